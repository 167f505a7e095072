"""``python -m benchmarks.peer_torch`` (or ``benchmarks/peer_torch.py``): the peer benchmark's
command line, what it prints first, and the worker processes' entry (``--worker``); the package
docstring says what it measures."""
from __future__ import annotations

import argparse
import json
import os
import time

from .timing import BENCH_TITLES
from .torch_models import torch_defs


def header(out):
    from tostnp.bench.machine import machine_info
    m = machine_info()
    la = os.getloadavg()
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": m["logical_cpus"],
            "python": m["python"], "numpy": m["numpy"], "loadavg_start": la,
            "blas": [f"{b['internal_api']} {b['version']} ({b['architecture']})"
                     for b in m["numpy_blas"]],
            "cpu": m["cpu"], "cpu_vendor": m["cpu_vendor"], "cpu_slug": m["cpu_slug"],
            "machine": m}
    out["env"] = info
    print(f"peer_bench: tostnp (NumPy) vs PyTorch eager (CPU); {info['date']}; "
          f"{info.get('cpu', '?')} x {info['host_cpus']}; Python {info['python']}, NumPy "
          f"{info['numpy']} ({', '.join(info.get('blas', []))}); load average at start "
          f"{la[0]:.2f} {la[1]:.2f} {la[2]:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", nargs=3, metavar=("SYSTEM", "BENCH", "THREADS"))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--only", nargs="+", default=["lm", "vision", "lm_tiny", "tssa_lm",
                                                   "block_nc", "block_c", "tssa_nc", "tssa_c"],
                    choices=sorted(set(BENCH_TITLES) - {"gemm"}), metavar="BENCH",
                    help="which benchmarks: " + ", ".join(sorted(set(BENCH_TITLES) - {"gemm"})))
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also run part 3 (profile)")
    ap.add_argument("--profile-only", action="store_true")
    ap.add_argument("--anatomy", action="store_true",
                    help="where the time goes in the LM/vision steps of --only, per thread "
                         "count: products (shapes, time), the rest, calls per step")
    ap.add_argument("--anatomy-only", action="store_true", help="only the anatomy")
    ap.add_argument("--anatomy-layers", action="store_true",
                    help="with --anatomy at 1 thread: also tostnp's step by layer (cProfile) "
                         "and torch's by op group (torch.profiler)")
    ap.add_argument("--no-perf", action="store_true", help="skip the perf sampling in part 3")
    ap.add_argument("--json", default=None, help="write all results here")
    args = ap.parse_args()
    if args.worker:           # the workers import only what their step needs
        from .worker import worker_main
        worker_main(args.worker[0], args.worker[1], int(args.worker[2]))
        return
    if args.rounds < 5:
        ap.error("--rounds must be >= 5")
    from .checks import run_checks
    from .profiling import run_profile
    from .timing import print_table, run_timing
    out = {}
    header(out)
    torch = torch_defs()["torch"]
    out["env"]["torch"] = torch.__version__
    print(f"torch {torch.__version__}")
    t0 = time.time()
    if not args.skip_check and not args.profile_only and not args.anatomy_only:
        run_checks(out)
    if not args.profile_only and not args.anatomy_only:
        run_timing(args, out)
        print_table(out)
    if args.anatomy or args.anatomy_only:
        from .profiling import run_anatomy
        run_anatomy(args, out)
    if args.profile or args.profile_only:
        run_profile(args, out)
    la = os.getloadavg()
    out["env"]["loadavg_end"] = la
    print(f"\nload average at end {la[0]:.2f} {la[1]:.2f} {la[2]:.2f}; total {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
