"""Benchmark TSSA against softmax and linear attention: time and memory against the length N.

``python -m tostnp bench`` measures, at width C = 384, 6 heads, batch 4, float32 by default:

* forward and forward+backward wall time and peak memory of the TSSA layer (non-causal and
  causal), softmax attention (non-causal) and linear attention (tostnp's own, elu + 1), for N
  from 256 to 16384; sizes whose estimated memory exceeds ``--max-mem-gb`` are skipped and
  recorded as skipped (softmax attention keeps a (B, h, N, N) matrix: 25 GB at N = 16384);
* the reference matmuls measured in the same run at every N: the TSSA layer's two C x C
  projections (forward: x @ W_u and a @ W_o) and the six matmuls of their forward and backward
  (four shaped like x @ W -- two forward, dx = g @ W^T twice -- and two shaped like x^T @ dy, the
  weight gradients). These are plain ``@`` calls on (B*N, C) arrays; on OpenBLAS the x^T @ dy
  shape runs several times slower than x @ W, and that is part of the baseline as measured;
* the per-token time of the O(1) recurrent decoder (:func:`tostnp.nn.tssa_decode_step`)
  against the context length, after prefilling the state with the causal forward;
* the training throughput (forward, backward and AdamW step, synthetic data) of the default
  models ("tiny-digits" vision classifier, "tiny-char" language model).

Timing: warm-up, then the median of ``--repeats`` runs; the runs are interleaved in rounds
(each measurement once per round), so a change of load during the run hits every size alike.
Peak memory: a separate run under ``tracemalloc`` (NumPy reports its buffers to it) on CPU, or
the bytes the CuPy memory pool holds after a run that started from an empty pool on GPU; both
count what the call allocates, not its inputs. Writes ``bench_<device>.json`` and log-log plots
(``bench_<device>_time.png``, ``_memory.png``, ``_decode.png``) atomically into ``--out``, prints
a table and the issue's targets with PASS/MISS. ``--device gpu`` without a usable GPU prints
why and exits with status 2, writing nothing.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc

import numpy as np

from . import backend

__all__ = ["add_arguments", "run", "run_benchmark", "evaluate_targets"]

DEFAULT_SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384]
DEFAULT_CONTEXTS = [256, 512, 1024, 2048, 4096, 8192]
LAYERS = ["tssa", "tssa_causal", "softmax", "linear"]
LABELS = {"tssa": "TSSA", "tssa_causal": "TSSA (causal)", "softmax": "softmax attention",
          "linear": "linear attention"}


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sizes")
    g.add_argument("--sizes", type=int, nargs="+", default=None, metavar="N",
                   help=f"sequence lengths N (default {' '.join(map(str, DEFAULT_SIZES))}; "
                        "--quick: 32 64)")
    g.add_argument("--batch", type=int, default=None, help="batch B (default 4; --quick: 1)")
    g.add_argument("--width", type=int, default=None, help="width C (default 384; --quick: 24)")
    g.add_argument("--heads", type=int, default=None, help="heads h (default 6; --quick: 2)")
    g.add_argument("--contexts", type=int, nargs="+", default=None, metavar="T",
                   help="decoder context lengths (default "
                        f"{' '.join(map(str, DEFAULT_CONTEXTS))}; --quick: 16 32)")
    g.add_argument("--decode-steps", type=int, default=None,
                   help="decoder steps timed per context (default 64; --quick: 4)")
    g.add_argument("--quick", action="store_true",
                   help="tiny sizes, 1 repeat: a smoke run in seconds (figures meaningless)")
    r = parser.add_argument_group("run")
    r.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    r.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="cpu (NumPy) or gpu (CuPy; exits with status 2 if no GPU is usable)")
    r.add_argument("--repeats", type=int, default=None,
                   help="timed rounds, the median is reported (default 5; --quick: 1)")
    r.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    r.add_argument("--max-mem-gb", type=float, default=8.0,
                   help="skip a layer at a size whose estimated memory exceeds this (default 8)")
    r.add_argument("--no-train", action="store_true",
                   help="skip the training-throughput section")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", default="bench_out",
                   help="output folder for bench_<device>.json and the plots (default ./bench_out)")
    r.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")


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
    result["meta"]["command"] = _command(s, args)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"bench_{s['device']}.json")
    _atomic_write_text(json_path, json.dumps(result, indent=1, sort_keys=False) + "\n")
    plots = write_plots(result, args.out, prefix=f"bench_{s['device']}")
    print(format_report(result))
    print(f"wrote {json_path}" + "".join(f", {p}" for p in plots))
    return 0


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------
class _Device:
    """Namespace, synchronisation and peak-memory measurement for "cpu" (NumPy) or "gpu"."""

    def __init__(self, name: str):
        self.name = name
        self.xp = backend.get_xp(name)
        if name == "gpu":
            import cupy
            self._cupy = cupy

    def sync(self):
        if self.name == "gpu":
            self._cupy.cuda.Device().synchronize()

    def peak_bytes(self, fn) -> int:
        """Bytes allocated at the high-water mark of ``fn()`` (its results count until it
        returns; its inputs, allocated before, do not)."""
        if self.name == "gpu":
            pool = self._cupy.get_default_memory_pool()
            self.sync()
            pool.free_all_blocks()
            before = pool.used_bytes()
            out = fn()
            self.sync()
            peak = pool.total_bytes() - before   # freed blocks stay in the pool: a high-water mark
            del out
            return int(peak)
        was_tracing = tracemalloc.is_tracing()
        if not was_tracing:
            tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            base = tracemalloc.get_traced_memory()[0]
            out = fn()
            peak = tracemalloc.get_traced_memory()[1] - base
            del out
        finally:
            if not was_tracing:
                tracemalloc.stop()
        return int(peak)

    def time_once(self, fn) -> float:
        t0 = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - t0

    def time(self, fn, repeats: int, warmup: int) -> dict:
        """Median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
        for _ in range(warmup):
            self.time_once(fn)
        ts = [self.time_once(fn) for _ in range(repeats)]
        return {"median_s": statistics.median(ts), "min_s": min(ts), "runs": len(ts)}


def _attn_params(rng, xp, C, dtype):
    return {"W_qkv": rng.normal(xp, (C, 3 * C), dtype, std=0.02),
            "b_qkv": xp.zeros((3 * C,), dtype=dtype),
            "W_o": rng.normal(xp, (C, C), dtype, std=0.02),
            "b_o": xp.zeros((C,), dtype=dtype)}


def _layer_fns(name, x, dy, params, h):
    """(forward(), forward_backward()) closures for layer ``name``."""
    from .nn import tssa, attention
    if name in ("tssa", "tssa_causal"):
        causal = name == "tssa_causal"
        fwd = lambda: tssa.tssa_forward(x, params, h, causal=causal)             # noqa: E731
        bwd = tssa.tssa_backward
    elif name == "softmax":
        fwd = lambda: attention.softmax_attention_forward(x, params, h)          # noqa: E731
        bwd = attention.softmax_attention_backward
    else:
        fwd = lambda: attention.linear_attention_forward(x, params, h)           # noqa: E731
        bwd = attention.linear_attention_backward

    def fwd_bwd():
        y, cache = fwd()
        return bwd(dy, cache)
    return fwd, fwd_bwd


def estimate_bytes(name: str, B: int, N: int, C: int, h: int, itemsize: int) -> int:
    """Rough peak memory of forward+backward: what decides whether a size is skipped."""
    linear_part = 40 * B * N * C * itemsize          # activations, cache and gradients
    if name == "softmax":
        scores = B * h * N * N * itemsize            # the attention weights kept for backward
        return scores + 2 * min(scores, 4 * (1 << 26)) + linear_part
    return linear_part


def _reference_fns(xp, B, N, C, rng, dtype):
    """The matmuls of the layer's projections, on (B*N, C) arrays, as plain ``@`` calls."""
    x = rng.normal(xp, (B * N, C), dtype)
    g = rng.normal(xp, (B * N, C), dtype)
    W1 = rng.normal(xp, (C, C), dtype, std=0.02)
    W2 = rng.normal(xp, (C, C), dtype, std=0.02)
    T = xp.matrix_transpose

    def mm2():          # forward: w = x @ W_u, y = a @ W_o
        return x @ W1, g @ W2

    def mm6():          # + backward: da = dy @ W_o^T, dx = dw @ W_u^T, dW_o = a^T dy, dW_u = x^T dw
        return x @ W1, g @ W2, g @ T(W2), x @ T(W1), T(x) @ g, T(g) @ x

    return {"xW": lambda: x @ W1, "xTdy": lambda: T(x) @ g, "mm2": mm2, "mm6": mm6}


def _decode_tasks(s, rng, xp, dtype):
    """[(T, fn)]: fn runs ``decode_steps`` steps of tssa_decode_step from a state prefilled
    with the causal forward on a context of T tokens (cache["decode_state"])."""
    from .nn import tssa
    B, C, h, steps = s["batch"], s["width"], s["heads"], s["decode_steps"]
    max_len = max(s["contexts"]) + steps
    params = tssa.tssa_init(rng, xp, C, h, causal=True, max_len=max_len, bias=True, dtype=dtype)
    xs = rng.normal(xp, (B, steps, C), dtype)
    xts = [xs[:, i, :] for i in range(steps)]
    out = []
    for T in s["contexts"]:
        ctx = rng.normal(xp, (B, T, C), dtype)
        _, cache = tssa.tssa_forward(ctx, params, h, causal=True)
        state0 = cache["decode_state"]
        del cache, ctx

        def decode(state0=state0, T=T):
            st = state0
            for i in range(steps):
                y, st = tssa.tssa_decode_step(st, xts[i], params, h, T + i)
            return y
        out.append((T, decode))
    return out


def _train_bench(dev, s, rng, tick):
    """Training steps per second of the default models on synthetic data."""
    from .models import (get_vision_config, get_lm_config, vision_init, lm_init,
                         vision_loss_and_grads, lm_loss_and_grads, num_params)
    from .optim import AdamW
    from .train import TrainConfig
    xp, dtype = dev.xp, getattr(dev.xp, s["dtype"])
    tcfg = TrainConfig()
    batch = 8 if s["quick"] else tcfg.batch_size
    out = {}
    host = np.random.default_rng(s["seed"])

    vcfg = get_vision_config()
    params = vision_init(vcfg, rng, xp, dtype=dtype)
    opt = AdamW(params, lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2),
                weight_decay=tcfg.weight_decay)
    images = backend.from_host(xp, host.standard_normal(
        (batch, vcfg.image_size, vcfg.image_size, vcfg.in_chans)), dtype=dtype)
    labels = xp.asarray(host.integers(0, vcfg.num_classes, size=batch))

    def vstep():
        loss, grads, _ = vision_loss_and_grads(opt.params, images, labels, vcfg)
        opt.step(grads)
        return loss

    t = dev.time(vstep, s["repeats"], max(1, s["warmup"]))
    out["vision:tiny-digits"] = {
        "step_s": t["median_s"], "batch": batch, "images_per_s": batch / t["median_s"],
        "tokens_per_image": vcfg.num_patches, "params": int(num_params(params)),
        "config": {"width": vcfg.width, "depth": vcfg.depth, "heads": vcfg.num_heads}}
    tick()

    lcfg = get_lm_config()
    T = 32 if s["quick"] else lcfg.block_size
    params = lm_init(lcfg, rng, xp, dtype=dtype)
    opt = AdamW(params, lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2),
                weight_decay=tcfg.weight_decay)
    ids = xp.asarray(host.integers(0, lcfg.vocab_size, size=(batch, T + 1)))
    x_ids, y_ids = ids[:, :-1], ids[:, 1:]

    def lstep():
        loss, grads, _ = lm_loss_and_grads(opt.params, x_ids, y_ids, lcfg)
        opt.step(grads)
        return loss

    t = dev.time(lstep, s["repeats"], max(1, s["warmup"]))
    out["lm:tiny-char"] = {
        "step_s": t["median_s"], "batch": batch, "seq_len": T,
        "tokens_per_s": batch * T / t["median_s"], "params": int(num_params(params)),
        "config": {"width": lcfg.width, "depth": lcfg.depth, "heads": lcfg.num_heads}}
    tick()
    return out


def run_benchmark(s: dict, progress: bool = True) -> dict:
    """Run every section for settings ``s`` (see :func:`_settings`) -> the result dict.

    Timings are interleaved: every measurement (each size, layer, pass, reference and decoder
    context) is run once per round, ``repeats`` rounds after ``warmup`` rounds, and the median
    over rounds is reported. A change of machine load during the run then affects all sizes
    alike, so the ratios between them (the targets) stay meaningful on a shared machine.
    """
    from tqdm import tqdm
    from .nn import tssa
    dev = _Device(s["device"])
    xp = dev.xp
    dtype = getattr(xp, s["dtype"])
    itemsize = 4 if s["dtype"] == "float32" else 8
    B, C, h = s["batch"], s["width"], s["heads"]
    rng = backend.RNG(s["seed"])
    budget = s["max_mem_gb"] * 2 ** 30
    load_before = _loadavg()

    # ---- build every timed task: (section, key, field) -> fn
    tasks = {}
    reference, layers = {}, {name: {} for name in LAYERS}
    for N in s["sizes"]:
        ref = _reference_fns(xp, B, N, C, rng, dtype)
        for field, fn_key in (("x@W_s", "xW"), ("xT@dy_s", "xTdy"), ("fwd_2mm_s", "mm2"),
                              ("fwdbwd_6mm_s", "mm6")):
            tasks[("reference_matmuls", str(N), field)] = ref[fn_key]
        reference[str(N)] = {}
        x = rng.normal(xp, (B, N, C), dtype)
        dy = rng.normal(xp, (B, N, C), dtype)
        for name in LAYERS:
            est = estimate_bytes(name, B, N, C, h, itemsize)
            if est > budget:
                layers[name][str(N)] = {
                    "skipped": f"estimated memory {est / 2**30:.1f} GB > --max-mem-gb "
                               f"{s['max_mem_gb']:g}", "est_bytes": est}
                continue
            if name in ("tssa", "tssa_causal"):
                params = tssa.tssa_init(rng, xp, C, h, causal=name == "tssa_causal",
                                        max_len=N, bias=True, dtype=dtype)
            else:
                params = _attn_params(rng, xp, C, dtype)
            fwd, fwd_bwd = _layer_fns(name, x, dy, params, h)
            tasks[("layers", name, str(N), "fwd_s")] = fwd
            tasks[("layers", name, str(N), "fwdbwd_s")] = fwd_bwd
            layers[name][str(N)] = {"est_bytes": est}
    decode = {}
    steps = s["decode_steps"]
    for T, fn in _decode_tasks(s, rng, xp, dtype):
        tasks[("decode", str(T), "per_token_s")] = fn
        decode[str(T)] = {"steps": steps}

    rounds = s["warmup"] + s["repeats"]
    n_mem = sum(1 for k in tasks if k[0] == "layers")
    bar = tqdm(total=rounds * len(tasks) + n_mem + (2 if s["train"] else 0), desc="bench",
               unit="run", disable=not progress, file=sys.stderr)
    times = {k: [] for k in tasks}
    order = list(tasks)
    for rnd in range(rounds):
        bar.set_postfix_str(f"round {rnd + 1}/{rounds}" + (" (warm-up)" if rnd < s["warmup"]
                                                          else ""))
        for k in (order if rnd % 2 == 0 else order[::-1]):   # alternate the order: no drift bias
            t = dev.time_once(tasks[k])
            if rnd >= s["warmup"]:
                times[k].append(t)
            bar.update(1)
    for k, ts in times.items():
        med = statistics.median(ts)
        if k[0] == "reference_matmuls":
            reference[k[1]][k[2]] = med
        elif k[0] == "layers":
            e = layers[k[1]][k[2]]
            e[k[3]] = med
            e[k[3].replace("_s", "_min_s")] = min(ts)
            e["runs"] = len(ts)
        else:
            decode[k[1]][k[2]] = med / steps
            decode[k[1]]["runs"] = len(ts)

    # ---- peak memory: one run of each layer task under tracemalloc (or the CuPy pool)
    bar.set_postfix_str("peak memory")
    for k, fn in tasks.items():
        if k[0] == "layers":
            layers[k[1]][k[2]][k[3].replace("_s", "_peak_bytes")] = dev.peak_bytes(fn)
            bar.update(1)
    del tasks, order

    train = {}
    if s["train"]:
        bar.set_postfix_str("training")
        train = _train_bench(dev, s, rng, lambda: bar.update(1))
    bar.close()

    result = {
        "meta": _meta(s, load_before),
        "reference_matmuls": reference,
        "layers": layers,
        "decode": decode,
        "train": train if s["train"] else {"skipped": "--no-train"},
    }
    result["targets"] = evaluate_targets(result)
    return result


# --------------------------------------------------------------------------------------------
# targets, report
# --------------------------------------------------------------------------------------------
def _get(result, name, N, key):
    e = result["layers"].get(name, {}).get(str(N))
    return None if e is None or key not in e else e[key]


def _target(desc, value, op, limit, unit="x"):
    if value is None:
        return {"target": desc, "value": None, "limit": limit, "status": "not measured"}
    ok = value <= limit if op == "<=" else value >= limit
    return {"target": desc, "value": value, "limit": limit, "op": op, "unit": unit,
            "status": "PASS" if ok else "MISS"}


def evaluate_targets(result: dict) -> list:
    """The issue's targets, from the measured numbers (None where a size was not measured)."""
    ref = result["reference_matmuls"]

    def ratio(a, b):
        return None if a is None or b is None or b <= 0 else a / b

    t16, t1 = _get(result, "tssa", 16384, "fwdbwd_s"), _get(result, "tssa", 1024, "fwdbwd_s")
    m16 = _get(result, "tssa", 16384, "fwdbwd_peak_bytes")
    m1 = _get(result, "tssa", 1024, "fwdbwd_peak_bytes")
    sm_t, ts_t = _get(result, "softmax", 4096, "fwdbwd_s"), _get(result, "tssa", 4096, "fwdbwd_s")
    sm_m = _get(result, "softmax", 4096, "fwdbwd_peak_bytes")
    ts_m = _get(result, "tssa", 4096, "fwdbwd_peak_bytes")
    r4 = ref.get("4096", {})
    ts_f = _get(result, "tssa", 4096, "fwd_s")
    dec = result.get("decode", {})
    d_hi = dec.get("8192", {}).get("per_token_s")
    d_lo = dec.get("256", {}).get("per_token_s")
    return [
        _target("TSSA fwd+bwd time, N=16384 / N=1024 (ideal 16)", ratio(t16, t1), "<=", 20.0),
        _target("TSSA fwd+bwd peak memory, N=16384 / N=1024 (ideal 16)", ratio(m16, m1),
                "<=", 18.0),
        _target("softmax / TSSA fwd+bwd time at N=4096", ratio(sm_t, ts_t), ">=", 5.0),
        _target("softmax / TSSA fwd+bwd peak memory at N=4096", ratio(sm_m, ts_m), ">=", 10.0),
        _target("TSSA forward / its 2 C x C matmuls at N=4096", ratio(ts_f, r4.get("fwd_2mm_s")),
                "<=", 1.25),
        _target("TSSA fwd+bwd / the 6 projection matmuls at N=4096",
                ratio(ts_t, r4.get("fwdbwd_6mm_s")), "<=", 1.5),
        _target("decoder per-token time, context 8192 / context 256", ratio(d_hi, d_lo),
                "<=", 1.5),
    ]


def _fmt_t(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}" if v >= 1e-3 else f"{v * 1e3:.3f}"


def _fmt_mb(v):
    return "-" if v is None else f"{v / 2**20:.1f}"


def format_report(result: dict) -> str:
    """A plain-text table (ms, MB) and the targets."""
    m = result["meta"]
    lines = [f"tostnp bench: B={m['batch']} C={m['width']} h={m['heads']} {m['dtype']} on "
             f"{m['device']} ({m['machine']}); load average {m['loadavg_before']} -> "
             f"{m['loadavg_after']}", ""]
    head = f"{'N':>6} {'layer':<16}{'fwd ms':>10}{'fwd+bwd ms':>12}{'fwd MB':>10}{'f+b MB':>10}"
    lines += [head, "-" * len(head)]
    for N in m["sizes"]:
        r = result["reference_matmuls"][str(N)]
        lines.append(f"{N:>6} {'2 / 6 matmuls':<16}{_fmt_t(r['fwd_2mm_s']):>10}"
                     f"{_fmt_t(r['fwdbwd_6mm_s']):>12}{'':>10}{'':>10}")
        for name in LAYERS:
            e = result["layers"][name][str(N)]
            if "skipped" in e:
                lines.append(f"{'':>6} {name:<16}  skipped: {e['skipped']}")
                continue
            lines.append(f"{'':>6} {name:<16}{_fmt_t(e['fwd_s']):>10}{_fmt_t(e['fwdbwd_s']):>12}"
                         f"{_fmt_mb(e['fwd_peak_bytes']):>10}"
                         f"{_fmt_mb(e['fwdbwd_peak_bytes']):>10}")
    lines += ["", "decoder (tssa_decode_step) per-token time:"]
    for T, e in result["decode"].items():
        lines.append(f"  context {T:>6}: {e['per_token_s'] * 1e6:8.1f} us")
    if result["train"] and "skipped" not in result["train"]:
        lines += ["", "training throughput (forward + backward + AdamW, synthetic data):"]
        for k, e in result["train"].items():
            rate = (f"{e['images_per_s']:.0f} images/s" if "images_per_s" in e
                    else f"{e['tokens_per_s']:.0f} tokens/s")
            lines.append(f"  {k:<20} batch {e['batch']:>3}: {e['step_s'] * 1e3:8.1f} ms/step, "
                         f"{rate}")
    lines += ["", "targets:"]
    for t in result["targets"]:
        v = "-" if t["value"] is None else f"{t['value']:.2f}"
        lim = f"{t.get('op', '')} {t['limit']:g}"
        lines.append(f"  [{t['status']:^12}] {t['target']}: {v} (target {lim.strip()})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# plots and files
# --------------------------------------------------------------------------------------------
def _atomic_write_text(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)                 # mkstemp makes 0600; these are shareable results
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _savefig_atomic(fig, path: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=90, format="png")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _ideal_lines(ax, Ns, anchor_N, anchor_v):
    """Dotted O(N) and O(N^2) guides through (anchor_N, anchor_v)."""
    Ns = np.asarray(Ns, dtype=float)
    ax.plot(Ns, anchor_v * Ns / anchor_N, ":", color="gray", label="O(N)")
    ax.plot(Ns, anchor_v * (Ns / anchor_N) ** 2, "--", color="lightgray", label="O(N²)")


def write_plots(result: dict, out: str, prefix: str = "bench") -> list:
    """Log-log time and memory against N, and decoder time against context -> file paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    m = result["meta"]
    title = f"B={m['batch']}, C={m['width']}, h={m['heads']}, {m['dtype']}, {m['device']}"
    paths = []
    Ns = m["sizes"]
    styles = {"tssa": "C0", "tssa_causal": "C2", "softmax": "C3", "linear": "C1"}

    for kind, key, ylabel, fname in (
            ("time", "fwdbwd_s", "forward + backward time (s)", f"{prefix}_time.png"),
            ("memory", "fwdbwd_peak_bytes", "forward + backward peak memory (MB)",
             f"{prefix}_memory.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        scale = 1.0 if kind == "time" else 1.0 / 2 ** 20
        for name in LAYERS:
            pts = [(N, _get(result, name, N, key)) for N in Ns]
            pts = [(N, v * scale) for N, v in pts if v is not None]
            if pts:
                ax.plot(*zip(*pts), "o-", color=styles[name], label=LABELS[name])
            if kind == "time":
                fp = [(N, _get(result, name, N, "fwd_s")) for N in Ns]
                fp = [(N, v) for N, v in fp if v is not None]
                if fp and name in ("tssa", "softmax"):
                    ax.plot(*zip(*fp), "x--", color=styles[name], alpha=0.6,
                            label=f"{LABELS[name]} (forward)")
        if kind == "time":
            ref = [(N, result["reference_matmuls"][str(N)]["fwdbwd_6mm_s"]) for N in Ns]
            ax.plot(*zip(*ref), "s-", color="k", alpha=0.5, ms=3, label="6 projection matmuls")
        anchor = [(N, _get(result, "tssa", N, key)) for N in Ns]
        anchor = [(N, v * scale) for N, v in anchor if v is not None]
        if anchor:
            _ideal_lines(ax, Ns, anchor[0][0], anchor[0][1])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{kind} vs N ({title})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, fname)
        _savefig_atomic(fig, path)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    Ts = [int(T) for T in result["decode"]]
    vals = [result["decode"][str(T)]["per_token_s"] * 1e6 for T in Ts]
    ax.plot(Ts, vals, "o-", color="C0", label="tssa_decode_step (recurrent state)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, max(vals) * 1.3)
    ax.set_xlabel("context length (tokens already consumed)")
    ax.set_ylabel("time per token (µs)")
    ax.set_title(f"O(1) decoder ({title})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, f"{prefix}_decode.png")
    _savefig_atomic(fig, path)
    plt.close(fig)
    paths.append(path)
    return paths


def _command(s, args) -> str:
    """The command line that reproduces these settings."""
    parts = ["python -m tostnp bench"]
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


def _loadavg():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _meta(s, load_before) -> dict:
    blas = None
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        blas = f"{b.get('name', '?')} {b.get('version', '')}".strip()
    except Exception:  # older NumPy: no dict mode
        pass
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sizes": s["sizes"], "batch": s["batch"], "width": s["width"], "heads": s["heads"],
        "dtype": s["dtype"], "device": s["device"], "repeats": s["repeats"],
        "warmup": s["warmup"], "contexts": s["contexts"], "decode_steps": s["decode_steps"],
        "max_mem_gb": s["max_mem_gb"], "quick": s["quick"],
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "python": platform.python_version(), "numpy": np.__version__, "blas": blas,
        "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "loadavg_before": load_before, "loadavg_after": _loadavg(),
        "timing": ("median over --repeats rounds after --warmup rounds; each round runs every "
                   "measurement once (order reversed every other round)"),
        "peak_memory": ("tracemalloc high-water mark of the call minus what was allocated "
                        "before it" if s["device"] == "cpu" else
                        "CuPy memory pool bytes after the call, starting from an empty pool"),
        "reference": ("fwd_2mm: x @ W twice on (B*N, C) x (C, C); fwdbwd_6mm: 4 shaped x @ W "
                      "(2 forward, 2 input gradients) + 2 shaped x^T @ dy (weight gradients), "
                      "plain @ on the same machine in the same run"),
    }
