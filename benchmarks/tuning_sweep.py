#!/usr/bin/env python
"""tuning_sweep.py -- one tuning constant (tostnp/backend/tuning.py) swept in a default training
step, the candidates interleaved in one process.

    PYTHONPATH=. python3 benchmarks/tuning_sweep.py lm 2 PIECES_MIN 262144 524288 1048576 \
        [--rounds 7] [--steps 8] [--out docs/bench/tuning_PIECES_MIN_lm_2t.json]

The step is the one ``bench --train`` times (tostnp.bench.train_steps: the default LM or digits
model, its batch in shards where training shards it, AdamW), or with ``tssa`` the non-causal
TSSA layer's forward at the shape of ``bench``'s targets (B 4, N 4096, C 384, 6 heads, float32),
beside its two matrix products (x @ W twice on (B N, C) x (C, C)), timed in the same rounds. Each round runs every candidate
once, in an order reversed every other round: the constant is set, one step runs unmeasured,
then ``--steps`` steps are timed. It prints, and with ``--out`` writes, the median seconds per
step of each candidate over the rounds, with the CPU, the BLAS and the load average. Run it on
an otherwise idle machine; differences of a percent or two are noise. The TSSA's piece size
(``TSSA_PIECE``) is the NumPy kernels': where Numba is installed, sweep it with ``TOSTNP_JIT=0``
(the JSON's ``machine.compiled_kernels`` says which kernels ran).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tostnp  # noqa: E402,F401  (first: sets OpenBLAS's spin before NumPy loads it)
import numpy as np  # noqa: E402

from tostnp import backend  # noqa: E402
from tostnp.backend import tuning  # noqa: E402
from tostnp.bench.machine import machine_info  # noqa: E402
from tostnp.bench.train_steps import _lm_step, _vision_step  # noqa: E402


def _step(name):
    """(a thunk that runs one step, its description)."""
    if name == "tssa":
        from tostnp.nn import tssa
        B, N, C, h = 4, 4096, 384, 6
        rng = backend.RNG(0)
        x = rng.normal(np, (B, N, C), np.float32)
        params = tssa.tssa_init(rng, np, C, h, dtype=np.float32)
        return (lambda: tssa.tssa_forward(x, params, h)), \
            f"TSSA forward (non-causal), B {B} N {N} C {C} h {h}, float32"
    st = (_lm_step if name == "lm" else _vision_step)(np, np.float32, False, 0)
    return st.run, st.desc


def _tssa_products():
    """The TSSA forward's two matrix products at its shape (the reference of its target)."""
    rng = backend.RNG(1)
    x = rng.normal(np, (4 * 4096, 384), np.float32)
    W1, W2 = (rng.normal(np, (384, 384), np.float32, std=0.02) for _ in range(2))
    return lambda: (x @ W1, x @ W2)


def interleaved(cands: dict, rounds: int, steps: int) -> dict:
    """Candidates timed in the same rounds. ``cands``: {key: (apply, step)}: ``apply()`` sets
    what the candidate needs (None: nothing), ``step()`` runs one step. Each round runs every
    candidate once, in an order reversed every other round: apply, one step unmeasured, then
    ``steps`` steps timed. Returns {key: [seconds per step, one per round]}."""
    keys = list(cands)
    times = {k: [] for k in keys}
    for r in range(rounds):
        for k in (keys if r % 2 == 0 else keys[::-1]):
            apply, step = cands[k]
            if apply is not None:
                apply()
            step()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            times[k].append((time.perf_counter() - t0) / steps)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["lm", "vision", "tssa"])
    ap.add_argument("threads", type=int)
    ap.add_argument("constant", help="a name in tostnp/backend/tuning.py")
    ap.add_argument("values", type=int, nargs="+")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    if not hasattr(tuning, a.constant) or a.constant.startswith("_"):
        ap.error(f"constant: {a.constant!r} is not in tostnp/backend/tuning.py")
    if a.threads < 1 or a.rounds < 1 or a.steps < 1:
        ap.error("threads, --rounds and --steps must be at least 1")
    backend.keep_freed_memory()                    # as training runs
    old = getattr(tuning, a.constant)
    load_before = os.getloadavg()
    with backend.threads(a.threads):
        run, desc = _step(a.step)
        cands = {v: (lambda v=v: setattr(tuning, a.constant, v), run) for v in a.values}
        if a.step == "tssa":
            cands[None] = (None, _tssa_products())                 # None: the two products
        for _ in range(3):
            run()
        try:
            times = interleaved(cands, a.rounds, a.steps)
        finally:
            setattr(tuning, a.constant, old)
    ref_s = float(np.median(times.pop(None))) if None in times else None
    res = {"step": desc, "threads": a.threads, "constant": a.constant,
           "median_step_s": {str(v): float(np.median(t)) for v, t in times.items()},
           "products_s": ref_s,
           "rounds": a.rounds, "steps_per_round": a.steps, "per_round_s":
           {str(v): t for v, t in times.items()}, "machine": machine_info(),
           "load_before": load_before, "load_after": os.getloadavg(),
           "command": "python3 benchmarks/tuning_sweep.py " + " ".join(sys.argv[1:])}
    for v in a.values:
        t = res["median_step_s"][str(v)]
        print(f"{a.constant} = {v:>10}: {t * 1e3:8.2f} ms per step"
              + (f" ({t / ref_s:.3f}x its two products, {ref_s * 1e3:.2f} ms)" if ref_s else ""))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
