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
from ..backend.budget import check_memory
from .options import bounded, SEED, THREADS, how_to_run, add_old_spelling

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sizes")
    g.add_argument("--sizes", type=bounded(int, 1, 1 << 20), nargs="+", default=None,
                   metavar="N",
                   help=f"sequence lengths N [{' '.join(map(str, DEFAULT_SIZES))}; "
                        "--quick: 32 64]")
    g.add_argument("--batch", type=bounded(int, 1, 4096), default=None,
                   help="batch B [4; --quick: 1]")
    g.add_argument("--width", type=bounded(int, 1, 16384), default=None,
                   help="width C [384; --quick: 24]")
    g.add_argument("--heads", type=bounded(int, 1, 1024), default=None,
                   help="heads h [6; --quick: 2]")
    g.add_argument("--contexts", type=bounded(int, 1, 1 << 20), nargs="+", default=None,
                   metavar="T",
                   help="decoder context lengths "
                        f"[{' '.join(map(str, DEFAULT_CONTEXTS))}; --quick: 16 32]")
    g.add_argument("--decode-steps", type=bounded(int, 1, 100_000), default=None,
                   help="decoder steps timed per context [64; --quick: 4]")
    g.add_argument("--quick", action="store_true",
                   help="tiny sizes, 1 repeat: a smoke run in seconds (figures meaningless)")
    r = parser.add_argument_group("run")
    r.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                   help="[float32]")
    r.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="cpu (NumPy) or gpu (CuPy; exits with status 2 if no GPU is usable) "
                        "[cpu]")
    r.add_argument("--repeats", type=bounded(int, 1, 1000), default=None,
                   help="timed rounds, the median is reported [5; --quick: 1]")
    r.add_argument("--warmup", type=bounded(int, 0, 1000), default=1,
                   help="untimed rounds first [1]")
    mem = r.add_argument("--max-memory-gb", dest="max_mem_gb", metavar="MAX_MEMORY_GB",
                         type=bounded(float, 0.0, 1e6, open_lo=True), default=8.0,
                         help="memory (GB) a layer may plan to use: a size whose estimated "
                              "memory exceeds it, or the memory available if that is less, is "
                              "skipped [8]")
    add_old_spelling(r, "--max-mem-gb", mem)
    r.add_argument("--no-train", action="store_true",
                   help="skip the training-throughput section")
    r.add_argument("--seed", type=SEED, default=0, help="[0]")
    r.add_argument("--out", default="bench_out",
                   help="output folder for bench_<device>.json and the plots [bench_out]")
    r.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    r.add_argument("--default-malloc", action="store_true",
                   help="keep glibc's default allocator settings instead of keeping freed "
                        "memory in the process as training does (to measure what that saves)")
    r.add_argument("--threads", type=THREADS, nargs="+", default=None, metavar="N",
                   help="CPU threads for BLAS [all cores]; with --train several "
                        "counts (e.g. 1 2) are timed side by side")
    t = parser.add_argument_group("training speed (--train)")
    t.add_argument("--train", action="store_true",
                   help="only time training steps: the default LM and vision models and one "
                        "ToST block at N=4096, C=384 (steps/s, phase split, page faults)")
    t.add_argument("--benches", nargs="+", default=None, metavar="NAME",
                   help="with --train: which of lm, vision, block [all]")
    t.add_argument("--compare-plain", action="store_true",
                   help="with --train: also run every step with the NumPy fast path off "
                        "(interleaved) and print the ratio")


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
    if s["width"] % s["heads"]:
        raise ValueError(f"--heads ({s['heads']}) must divide --width ({s['width']})")
    s["sizes"] = sorted(set(s["sizes"]))
    s["contexts"] = sorted(set(s["contexts"]))
    check_memory(_fixed_bytes(s), "bench's input arrays (--batch x --sizes x --width, and the "
                                  "decoder's --contexts)")
    return s


def _fixed_bytes(s) -> int:
    """What the benchmark holds for its whole run, whatever layer is skipped: for each size the
    reference matmuls' and the layers' inputs and outputs (about 12 (B, N, C) arrays); the
    decoder's inputs, its prefilled states and one causal forward on the longest context."""
    item = 4 if s["dtype"] == "float32" else 8
    B, C, h = s["batch"], s["width"], s["heads"]
    grid = sum(12 * B * n * C for n in s["sizes"])
    T = max(s["contexts"]) + s["decode_steps"]
    decode = 2 * B * s["decode_steps"] * C + 40 * B * T * C + h * T \
        + len(s["contexts"]) * B * C * (C // h + 2)
    return item * (grid + decode)


def run(args) -> int:
    counts = [backend.cpu_cores()] if args.threads is None else args.threads
    if len(counts) > 1 and not args.train:
        raise ValueError(f"--threads takes several counts only with --train, got "
                         f"{' '.join(map(str, counts))}")
    with backend.threads(counts[0]):
        return _run_train(args) if args.train else _run(args)


def _run_train(args) -> int:
    from ..bench.measure import _loadavg
    from ..bench.anatomy import format_anatomy
    from ..bench.machine import machine_info
    from ..bench.train_steps import (TRAIN_BENCHES, run_train_bench, train_anatomy,
                                     format_train_report)
    benches = args.benches or list(TRAIN_BENCHES)
    bad = [b for b in benches if b not in TRAIN_BENCHES]
    if bad:
        raise ValueError(f"--benches must be among {', '.join(TRAIN_BENCHES)}, got {bad}")
    if args.device != "cpu":
        raise ValueError("--train measures the CPU (NumPy) path only; drop --device gpu")
    kept = False if args.default_malloc else backend.keep_freed_memory()
    load_before = _loadavg()
    res = run_train_bench(benches, dtype=args.dtype, rounds=args.repeats or 5,
                          quick=args.quick, compare_plain=args.compare_plain,
                          threads=args.threads if args.threads and len(args.threads) > 1
                          else None, seed=args.seed, progress=not args.no_progress)
    anatomy = train_anatomy(benches, dtype=args.dtype, quick=args.quick, seed=args.seed)
    from threadpoolctl import threadpool_info
    blas_threads = sorted({i["num_threads"] for i in threadpool_info()     # NumPy's BLAS (not
                           if i.get("user_api") == "blas"                   # SciPy's own copy)
                           and "numpy" in i.get("filepath", "")})
    meta = {"load_before": load_before, "load_after": _loadavg(), "machine": machine_info(),
            "blas_threads": blas_threads, "kept_freed_memory": kept, "dtype": args.dtype,
            "command": how_to_run("bench", *sys.argv[2:])
            if sys.argv[1:2] == ["bench"] else None}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "bench_train_cpu.json")
    atomic_write_text(path, json.dumps({"meta": meta, "train": res, "anatomy": anatomy},
                                          indent=1) + "\n")
    print(format_train_report(res))
    print(f"Where the time goes ({meta['machine']['cpu']}, {meta['machine']['blas']}; "
          "medians of 5, products in a pass of their own):")
    for name, a in anatomy.items():
        print(format_anatomy(name, a))
    print(f"BLAS threads {blas_threads}; load average {load_before} before, "
          f"{meta['load_after']} after; wrote {path}")
    return 0


def _run(args) -> int:
    s = _settings(args)
    if s["device"] == "gpu" and not backend.gpu_available():
        raise ValueError("--device gpu needs CuPy and a usable CUDA GPU, and none is available "
                         "here (cupy.cuda.is_available() is False or CuPy is not installed). "
                         "Nothing was measured or written; run with --device cpu.")
    # as training runs (tostnp.train.loop.train): freed arrays are reused, not faulted in anew
    kept = False if args.default_malloc or s["device"] != "cpu" else backend.keep_freed_memory()
    result = run_benchmark(s, progress=not args.no_progress)
    result["meta"]["kept_freed_memory"] = kept
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
                 f"--max-memory-gb {s['max_mem_gb']:g} --seed {s['seed']}")
    if not s["train"]:
        parts.append("--no-train")
    if args.default_malloc:
        parts.append("--default-malloc")
    parts.append(f"--out {args.out}")
    return " ".join(parts)
