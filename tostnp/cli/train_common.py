"""What the vision run and the LM run of ``train`` share: the options given as training
settings, the memory check, saying what is trained, the training loop's call, result.json."""
from __future__ import annotations

import json
import os
import time

from .. import backend
from ..train import shard_workers
from ..train.defaults import given

__all__ = ["given", "options_of", "check_fits", "say", "train_and_report", "say_best",
           "finish"]


def options_of(args, cls, **replaced) -> dict:
    """{field: the option's value (None: not given)} of the fields of dataclass ``cls`` that
    options set (:func:`tostnp.models.configs.option`), with ``replaced`` over them."""
    from ..models.configs import option_fields
    return {**{name: getattr(args, dest) for dest, (name, _, _) in option_fields(cls).items()},
            **replaced}


def check_fits(kind, cfg, tcfg, args) -> None:
    from ..models.memory import check_model_fits
    check_model_fits(kind, cfg, tcfg.batch_size, training=True,
                     what=f"training in {args.out}")


def say(args, text) -> None:
    if not getattr(args, "quiet", False):
        print(text, flush=True)     # at once, also when the output is a pipe


def _cpu_time() -> float:
    """CPU seconds of this process and of its children that have ended and been waited for:
    the shard worker processes (tostnp.train.shard_workers), which the training loop closes and
    reaps before it returns."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def train_and_report(args, task, tcfg, describe, data_line):
    """Say what is trained (``describe(params0)`` of the initial parameters, and
    ``data_line``), then run the training loop from those parameters -> (the last evaluation
    record, or None when the run stopped early; the trained parameters; the CPU time of the
    process (all its threads) and of its shard worker processes, and the wall time of
    training; the evaluation record of the best checkpoint, or None); says how to continue a
    stopped run."""
    from ..train.loop import train
    params0 = task.init_params(backend.RNG(tcfg.seed))     # printed, then trained from
    say(args, describe(params0))
    say(args, data_line)
    n = task.shards(params0)
    if n > 1:
        where = ("this process and worker processes" if shard_workers.available()
                 else "threads")
        say(args, f"each batch runs in {n} shards, one per CPU thread, on {where} (--threads; "
                  f"another count changes the float rounding)")
    c0, t0 = _cpu_time(), time.perf_counter()
    from ..train.defaults import PROGRESS_SECONDS
    res = train(task, tcfg, args.out, resume=args.resume, progress=not args.no_progress,
                init_params=params0, progress_seconds=given(args.progress_seconds,
                                                            PROGRESS_SECONDS))
    cpu, wall = _cpu_time() - c0, time.perf_counter() - t0
    final = [r for r in res["metrics"] if r["kind"] == "eval" and r["step"] == tcfg.steps]
    if res["step"] == tcfg.steps and final:   # (the loop made it again if metrics.jsonl lost it)
        if res.get("start") == tcfg.steps:
            say(args, f"the run in {args.out} had already finished (step {tcfg.steps} of "
                       f"{tcfg.steps}); its result is written again")
        return final[-1], res["params"], cpu, wall, res["best"]
    from .options import how_to_run
    print(f"stopped at step {res['step']} of {tcfg.steps} after {wall:.1f} s; resume with: "
          + how_to_run("train", args.model, "--out", args.out, "--resume"))
    return None, res["params"], cpu, wall, res["best"]


def say_best(args, best, steps, figures: str) -> None:
    """Say which checkpoint ``evaluate`` reads by default (best.npz, the lowest validation loss)
    and its ``figures``; the figures above it are the last checkpoint's."""
    from .options import how_to_run
    last = how_to_run("evaluate", "--checkpoint", args.out, "--which", "last")
    if best["step"] == steps:
        say(args, f"best checkpoint (lowest validation loss): the last, step {steps}; "
                  f"'evaluate' reports the figures above")
    else:
        say(args, f"best checkpoint (lowest validation loss): step {best['step']} of {steps}, "
                  f"{figures}; 'evaluate' reports these (best.npz), '{last}' the figures above")


def finish(args, kind, seed, result) -> None:
    """Write the run's final numbers to <out>/result.json (atomically)."""
    from ..io.atomic import atomic_write_text
    from .options import load_1min
    result = {"task": kind, "seed": seed, **result, "loadavg_1min_end": load_1min()}
    atomic_write_text(os.path.join(args.out, "result.json"), json.dumps(result, indent=1) + "\n")
