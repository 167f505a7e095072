"""The measurements behind four choices of the NumPy fast path, at the default models' shapes,
on the CPU at hand (docs/tuning.md cites a committed run):

* ``tuning.PIECES_MIN`` / ``tuning.CHUNK``: LayerNorm and GELU forward and backward
  (:mod:`tostnp.backend.kernels`) at the default LM's shapes, whole batch (B 32) and one of its
  two shards (B 16), for each candidate pair; "step" adds them up as a step of the LM has them
  (9 LayerNorms, 4 GELUs);
* ``tuning.SCAN_WHOLE``: the causal prefix sums (``tostnp.nn.tssa_causal._scan``) of the LM's
  (32, 64, 128) and (32, 64, 4) arrays, as one (T, T) block and blocked;
* the GELU's gate: 0.5 (1 + tanh u) (the kernel's form) against 1 / (1 + exp(-2u)), one piece;
* the embedding's scatter-add: ``np.add.at`` against the sort + ``add.reduceat`` of
  :func:`tostnp.backend.scatter_add`;
* last, the two piece sizes in the default LM's and digits model's whole training steps, at 1
  and 2 threads (wall time: the step's other threads count there).

Kernel times are CPU time of the calling thread (``time.thread_time``), BLAS on one thread: on a
busy machine they move far less than wall time. Each figure is the third-best of 9 repeats.

    python3 benchmarks/kernel_choices.py [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tostnp  # noqa: E402,F401  (before NumPy: OpenBLAS's spin)
import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from tostnp.backend import keep_freed_memory, kernels, tuning  # noqa: E402
from tostnp.bench.machine import machine_info  # noqa: E402
from tostnp.nn import tssa_causal  # noqa: E402

PIECE_CANDIDATES = [(1 << 20, 1 << 17), (1 << 17, 1 << 16), (1 << 16, 1 << 16),
                    (1 << 16, 1 << 15), (1 << 15, 1 << 15)]


def cpu_us(f, n: int) -> float:
    """Third-best of 9 repeats of n calls, microseconds of this thread's CPU time per call."""
    f()
    ts = []
    for _ in range(9):
        t0 = time.thread_time()
        for _ in range(n):
            f()
        ts.append((time.thread_time() - t0) / n * 1e6)
    return sorted(ts)[2]


def pieces(rng) -> list[dict]:
    rows = []
    C = 128
    old = tuning.PIECES_MIN, tuning.CHUNK
    try:
        for B in (32, 16):
            x = rng.standard_normal((B, 64, C)).astype(np.float32)
            g = (1 + 0.1 * rng.standard_normal(C)).astype(np.float32)
            b = rng.standard_normal(C).astype(np.float32)
            dy = rng.standard_normal(x.shape).astype(np.float32)
            h = rng.standard_normal((B, 64, 4 * C)).astype(np.float32)
            for pm, ch in PIECE_CANDIDATES:
                tuning.PIECES_MIN, tuning.CHUNK = pm, ch
                _, xh, r = kernels.layer_norm_forward(x, g, b, 1e-5)
                _, s = kernels.gelu_forward(h)
                row = {"B": B, "PIECES_MIN": pm, "CHUNK": ch,
                       "ln_fwd_us": cpu_us(lambda: kernels.layer_norm_forward(x, g, b, 1e-5), 40),
                       "ln_bwd_us": cpu_us(lambda: kernels.layer_norm_backward(dy, xh, r, g), 40),
                       "gelu_fwd_us": cpu_us(lambda: kernels.gelu_forward(h), 15),
                       "gelu_bwd_us": cpu_us(lambda: kernels.gelu_backward(h, h, s), 15)}
                row["step_ms"] = (9 * (row["ln_fwd_us"] + row["ln_bwd_us"])
                                  + 4 * (row["gelu_fwd_us"] + row["gelu_bwd_us"])) / 1e3
                rows.append(row)
                print(f"  B {B:2d}  PIECES_MIN {pm >> 10:5d}K  CHUNK {ch >> 10:4d}K   LN fwd "
                      f"{row['ln_fwd_us']:6.0f}  bwd {row['ln_bwd_us']:6.0f}   GELU fwd "
                      f"{row['gelu_fwd_us']:6.0f}  bwd {row['gelu_bwd_us']:6.0f} us   as in a step "
                      f"{row['step_ms']:5.2f} ms", flush=True)
    finally:
        tuning.PIECES_MIN, tuning.CHUNK = old
    return rows


def steps() -> list[dict]:
    """The default LM's and digits model's training steps (tostnp.bench.train_steps, as
    `bench --train` times them) with the pieces before this sweep (1M / 128K) and after
    (128K / 64K), the two toggled in one process, interleaved: wall ms, medians of 8 rounds."""
    import statistics
    from tostnp import backend
    from tostnp.bench.train_steps import _lm_step, _vision_step
    from benchmarks.tuning_sweep import interleaved

    def apply(pair):
        tuning.PIECES_MIN, tuning.CHUNK = pair
    pairs = [(1 << 20, 1 << 17), (1 << 17, 1 << 16)]
    rows = []
    old = tuning.PIECES_MIN, tuning.CHUNK
    try:
        for threads in (1, 2):
            with backend.threads(threads):
                for make, n in ((_lm_step, 4), (_vision_step, 30)):
                    st = make(np, np.float32, False, 0)
                    for _ in range(3):
                        st.run()
                    times = interleaved({pair: (lambda pair=pair: apply(pair), st.run)
                                         for pair in pairs}, 8, n)
                    label = {pair: f"{pair[0] >> 10}K/{pair[1] >> 10}K" for pair in pairs}
                    row = {"step": st.name, "threads": threads,
                           "ms": {label[p]: statistics.median(v) * 1e3 for p, v in times.items()},
                           "min_ms": {label[p]: min(v) * 1e3 for p, v in times.items()}}
                    rows.append(row)
                    print(f"  {st.name:6s} step, {threads} thread(s), wall ms (median of 8; min): "
                          + ", ".join(f"pieces {k}: {row['ms'][k]:.2f} ({row['min_ms'][k]:.2f})"
                                      for k in row["ms"]), flush=True)
    finally:
        tuning.PIECES_MIN, tuning.CHUNK = old
    return rows


def scan(rng) -> list[dict]:
    rows = []
    old = tuning.SCAN_WHOLE
    try:
        for F in (128, 4):
            a = rng.standard_normal((32, 64, F)).astype(np.float32)
            row = {"shape": [32, 64, F]}
            for name, whole in (("whole_us", 64), ("blocked_us", 0)):
                tuning.SCAN_WHOLE = whole
                row[name] = cpu_us(lambda: tssa_causal._scan(a, np), 100)
            rows.append(row)
            print(f"  prefix sums of (32, 64, {F:3d}): one (T, T) block {row['whole_us']:6.1f} us,"
                  f" blocked (L = {tuning.SCAN_BLOCK}) {row['blocked_us']:6.1f} us", flush=True)
    finally:
        tuning.SCAN_WHOLE = old
    return rows


def gelu_gate(rng) -> dict:
    A, Bc = math.sqrt(2 / math.pi), 0.044715
    x = rng.standard_normal(1 << 16).astype(np.float32)
    s, y = np.empty_like(x), np.empty_like(x)

    def tanh_form():
        np.multiply(x, x, out=s); s.__imul__(A * Bc); s.__iadd__(A); s.__imul__(x)
        np.tanh(s, out=s); s.__iadd__(1.0); s.__imul__(0.5); np.multiply(x, s, out=y)

    def sigmoid_form():
        np.multiply(x, x, out=s); s.__imul__(-2 * A * Bc); s.__iadd__(-2 * A); s.__imul__(x)
        np.exp(s, out=s); s.__iadd__(1.0); np.reciprocal(s, out=s); np.multiply(x, s, out=y)
    row = {"elements": x.size, "tanh_us": cpu_us(tanh_form, 300),
           "sigmoid_us": cpu_us(sigmoid_form, 300)}
    print(f"  GELU forward, one piece of {x.size} float32: tanh form {row['tanh_us']:.1f} us, "
          f"sigmoid form {row['sigmoid_us']:.1f} us", flush=True)
    return row


def scatter(rng) -> dict:
    from tostnp.backend import scatter_add
    V, M, C = 512, 2048, 128
    d = rng.standard_normal((M, C)).astype(np.float32)
    ids = rng.integers(0, V, M)

    def add_at():
        out = np.zeros((V, C), np.float32)
        np.add.at(out, ids, d)
    row = {"rows": M, "ids": V, "width": C, "add_at_us": cpu_us(add_at, 30),
           "sorted_reduceat_us": cpu_us(lambda: scatter_add(ids, d, V), 30)}
    print(f"  embedding scatter-add ({M} rows of {C} over {V} ids): np.add.at "
          f"{row['add_at_us']:.0f} us, sort + add.reduceat {row['sorted_reduceat_us']:.0f} us",
          flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    keep_freed_memory()
    m = machine_info()
    print(f"kernel_choices: {m['cpu']} x {m['logical_cpus']}; NumPy {m['numpy']}; load average "
          f"{os.getloadavg()[0]:.2f}; CPU time of one thread, BLAS on one thread")
    rng = np.random.default_rng(0)
    with threadpool_limits(limits=1, user_api="blas"):
        old = kernels.set_threads(1)
        try:
            out = {"machine": m, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                   "loadavg_start": os.getloadavg(), "pieces": pieces(rng), "scan": scan(rng),
                   "gelu_gate": gelu_gate(rng), "scatter_add": scatter(rng)}
        finally:
            kernels.set_threads(old)
    out["steps"] = steps()
    out["loadavg_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
