"""Measuring for ``python -m tostnp bench``: time and peak memory of the layers against N, the
reference matmuls, the recurrent decoder and the training throughput (see
:mod:`tostnp.bench` for what is measured and how; :mod:`tostnp.bench.report` turns the result
into targets, a table and plots)."""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import sys
import time

import numpy as np

from .. import backend
from ..backend.budget import memory_budget
from .machine import cpu_model, loadavg as _loadavg
from ..backend.compiled import describe as compiled_status
from .peaks import traced_peak_bytes

__all__ = ["DEFAULT_SIZES", "DEFAULT_CONTEXTS", "LAYERS", "LABELS", "run_benchmark",
           "paired_ratios", "estimate_bytes"]

DEFAULT_SIZES = [256, 512, 1024, 2048, 4096, 8192, 16384]
DEFAULT_CONTEXTS = [256, 512, 1024, 2048, 4096, 8192]
LAYERS = ["tssa", "tssa_causal", "softmax", "linear"]
LABELS = {"tssa": "TSSA", "tssa_causal": "TSSA (causal)", "softmax": "softmax attention",
          "linear": "linear attention"}


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
        return traced_peak_bytes(fn)

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
    from ..nn import tssa, attention
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
    from ..nn import tssa
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
    """Training steps per second of the default models on synthetic data (the batch in shards
    on the threads where training shards it, :mod:`tostnp.train.shards`)."""
    from ..models import (get_vision_config, get_lm_config, vision_init, lm_init,
                         vision_loss_and_grads, lm_loss_and_grads, num_params)
    from ..train.loop import TrainConfig, make_optimizer, update_step
    from ..train.shards import sharded
    xp, dtype = dev.xp, getattr(dev.xp, s["dtype"])
    tcfg = TrainConfig()
    batch = 8 if s["quick"] else tcfg.batch_size
    out = {}
    host = np.random.default_rng(s["seed"])

    def step_seconds(params, loss_and_grads):
        """Median seconds of one training step as training makes it: loss_and_grads(params),
        then the loop's update (clipping, schedule, AdamW)."""
        opt = make_optimizer(params, tcfg)

        def step():
            loss, grads, _ = loss_and_grads(opt.params)
            update_step(opt, grads, loss, tcfg.warmup_steps, tcfg)
            return loss
        return dev.time(step, s["repeats"], max(1, s["warmup"]))["median_s"]

    vcfg = get_vision_config()
    params = vision_init(vcfg, rng, xp, dtype=dtype)
    images = backend.from_host(xp, host.standard_normal(
        (batch, vcfg.image_size, vcfg.image_size, vcfg.in_chans)), dtype=dtype)
    labels = xp.asarray(host.integers(0, vcfg.num_classes, size=batch))

    t = step_seconds(params, lambda P: sharded(
        lambda Q, X, y: vision_loss_and_grads(Q, X, y, vcfg), P, (images, labels), xp,
        row_elements=vcfg.block_tokens * vcfg.width))
    out["vision:tiny-digits"] = {
        "step_s": t, "batch": batch, "images_per_s": batch / t,
        "tokens_per_image": vcfg.num_patches, "params": int(num_params(params)),
        "config": {"width": vcfg.width, "depth": vcfg.depth, "heads": vcfg.num_heads}}
    tick()

    lcfg = get_lm_config()
    T = 32 if s["quick"] else lcfg.block_size
    params = lm_init(lcfg, rng, xp, dtype=dtype)
    ids = xp.asarray(host.integers(0, lcfg.vocab_size, size=(batch, T + 1)))
    x_ids, y_ids = ids[:, :-1], ids[:, 1:]

    t = step_seconds(params, lambda P: sharded(
        lambda Q, i, t: lm_loss_and_grads(Q, i, t, lcfg), P, (x_ids, y_ids), xp,
        row_elements=T * lcfg.width))
    out["lm:tiny-char"] = {
        "step_s": t, "batch": batch, "seq_len": T,
        "tokens_per_s": batch * T / t, "params": int(num_params(params)),
        "config": {"width": lcfg.width, "depth": lcfg.depth, "heads": lcfg.num_heads}}
    tick()
    return out


def run_benchmark(s: dict, progress: bool = True) -> dict:
    """Run every section for settings ``s`` (built by tostnp/cli/bench_command.py) -> the result.

    Timings are interleaved: every measurement (each size, layer, pass, reference and decoder
    context) is run once per round, ``repeats`` rounds after ``warmup`` rounds, and the median
    over rounds is reported. A change of machine load during the run then affects all sizes
    alike, so the ratios between them (the targets) stay meaningful on a shared machine.
    """
    from tqdm import tqdm
    from ..nn import tssa
    dev = _Device(s["device"])
    xp = dev.xp
    dtype = getattr(xp, s["dtype"])
    itemsize = 4 if s["dtype"] == "float32" else 8
    B, C, h = s["batch"], s["width"], s["heads"]
    rng = backend.RNG(s["seed"])
    budget = min(s["max_mem_gb"] * 2 ** 30, memory_budget())
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
                    "skipped": f"estimated memory {est / 2**30:.1f} GB > {budget / 2**30:.1f} "
                               f"GB (--max-memory-gb, or the memory available)",
                    "est_bytes": est}
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
    paired = {str(N): paired_ratios(times, str(N)) for N in s["sizes"]}
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
        "paired": paired,
        "decode": decode,
        "train": train if s["train"] else {"skipped": "--no-train"},
    }
    return result


# (ratio's name, the layer task, the reference task): each the TSSA layer over its own products
PAIRS = (("tssa_fwd_over_2mm", ("tssa", "fwd_s"), "fwd_2mm_s"),
         ("tssa_fwdbwd_over_6mm", ("tssa", "fwdbwd_s"), "fwdbwd_6mm_s"))


def paired_ratios(times: dict, N: str) -> dict:
    """The TSSA layer's time over its matrix products' time, round by round, at size N.

    ``times``: {task key: [seconds of each timed round]} as :func:`run_benchmark` collects
    them. A round runs the layer and the plain products within moments of each other, so the
    ratio of one round's two times does not move with the machine's speed from one round to
    the next, as the ratio of the two medians may. Returns {name: {"per_round": [...],
    "median", "min", "max"}} for each pair of :data:`PAIRS` that was measured at N."""
    out = {}
    for name, (layer, field), ref_field in PAIRS:
        a = times.get(("layers", layer, N, field))
        b = times.get(("reference_matmuls", N, ref_field))
        if not a or not b:
            continue
        r = [x / y for x, y in zip(a, b)]
        out[name] = {"per_round": r, "median": statistics.median(r), "min": min(r),
                     "max": max(r)}
    return out


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
        "cpu": cpu_model(),
        "python": platform.python_version(), "numpy": np.__version__, "blas": blas,
        "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "compiled_kernels": compiled_status(),
        "loadavg_before": load_before, "loadavg_after": _loadavg(),
        "timing": ("median over --repeats rounds after --warmup rounds; each round runs every "
                   "measurement once (order reversed every other round); 'paired': the TSSA "
                   "layer's time over its products' time in the same round, per round"),
        "peak_memory": ("tracemalloc high-water mark of the call minus what was allocated "
                        "before it" if s["device"] == "cpu" else
                        "CuPy memory pool bytes after the call, starting from an empty pool"),
        "reference": ("fwd_2mm: x @ W twice on (B*N, C) x (C, C); fwdbwd_6mm: 4 shaped x @ W "
                      "(2 forward, 2 input gradients) + 2 shaped x^T @ dy (weight gradients), "
                      "plain @ on the same machine in the same run"),
    }
