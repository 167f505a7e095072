"""mixers-char: validation bits/char against training time for every mixer on the char LM.

The reviewers: "when matched for performance, is ToST still faster?". The causal character
model (:mod:`tostnp.models.lm`, default corpus) with each mixer, everything else identical, in
two comparisons:

* **equal parameters** -- TSSA has 2C^2 mixer weights, the attention mixers 4C^2, so each
  mixer gets the width (a multiple of the heads) whose parameter count is closest to the TSSA
  model's; all train the same number of steps; the curve of validation bits/char against
  training CPU time is recorded (evaluations on the same fixed validation windows);
* **equal training time** -- each mixer gets as many steps as fit in the CPU time the TSSA
  run took (from its measured time per step in the first comparison), at the same widths.

Time is process CPU time (the load of a shared machine inflates wall time, not CPU time); the
JSON has both. ``flash`` computes the same function as ``softmax``; it is here for its time.
(``tssa-uniform`` is left out here: the uniform-Pi question is answered by ``mixers-digits``
and ``needle``.)
"""
from __future__ import annotations

from .common import train_run, fmt, markdown_table, savefig
from ..nn.mixers import MIXERS

NAME = "mixers-char"
QUESTION = ("Validation bits/char against training time for every mixer on the char LM, at "
            "equal parameters and at equal training time.")
FULL = dict(mixers=["tssa", "softmax", "flash", "linear"], width=64, depth=2, num_heads=4,
            block_size=128, batch_size=8, steps=500, evals=5, eval_batches=4, lr=2e-3, warmup_steps=25, weight_decay=0.1)
QUICK = dict(FULL, mixers=["tssa", "softmax"], width=16, depth=1, num_heads=2, block_size=16,
             batch_size=4, steps=4, evals=2, eval_batches=1, warmup_steps=1)

_corpus = {}


def _text():
    if "ids" not in _corpus:
        from ..data import load_lm_text
        _corpus["ids"] = load_lm_text(None)
    return _corpus["ids"]


def _cfg(s, mixer, width):
    from ..models import get_lm_config
    return get_lm_config("tiny-lm", vocab_size=_text()[2].vocab_size, width=width,
                         depth=s["depth"], num_heads=s["num_heads"],
                         block_size=s["block_size"], mixer=mixer)


def _count(cfg):
    from .. import backend
    from ..models import lm_init, num_params
    return num_params(lm_init(cfg, backend.RNG(0), backend.get_xp("cpu")))


def matched_width(s, mixer) -> int:
    """The width (multiple of num_heads, 1/2 to 2 times the TSSA width) whose parameter count
    is closest to the TSSA model's."""
    target = _count(_cfg(s, "tssa", s["width"]))
    h = s["num_heads"]
    cands = range(max(h, (s["width"] // 2) // h * h), 2 * s["width"] + 1, h)
    return min(cands, key=lambda c: (abs(_count(_cfg(s, mixer, c)) - target), c))


def _train(s, mixer, width, steps, seed):
    from ..train.tasks import LMTask
    from ..train.loop import TrainConfig
    train_ids, val_ids, tok = _text()
    cfg = _cfg(s, mixer, width)
    task = LMTask(cfg, train_ids, val_ids, tok, batch_size=s["batch_size"], seed=seed,
                  eval_batches=s["eval_batches"], text_name="default corpus")
    every = max(1, steps // s["evals"])
    tcfg = TrainConfig(steps=steps, batch_size=s["batch_size"], lr=s["lr"],
                       warmup_steps=min(s["warmup_steps"], steps),
                       weight_decay=s["weight_decay"], eval_every=every, log_every=every,
                       seed=seed).validate()
    r = train_run(task, tcfg)
    ev = [m for m in r["metrics"] if m["kind"] == "eval"]
    # CPU time at each evaluation, pro rata by step (the run's CPU time is measured in total)
    curve = [[m["step"], r["cpu_s"] * m["step"] / steps, m["val_bpc"]] for m in ev]
    from ..models import num_params
    return {"val_bpc": r["final"]["val_bpc"], "wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
            "cpu_ms_per_step": 1e3 * r["cpu_s"] / steps, "steps": steps,
            "params": num_params(r["params"]), "curve": curve}


def run(rec, s, seeds):
    widths = {m: (s["width"] if m.startswith("tssa") else matched_width(s, m))
              for m in s["mixers"]}
    rec.data["widths"] = widths
    per_step = {}
    for m in s["mixers"]:
        e = rec.condition(lambda seed, m=m: _train(s, m, widths[m], s["steps"], seed), seeds,
                          desc=f"{NAME} equal-params {m}", part="equal-params", mixer=m,
                          width=widths[m])
        per_step[m] = e["mean"]["cpu_s"] / s["steps"]
    ref = "tssa" if "tssa" in per_step else s["mixers"][0]
    budget = per_step[ref] * s["steps"]
    rec.data["equal_time_budget_cpu_s"] = budget
    for m in s["mixers"]:
        steps = max(1, round(budget / per_step[m]))
        if m == ref:
            same = dict(rec.data["results"][s["mixers"].index(m)], part="equal-time")
            rec.add(same)
            continue
        rec.condition(lambda seed, m=m, steps=steps: _train(s, m, widths[m], steps, seed),
                      seeds, desc=f"{NAME} equal-time {m}", part="equal-time", mixer=m,
                      width=widths[m], steps=steps)


def table(data) -> str:
    return markdown_table(
        ["comparison", "mixer", "width", "parameters", "steps", "val bits/char",
         "train CPU time (s)", "CPU ms / step"],
        [[e["part"], e["mixer"], e["width"], f"{int(e['mean']['params']):,}",
          int(e["mean"]["steps"]), fmt(e, "val_bpc"), fmt(e, "cpu_s", 1, 1),
          fmt(e, "cpu_ms_per_step", 1, 1)] for e in data["results"]])


def plot(data, path):
    import numpy as np
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    colors = dict(zip(MIXERS, ["C0", "C9", "C1", "C2", "C3"]))
    for ax, part in zip(axes, ("equal-params", "equal-time")):
        for e in [r for r in data["results"] if r["part"] == part]:
            curves = np.array([run["curve"] for run in e["runs"]])       # (seeds, evals, 3)
            t, b = curves[:, :, 1].mean(0), curves[:, :, 2]
            ax.errorbar(t, b.mean(0), yerr=b.std(0, ddof=1) if len(b) > 1 else None,
                        marker="o", ms=3, capsize=2, color=colors.get(e["mixer"]),
                        label=f"{e['mixer']} (C={e['width']}, {int(e['mean']['steps'])} steps)")
        ax.set_xlabel("training CPU time (s)")
        ax.set_ylabel("validation bits/char")
        ax.grid(alpha=0.3)
        ax.legend()
        ax.set_title("equal parameters, equal steps" if part == "equal-params" else
                     "equal parameters, equal training time")
    fig.suptitle(f"{NAME}: char LM, context {data['settings']['block_size']} (mean ± sd, seeds "
                 f"{data['seeds']})")
    fig.tight_layout()
    return savefig(fig, path)
