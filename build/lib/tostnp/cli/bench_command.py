"""``python -m tostnp bench``: the command line of the benchmark (:mod:`tostnp.bench`).

Measures TSSA against softmax and linear attention (time and memory against the length N),
the recurrent decoder and the training throughput; writes ``bench_<device>.json`` and plots
into ``--out``, prints a table and the targets. ``--device gpu`` without a usable GPU prints why
and exits with status 2, writing nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .. import backend
from ..bench import (DEFAULT_SIZES, DEFAULT_CONTEXTS, run_benchmark, evaluate_targets,
                     format_report, write_plots)
from ..io.atomic import atomic_write_text
from .options import POSITIVE_INT, NONNEG_INT, POSITIVE_FLOAT, how_to_run

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sizes")
    g.add_argument("--sizes", type=POSITIVE_INT, nargs="+", default=None, metavar="N",
                   help=f"sequence lengths N (default {' '.join(map(str, DEFAULT_SIZES))}; "
                        "--quick: 32 64)")
    g.add_argument("--batch", type=POSITIVE_INT, default=None, help="batch B (default 4; --quick: 1)")
    g.add_argument("--width", type=POSITIVE_INT, default=None, help="width C (default 384; --quick: 24)")
    g.add_argument("--heads", type=POSITIVE_INT, default=None, help="heads h (default 6; --quick: 2)")
    g.add_argument("--contexts", type=POSITIVE_INT, nargs="+", default=None, metavar="T",
                   help="decoder context lengths (default "
                        f"{' '.join(map(str, DEFAULT_CONTEXTS))}; --quick: 16 32)")
    g.add_argument("--decode-steps", type=POSITIVE_INT, default=None,
                   help="decoder steps timed per context (default 64; --quick: 4)")
    g.add_argument("--quick", action="store_true",
                   help="tiny sizes, 1 repeat: a smoke run in seconds (figures meaningless)")
    r = parser.add_argument_group("run")
    r.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    r.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="cpu (NumPy) or gpu (CuPy; exits with status 2 if no GPU is usable)")
    r.add_argument("--repeats", type=POSITIVE_INT, default=None,
                   help="timed rounds, the median is reported (default 5; --quick: 1)")
    r.add_argument("--warmup", type=NONNEG_INT, default=1, help="untimed rounds first (default 1)")
    r.add_argument("--max-mem-gb", type=POSITIVE_FLOAT, default=8.0,
                   help="skip a layer at a size whose estimated memory exceeds this (default 8)")
    r.add_argument("--no-train", action="store_true",
                   help="skip the training-throughput section")
    r.add_argument("--seed", type=NONNEG_INT, default=0)
    r.add_argument("--out", default="bench_out",
                   help="output folder for bench_<device>.json and the plots (default ./bench_out)")
    r.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    r.add_argument("--threads", type=int, nargs="+", default=None, metavar="N",
                   help="CPU threads for BLAS (default: all cores); with --train several "
                        "counts (e.g. 1 2) are timed side by side")
    t = parser.add_argument_group("training speed (--train)")
    t.add_argument("--train", action="store_true",
                   help="only time training steps: the default LM and vision models and one "
                        "ToST block at N=4096, C=384 (steps/s, phase split, page faults)")
    t.add_argument("--benches", nargs="+", default=None, metavar="NAME",
                   help="with --train: which of lm, vision, block (default all)")
    t.add_argument("--compare-plain", action="store_true",
                   help="with --train: also run every step with the NumPy fast path off "
                        "(interleaved) and print the ratio")
    t.add_argument("--default-malloc", action="store_true",
                   help="with --train: keep glibc's default allocator settings (to measure "
                        "what keeping freed memory saves)")


def _settings(args) -> dict:
    q = args.quick
    pick = lambda v, full, quick: v if v is not None else (quick if q else full)  # noqa: E731
    s = {
        "sizes": pick(args.sizes, DEFAULT_SIZES, [32, 64]),
        "batch": pick(args.batch, 4, 1),
        "width": pick(args.width, 384, 24),
        "heads": pick(args.heads, 6, 2),
        "contexts": pick(args.contexts, DEFAULT_CONTEXTS, [16, 32]),
        "decode_steps": pick(args.decode_steps, 64, 4),
        "repeats": pick(args.repeats, 5, 1),
        "warmup": args.warmup, "dtype": args.dtype, "device": args.device,
        "max_mem_gb": args.max_mem_gb, "train": not args.no_train, "quick": q,
        "seed": args.seed,
    }
    for key in ("batch", "width", "heads", "decode_steps", "repeats"):
        if s[key] < 1:
            raise ValueError(f"--{key.replace('_', '-')} must be >= 1, got {s[key]}")
    if s["warmup"] < 0:
        raise ValueError(f"--warmup must be >= 0, got {s['warmup']}")
    if any(n < 1 for n in s["sizes"]) or any(t < 1 for t in s["contexts"]):
        raise ValueError("--sizes and --contexts must be positive integers")
    if s["width"] % s["heads"]:
        raise ValueError(f"--heads ({s['heads']}) must divide --width ({s['width']})")
    s["sizes"] = sorted(set(s["sizes"]))
    s["contexts"] = sorted(set(s["contexts"]))
    return s


def run(args) -> int:
    counts = [backend.cpu_cores()] if args.threads is None else args.threads
    if min(counts) < 1 or (len(counts) > 1 and not args.train):
        print(f"bench: --threads takes counts >= 1 (several only with --train), got "
              f"{' '.join(map(str, counts))}", file=sys.stderr)
        return 1
    with backend.threads(counts[0]):
        return _run_train(args) if args.train else _run(args)


def _run_train(args) -> int:
    from ..bench.measure import _loadavg
    from ..bench.train_steps import TRAIN_BENCHES, run_train_bench, format_train_report
    benches = args.benches or list(TRAIN_BENCHES)
    bad = [b for b in benches if b not in TRAIN_BENCHES]
    if bad:
        print(f"bench: --benches must be among {', '.join(TRAIN_BENCHES)}, got {bad}",
              file=sys.stderr)
        return 1
    if args.device != "cpu":
        print("bench: --train measures the CPU (NumPy) path only; drop --device gpu",
              file=sys.stderr)
        return 2
    kept = False if args.default_malloc else backend.keep_freed_memory()
    load_before = _loadavg()
    res = run_train_bench(benches, dtype=args.dtype, rounds=args.repeats or 5,
                          quick=args.quick, compare_plain=args.compare_plain,
                          threads=args.threads if args.threads and len(args.threads) > 1
                          else None, seed=args.seed, progress=not args.no_progress)
    from threadpoolctl import threadpool_info
    blas_threads = sorted({i["num_threads"] for i in threadpool_info()
                           if i.get("user_api") == "blas"})
    meta = {"load_before": load_before, "load_after": _loadavg(),
            "blas_threads": blas_threads, "kept_freed_memory": kept, "dtype": args.dtype,
            "command": how_to_run("bench", *sys.argv[2:])
            if sys.argv[1:2] == ["bench"] else None}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench_train_cpu.json")
    atomic_write_text(path, json.dumps({"meta": meta, "train": res}, indent=1) + "\n")
    print(format_train_report(res))
    print(f"BLAS threads {blas_threads}; load average {load_before} before, "
          f"{meta['load_after']} after; wrote {path}")
    return 0


def _run(args) -> int:
    try:
        s = _settings(args)
    except ValueError as e:
        print(f"bench: {e}", file=sys.stderr)
        return 1
    if s["device"] == "gpu" and not backend.gpu_available():
        print("bench: --device gpu needs CuPy and a usable CUDA GPU, and none is available "
              "here (cupy.cuda.is_available() is False or CuPy is not installed). Nothing was "
              "measured or written; run with --device cpu.", file=sys.stderr)
        return 2
    result = run_benchmark(s, progress=not args.no_progress)
    result["targets"] = evaluate_targets(result)
    result["meta"]["command"] = _command(s, args)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"bench_{s['device']}.json")
    atomic_write_text(json_path, json.dumps(result, indent=1, sort_keys=False) + "\n")
    plots = write_plots(result, args.out, prefix=f"bench_{s['device']}")
    print(format_report(result))
    print(f"wrote {json_path}" + "".join(f", {p}" for p in plots))
    return 0


def _command(s, args) -> str:
    """The command line that reproduces these settings."""
    parts = [how_to_run("bench")]
    if s["quick"]:
        parts.append("--quick")
    parts.append("--sizes " + " ".join(map(str, s["sizes"])))
    parts.append(f"--batch {s['batch']} --width {s['width']} --heads {s['heads']}")
    parts.append("--contexts " + " ".join(map(str, s["contexts"])))
    parts.append(f"--decode-steps {s['decode_steps']} --repeats {s['repeats']} "
                 f"--warmup {s['warmup']} --dtype {s['dtype']} --device {s['device']} "
                 f"--max-mem-gb {s['max_mem_gb']:g} --seed {s['seed']}")
    if not s["train"]:
        parts.append("--no-train")
    parts.append(f"--out {args.out}")
    return " ".join(parts)
