"""What a worker times: one step of each benchmark ("lm", "vision", "lm_tiny", the ToST block and
the TSSA layer alone, and for the profile the GEMMs and the tanh-GELU alone), for either
system, as a function returning the step's phase seconds."""
from __future__ import annotations

import time

from .setups import (BLOCK_SHAPE, block_setup, torch_block, torch_fwd_bwd, torch_trainer,
                     tostnp_block, tostnp_trainer)
from .torch_models import torch_defs


def gemm_inventory():
    """Every GEMM of one tiny-char LM step as tostnp computes it (M = B*T = 2048, C = 128,
    H = 512, V = 512 (the default BPE vocabulary), 4 layers): (name, A shape, A transposed?, B shape, B transposed?, calls
    per step). Shapes are the stored arrays; "T" means the operand is a transposed view."""
    M, C, H, V, L = 32 * 64, 128, 512, 512, 4
    return [("x@W_u, a@W_o      (2048x128 @ 128x128)", (M, C), False, (C, C), False, 2 * L),
            ("dy@W^T            (2048x128 @ 128x128^T)", (M, C), False, (C, C), True, 2 * L),
            ("x^T@dy  dW_u,dW_o (2048x128^T @ 2048x128)", (M, C), True, (M, C), False, 2 * L),
            ("x@W1              (2048x128 @ 128x512)", (M, C), False, (C, H), False, L),
            ("dy@W2^T           (2048x128 @ 512x128^T)", (M, C), False, (H, C), True, L),
            ("a@W2              (2048x512 @ 512x128)", (M, H), False, (H, C), False, L),
            ("dh@W1^T           (2048x512 @ 128x512^T)", (M, H), False, (C, H), True, L),
            ("x^T@dh  dW1       (2048x128^T @ 2048x512)", (M, C), True, (M, H), False, L),
            ("a^T@dy  dW2       (2048x512^T @ 2048x128)", (M, H), True, (M, C), False, L),
            ("head h@wte^T      (2048x128 @ 512x128^T)", (M, C), False, (V, C), True, 1),
            ("head dlogits^T@h  (2048x512^T @ 2048x128)", (M, V), True, (M, C), False, 1),
            ("head dlogits@wte  (2048x512 @ 512x128)", (M, V), False, (V, C), False, 1)]


def gemm_inventory_block():
    """The GEMMs of one ToST block fwd+bwd at B=4, N=4096, C=384, H=1536 in their plain 2-D
    form (what the torch block runs; tostnp's non-causal TSSA runs its W_o products as
    per-batch (4, 4096, 384) x (4, 384, 384) products instead)."""
    M, C, H = 4 * 4096, 384, 4 * 384
    return [("x@W_u, v@W_o      (16384x384 @ 384x384)", (M, C), False, (C, C), False, 2),
            ("dy@W^T            (16384x384 @ 384x384^T)", (M, C), False, (C, C), True, 2),
            ("x^T@dy  dW_u,dW_o (16384x384^T @ 16384x384)", (M, C), True, (M, C), False, 2),
            ("x@W1              (16384x384 @ 384x1536)", (M, C), False, (C, H), False, 1),
            ("a@W2              (16384x1536 @ 1536x384)", (M, H), False, (H, C), False, 1),
            ("dy@W2^T           (16384x384 @ 1536x384^T)", (M, C), False, (H, C), True, 1),
            ("dh@W1^T           (16384x1536 @ 384x1536^T)", (M, H), False, (C, H), True, 1),
            ("x^T@dh  dW1       (16384x384^T @ 16384x1536)", (M, C), True, (M, H), False, 1),
            ("a^T@dy  dW2       (16384x1536^T @ 16384x384)", (M, H), True, (M, C), False, 1)]


SCAN_GEMMS = [  # tostnp's blocked prefix sums: tri (32, 32) @ (B, T/32, 32, F), per LM step
    ("_scan tri@(32,2,32,128) [tostnp only]", 128, 16), ("_scan tri@(32,2,32,4) [tostnp only]", 4, 8)]


def make_step(system, bench):
    """-> (step() returning a dict of phase seconds incl. "total", meta dict)."""
    if bench in ("lm", "vision", "lm_tiny"):
        kind = bench
        if system == "tostnp":
            step, task, tcfg, _, _ = tostnp_trainer(kind)
        else:
            step, _, _, _, task, tcfg = torch_trainer(kind)
        cfg = task.cfg
        if kind.startswith("lm"):
            items, unit = task.batch_size * cfg.block_size, "tokens"
        else:
            items, unit = task.batch_size, "images"
        meta = {"items_per_step": items, "unit": unit, "batch": task.batch_size}
        return (lambda: {k: v for k, v in step().items() if k != "loss"}), meta
    if bench in ("block_nc", "block_c"):
        causal = bench == "block_c"
        f = tostnp_block(causal) if system == "tostnp" else torch_block(causal)
        s = BLOCK_SHAPE
        meta = {"items_per_step": s["B"] * s["N"], "unit": "tokens", "batch": s["B"]}

        def step():
            r = f()
            r.pop("_out")
            return r
        return step, meta
    if bench in ("tssa_nc", "tssa_c", "tssa_lm"):   # the TSSA layer alone, fwd + bwd
        causal = bench != "tssa_nc"
        if bench == "tssa_lm":      # the LM's layer: B=32, T=64, C=128, h=4, no biases
            import numpy as np
            from tostnp import backend
            from tostnp.nn.tssa import tssa_init
            g = np.random.default_rng(3)
            B, N, C, h = 32, 64, 128, 4
            p = tssa_init(backend.RNG(0), backend.get_xp("cpu"), C, h, causal=True, max_len=N,
                          bias=False, dtype=np.float32)
            p["denom_bias"] = (0.1 * g.standard_normal(p["denom_bias"].shape)).astype(np.float32)
            x = g.standard_normal((B, N, C)).astype(np.float32)
            dy = g.standard_normal((B, N, C)).astype(np.float32)
        else:
            params, x, dy, _ = block_setup(causal)
            p = {k[5:]: v for k, v in params.items() if k.startswith("tssa.")}
            B, N, C, h = x.shape[0], x.shape[1], x.shape[2], BLOCK_SHAPE["h"]
        pc = time.perf_counter
        if system == "tostnp":
            from tostnp.nn.tssa import tssa_forward, tssa_backward

            def step():
                t0 = pc()
                y, cache = tssa_forward(x, p, h, causal=causal)
                t1 = pc()
                tssa_backward(dy, cache)
                t2 = pc()
                return {"fwd": t1 - t0, "bwd": t2 - t1, "total": t2 - t0}
        else:
            T = torch_defs()
            torch = T["torch"]
            mod = T["TSSA"](C, h, causal=causal, max_len=N if causal else None,
                            bias="b_u" in p)
            with torch.no_grad():
                mod.W_u.weight.copy_(torch.from_numpy(p["W_u"].T.copy()))
                mod.W_o.weight.copy_(torch.from_numpy(p["W_o"].T.copy()))
                mod.temp.copy_(torch.from_numpy(p["temp"]))
                if "b_u" in p:
                    mod.W_u.bias.copy_(torch.from_numpy(p["b_u"]))
                    mod.W_o.bias.copy_(torch.from_numpy(p["b_o"]))
                if causal:
                    mod.denom_bias.copy_(torch.from_numpy(p["denom_bias"]))
            step = torch_fwd_bwd(mod, torch.from_numpy(x).requires_grad_(True),
                                 torch.from_numpy(dy))
        return step, {"items_per_step": B * N, "unit": "tokens", "batch": B}
    if bench in ("gemm", "gemm_block"):
        import numpy as np
        g = np.random.default_rng(0)
        inv = gemm_inventory() if bench == "gemm" else gemm_inventory_block()
        reps = 5 if bench == "gemm" else 1
        ops = []
        for name, sa, ta, sb, tb, _ in inv:
            a = g.standard_normal(sa).astype(np.float32)
            b = g.standard_normal(sb).astype(np.float32)
            ops.append((name, a, ta, b, tb))
        if system == "tostnp" and bench == "gemm":
            tri = np.tril(np.ones((32, 32), np.float32))
            for name, F, _ in SCAN_GEMMS:
                ops.append((name, tri, False, g.standard_normal((32, 2, 32, F)).astype(np.float32),
                            False))
        if system == "torch":
            torch = torch_defs()["torch"]
            ops = [(n, torch.from_numpy(a), ta, torch.from_numpy(b), tb) for n, a, ta, b, tb in ops]
        pc = time.perf_counter

        def step():
            out, t_all = {}, pc()
            for n, a, ta, b, tb in ops:
                A, Bm = (a.T if ta else a), (b.T if tb else b)
                t0 = pc()
                for _ in range(reps):
                    A @ Bm
                out[n] = (pc() - t0) / reps
            out["total"] = pc() - t_all
            return out
        return step, {"items_per_step": 1, "unit": "calls", "batch": 1}
    if bench == "gelu":      # tanh-GELU forward + backward on the MLP hidden activations
        import numpy as np
        g = np.random.default_rng(0)
        shapes = {"LM (32x64, 512)": (32, 64, 512), "block (4x4096, 1536)": (4, 4096, 1536)}
        data = {n: (g.standard_normal(sh).astype(np.float32), g.standard_normal(sh)
                    .astype(np.float32)) for n, sh in shapes.items()}
        pc = time.perf_counter
        if system == "tostnp":
            from tostnp.nn.layers import gelu_forward, gelu_backward

            def one(x, dy):
                y, c = gelu_forward(x)
                dx, _ = gelu_backward(dy, c)
        else:
            T = torch_defs()
            torch, F = T["torch"], T["F"]
            data = {n: (torch.from_numpy(x).requires_grad_(True), torch.from_numpy(dy))
                    for n, (x, dy) in data.items()}

            def one(x, dy):
                x.grad = None
                F.gelu(x, approximate="tanh").backward(dy)

        def step():
            out, t_all = {}, pc()
            for n, (x, dy) in data.items():
                reps = 10 if n.startswith("LM") else 1
                t0 = pc()
                for _ in range(reps):
                    one(x, dy)
                out[n] = (pc() - t0) / reps
            out["total"] = pc() - t_all
            return out
        return step, {"items_per_step": 1, "unit": "calls", "batch": 1}
    raise ValueError(bench)

