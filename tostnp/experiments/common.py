"""What every experiment shares: a seeded training run with its time, the result file, plots.

A result file ``NAME.json`` holds the settings, one entry per condition (a mixer, a length, ...)
with the per-seed runs and their mean and sample standard deviation (:mod:`tostnp.train.seeds`),
the seeds, the command that produced it, the machine and the load. It is rewritten atomically
after every condition (``"complete": false`` until the last one), so a killed experiment
leaves a loadable file with everything finished so far.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import tempfile
import time

import numpy as np

from ..train.seeds import run_over_seeds
from ..io.atomic import atomic_savefig, atomic_write_text
from ..train.loop import TrainConfig, train

__all__ = ["train_run", "digits_settings", "train_digits", "peak_step_bytes", "Recorder", "fmt", "markdown_table",
           "savefig"]


def train_run(task, tcfg: TrainConfig) -> dict:
    """Train ``task`` (no files kept) -> {"params", "metrics", "final" (last eval), "wall_s",
    "cpu_s"}; wall and process CPU time cover the whole run, evaluations included."""
    with tempfile.TemporaryDirectory(prefix="tostnp-exp-") as d:
        t0, c0 = time.perf_counter(), time.process_time()
        res = train(task, tcfg, d, progress=False, plot=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    evals = [r for r in res["metrics"] if r["kind"] == "eval"]
    return {"params": res["params"], "metrics": res["metrics"], "final": evals[-1],
            "wall_s": wall, "cpu_s": cpu}


def digits_settings(**settings) -> dict:
    """An experiment's settings on the digits: the "tiny-digits" model and its training preset's
    batch_size, lr, warmup_epochs, weight_decay and augment_shift
    (:mod:`tostnp.train.defaults`), with ``settings`` added (epochs, ...) or replacing them."""
    from ..train.defaults import get_vision_train_preset
    p = get_vision_train_preset("tiny-digits")
    return {"config": "tiny-digits", "batch_size": p.batch_size, "lr": p.lr,
            "warmup_epochs": p.warmup_epochs, "weight_decay": p.weight_decay,
            "augment_shift": p.augment_shift, **settings}


def train_digits(cfg, data, s: dict, seed: int):
    """Train the vision model ``cfg`` on the digits split ``data`` with an experiment's settings
    ``s`` (batch_size, augment_shift, epochs, max_steps, lr, warmup_epochs, weight_decay)
    -> (task, :func:`train_run`'s record, steps)."""
    from ..train.tasks import VisionTask
    task = VisionTask(cfg, data, batch_size=s["batch_size"], seed=seed,
                      augment_shift=s["augment_shift"], data_name="digits")
    spe = task.steps_per_epoch
    steps = min(s["epochs"] * spe, s["max_steps"] or s["epochs"] * spe)
    tcfg = TrainConfig(steps=steps, batch_size=task.batch_size, lr=s["lr"],
                       warmup_steps=min(s["warmup_epochs"] * spe, steps),
                       weight_decay=s["weight_decay"], eval_every=0, log_every=steps,
                       seed=seed).validate()
    return task, train_run(task, tcfg), steps


def peak_step_bytes(task, params) -> int:
    """tracemalloc high-water mark of one forward+backward on a training batch (bytes above
    what was allocated before: activations, cache, gradients; not the parameters), measured
    the way ``python -m tostnp bench`` measures memory on CPU."""
    from ..bench.peaks import traced_peak_bytes
    batch = task.next_batch()
    return traced_peak_bytes(lambda: task.loss_and_grads(params, batch))


def _loadavg() -> float | None:
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return None


class Recorder:
    """Collects the conditions of one experiment and writes ``out/NAME.json`` after each."""

    def __init__(self, name: str, out_dir: str, *, quick: bool, seeds, settings: dict,
                 command: str, question: str):
        self.path = os.path.join(out_dir, f"{name}.json")
        os.makedirs(out_dir, exist_ok=True)
        self.t0, self.c0 = time.perf_counter(), time.process_time()
        self.data = {
            "name": name, "question": question, "command": command, "quick": quick,
            "seeds": list(seeds), "settings": settings, "results": [], "complete": False,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "python": platform.python_version(), "numpy": np.__version__},
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "loadavg_1min": {"start": _loadavg()},
        }
        self.save()

    def condition(self, fn, seeds, desc: str, **keys) -> dict:
        """Run ``fn(seed) -> metrics`` over the seeds; record {**keys, seeds, mean, std, runs}."""
        summary = run_over_seeds(fn, seeds, desc=desc)
        entry = {**keys, **summary}
        self.data["results"].append(entry)
        self.save()
        return entry

    def add(self, entry: dict) -> None:
        self.data["results"].append(entry)
        self.save()

    def save(self, complete: bool = False, **extra) -> str:
        self.data.update(extra)
        self.data["complete"] = complete
        self.data["wall_s"] = round(time.perf_counter() - self.t0, 2)
        self.data["cpu_s"] = round(time.process_time() - self.c0, 2)
        self.data["loadavg_1min"]["end"] = _loadavg()
        atomic_write_text(self.path, json.dumps(self.data, indent=1) + "\n")
        return self.path


def markdown_table(columns, rows) -> str:
    """A Markdown table: a header of ``columns``, then one line per row of cells."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(entry: dict, key: str, scale: float = 1.0, digits: int = 3) -> str:
    """"mean ± std" of metric ``key`` of a result entry."""
    m, s = entry["mean"].get(key), entry["std"].get(key)
    if m is None:
        return "—"
    return f"{m * scale:.{digits}f} ± {s * scale:.{digits}f}"


def savefig(fig, path: str) -> str:
    atomic_savefig(fig, path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path
