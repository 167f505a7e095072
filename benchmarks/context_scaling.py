#!/usr/bin/env python
"""context_scaling.py -- the paper's efficiency claim on this CPU: a causal ToST language model
(tostnp, O(T) TSSA) against a GPT-style model of the same width and depth whose attention is
PyTorch's ``scaled_dot_product_attention`` (causal; its fused CPU kernel), as the context grows.

    # PyTorch in its own venv (torch is never a dependency of tostnp; this file is outside the
    # package); run from the repository root:
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch==2.13.0 -r requirements.txt
    PYTHONPATH=. /tmp/torchvenv/bin/python benchmarks/context_scaling.py \\
        [--contexts 512 1024 2048 4096 8192 16384] [--width 256 --depth 4 --heads 4]
        [--threads 2] [--rounds 3] [--json docs/bench/context_scaling.json]
    # on a CUDA GPU (tostnp on CuPy, torch on cuda; training only; memory = GPU memory held):
    PYTHONPATH=. python benchmarks/context_scaling.py --device gpu --width 768 --depth 12 \
        --heads 12 --contexts 1024 4096 16384 65536      # what .ci/gpu-check runs

Every number it prints is measured in the run that prints it.

Training (batch 1, float32, vocabulary 256): at each context T, one worker process per system
(the tostnp worker never imports torch), each fresh, with the same thread count (BLAS via
threadpoolctl and tostnp's fast path; torch.set_num_threads). A step is what training does per
update: forward, mean next-token cross-entropy, backward, gradient clipping at 1.0, AdamW
(tostnp: tostnp.train.optim; torch: torch.optim.AdamW), the loss to the host. After one warm-up
step the parent alternates rounds tostnp, torch, tostnp, ...; a round runs k steps (about
``--round-s`` seconds, at least one) and its mean is one sample. Reported per T: the median step
time of each, their ratio (tostnp / torch) and the median of the per-round paired ratios.
Memory: each worker's peak resident set (RSS, /proc/self/status VmHWM) over all its steps minus
its RSS before the model was built (after the imports and one step of a width-8 model at context
8, which sets up the library's runtime: thread pools, autograd, kernels), i.e. parameters,
optimiser state, data, activations and allocator caches, the same measure for both; for tostnp also the NumPy bytes at one step's high-water
mark (tracemalloc, which cannot see torch's buffers). The crossover is the smallest measured T
from which on tostnp's step is faster (memory: smaller).

Generation (batch 1): per-token time of tostnp's O(1) recurrent decoder (each TSSA layer carries
its prefix statistics) against the torch model with a key/value cache, at contexts 1k ... 16k.
At context t each state is put at position t directly (the statistics and the cached keys and
values filled with random numbers: neither system's per-token work depends on the values), then
``--tokens`` tokens are timed one by one (median), systems interleaved per context. Memory: the
bytes of the state each keeps for the context (the KV cache grows as 2 L t C; the TSSA state is
L (2 C + h) numbers at any t).

The models: tostnp's LM (tostnp/models/lm.py: token + learned position embeddings, pre-LN
blocks of causal TSSA and a tanh-GELU MLP with LayerScale, tied head) at the given width,
depth, heads and MLP ratio 4; the torch GPT the same with causal softmax attention (fused
q/k/v and output projections, 4 C^2 weights per layer against TSSA's 2 C^2), no LayerScale.
``--attention eager`` replaces the fused kernel in training by softmax(q k^T / sqrt(p)) v with the
(B, h, T, T) weights stored for the backward, as GPT-2's reference code does (memory O(T^2)).
The paper's figure (ToST-Base against GPT2-Base at 4k context on a GPU: 0.60x the time, 0.41x
the memory) is printed beside the 4k ratios; a CPU and a small model are a different setting.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

if __package__ in (None, ""):         # run as a script: the repository root on the path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.workers import Worker, protocol_channel  # noqa: E402

HERE = os.path.abspath(__file__)
PAPER = {"context": 4096, "time_ratio": 0.60, "memory_ratio": 0.41,
         "setting": "GPU; ToST-Base against GPT2-Base, per training step (ICLR 2025 paper)"}
VOCAB = 256


# ============================================================================================
# the two models
# ============================================================================================
def tostnp_model(T, a):
    from tostnp import backend
    from tostnp.models import get_lm_config, lm_init
    cfg = get_lm_config("tiny-char", vocab_size=VOCAB, block_size=T, width=a.width,
                        depth=a.depth, num_heads=a.heads, mlp_ratio=4)
    xp = backend.get_xp(a.device)
    return cfg, lm_init(cfg, backend.RNG(0), xp, getattr(xp, a.dtype))


def torch_model(T, a):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, C, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.qkv = nn.Linear(C, 3 * C, bias=False)
            self.proj = nn.Linear(C, C, bias=False)
            self.fc = nn.Linear(C, 4 * C, bias=False)
            self.fc2 = nn.Linear(4 * C, C, bias=False)

        def _heads(self, x):                                     # (B, T, C) -> 3 x (B, h, T, p)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            return [z.view(B, T, self.h, C // self.h).transpose(1, 2) for z in (q, k, v)]

        def _rest(self, x, y):                                   # y (B, h, T, p)
            B, T, C = x.shape
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

        def forward(self, x):
            q, k, v = self._heads(x)
            if a.attention == "sdpa":
                return self._rest(x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
            # "eager": the (B, h, T, T) weights stored, as GPT-2's reference code does
            T = x.shape[1]
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
            mask = torch.ones(T, T, dtype=torch.bool).triu(1)
            att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
            return self._rest(x, att @ v)

        def decode(self, x, cache_k, cache_v, t):                # x (B, 1, C) at position t
            q, k, v = self._heads(x)
            cache_k[:, :, t:t + 1] = k
            cache_v[:, :, t:t + 1] = v
            y = F.scaled_dot_product_attention(q, cache_k[:, :, :t + 1], cache_v[:, :, :t + 1])
            return self._rest(x, y)

    class GPT(nn.Module):
        def __init__(self, V, T, C, L, h):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block(C, h) for _ in range(L))
            self.ln_f = nn.LayerNorm(C)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe.weight[:ids.shape[1]]
            for b in self.blocks:
                x = b(x)
            return self.ln_f(x) @ self.wte.weight.T                          # tied head

        def decode(self, ids_t, caches, t):                      # ids_t (B, 1)
            x = self.wte(ids_t) + self.wpe.weight[t]
            for b, (ck, cv) in zip(self.blocks, caches):
                x = b.decode(x, ck, cv, t)
            return self.ln_f(x) @ self.wte.weight.T

    torch.manual_seed(0)
    return GPT(VOCAB, T, a.width, a.depth, a.heads).to(a.dtype_torch).to(_torch_device(a))


def _torch_device(a):
    return "cuda" if a.device == "gpu" else "cpu"


# ============================================================================================
# workers (one per system and context; the tostnp worker never imports torch)
# ============================================================================================
def train_step(system, T, a):
    """-> step() that runs one training step and returns the loss as a float."""
    import numpy as np
    host = np.random.default_rng(1)
    if system == "tostnp":
        from tostnp import backend
        from tostnp.models.lm import lm_loss_and_grads
        from tostnp.train.optim import AdamW, clip_grad_norm
        backend.keep_freed_memory()                              # as tostnp's training does
        xp = backend.get_xp(a.device)
        cfg, params = tostnp_model(T, a)
        opt = AdamW(params, lr=1e-3, weight_decay=0.1)

        def step():
            ids = host.integers(0, VOCAB, size=(1, T + 1))
            x = backend.from_host(xp, ids[:, :-1], dtype=xp.int64)
            y = backend.from_host(xp, ids[:, 1:], dtype=xp.int64)
            loss, grads, _ = lm_loss_and_grads(opt.params, x, y, cfg)
            grads, _ = clip_grad_norm(grads, 1.0)
            opt.step(grads, lr=1e-3)
            return float(backend.to_host(loss))                  # waits for the device
        return step
    import torch
    import torch.nn.functional as F
    model = torch_model(T, a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)

    def step():
        ids = torch.from_numpy(host.integers(0, VOCAB, size=(1, T + 1))).to(_torch_device(a))
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()                                       # waits for the device
    return step


def decode_at(system, Tmax, a):
    """-> (at(t) -> (token(), state bytes)): a decoder put at position t, one token per call."""
    import numpy as np
    rs = np.random.default_rng(2)
    if system == "tostnp":
        from tostnp import backend
        from tostnp.models.lm import _Decoder
        xp = backend.get_xp("cpu")
        cfg, params = tostnp_model(Tmax + a.tokens + 8, a)
        dec = _Decoder(params, cfg, 1)
        ids = backend.from_host(xp, rs.integers(0, VOCAB, size=(1,)), dtype=xp.int64)

        def at(t):
            dec.reset()
            dec.t = t
            for st in dec.states:                                # statistics of t tokens
                s = st["tssa"]
                s["S1"] = xp.asarray(t * (1 + rs.random(s["S1"].shape)), dtype=a.dtype_np)
                s["S3"] = xp.asarray(t * rs.dirichlet(np.ones(a.heads))[None, :],
                                     dtype=a.dtype_np)
                s["S2"] = xp.asarray(s["S1"] * rs.random(s["S2"].shape), dtype=a.dtype_np)
                s["t"] = t
            nbytes = sum(int(v.nbytes) for st in dec.states for v in st["tssa"].values()
                         if hasattr(v, "nbytes"))
            return (lambda: dec.step(ids)), nbytes
        return at
    import torch
    model = torch_model(Tmax + a.tokens + 8, a)
    B, h, p = 1, a.heads, a.width // a.heads
    caches = [(torch.randn(B, h, Tmax + a.tokens + 8, p, dtype=a.dtype_torch),
               torch.randn(B, h, Tmax + a.tokens + 8, p, dtype=a.dtype_torch))
              for _ in range(a.depth)]
    ids = torch.from_numpy(rs.integers(0, VOCAB, size=(1, 1)))

    def at(t):
        pos = [t]

        def token():
            with torch.inference_mode():
                out = model.decode(ids, caches, pos[0])
            pos[0] += 1
            return out
        # the cache a decoder holds for t tokens: keys and values of every layer
        return token, 2 * a.depth * B * t * a.width * caches[0][0].element_size()
    return at


def worker_main(argv):
    system, T, a = argv[0], int(argv[1]), parse_args(argv[2:])
    send = protocol_channel()                            # library prints go to stderr
    import numpy  # noqa: F401  (load OpenBLAS first: threadpoolctl only limits loaded libraries)
    from threadpoolctl import threadpool_limits
    from tostnp.backend import kernels
    from tostnp.bench.peaks import (peak_rss_bytes, reset_peak_rss, rss_bytes,
                                     traced_peak_bytes)
    threadpool_limits(limits=a.threads, user_api="blas")
    if system == "torch":
        import torch
        torch.set_num_threads(a.threads)
    else:
        kernels.set_threads(a.threads)
    a.dtype_np = getattr(numpy, a.dtype)
    if system == "torch":
        a.dtype_torch = getattr(torch, a.dtype)
    if a.mode == "train":       # the runtime's one-time set-up (thread pools, autograd, ...)
        warm = parse_args(["--width", "8", "--depth", "1", "--heads", "2", "--dtype", a.dtype,
                           "--attention", a.attention, "--device", a.device])
        warm.dtype_np, warm.dtype_torch = a.dtype_np, getattr(a, "dtype_torch", None)
        train_step(system, 8, warm)()
    reset_peak_rss()
    rss0 = rss_bytes()                  # libraries loaded and warmed up, nothing else yet
    gpu0 = _gpu_held(system) if a.device == "gpu" else None

    if a.mode == "train":
        step = train_step(system, T, a)
        t0 = time.perf_counter()
        loss = step()
        send({"ready": {"warm_step_s": time.perf_counter() - t0, "loss": loss}})
    else:
        at = decode_at(system, T, a)
        send({"ready": {}})
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "run":                          # k training steps -> seconds each
            ts = []
            for _ in range(cmd["k"]):
                t0 = time.perf_counter()
                step()
                ts.append(time.perf_counter() - t0)
            send({"times": ts})
        elif cmd["cmd"] == "memory":                     # after every timed step
            hwm = peak_rss_bytes()
            m = {"train_rss_mb": None if hwm is None or rss0 is None else (hwm - rss0) / 2**20,
                 "rss_after_imports_mb": None if rss0 is None else rss0 / 2**20}
            if a.device == "gpu":                        # the device's memory, not the host's
                m["train_rss_mb"] = (_gpu_held(system) - gpu0) / 2**20
                m["memory_measure"] = ("GPU memory held by the library's pool at the end "
                                       "(CuPy's pool total_bytes / torch's max_memory_reserved) "
                                       "minus before the model")
            elif system == "tostnp":
                m["step_traced_mb"] = traced_peak_bytes(step) / 2**20
            send(m)
        elif cmd["cmd"] == "decode":                     # per-token seconds at context t
            token, nbytes = at(cmd["t"])
            for _ in range(3):
                token()
            ts = []
            for _ in range(cmd["n"]):
                t0 = time.perf_counter()
                token()
                ts.append(time.perf_counter() - t0)
            send({"times": ts, "state_bytes": nbytes})
        else:
            break


def _gpu_held(system) -> int:
    """Bytes of GPU memory the library holds for this process: CuPy's memory pool keeps freed
    blocks, so its total is the high-water mark of what tostnp had allocated at once; torch's
    caching allocator likewise (max_memory_reserved)."""
    if system == "tostnp":
        import cupy
        cupy.cuda.Device().synchronize()
        return int(cupy.get_default_memory_pool().total_bytes())
    import torch
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_reserved())


def start_worker(system, T, argv):
    """A worker process for ``system`` at context T (argv: the options and --mode)."""
    return Worker([HERE, "--worker", system, str(T)] + argv, system, close_timeout=120)


SYSTEMS = ("tostnp", "torch")


# ============================================================================================
# the parent: training at each context, then generation
# ============================================================================================
def run_training(a, argv, out):
    rows, skip = [], set()
    for T in a.contexts:
        live = [s for s in SYSTEMS if s not in skip]
        if len(live) < 2:
            print(f"  T={T}: skipped (a step took longer than --max-step-s at a shorter context)")
            rows.append({"context": T, "skipped": sorted(skip)})
            continue
        ws, t0 = {}, time.time()
        try:
            for s in SYSTEMS:                            # one at a time: warm-ups do not overlap
                ws[s] = start_worker(s, T, argv + ["--mode", "train"])
            ks = {s: max(1, round(a.round_s / ws[s].meta["warm_step_s"])) for s in SYSTEMS}
            per, loads = {s: [] for s in SYSTEMS}, []
            for r in range(a.rounds):
                for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                    time.sleep(0.2)                      # let the other worker's threads sleep
                    loads.append(os.getloadavg()[0])
                    per[s].append(statistics.mean(ws[s].cmd(cmd="run", k=ks[s])["times"]))
            mem = {s: ws[s].cmd(cmd="memory") for s in SYSTEMS}
        except RuntimeError as e:                        # a worker died: out of memory?
            print(f"  T={T}: {e}; no longer contexts", flush=True)
            rows.append({"context": T, "failed": str(e)})
            break
        finally:
            for w in ws.values():
                w.close()
        med = {s: statistics.median(per[s]) for s in SYSTEMS}
        row = {"context": T, "step_s": med, "rounds": a.rounds, "k": ks,
               "per_round_s": per,
               "time_ratio": med["tostnp"] / med["torch"],
               "time_ratio_paired": statistics.median(
                   x / y for x, y in zip(per["tostnp"], per["torch"])),
               "train_rss_mb": {s: mem[s]["train_rss_mb"] for s in SYSTEMS},
               "rss_after_imports_mb": {s: mem[s]["rss_after_imports_mb"] for s in SYSTEMS},
               "tostnp_step_traced_mb": mem["tostnp"]["step_traced_mb"],
               "load_1min": {"min": min(loads), "max": max(loads)}}
        m = row["train_rss_mb"]
        row["memory_ratio"] = (m["tostnp"] / m["torch"]
                               if m["tostnp"] is not None and m["torch"] else None)
        rows.append(row)
        print(f"  T={T:6d}: step tostnp {med['tostnp']:8.3f} s, torch {med['torch']:8.3f} s, "
              f"ratio {row['time_ratio']:.2f} (paired {row['time_ratio_paired']:.2f}); memory "
              f"tostnp {m['tostnp']:7.0f} MB, torch {m['torch']:7.0f} MB, ratio "
              f"{row['memory_ratio']:.2f}; load {min(loads):.1f}-{max(loads):.1f}; "
              f"{time.time() - t0:.0f} s", flush=True)
        for s in SYSTEMS:
            if med[s] > a.max_step_s:
                skip.add(s)
    out["train"] = rows


def crossover(rows, key):
    """The smallest measured context from which on the ratio stays below 1, or None."""
    ok = [r for r in rows if r.get(key) is not None]
    for i, r in enumerate(ok):
        if all(q[key] < 1.0 for q in ok[i:]):
            return r["context"]
    return None


def run_decoding(a, argv, out):
    Tmax = max(a.decode_contexts)
    ws = {}
    rows = []
    try:
        for s in SYSTEMS:
            ws[s] = start_worker(s, Tmax, argv + ["--mode", "decode"])
        for t in a.decode_contexts:
            per, nbytes = {s: [] for s in SYSTEMS}, {}
            for r in range(a.rounds):
                for s in (SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]):
                    res = ws[s].cmd(cmd="decode", t=t, n=a.tokens)
                    per[s].append(statistics.median(res["times"]))
                    nbytes[s] = res["state_bytes"]
            med = {s: statistics.median(per[s]) for s in SYSTEMS}
            rows.append({"context": t, "token_s": med, "state_bytes": nbytes,
                         "time_ratio": med["tostnp"] / med["torch"]})
            print(f"  context {t:6d}: per token tostnp {1e3 * med['tostnp']:7.3f} ms, torch "
                  f"{1e3 * med['torch']:7.3f} ms, ratio {med['tostnp'] / med['torch']:.2f}; "
                  f"state tostnp {nbytes['tostnp'] / 1024:.1f} KiB, torch KV cache "
                  f"{nbytes['torch'] / 2**20:.1f} MiB", flush=True)
    finally:
        for w in ws.values():
            w.close()
    out["decode"] = rows


def machine(a):
    import numpy
    import torch
    from threadpoolctl import threadpool_info
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f
                       if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    blas = [{k: i.get(k) for k in ("internal_api", "version", "architecture")}
            for i in threadpool_info() if i["user_api"] == "blas"]     # threads: "threads" 
    return {"cpu": cpu, "logical_cpus": os.cpu_count(), "threads": a.threads,
            "numpy": numpy.__version__, "numpy_blas": blas, "torch": torch.__version__,
            "torch_parallel": torch.__config__.parallel_info().splitlines()[:4],
            "python": platform.python_version(), "platform": platform.platform(),
            "load_1min_at_start": os.getloadavg()[0], "device": a.device,
            "gpu": torch.cuda.get_device_name(0) if a.device == "gpu" else None,
            "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", type=int, nargs="+",
                    default=[512, 1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--decode-contexts", type=int, nargs="+",
                    default=[1024, 2048, 4096, 8192, 16384])
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "gpu"],
                    help="gpu: both systems on the CUDA GPU (tostnp on CuPy, torch on cuda; "
                         "training only); memory is then the GPU memory each holds")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-s", type=float, default=2.0,
                    help="seconds of steps per round (at least one step)")
    ap.add_argument("--max-step-s", type=float, default=90.0,
                    help="stop at longer contexts once a system's step takes this long")
    ap.add_argument("--tokens", type=int, default=30, help="tokens timed per decode sample")
    ap.add_argument("--attention", default="sdpa", choices=["sdpa", "eager"],
                    help="torch's attention in training: the fused scaled_dot_product_attention "
                         "(default) or softmax(q k^T) v with the T x T weights stored")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--note", default="", help="a line stored with the results")
    ap.add_argument("--json", help="write the results here (atomically)")
    ap.add_argument("--mode", default="train", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    for name in ("contexts", "decode_contexts"):
        if min(getattr(a, name)) < 2:
            ap.error(f"--{name.replace('_', '-')} must all be >= 2")
    if a.width % a.heads:
        ap.error(f"--heads {a.heads} must divide --width {a.width}")
    if a.device == "gpu":
        a.skip_decode = True                              # the decoders are timed on the CPU
    if min(a.threads, a.rounds, a.tokens, a.depth) < 1:
        ap.error("--threads, --rounds, --tokens and --depth must be >= 1")
    return a


def main(argv):
    a = parse_args(argv)
    worker_argv = ["--width", str(a.width), "--depth", str(a.depth), "--heads", str(a.heads),
                   "--dtype", a.dtype, "--threads", str(a.threads), "--tokens", str(a.tokens),
                   "--attention", a.attention, "--device", a.device]
    out = {"machine": machine(a), "note": a.note, "paper": PAPER,
           "model": {"width": a.width, "depth": a.depth, "heads": a.heads, "mlp_ratio": 4,
                     "vocab": VOCAB, "batch": 1, "dtype": a.dtype,
                     "torch_attention": a.attention},
           "command": "benchmarks/context_scaling.py " + " ".join(argv)}
    print(f"context scaling: width {a.width}, depth {a.depth}, {a.heads} heads, batch 1, "
          f"{a.dtype}, {a.threads} thread(s) each; {out['machine']['cpu']}")
    if not a.skip_train:
        print(f"== training step: tostnp causal ToST LM / torch GPT ({a.attention} attention, "
              "causal) ==")
        run_training(a, worker_argv, out)
        rows = [r for r in out["train"] if "time_ratio" in r]
        out["crossover"] = {"time": crossover(rows, "time_ratio"),
                            "memory": crossover(rows, "memory_ratio")}
        at4k = next((r for r in rows if r["context"] == PAPER["context"]), None)
        print(f"  crossover (tostnp faster from T = ...): {out['crossover']['time']}; "
              f"(tostnp smaller from T = ...): {out['crossover']['memory']}")
        if at4k:
            print(f"  at 4k: time {at4k['time_ratio']:.2f}x, memory {at4k['memory_ratio']:.2f}x "
                  f"(the paper, {PAPER['setting']}: {PAPER['time_ratio']:.2f}x time, "
                  f"{PAPER['memory_ratio']:.2f}x memory)")
    if not a.skip_decode:
        print("== generation, per token: tostnp recurrent decoder / torch with a KV cache ==")
        run_decoding(a, worker_argv, out)
    if a.json:
        from tostnp.io.atomic import atomic_write_text
        atomic_write_text(a.json, json.dumps(out, indent=1) + "\n")
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
