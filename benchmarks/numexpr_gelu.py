#!/usr/bin/env python
"""Does numexpr pay for tostnp's elementwise chains? The tanh-GELU forward and backward (the
MLP's elementwise chain, the longest of a training step) at the default LM's shapes: tostnp's
NumPy fast path (tostnp.backend.kernels: in-place ufuncs over cache-sized pieces) against one
numexpr expression each, at 1 and 2 threads, interleaved, median of 25 rounds.

    pip install numexpr   # not a tostnp dependency; into any venv with tostnp's requirements
    PYTHONPATH=. python benchmarks/numexpr_gelu.py [--json PATH]

numexpr fuses a chain into one pass over memory and spreads it over threads; whether that beats
the fast path depends on its transcendental functions (its own loop over libm's exp unless it was
built with Intel's VML) against NumPy's vectorised exp. Prints the times, the ratio numexpr /
fast path, and the largest difference from the fast path's result.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import numexpr as ne
    from tostnp.backend import kernels as K
    from tostnp.bench.machine import machine_info
    a, b = math.sqrt(2 / math.pi), 0.044715
    c1, c2 = np.float32(-2 * a), np.float32(-2 * a * b)          # -2u = (c1 + c2 x^2) x
    d1, d2 = np.float32(2 * a), np.float32(6 * a * b)
    out = {"machine": machine_info(), "numexpr": ne.__version__, "numexpr_vml": ne.use_vml,
           "rows": []}
    print(f"{out['machine']['cpu']}; {out['machine']['blas']}; numexpr {ne.__version__} "
          f"(VML {ne.use_vml}); load {out['machine']['loadavg']}")
    g = np.random.default_rng(0)
    for thr in (1, 2):
        K.set_threads(thr)
        ne.set_num_threads(thr)
        for shape in [(2048, 512), (2048, 128)]:
            x = g.standard_normal(shape).astype(np.float32)
            dy = g.standard_normal(shape).astype(np.float32)
            _, s0 = K.gelu_forward(x)
            fns = {"fwd fast path": lambda: K.gelu_forward(x),
                   "fwd numexpr": lambda: ne.evaluate("x / (1 + exp((c1 + c2*x*x)*x))",
                                                      local_dict=dict(x=x, c1=c1, c2=c2)),
                   "bwd fast path": lambda: K.gelu_backward(dy, x, s0),
                   "bwd numexpr": lambda: ne.evaluate("dy*s0*(1 + (d1 + d2*x*x)*x*(1 - s0))",
                                                      local_dict=dict(dy=dy, s0=s0, x=x, d1=d1,
                                                                      d2=d2))}
            diff = {"fwd": float(np.max(np.abs(fns["fwd numexpr"]() - fns["fwd fast path"]()[0]))),
                    "bwd": float(np.max(np.abs(fns["bwd numexpr"]() - fns["bwd fast path"]())))}
            ts = {k: [] for k in fns}
            for r in range(25):
                for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
                    t0 = time.perf_counter()
                    for _ in range(5):
                        fns[k]()
                    ts[k].append((time.perf_counter() - t0) / 5)
            m = {k: statistics.median(v) for k, v in ts.items()}
            for ph in ("fwd", "bwd"):
                row = {"threads": thr, "shape": list(shape), "phase": ph,
                       "fast_path_ms": 1e3 * m[f"{ph} fast path"],
                       "numexpr_ms": 1e3 * m[f"{ph} numexpr"],
                       "ratio_numexpr_to_fast": m[f"{ph} numexpr"] / m[f"{ph} fast path"],
                       "max_abs_diff": diff[ph]}
                out["rows"].append(row)
                print(f"  {thr} thread(s) {shape} GELU {ph}: fast path {row['fast_path_ms']:.3f} "
                      f"ms, numexpr {row['numexpr_ms']:.3f} ms, numexpr / fast path "
                      f"{row['ratio_numexpr_to_fast']:.2f}, max |diff| {diff[ph]:.1e}",
                      flush=True)
    out["loadavg_end"] = machine_info()["loadavg"]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
