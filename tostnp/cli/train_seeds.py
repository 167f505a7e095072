"""``train ... --seeds LIST``: the same training job once per seed, then mean ± sd.

Each run goes to ``--out/seed-S`` (a resumable run directory of its own); the summary of every
run's final numbers is printed and written atomically to ``--out/seeds.json``. The repetition
and the statistics are :func:`tostnp.train.seeds.run_over_seeds`, shared with the experiments.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..io.runlock import run_lock
from ..train.seeds import run_over_seeds

__all__ = ["train_over_seeds"]


# What the summary over seeds reports (mean ± sd), per job, with a format for each.
_SEED_KEYS = {"vision": [("test_acc", "test accuracy", "{:.2%}"),
                         ("val_acc", "validation accuracy", "{:.2%}")],
              "lm": [("val_bpc", "validation bits/char", "{:.3f}"),
                     ("word_rate", "word rate", "{:.1%}")]}


def train_over_seeds(args, xp, seeds, kind, train_one) -> int:
    """``--seeds``: one full run per seed in ``--out/seed-S``, then mean ± sd (seeds.json).

    ``train_one(args, xp) -> (exit code, result dict)`` trains one run; ``kind``: vision|lm."""
    root, failed = args.out, []

    def one(seed):
        sub = argparse.Namespace(**{**vars(args), "seed": seed, "no_progress": True,
                                    "out": os.path.join(root, f"seed-{seed}"),
                                    "resume": args.resume and os.path.isfile(
                                        os.path.join(root, f"seed-{seed}", "checkpoint.npz")),
                                    "quiet": seed != seeds[0]})
        rc, res = train_one(sub, xp)
        if rc or res is None:
            failed.append(seed)
            raise _SeedFailed(rc or 1)
        from tqdm import tqdm
        tqdm.write(f"seed {seed}: " + ", ".join(fmt.format(res[k]) + f" {name}"
                                                for k, name, fmt in _SEED_KEYS[kind] if k in res)
                   + f"; training {res['train_cpu_s']:.1f} s CPU, {res['train_wall_s']:.1f} s wall")
        return res

    with run_lock(root, f"train {kind} --seeds"):      # seeds.json is written under it too
        return _over_seeds(args, one, seeds, kind, root, failed)


def _over_seeds(args, one, seeds, kind, root, failed) -> int:
    try:
        summary = run_over_seeds(one, seeds, desc=f"train {kind} over seeds",
                                 progress=None if not args.no_progress else False)
    except _SeedFailed as e:
        print(f"error: the run with seed {failed[-1]} failed; finished runs are in {root}",
              file=sys.stderr)
        return e.rc
    from .options import how_to_run, load_1min
    summary.update(command=how_to_run(*sys.argv[1:]) if sys.argv else "",
                   loadavg_1min_end=load_1min(), cpu_count=os.cpu_count())
    from ..io.atomic import atomic_write_text
    os.makedirs(root, exist_ok=True)
    atomic_write_text(os.path.join(root, "seeds.json"), json.dumps(summary, indent=1) + "\n")
    m, sd = summary["mean"], summary["std"]
    label = ",".join(str(s) for s in seeds) if len(seeds) < 3 else args.seeds
    for k, name, fmt in _SEED_KEYS[kind]:
        if k in m:
            lo = min(r[k] for r in summary["runs"])
            hi = max(r[k] for r in summary["runs"])
            print(f"{name} over {len(seeds)} seeds ({label}): {fmt.format(m[k])} ± "
                  f"{fmt.format(sd[k])} (mean ± sd; min {fmt.format(lo)}, max {fmt.format(hi)})")
    print(f"training time per run: {m['train_cpu_s']:.1f} ± {sd['train_cpu_s']:.1f} s CPU, "
          f"{m['train_wall_s']:.1f} ± {sd['train_wall_s']:.1f} s wall; "
          f"summary: {os.path.join(root, 'seeds.json')}")
    return 0


class _SeedFailed(Exception):
    def __init__(self, rc):
        super().__init__(rc)
        self.rc = rc
