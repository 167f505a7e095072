#!/usr/bin/env python
"""peer_torch.py -- training speed of tostnp (from-scratch NumPy) against the same models in
PyTorch eager on CPU.

    # from the repository root, with a separate venv that has torch and the project's
    # requirements (torch is never a dependency of tostnp; this file is outside the package):
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch -r requirements.txt
    PYTHONPATH=. /tmp/torchvenv/bin/python benchmarks/peer_torch.py [--profile]

Every number it prints is measured in the run that prints it.

1. Equivalence. Builds tostnp's default presets (LM "tiny-char" on its default corpus, vision
   "tiny-digits" on the bundled digits, with tostnp's CLI training settings) and a PyTorch
   nn.Module version of each (LayerNorm, TSSA -- causal with denom_bias for the LM, non-causal
   for vision, written from tostnp/nn/tssa.py's documented semantics -- LayerScale, tanh-GELU
   MLP, tied LM head, class-attention pooling), copies tostnp's initial weights into it, asserts
   equal parameter counts, and compares the first loss, every gradient, the losses of 3 full
   training steps (clip + lr schedule + AdamW) and the parameters after them, in float32 and
   float64. "stress": LayerScale gammas 1, random temp and denom_bias, so the LM's ToST blocks
   matter (at init their gammas are 1e-5). The ToST block of part 2 is checked the same way.
2. Timing. Each system runs in its own worker process (the tostnp worker never imports torch)
   with the same thread count: NumPy's BLAS via threadpoolctl.threadpool_limits(n, "blas") and
   tostnp's fast path via tostnp.backend.kernels.set_threads(n) (together: what `--threads n` sets),
   torch via torch.set_num_threads(n) (all asserted in the worker). The tostnp worker keeps
   freed memory in the process (backend.keep_freed_memory), as tostnp's training does. After warm-up the parent
   alternates rounds A (tostnp), B (torch), A, B, ...; a round runs k steps (k chosen so a
   round takes ~1 s; one call for the big blocks); the per-step mean of a round is one sample.
   Reported: ratio tostnp/torch of the medians over rounds, the median (min-max) of the
   per-round paired ratios, steps/s, items/s, the 1-min load average during the rounds, the
   phase split of a step, the fresh memory faulted in per step (minor faults, counting
   2 MB for each transparent-huge-page fault), and each worker's memory: its peak RSS over the
   warm-up above its RSS after the imports (for torch: and after one step of a tiny model, which
   sets up its runtime), and for tostnp the NumPy bytes at one step's
   high-water mark (tracemalloc; it cannot see torch's buffers).
   One training step = what tostnp/train/loop.py does per update minus logging/eval/checkpoints:
   task.next_batch(), task.loss_and_grads(), clip_grad_norm(1.0), lr_schedule(), float(loss) +
   finiteness check, AdamW.step(); torch: the same batch sampler, forward, cross-entropy,
   zero_grad + backward, clip_grad_norm_(1.0), the same lr schedule, loss.item() + check,
   torch.optim.AdamW (default implementation) with the same betas/eps/weight decay and the
   same no-decay parameters.
   Benches: LM step; vision step; the LM step at width 8, batch 1 (same op count, negligible
   FLOPs: the fixed per-step overhead); the TSSA layer alone at the LM's shape; one ToST block
   forward+backward at B=4, N=4096, C=384, h=6, non-causal and causal, and its TSSA layer alone.
   (tostnp's CLI default is all cores, so "2 threads" is both systems at their default here.)
3. --profile (1 thread): cProfile of tostnp's LM and vision steps (inclusive time per layer,
   input validators included), torch.profiler op tables of the torch steps, every GEMM shape of the LM step
   and of the big block timed alone in NumPy/OpenBLAS and torch, the tanh-GELU forward+backward
   alone, and -- if `perf` is installed -- perf samples of each worker by library/category.

Options: --threads 1 2   --rounds 9 (>= 5)   --only lm vision lm_tiny tssa_lm block_nc block_c
         tssa_nc tssa_c   --skip-check   --profile   --profile-only   --no-perf
         --json PATH
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
PROTO = "@@"                          # prefix of protocol lines on the workers' stdout

BLOCK_SHAPE = dict(B=4, N=4096, C=384, h=6, mlp_ratio=4)


# ============================================================================================
# the PyTorch models
# ============================================================================================
_T = {}


def torch_defs():
    """Import torch and define the modules once (the tostnp worker never calls this)."""
    if _T:
        return _T
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class TSSA(nn.Module):
        """Token Statistics Self-Attention, tostnp/nn/tssa.py semantics, plain eager PyTorch.

        w = x W_u + b_u; sq = w^2; Pi = softmax over heads of temp_k * q_nk with
        q_nk = sum_{c in k} sq_nc / S1_c (S1 = token sum of sq, causal: prefix sum, + p *
        denom_bias[k, t]); m = (Pi-weighted token sum of sq) / (sum Pi + 1e-8) (causal: prefix
        sums); out = -w Pi / (1 + m); y = out W_o + b_o.
        """

        def __init__(self, C, h, causal=False, max_len=None, bias=True):
            super().__init__()
            self.C, self.h, self.p, self.causal = C, h, C // h, causal
            self.W_u = nn.Linear(C, C, bias=bias)
            self.temp = nn.Parameter(torch.ones(h, 1))
            self.W_o = nn.Linear(C, C, bias=bias)
            if causal:
                self.denom_bias = nn.Parameter(torch.zeros(h, max_len, 1))

        def forward(self, x):
            B, N, C = x.shape
            h, p = self.h, self.p
            w = self.W_u(x)                                                  # (B, N, C)
            sq = w * w
            if self.causal:
                S1 = torch.cumsum(sq, dim=1).clamp_min(1e-12)                # (B, N, C)
                q = (sq / S1).view(B, N, h, p).sum(-1) \
                    + p * self.denom_bias[:, :N, 0].t()                      # (B, N, h)
            else:
                S1 = sq.sum(dim=1, keepdim=True).clamp_min(1e-24)            # (B, 1, C)
                q = (sq / S1).view(B, N, h, p).sum(-1)                       # (B, N, h)
            Pi = torch.softmax(q * self.temp.view(1, 1, h), dim=-1)          # (B, N, h)
            w4 = w.view(B, N, h, p)
            a = w4 * Pi.unsqueeze(-1)                                        # w Pi
            aw = a * w4                                                      # Pi w^2
            if self.causal:
                S2 = torch.cumsum(aw, dim=1)                                 # (B, N, h, p)
                D = torch.cumsum(Pi, dim=1) + 1e-8                           # (B, N, h)
                m = S2 / D.unsqueeze(-1)
            else:
                S2 = aw.sum(dim=1, keepdim=True)                             # (B, 1, h, p)
                D = Pi.sum(dim=1) + 1e-8                                     # (B, h)
                m = S2 / D.view(B, 1, h, 1)
            out = -a / (1.0 + m)                                             # (B, N, h, p)
            return self.W_o(out.reshape(B, N, C))

    class ToSTBlock(nn.Module):
        """x1 = x + ls1 * TSSA(LN1(x));  y = x1 + ls2 * MLP(LN2(x1)), MLP = fc2(GELU_tanh(fc1))."""

        def __init__(self, C, h, *, causal, max_len=None, bias=True, ls_init=1.0,
                     mlp_ratio=4, eps=1e-6):
            super().__init__()
            H = mlp_ratio * C
            self.ln1 = nn.LayerNorm(C, eps=eps)
            self.tssa = TSSA(C, h, causal=causal, max_len=max_len, bias=bias)
            self.ls1 = nn.Parameter(torch.full((C,), float(ls_init)))
            self.ln2 = nn.LayerNorm(C, eps=eps)
            self.fc1 = nn.Linear(C, H, bias=bias)
            self.fc2 = nn.Linear(H, C, bias=bias)
            self.ls2 = nn.Parameter(torch.full((C,), float(ls_init)))

        def forward(self, x):
            x = x + self.ls1 * self.tssa(self.ln1(x))
            return x + self.ls2 * self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class ToSTLM(nn.Module):
        """nanoGPT layout: wte + wpe, causal ToST blocks, final LN, head tied to wte."""

        def __init__(self, cfg):
            super().__init__()
            C = cfg.width
            self.wte = nn.Embedding(cfg.vocab_size, C)
            self.wpe = nn.Embedding(cfg.block_size, C)
            self.blocks = nn.ModuleList([
                ToSTBlock(C, cfg.num_heads, causal=True, max_len=cfg.block_size, bias=False,
                          ls_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio, eps=cfg.ln_eps)
                for _ in range(cfg.depth)])
            self.ln_f = nn.LayerNorm(C, eps=cfg.ln_eps)

        def forward(self, ids):
            T = ids.shape[1]
            x = self.wte(ids) + self.wpe(torch.arange(T, device=ids.device))
            for blk in self.blocks:
                x = blk(x)
            return F.linear(self.ln_f(x), self.wte.weight)                  # (B, T, V) tied

    class ClassAttnBlock(nn.Module):
        """Class-attention block (tostnp/nn/class_attention.py): only the CLS token is a query.
        form "published": XCiT's block with tokens_norm=True (the patch tokens are re-normalised
        and passed on); "cls-only": CaiT's block, which updates the CLS token alone."""

        def __init__(self, C, h, mlp_ratio, ls_init, eps, form="published"):
            super().__init__()
            self.form = form
            self.h, self.p = h, C // h
            self.norm1 = nn.LayerNorm(C, eps=eps)
            self.q = nn.Linear(C, C)
            self.kv = nn.Linear(C, 2 * C)
            self.proj = nn.Linear(C, C)
            self.ls1 = nn.Parameter(torch.full((C,), float(ls_init)))
            self.norm2 = nn.LayerNorm(C, eps=eps)
            self.fc1 = nn.Linear(C, mlp_ratio * C)
            self.fc2 = nn.Linear(mlp_ratio * C, C)
            self.ls2 = nn.Parameter(torch.full((C,), float(ls_init)))

        def forward(self, cls, tokens):
            B, N, C = tokens.shape
            h, p = self.h, self.p
            u = self.norm1(torch.cat([cls, tokens], dim=1))                  # (B, 1+N, C)
            q = self.q(u[:, :1]).view(B, 1, h, p).transpose(1, 2)            # (B, h, 1, p)
            k, v = self.kv(u).view(B, N + 1, 2, h, p).permute(2, 0, 3, 1, 4)  # (B, h, 1+N, p)
            o = F.scaled_dot_product_attention(q, k, v)                      # (B, h, 1, p)
            a = self.proj(o.transpose(1, 2).reshape(B, 1, C))                # (B, 1, C)
            if self.form == "published":
                y = self.norm2(torch.cat([cls, tokens], dim=1)
                               + self.ls1 * torch.cat([a, u[:, 1:]], dim=1))   # all tokens
                c, tokens = y[:, :1], 2.0 * y[:, 1:]
            else:
                c = self.norm2(cls + self.ls1 * a)
                cls = cls + self.ls1 * a
            out = (c if self.form == "published" else cls) + \
                self.ls2 * self.fc2(F.gelu(self.fc1(c), approximate="tanh"))
            return out, tokens

    class ToSTVision(nn.Module):
        """ViT patch stem + learned positions, ToST blocks, class-attention pooling, LN, head."""

        def __init__(self, cfg):
            super().__init__()
            assert cfg.pool == "cls" and cfg.stem == "linear" and cfg.pos == "learned" \
                and cfg.gelu == "tanh" and cfg.num_registers == 0 and cfg.mixer == "tssa", cfg
            C, P = cfg.width, cfg.patch_size
            self.cfg = cfg
            self.patch = nn.Linear(P * P * cfg.in_chans, C)
            self.pos_embed = nn.Parameter(torch.zeros(1, cfg.num_patches, C))
            self.blocks = nn.ModuleList([
                ToSTBlock(C, cfg.num_heads, causal=False, bias=True,
                          ls_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio, eps=cfg.ln_eps)
                for _ in range(cfg.depth)])
            self.cls_token = nn.Parameter(torch.zeros(1, 1, C))
            self.cab = nn.ModuleList([
                ClassAttnBlock(C, cfg.num_heads, cfg.mlp_ratio, cfg.layer_scale_init, cfg.ln_eps,
                               form=cfg.cab)
                for _ in range(cfg.num_cls_blocks)])
            self.norm = nn.LayerNorm(C, eps=cfg.ln_eps)
            self.head = nn.Linear(C, cfg.num_classes)

        def forward(self, images):                                          # (B, H, W, Cin)
            B, H, W, Cin = images.shape
            P = self.cfg.patch_size
            Hp, Wp = H // P, W // P
            patches = images.reshape(B, Hp, P, Wp, P, Cin).permute(0, 1, 3, 2, 4, 5) \
                .reshape(B, Hp * Wp, P * P * Cin)                            # (B, N, P*P*Cin)
            x = self.patch(patches) + self.pos_embed
            for blk in self.blocks:
                x = blk(x)
            cls = self.cls_token.expand(B, -1, -1)
            for c in self.cab:
                cls, x = c(cls, x)
            return self.head(self.norm(cls[:, 0]))

    _T.update(torch=torch, nn=nn, F=F, TSSA=TSSA, ToSTBlock=ToSTBlock, ToSTLM=ToSTLM,
              ToSTVision=ToSTVision)
    return _T


# --------------------------------------------------------------------------------------------
# tostnp key <-> torch parameter map (tostnp stores Linear weights (in, out): transpose)
# --------------------------------------------------------------------------------------------
def _block_map(prefix, blk, bias):
    m = [(f"{prefix}ln1.gamma", blk.ln1.weight, False), (f"{prefix}ln1.beta", blk.ln1.bias, False),
         (f"{prefix}tssa.W_u", blk.tssa.W_u.weight, True),
         (f"{prefix}tssa.temp", blk.tssa.temp, False),
         (f"{prefix}tssa.W_o", blk.tssa.W_o.weight, True),
         (f"{prefix}ls1.gamma", blk.ls1, False),
         (f"{prefix}ln2.gamma", blk.ln2.weight, False), (f"{prefix}ln2.beta", blk.ln2.bias, False),
         (f"{prefix}mlp.W1", blk.fc1.weight, True), (f"{prefix}mlp.W2", blk.fc2.weight, True),
         (f"{prefix}ls2.gamma", blk.ls2, False)]
    if bias:
        m += [(f"{prefix}tssa.b_u", blk.tssa.W_u.bias, False),
              (f"{prefix}tssa.b_o", blk.tssa.W_o.bias, False),
              (f"{prefix}mlp.b1", blk.fc1.bias, False), (f"{prefix}mlp.b2", blk.fc2.bias, False)]
    if blk.tssa.causal:
        m.append((f"{prefix}tssa.denom_bias", blk.tssa.denom_bias, False))
    return m


def param_map(kind, model):
    """[(tostnp key, torch parameter, transpose?)] covering every parameter of both."""
    if kind == "block":
        return _block_map("", model, model.tssa.W_u.bias is not None)
    if kind == "lm":
        m = [("wte", model.wte.weight, False), ("wpe", model.wpe.weight, False)]
        for i, blk in enumerate(model.blocks):
            m += _block_map(f"blocks.{i}.", blk, False)
        return m + [("ln_f.gamma", model.ln_f.weight, False), ("ln_f.beta", model.ln_f.bias, False)]
    m = [("patch.W", model.patch.weight, True), ("patch.b", model.patch.bias, False),
         ("pos_embed", model.pos_embed, False)]
    for i, blk in enumerate(model.blocks):
        m += _block_map(f"blocks.{i}.", blk, True)
    m.append(("cls_token", model.cls_token, False))
    for j, c in enumerate(model.cab):
        p = f"cab.{j}."
        m += [(p + "norm1.gamma", c.norm1.weight, False), (p + "norm1.beta", c.norm1.bias, False),
              (p + "attn.W_q", c.q.weight, True), (p + "attn.b_q", c.q.bias, False),
              (p + "attn.W_kv", c.kv.weight, True), (p + "attn.b_kv", c.kv.bias, False),
              (p + "attn.W_o", c.proj.weight, True), (p + "attn.b_o", c.proj.bias, False),
              (p + "ls1.gamma", c.ls1, False),
              (p + "norm2.gamma", c.norm2.weight, False), (p + "norm2.beta", c.norm2.bias, False),
              (p + "mlp.W1", c.fc1.weight, True), (p + "mlp.b1", c.fc1.bias, False),
              (p + "mlp.W2", c.fc2.weight, True), (p + "mlp.b2", c.fc2.bias, False),
              (p + "ls2.gamma", c.ls2, False)]
    return m + [("norm.gamma", model.norm.weight, False), ("norm.beta", model.norm.bias, False),
                ("head.W", model.head.weight, True), ("head.b", model.head.bias, False)]


def transplant(kind, model, params):
    """Copy tostnp's parameter dict into the torch model; asserts a one-to-one map."""
    import numpy as np
    torch = torch_defs()["torch"]
    m = param_map(kind, model)
    keys = [k for k, _, _ in m]
    assert len(set(keys)) == len(keys) == len(params) and set(keys) == set(params), \
        (sorted(set(params) - set(keys)), sorted(set(keys) - set(params)))
    assert len({id(p) for _, p, _ in m}) == len(list(model.parameters())), "unmapped torch params"
    with torch.no_grad():
        for k, p, tr in m:
            a = np.asarray(params[k])
            a = a.T if tr else a
            assert tuple(a.shape) == tuple(p.shape), (k, a.shape, tuple(p.shape))
            p.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(p.dtype))
    return m


def torch_grads_as_tostnp(m):
    return {k: (p.grad.T if tr else p.grad).detach().numpy() for k, p, tr in m}


def torch_params_as_tostnp(m):
    return {k: (p.T if tr else p).detach().numpy() for k, p, tr in m}


def make_torch_adamw(m, tcfg):
    """torch.optim.AdamW with tostnp's hyper-parameters and its no-decay rule (by tostnp name)."""
    torch = torch_defs()["torch"]
    from tostnp.train.optim import default_no_decay
    decay = [p for k, p, _ in m if not default_no_decay(k)]
    no_decay = [p for k, p, _ in m if default_no_decay(k)]
    return torch.optim.AdamW([{"params": decay, "weight_decay": tcfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2), eps=1e-8)


# ============================================================================================
# the two systems' setups (shared by the equivalence check and the workers)
# ============================================================================================
def train_config(kind, n_train=None):
    """tostnp's CLI training defaults (tostnp/cli/train_command.py) for the default presets."""
    from tostnp.train.loop import TrainConfig
    from tostnp.models.configs import LM_TRAIN_PRESET, get_vision_train_preset
    if kind.startswith("lm"):
        d = LM_TRAIN_PRESET
        return TrainConfig(steps=d.steps, batch_size=d.batch_size, lr=d.lr,
                           warmup_steps=d.warmup_steps, weight_decay=d.weight_decay)
    d = get_vision_train_preset("tiny-digits")
    spe = n_train // d.batch_size
    return TrainConfig(steps=d.epochs * spe, batch_size=d.batch_size, lr=d.lr,
                       warmup_steps=d.warmup_epochs * spe, weight_decay=d.weight_decay)


_DATA = {}


def make_task(kind, seed=0, dtype=None):
    """tostnp's Task for the default presets, exactly as `python -m tostnp train ...` builds it.
    kind "lm_tiny": the LM preset at width 8 (same layers and op count, negligible FLOPs)."""
    from tostnp import backend
    from tostnp.models import configs as Cf
    from tostnp.train.tasks import LMTask, VisionTask
    from tostnp.data import load_lm_text, load_vision_data
    from tostnp.models.configs import get_vision_train_preset
    xp = backend.get_xp("cpu")
    if kind.startswith("lm"):
        if "lm" not in _DATA:      # the default corpus with the CLI's default tokenizer
            from tostnp.models.configs import LM_TRAIN_PRESET
            _DATA["lm"] = load_lm_text(None, kind=LM_TRAIN_PRESET.tokenizer,
                                       vocab_size=LM_TRAIN_PRESET.vocab_size)
        train_ids, val_ids, tok = _DATA["lm"]
        over = dict(width=8, num_heads=4) if kind == "lm_tiny" else {}
        cfg = Cf.get_lm_config("tiny-char", vocab_size=tok.vocab_size, **over)
        tcfg = train_config("lm")
        bs = 1 if kind == "lm_tiny" else tcfg.batch_size
        task = LMTask(cfg, train_ids, val_ids, tok, batch_size=bs, seed=seed, xp=xp, dtype=dtype)
        return task, tcfg
    if "vision" not in _DATA:
        _DATA["vision"] = load_vision_data("digits")
    data = _DATA["vision"]
    cfg = Cf.get_vision_config("tiny-digits")
    tcfg = train_config("vision", len(data[0]))
    task = VisionTask(cfg, data, batch_size=tcfg.batch_size, seed=seed,
                      augment_shift=get_vision_train_preset("tiny-digits").augment_shift, xp=xp,
                      dtype=dtype)
    return task, tcfg


def tostnp_trainer(kind, dtype=None):
    """tostnp's own per-update path from tostnp/train/loop.py (minus logging/eval/checkpoint)."""
    from tostnp import backend
    from tostnp.train.optim import clip_grad_norm, lr_schedule
    from tostnp.train.loop import _make_opt
    task, tcfg = make_task(kind, dtype=dtype)
    if hasattr(backend, "keep_freed_memory"):      # what tostnp.train.loop.train() does first
        backend.keep_freed_memory()
    params = task.init_params(backend.RNG(tcfg.seed))
    opt = _make_opt(params, tcfg)
    state = {"step": 0}
    pc = time.perf_counter

    def step(batch=None):
        t0 = pc()
        if batch is None:
            batch = task.next_batch()
        t1 = pc()
        loss, grads, extra = task.loss_and_grads(params, batch)
        t2 = pc()
        grads, gnorm = clip_grad_norm(grads, tcfg.grad_clip)
        lr = lr_schedule(state["step"] % tcfg.steps, max_lr=tcfg.lr, min_lr=tcfg.final_lr,
                         warmup_steps=tcfg.warmup_steps, total_steps=tcfg.steps)
        loss_f = float(loss)
        if not math.isfinite(loss_f) or not math.isfinite(gnorm):
            raise FloatingPointError(f"loss {loss_f}, grad norm {gnorm}")
        t3 = pc()
        opt.step(grads, lr=lr)
        t4 = pc()
        state["step"] += 1
        return {"data": t1 - t0, "fwd_bwd": t2 - t1, "clip": t3 - t2, "opt": t4 - t3,
                "total": t4 - t0, "loss": loss_f}

    return step, task, tcfg, params, opt


def torch_trainer(kind, task=None, tcfg=None, params0=None, dtype=None):
    """The same model and update in PyTorch eager (weights copied from tostnp's init)."""
    T = torch_defs()
    torch, F = T["torch"], T["F"]
    from tostnp import backend
    from tostnp.train.optim import lr_schedule
    if task is None:
        task, tcfg = make_task(kind)
        params0 = task.init_params(backend.RNG(tcfg.seed))
    tdt = torch.float64 if dtype is not None and "64" in str(dtype) else torch.float32
    model = (T["ToSTLM"] if kind.startswith("lm") else T["ToSTVision"])(task.cfg).to(tdt)
    m = transplant("lm" if kind.startswith("lm") else "vision", model, params0)
    opt = make_torch_adamw(m, tcfg)
    params = list(model.parameters())
    lm = kind.startswith("lm")
    state = {"step": 0}
    pc = time.perf_counter

    def step(batch=None):
        t0 = pc()
        if batch is None:
            batch = task.next_batch()
        x = torch.from_numpy(batch[0])
        y = torch.from_numpy(batch[1])
        if x.is_floating_point():
            x = x.to(tdt)
        t1 = pc()
        logits = model(x)
        if lm:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        else:
            loss = F.cross_entropy(logits, y)
            with torch.no_grad():
                acc = (logits.argmax(-1) == y).to(logits.dtype).mean()  # noqa: F841 (tostnp too)
        t2 = pc()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = pc()
        gnorm = torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip)
        lr = lr_schedule(state["step"] % tcfg.steps, max_lr=tcfg.lr, min_lr=tcfg.final_lr,
                         warmup_steps=tcfg.warmup_steps, total_steps=tcfg.steps)
        for g in opt.param_groups:
            g["lr"] = lr
        loss_f = loss.item()
        if not math.isfinite(loss_f) or not math.isfinite(float(gnorm)):
            raise FloatingPointError(f"loss {loss_f}, grad norm {gnorm}")
        t4 = pc()
        opt.step()
        t5 = pc()
        state["step"] += 1
        return {"data": t1 - t0, "fwd": t2 - t1, "bwd": t3 - t2, "fwd_bwd": t3 - t1,
                "clip": t4 - t3, "opt": t5 - t4, "total": t5 - t0, "loss": loss_f}

    return step, model, m, opt, task, tcfg


def block_setup(causal, seed=0):
    """tostnp ToST block params (LM style if causal: no biases; vision style otherwise)."""
    import numpy as np
    from tostnp import backend
    from tostnp.nn.block import tost_block_init
    s = BLOCK_SHAPE
    xp = backend.get_xp("cpu")
    rng = backend.RNG(seed)
    params = tost_block_init(rng, xp, s["C"], s["h"], causal=causal,
                             max_len=s["N"] if causal else None, bias=not causal,
                             layer_scale_init=1.0, mlp_ratio=s["mlp_ratio"], dtype=xp.float32)
    g = np.random.default_rng(seed + 1)
    if causal:   # non-trivial values for the parameters that init to constants
        params["tssa.denom_bias"] = (0.1 * g.standard_normal(params["tssa.denom_bias"].shape)) \
            .astype(np.float32)
    params["tssa.temp"] = g.uniform(0.5, 2.0, size=(s["h"], 1)).astype(np.float32)
    x = g.standard_normal((s["B"], s["N"], s["C"])).astype(np.float32)
    dy = g.standard_normal((s["B"], s["N"], s["C"])).astype(np.float32)
    eps = 1e-5 if causal else 1e-6
    return params, x, dy, eps


def tostnp_block(causal):
    from tostnp import backend
    from tostnp.nn.block import tost_block_forward, tost_block_backward
    params, x, dy, eps = block_setup(causal)
    if hasattr(backend, "keep_freed_memory"):      # as tostnp's training and `bench --train` run
        backend.keep_freed_memory()
    h = BLOCK_SHAPE["h"]
    pc = time.perf_counter

    def step():
        t0 = pc()
        y, cache = tost_block_forward(x, params, h, causal=causal, ln_eps=eps)
        t1 = pc()
        dx, grads = tost_block_backward(dy, cache)
        t2 = pc()
        return {"fwd": t1 - t0, "bwd": t2 - t1, "total": t2 - t0, "_out": (y, dx, grads)}

    return step


def torch_block(causal):
    T = torch_defs()
    torch = T["torch"]
    params, x, dy, eps = block_setup(causal)
    s = BLOCK_SHAPE
    blk = T["ToSTBlock"](s["C"], s["h"], causal=causal, max_len=s["N"] if causal else None,
                         bias=not causal, ls_init=1.0, mlp_ratio=s["mlp_ratio"], eps=eps)
    m = transplant("block", blk, params)
    xt = torch.from_numpy(x).requires_grad_(True)
    dyt = torch.from_numpy(dy)
    pc = time.perf_counter

    def step():
        for p in blk.parameters():
            p.grad = None
        xt.grad = None
        t0 = pc()
        y = blk(xt)
        t1 = pc()
        y.backward(dyt)
        t2 = pc()
        return {"fwd": t1 - t0, "bwd": t2 - t1, "total": t2 - t0, "_out": (y, xt, m)}

    return step


# ============================================================================================
# 1. equivalence checks
# ============================================================================================
def _rel(a, b):
    import numpy as np
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))


def _max_rel(d1, d2):
    worst = max(((k, _rel(d1[k], d2[k])) for k in d1), key=lambda kv: kv[1])
    return worst


def check_model(kind, dtype_name="float32", stress=False, steps=3):
    import numpy as np
    from tostnp.models import num_params
    torch = torch_defs()["torch"]
    dtype = np.float64 if dtype_name == "float64" else np.float32
    tstep, task, tcfg, params, opt = tostnp_trainer(kind, dtype=dtype)
    if stress:   # make the ToST blocks matter: LayerScale 1, random temp / denom_bias
        g = np.random.default_rng(7)
        for k in list(params):
            if k.endswith("ls1.gamma") or k.endswith("ls2.gamma"):
                params[k] = np.ones_like(params[k])
            elif k.endswith("tssa.temp"):
                params[k] = g.uniform(0.5, 2.0, size=params[k].shape).astype(dtype)
            elif k.endswith("tssa.denom_bias"):
                params[k] = (0.3 * g.standard_normal(params[k].shape)).astype(dtype)
        opt.params.update(params)
    batch0 = task.next_batch()
    bcopy = tuple(np.array(b, copy=True) for b in batch0)
    cstep, model, m, topt, _, _ = torch_trainer(kind, task=task, tcfg=tcfg, params0=params,
                                                dtype=dtype)
    n_np = num_params(params)
    n_t = sum(p.numel() for p in model.parameters())
    assert n_np == n_t, (n_np, n_t)
    # first loss and every gradient, before any update
    loss_np, grads_np, _ = task.loss_and_grads(params, batch0)
    x = torch.from_numpy(bcopy[0])
    x = x.to(torch.float64 if dtype == np.float64 else torch.float32) if x.is_floating_point() else x
    logits = model(x)
    y = torch.from_numpy(bcopy[1])
    F = torch_defs()["F"]
    loss_t = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    model.zero_grad(set_to_none=True)
    loss_t.backward()
    gk, gerr = _max_rel(grads_np, torch_grads_as_tostnp(m))
    # full training steps on identical batches (clip + lr schedule + AdamW)
    step_loss_err = 0.0
    for _ in range(steps):
        b = task.next_batch()
        bc = tuple(np.array(a, copy=True) for a in b)
        l1 = tstep(b)["loss"]
        l2 = cstep(bc)["loss"]
        step_loss_err = max(step_loss_err, abs(l1 - l2) / abs(l1))
    pk, perr = _max_rel(opt.params, torch_params_as_tostnp(m))
    tp = torch_params_as_tostnp(m)
    perr_med = statistics.median(_rel(opt.params[k], tp[k]) for k in tp)
    return {"model": kind, "dtype": dtype_name, "stress": stress, "params_tostnp": int(n_np),
            "params_torch": int(n_t), "loss_tostnp": float(loss_np), "loss_torch": loss_t.item(),
            "loss_abs_diff": abs(float(loss_np) - loss_t.item()),
            "loss_rel_diff": abs(float(loss_np) - loss_t.item()) / abs(float(loss_np)),
            "grad_max_rel_err": gerr, "grad_worst_key": gk, "steps": steps,
            "step_loss_max_rel_diff": step_loss_err,
            "param_max_rel_err": perr, "param_worst_key": pk, "param_median_rel_err": perr_med}


def check_block(causal):
    import numpy as np
    torch = torch_defs()["torch"]
    a = tostnp_block(causal)()["_out"]
    y_np, dx_np, g_np = a
    b = torch_block(causal)()["_out"]
    y_t, xt, m = b
    gk, gerr = _max_rel(g_np, torch_grads_as_tostnp(m))
    return {"block": "causal" if causal else "non-causal", **{k: v for k, v in BLOCK_SHAPE.items()},
            "y_rel_err": _rel(y_np, y_t.detach().numpy()), "dx_rel_err": _rel(dx_np, xt.grad.numpy()),
            "grad_max_rel_err": gerr, "grad_worst_key": gk}


def run_checks(out):
    """Both libraries in one process: 1 thread each (2 + 2 threads here interfere badly)."""
    from threadpoolctl import threadpool_limits
    torch = torch_defs()["torch"]
    torch.set_num_threads(1)
    res = []
    print("\n== 1. Equivalence: tostnp's init copied into the torch model, same batches ==")
    print(f"{'model':6s} {'dtype':7s} {'variant':7s} {'params':>8s} {'loss tostnp':>12s} "
          f"{'loss torch':>12s} {'rel diff':>8s} {'grad err (worst param)':>36s} "
          f"{'3-step losses':>13s} {'params after 3 steps: max (worst), median':>44s}")
    with threadpool_limits(limits=1, user_api="blas"):
        for kind in ("lm", "vision"):
            for dt in ("float32", "float64"):
                for stress in ((False, True) if kind == "lm" else (False,)):
                    r = check_model(kind, dt, stress)
                    res.append(r)
                    print(f"{kind:6s} {dt:7s} {'stress' if stress else 'init':7s} "
                          f"{r['params_tostnp']:>8,d} {r['loss_tostnp']:12.7f} "
                          f"{r['loss_torch']:12.7f} {r['loss_rel_diff']:8.1e} "
                          f"{r['grad_max_rel_err']:8.1e} ({r['grad_worst_key']:>24s}) "
                          f"{r['step_loss_max_rel_diff']:13.1e} {r['param_max_rel_err']:8.1e} "
                          f"({r['param_worst_key']:>20s}) {r['param_median_rel_err']:8.1e}")
        print("  params: tostnp count == torch count (asserted). rel diff: |loss_np - loss_torch| "
              "/ loss at the first batch. grad err: max over parameters of max|g_np - g_torch| / "
              "max|g_np|. 3-step losses: max rel diff of the losses of 3 full training steps "
              "(clip + lr schedule + AdamW) on the same batches; then the parameters after them. "
              "'stress': LayerScale gammas 1, random temp and denom_bias, so the LM's ToST blocks "
              "shape the loss (at init their gammas are 1e-5).")
        for causal in (False, True):
            r = check_block(causal)
            res.append(r)
            print(f"  ToST block {r['block']:10s} B={r['B']} N={r['N']} C={r['C']} h={r['h']} "
                  f"float32: rel err y {r['y_rel_err']:.1e}, dx {r['dx_rel_err']:.1e}, "
                  f"param grads {r['grad_max_rel_err']:.1e} ({r['grad_worst_key']})")
    out["checks"] = res


# ============================================================================================
# 2. workers and interleaved timing
# ============================================================================================
def _gemm_inventory():
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


def _gemm_inventory_block():
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


_SCAN_GEMMS = [  # tostnp's blocked prefix sums: tri (32, 32) @ (B, T/32, 32, F), per LM step
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
            xt = torch.from_numpy(x).requires_grad_(True)
            dyt = torch.from_numpy(dy)

            def step():
                for q in mod.parameters():
                    q.grad = None
                xt.grad = None
                t0 = pc()
                y = mod(xt)
                t1 = pc()
                y.backward(dyt)
                t2 = pc()
                return {"fwd": t1 - t0, "bwd": t2 - t1, "total": t2 - t0}
        return step, {"items_per_step": B * N, "unit": "tokens", "batch": B}
    if bench in ("gemm", "gemm_block"):
        import numpy as np
        g = np.random.default_rng(0)
        inv = _gemm_inventory() if bench == "gemm" else _gemm_inventory_block()
        reps = 5 if bench == "gemm" else 1
        ops = []
        for name, sa, ta, sb, tb, _ in inv:
            a = g.standard_normal(sa).astype(np.float32)
            b = g.standard_normal(sb).astype(np.float32)
            ops.append((name, a, ta, b, tb))
        if system == "tostnp" and bench == "gemm":
            tri = np.tril(np.ones((32, 32), np.float32))
            for name, F, _ in _SCAN_GEMMS:
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


def _thp_faults():
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("thp_fault_alloc "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def worker_main(system, bench, threads):
    import resource
    import numpy  # noqa: F401  (load OpenBLAS first: threadpoolctl only limits loaded libraries)
    from threadpoolctl import threadpool_limits, threadpool_info
    proto = sys.stdout
    sys.stdout = sys.stderr           # keep library prints off the protocol channel
    from tostnp.bench.peaks import (peak_rss_bytes, reset_peak_rss, rss_bytes,
                                     traced_peak_bytes)
    with threadpool_limits(limits=threads, user_api="blas"):
        if system == "torch":
            torch = torch_defs()["torch"]
            torch.set_num_threads(threads)
            # set up torch's runtime (thread pools, autograd engine, kernels) before measuring
            # memory, with a step of a tiny model, so that the memory below is the model's
            tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
            tiny_opt = torch.optim.AdamW(tiny.parameters())
            tiny(torch.randn(2, 8)).square().sum().backward()
            tiny_opt.step()
            del tiny, tiny_opt
        else:       # `--threads N` sets BLAS and tostnp's fast path together (backend.threads)
            from tostnp.backend import kernels as fused
            if hasattr(fused, "set_threads"):
                fused.set_threads(threads)
        reset_peak_rss()
        rss0 = rss_bytes()            # libraries loaded; no model, data or optimiser yet
        step0, meta = make_step(system, bench)

        def step():            # + page faults during the step (this process, all threads)
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            h0 = _thp_faults()
            r = step0()
            r["minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            r["thp"] = _thp_faults() - h0      # system-wide counter: 2 MB huge-page faults
            # fresh memory mapped in: a THP fault maps 2 MB, any other minor fault 4 KB
            r["fault_mb"] = (r["thp"] * 2048 + max(r["minflt"] - r["thp"], 0) * 4) / 1024
            return r
        # setup may load more BLAS copies (scikit-learn -> SciPy's OpenBLAS): limit them too
        threadpool_limits(limits=threads, user_api="blas")
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(n == threads for n in blas), (blas, threads)
        if system == "torch":
            assert torch.get_num_threads() == threads
        elif hasattr(fused, "get_threads"):
            assert fused.get_threads() == threads
        t0, warm = time.perf_counter(), []
        while len(warm) < 2 or time.perf_counter() - t0 < 2.0:
            warm.append(step()["total"])
        meta.update(warm_step_s=statistics.median(warm[-3:]), warm_steps=len(warm),
                    pid=os.getpid(), threads=threads)
        # memory: the process's peak RSS over the warm-up above its RSS after the imports
        # (model, data, optimiser state, activations, allocator caches); for tostnp also the
        # NumPy bytes of one step's high-water mark (tracemalloc does not see torch's buffers)
        hwm = peak_rss_bytes()
        meta["rss_after_imports_mb"] = None if rss0 is None else rss0 / 2**20
        meta["train_rss_mb"] = None if rss0 is None or hwm is None else (hwm - rss0) / 2**20
        meta["step_traced_mb"] = (traced_peak_bytes(step0) / 2**20
                                  if system == "tostnp" else None)
        meta["blas_threads"] = blas
        if system == "torch":
            meta["torch_threads"] = torch.get_num_threads()
        print(PROTO + json.dumps({"ready": meta}), file=proto, flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "run":
                recs = [step() for _ in range(cmd["k"])]
                print(PROTO + json.dumps({"steps": recs}), file=proto, flush=True)
            elif cmd["cmd"] == "spin":          # run steps for cmd["s"] seconds (for perf)
                t_end, n = time.perf_counter() + cmd["s"], 0
                while time.perf_counter() < t_end:
                    step()
                    n += 1
                print(PROTO + json.dumps({"spun": n}), file=proto, flush=True)
            elif cmd["cmd"] == "cprofile":
                import cProfile
                import pstats
                pr = cProfile.Profile()
                t0 = time.perf_counter()
                pr.enable()
                for _ in range(cmd["k"]):
                    step()
                pr.disable()
                wall = time.perf_counter() - t0
                pr.dump_stats(cmd["path"])
                print(PROTO + json.dumps({"profiled": cmd["k"], "wall": wall}), file=proto,
                      flush=True)
            elif cmd["cmd"] == "tprofile":           # torch.profiler op table (torch only)
                from torch.profiler import profile, ProfilerActivity
                k = cmd["k"]
                with profile(activities=[ProfilerActivity.CPU]) as pr:
                    for _ in range(k):
                        step()
                rows = sorted(((e.key, e.self_cpu_time_total / k / 1e3,
                                e.cpu_time_total / k / 1e3, e.count / k)
                               for e in pr.key_averages()), key=lambda r: -r[1])
                print(PROTO + json.dumps({"rows": rows}), file=proto, flush=True)
            else:
                break


class Worker:
    def __init__(self, system, bench, threads):
        self.system, self.bench = system, bench
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [env.get("PYTHONPATH", ""), os.getcwd()] if p)
        if system == "tostnp":      # OpenBLAS's spin as `train` has it (tostnp/backend/openblas.py)
            env.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")
        self.p = subprocess.Popen([sys.executable, HERE, "--worker", system, bench, str(threads)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env, bufsize=1)
        self.meta = self._read()["ready"]

    def _read(self):
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.system}/{self.bench} died "
                                   f"(rc={self.p.poll()})")
            if line.startswith(PROTO):
                return json.loads(line[len(PROTO):])

    def cmd(self, **kw):
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()
        return self._read()

    def run(self, k):
        return self.cmd(cmd="run", k=k)["steps"]

    def close(self):
        try:
            self.p.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.p.stdin.flush()
            self.p.wait(timeout=60)
        except Exception:
            self.p.kill()


def _phase_means(recs):
    keys = [k for k in recs[0]]
    return {k: sum(r[k] for r in recs) / len(recs) for k in keys}


def interleave(bench, threads, rounds, target_s, systems=("tostnp", "torch")):
    """Rounds A, B, A, B, ...: per-system lists of per-round phase means, and load averages.
    threads: one count for both, or a dict {system: count}."""
    ws = []
    try:
        for s in systems:           # started one at a time: warm-ups do not overlap
            ws.append(Worker(s, bench, threads[s] if isinstance(threads, dict) else threads))
        ks = [max(1, min(500, round(target_s / w.meta["warm_step_s"]))) for w in ws]
        per = {s: [] for s in systems}
        loads = []
        for _ in range(rounds):
            for s, w, k in zip(systems, ws, ks):
                time.sleep(0.25)     # let the other worker's spinning BLAS/OpenMP threads sleep
                loads.append(os.getloadavg()[0])
                per[s].append(_phase_means(w.run(k)))
        metas = {s: w.meta for s, w in zip(systems, ws)}
    finally:
        for w in ws:
            w.close()
    return {"per_round": per, "k": dict(zip(systems, ks)), "loads": loads, "meta": metas}


def summarize(res, a="tostnp", b="torch"):
    pa = [r["total"] for r in res["per_round"][a]]
    pb = [r["total"] for r in res["per_round"][b]]
    paired = [x / y for x, y in zip(pa, pb)]
    ma, mb = statistics.median(pa), statistics.median(pb)
    items = res["meta"][a]["items_per_step"]
    return {"median_step_s": {a: ma, b: mb}, "ratio_of_medians": ma / mb,
            "paired_ratio_median": statistics.median(paired),
            "paired_ratio_min": min(paired), "paired_ratio_max": max(paired),
            "steps_per_s": {a: 1 / ma, b: 1 / mb},
            "items_per_s": {a: items / ma, b: items / mb}, "unit": res["meta"][a]["unit"],
            "rounds": len(pa), "k": res["k"],
            "load_1min": {"min": min(res["loads"]), "median": statistics.median(res["loads"]),
                          "max": max(res["loads"])},
            "train_rss_mb": {s: res["meta"][s].get("train_rss_mb") for s in (a, b)},
            "step_traced_mb": res["meta"][a].get("step_traced_mb"),
            "phases_median": {s: {ph: statistics.median(r[ph] for r in res["per_round"][s])
                                  for ph in res["per_round"][s][0]} for s in (a, b)}}


BENCH_TITLES = {"gemm": "GEMMs",
                "tssa_lm": "TSSA layer alone fwd+bwd, causal, LM shape B32 T64 C128 h4",
                "tssa_nc": "TSSA layer alone fwd+bwd, non-causal, B4 N4096 C384 h6",
                "tssa_c": "TSSA layer alone fwd+bwd, causal, B4 N4096 C384 h6","lm": "LM tiny-char train step (32x64 tokens)",
                "vision": "vision tiny-digits train step (64 images)",
                "lm_tiny": "LM step at width 8, batch 1 (overhead floor)",
                "block_nc": "ToST block fwd+bwd, non-causal, B4 N4096 C384 h6",
                "block_c": "ToST block fwd+bwd, causal, B4 N4096 C384 h6"}


def run_timing(args, out):
    out["timing"] = {}
    for threads in args.threads:
        print(f"\n== 2. Timing, {threads} thread(s) for both (BLAS threads for NumPy, "
              f"torch.set_num_threads for torch); {args.rounds} interleaved rounds ==")
        out["timing"][threads] = {}
        for bench in args.only:
            target = 1.0 if bench in ("lm", "vision", "lm_tiny", "tssa_lm") else 0.1
            t0 = time.time()
            res = interleave(bench, threads, args.rounds, target)
            s = summarize(res)
            s["raw"] = res
            out["timing"][threads][bench] = s
            print(f"  {BENCH_TITLES[bench]:52s} tostnp/torch = {s['ratio_of_medians']:5.2f}x "
                  f"(paired {s['paired_ratio_median']:.2f}, range "
                  f"{s['paired_ratio_min']:.2f}-{s['paired_ratio_max']:.2f}); load "
                  f"{s['load_1min']['min']:.2f}-{s['load_1min']['max']:.2f}; "
                  f"{time.time() - t0:.0f} s", flush=True)


def print_table(out):
    print("\n== Results (medians over interleaved rounds; ratio = tostnp time / torch time) ==")
    hdr = (f"{'thr':>3s}  {'benchmark':52s} {'ratio':>6s} {'paired (min-max)':>18s} "
           f"{'tostnp steps/s':>14s} {'torch steps/s':>13s} {'tostnp items/s':>15s} "
           f"{'torch items/s':>14s} {'load avg 1-min':>15s}")
    print(hdr)
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            u = s["unit"][:3]
            print(f"{threads:>3}  {BENCH_TITLES[bench]:52s} {s['ratio_of_medians']:6.2f} "
                  f"{s['paired_ratio_median']:6.2f} ({s['paired_ratio_min']:.2f}-"
                  f"{s['paired_ratio_max']:.2f}) {s['steps_per_s']['tostnp']:14.2f} "
                  f"{s['steps_per_s']['torch']:13.2f} {s['items_per_s']['tostnp']:11.0f} {u} "
                  f"{s['items_per_s']['torch']:10.0f} {u} "
                  f"{s['load_1min']['min']:6.2f}-{s['load_1min']['max']:.2f}")
    print("  (thr: threads for both. steps/s and "
          "items/s are absolute numbers from a shared 2-core machine: read the ratios. The load "
          "average includes this benchmark's own running worker.)")
    print("\n  Phase split of one step (median ms per step; torch fwd_bwd = forward+loss + "
          "zero_grad+backward; clip includes float(loss)/loss.item()):")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            if bench not in ("lm", "vision", "lm_tiny"):
                continue
            ph = s["phases_median"]
            line = "  ".join(f"{k} {1e3 * ph['tostnp'][k]:.2f}/{1e3 * ph['torch'][k]:.2f}"
                             for k in ("data", "fwd_bwd", "clip", "opt", "total"))
            print(f"  {threads} thr {bench:8s} tostnp/torch ms: {line}  | fresh memory "
                  f"faulted in per step {ph['tostnp']['fault_mb']:.1f}/{ph['torch']['fault_mb']:.1f}"
                  f" MB")
    print("\n  Memory (each system in its own fresh worker process): peak RSS over the warm-up "
          "above the RSS after the imports (model, data, optimiser state, activations, "
          "allocator caches); tostnp's NumPy peak of one step (tracemalloc):")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            m = s.get("train_rss_mb") or {}
            if m.get("tostnp") is None or m.get("torch") is None:
                continue
            print(f"  {threads} thr {bench:8s} RSS tostnp {m['tostnp']:.0f} MB, torch "
                  f"{m['torch']:.0f} MB, ratio {m['tostnp'] / max(m['torch'], 1e-9):.2f}; tostnp "
                  f"step (tracemalloc) {s['step_traced_mb']:.1f} MB")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            if not bench.startswith(("block", "tssa")):
                continue
            ph = s["phases_median"]
            print(f"  {threads} thr {bench:8s} tostnp/torch ms: fwd {1e3 * ph['tostnp']['fwd']:.1f}"
                  f"/{1e3 * ph['torch']['fwd']:.1f}  bwd {1e3 * ph['tostnp']['bwd']:.1f}/"
                  f"{1e3 * ph['torch']['bwd']:.1f}  fwd ratio "
                  f"{ph['tostnp']['fwd'] / ph['torch']['fwd']:.2f}, bwd ratio "
                  f"{ph['tostnp']['bwd'] / ph['torch']['bwd']:.2f}  | fresh memory faulted in "
                  f"{ph['tostnp']['fault_mb']:.0f}/{ph['torch']['fault_mb']:.0f} MB")


# ============================================================================================
# 3. profile of tostnp's LM step
# ============================================================================================
_CATS = [  # (label, [(module file suffix, function name)]) -- inclusive times
    ("data: task.next_batch", [("tasks.py", "next_batch")]),
    ("loss_and_grads (fwd+bwd)", [("tasks.py", "loss_and_grads")]),
    ("  model forward", [("lm.py", "lm_forward"), ("vision.py", "vision_forward")]),
    ("  model backward", [("lm.py", "_backward"), ("vision.py", "_backward")]),
    ("  TSSA fwd+bwd (incl. its W_u/W_o matmuls)", [("tssa.py", "_tssa_forward"),
                                                   ("tssa.py", "_tssa_backward")]),
    ("    of which _scan (causal prefix/suffix sums)", [("tssa_causal.py", "_scan")]),
    ("  MLP fwd+bwd (matmuls + GELU)", [("layers.py", "_mlp_forward"),
                                        ("layers.py", "mlp_backward")]),
    ("    of which GELU fwd+bwd (tanh form)", [("layers.py", "_gelu_forward"),
                                               ("layers.py", "gelu_backward")]),
    ("  LayerNorm fwd+bwd", [("layers.py", "_layer_norm_forward"),
                             ("layers.py", "layer_norm_backward")]),
    ("  LayerScale fwd+bwd", [("layers.py", "_layer_scale_forward"),
                              ("layers.py", "layer_scale_backward")]),
    ("  class-attention fwd+bwd (vision)", [("class_attention.py", "_class_attention_forward"),
                                            ("class_attention.py", "class_attention_backward")]),
    ("  patch embed fwd+bwd (vision)", [("layers.py", "_patch_embed_forward"),
                                        ("layers.py", "patch_embed_backward")]),
    ("  embedding fwd+bwd (LM; np.add.at scatter)", [("layers.py", "_embedding_forward"),
                                                    ("layers.py", "embedding_backward")]),
    ("  softmax cross-entropy fwd+bwd", [("layers.py", "softmax_cross_entropy_forward"),
                                         ("layers.py", "softmax_cross_entropy_backward")]),
    ("clip_grad_norm", [("optim.py", "clip_grad_norm")]),
    ("AdamW.step", [("optim.py", "step")]),
]
_VALIDATORS = [("validate.py", "check_array"), ("validate.py", "check_same_dtype"),
               ("validate.py", "check_param"), ("validate.py", "check_params"),
               ("validate.py", "check_token_ids")]


def _inclusive(st, funcs):
    """Inclusive time of a set of functions, counting only calls from outside the set."""
    keys = [k for k in st.stats if any(k[0].endswith(f) and k[2] == n for f, n in funcs)]
    tot = 0.0
    for k in keys:
        cc, nc, tt, ct, callers = st.stats[k]
        for ck, cv in callers.items():
            if ck not in keys:
                tot += cv[3]
    return tot


def cprofile_table(bench, k):
    import pstats
    w = Worker("tostnp", bench, 1)
    try:
        path = os.path.join(tempfile.gettempdir(), f"peer_{bench}_{os.getpid()}.prof")
        r = w.cmd(cmd="cprofile", k=k, path=path)
        base = w.run(max(3, k // 3))
    finally:
        w.close()
    st = pstats.Stats(path)
    prof_step = r["wall"] / k
    plain_step = statistics.median(x["total"] for x in base)
    print(f"  cProfile of tostnp's {bench} step, 1 thread: {k} steps; "
          f"{1e3 * prof_step:.1f} ms/step under the profiler, {1e3 * plain_step:.1f} ms/step "
          f"right after without it")
    rows = [(label, _inclusive(st, funcs) / k) for label, funcs in _CATS]
    rows.append(("input validators (check_array, check_params, check_token_ids, ...)",
                 _inclusive(st, _VALIDATORS) / k))
    print(f"    {'inclusive time per step':62s} {'ms':>8s} {'% of step':>9s}")
    for label, t in rows:
        if t > 0:
            print(f"    {label:62s} {1e3 * t:8.2f} {100 * t / prof_step:8.1f}%")
    calls = sum(v[1] for v in st.stats.values()) / k
    print(f"    Python-level function calls per step (incl. NumPy's Python wrappers): {calls:,.0f}")
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:12]
    print("    top functions by own time (NumPy operators such as @ * + count in the caller):")
    for key, v in top:
        print(f"      {1e3 * v[2] / k:7.2f} ms  {v[1] / k:6.0f} calls  "
              f"{os.path.basename(key[0])}:{key[1]} {key[2]}")
    try:
        os.remove(path)
    except OSError:
        pass
    return {"ms_per_step_profiled": 1e3 * prof_step, "ms_per_step_plain": 1e3 * plain_step,
            "rows_ms": {l: 1e3 * t for l, t in rows}, "calls_per_step": calls,
            "top_tottime": [(f"{os.path.basename(k_[0])}:{k_[2]}", 1e3 * v[2] / k, v[1] / k)
                            for k_, v in top]}


_TORCH_GROUPS = [("GEMM (aten::mm/addmm/bmm, self)", ("aten::mm", "aten::addmm", "aten::bmm")),
                 ("GELU fwd+bwd (aten::gelu, aten::gelu_backward)", ("aten::gelu",
                                                                     "aten::gelu_backward")),
                 ("LayerNorm fwd+bwd", ("aten::native_layer_norm",
                                        "aten::native_layer_norm_backward")),
                 ("cumsum (causal TSSA) + flip (its backward)", ("aten::cumsum", "aten::flip")),
                 ("softmax fwd+bwd", ("aten::_softmax", "aten::_softmax_backward_data")),
                 ("embedding backward", ("aten::embedding_dense_backward",))]


def torch_profile_table(bench, k):
    w = Worker("torch", bench, 1)
    try:
        rows = w.cmd(cmd="tprofile", k=k)["rows"]
        base = w.run(max(3, k // 2))
    finally:
        w.close()
    plain = statistics.median(x["total"] for x in base)
    self_total = sum(r[1] for r in rows)
    byname = {r[0]: r for r in rows}
    print(f"  torch.profiler of the torch {bench} step, 1 thread: {k} steps; sum of op self "
          f"times {self_total:.1f} ms/step (step without profiler {1e3 * plain:.1f} ms)")
    out = {"self_total_ms": self_total, "plain_ms": 1e3 * plain, "groups_ms": {}}
    for label, names in _TORCH_GROUPS:
        t = sum(byname[n][1] for n in names if n in byname)
        out["groups_ms"][label] = t
        print(f"    {label:62s} {t:8.2f} ms")
    opt = byname.get("Optimizer.step#AdamW.step")
    if opt:
        out["groups_ms"]["AdamW.step (inclusive)"] = opt[2]
        print(f"    {'AdamW.step (inclusive)':62s} {opt[2]:8.2f} ms")
    print("    top ops by self time: " + "; ".join(f"{r[0]} {r[1]:.1f} ms ({r[3]:.0f}x)"
                                                  for r in rows[:8]))
    out["top"] = rows[:25]
    return out


def gemm_table(bench, rounds, out, threads=1):
    inv = _gemm_inventory() if bench == "gemm" else _gemm_inventory_block()
    what = "the LM step" if bench == "gemm" else "one ToST block fwd+bwd (B4 N4096 C384)"
    print(f"  GEMMs of {what} timed alone, {threads} thread(s), {rounds} interleaved rounds "
          f"(ms per call):")
    res = interleave(bench, threads, rounds, 0.5)
    g, tot_np, tot_t = {}, 0.0, 0.0
    for name, _, _, _, _, cnt in inv:
        x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
        y = statistics.median(r[name] for r in res["per_round"]["torch"])
        tot_np += cnt * x
        tot_t += cnt * y
        g[name] = {"calls": cnt, "numpy_ms": 1e3 * x, "torch_ms": 1e3 * y}
        print(f"    {name:46s} x{cnt:2d}  numpy {1e3 * x:8.3f}  torch {1e3 * y:8.3f}  "
              f"numpy/torch {x / y:4.2f}")
    tot_scan = 0.0
    if bench == "gemm":
        for name, _, cnt in _SCAN_GEMMS:
            x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
            tot_scan += cnt * x
            g[name] = {"calls": cnt, "numpy_ms": 1e3 * x}
            print(f"    {name:46s} x{cnt:2d}  numpy {1e3 * x:8.3f}")
    print(f"    sum (calls x time): numpy {1e3 * tot_np:.1f} ms vs torch {1e3 * tot_t:.1f} ms "
          f"(numpy/torch {tot_np / tot_t:.2f})"
          + (f"; tostnp's scan GEMMs add {1e3 * tot_scan:.1f} ms" if tot_scan else ""))
    out[f"{bench}@{threads}"] = {"rows": g, "numpy_ms": 1e3 * tot_np, "torch_ms": 1e3 * tot_t,
                                 "numpy_scan_ms": 1e3 * tot_scan}


def run_profile(args, out):
    prof = {}
    rounds = args.rounds
    print("\n== 3. Where the time goes (1 thread) ==")
    prof["cprofile"] = {b: cprofile_table(b, 30 if b == "lm" else 150) for b in ("lm", "vision")}
    prof["torch_profiler"] = {b: torch_profile_table(b, 10 if b == "lm" else 60)
                              for b in ("lm", "vision")}
    # GEMMs alone
    prof["gemm"] = {}
    for threads in (1, 2):
        gemm_table("gemm", rounds, prof["gemm"], threads)
    gemm_table("gemm_block", 5, prof["gemm"], 1)
    # GELU alone
    prof["gelu"] = {}
    for threads in (1, 2):
        res = interleave("gelu", threads, rounds, 0.5)
        print(f"  tanh-GELU forward+backward alone, {threads} thread(s), {rounds} interleaved "
              f"rounds (tostnp gelu_forward+gelu_backward vs torch F.gelu(approximate='tanh') "
              f"+ backward):")
        for name in ("LM (32x64, 512)", "block (4x4096, 1536)"):
            x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
            y = statistics.median(r[name] for r in res["per_round"]["torch"])
            prof["gelu"][f"{name}@{threads}"] = {"numpy_ms": 1e3 * x, "torch_ms": 1e3 * y}
            print(f"    {name:22s} tostnp {1e3 * x:8.2f} ms  torch {1e3 * y:8.2f} ms  ratio "
                  f"{x / y:5.2f}" + (f"   (x4 layers per LM step: {4e3 * x:.0f} vs "
                                     f"{4e3 * y:.0f} ms)" if name.startswith("LM") else ""))
    # perf
    if shutil.which("perf") and not args.no_perf:
        prof["perf"] = {}
        for bench, secs in (("lm", 8.0), ("vision", 6.0), ("block_nc", 14.0), ("block_c", 20.0)):
            for system in ("tostnp", "torch"):
                prof["perf"][f"{system}:{bench}"] = perf_profile(system, bench, 1, secs)
    else:
        print("  (perf not installed or --no-perf: no per-library CPU sample breakdown)")
    out["profile"] = prof


def _perf_category(dso, sym):
    d, s_ = dso.lower(), sym
    if "openblas" in d:
        if any(k in s_ for k in ("thread", "exec_blas", "blas_thread")):
            return "BLAS threading (wait/spin)"
        return "GEMM (OpenBLAS sgemm + packing)"
    if s_.startswith("mkl_") or "mkl" in d:
        return "GEMM (MKL sgemm + packing)"
    if "gomp" in d:
        return "OpenMP runtime (wait/spin)"
    if "Sleef" in s_:
        return "tanh for GELU (Sleef)"
    if "_multiarray_umath" in d or "_umath" in d:
        return "NumPy loops (elementwise, reductions, copies, add.at)"
    if "libtorch_cpu" in d:
        return "ATen non-GEMM kernels + dispatch"
    if "kernel" in d:
        return "kernel (page faults/zeroing of fresh memory, scheduling)"
    if "libpython" in d or "python3" in d:
        return "Python interpreter"
    if "libc10" in d or "libtorch_python" in d or "libstdc++" in d:
        return "torch framework overhead (c10, bindings)"
    if "libc" in d:
        return "libc (memcpy, memset, malloc/free)"
    return "other"


def perf_profile(system, bench, threads, seconds):
    """perf record of a worker's steady state -> percent of CPU samples by category."""
    import re
    w = Worker(system, bench, threads)
    data = os.path.join(tempfile.gettempdir(), f"peer_perf_{system}_{bench}_{os.getpid()}.data")
    try:
        w.p.stdin.write(json.dumps({"cmd": "spin", "s": seconds + 2}) + "\n")
        w.p.stdin.flush()
        time.sleep(0.5)
        subprocess.run(["perf", "record", "-q", "-F", "1000", "-o", data, "-p", str(w.p.pid),
                        "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        w._read()
    finally:
        w.close()
    rep = subprocess.run(["perf", "report", "-i", data, "--sort", "dso,sym", "--stdio", "-q",
                          "--percent-limit", "0"], capture_output=True, text=True).stdout
    try:
        os.remove(data)
    except OSError:
        pass
    rows = []
    for line in rep.splitlines():
        mm = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if mm:
            rows.append((float(mm.group(1)), mm.group(2), mm.group(4).strip()))
    cats = {}
    for pct, dso, sym in rows:
        c = _perf_category(dso, sym)
        cats[c] = cats.get(c, 0.0) + pct
    tot = sum(cats.values()) or 1.0
    print(f"  perf, {system} {BENCH_TITLES.get(bench, bench)}, {threads} thread, "
          f"{seconds:.0f} s steady state: % of CPU samples")
    for c, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"    {100 * v / tot:6.1f}%  {c}")
    print("    top symbols: " + "; ".join(f"{p:.1f}% {s_[:40]}" for p, _, s_ in rows[:6]))
    return {"categories_pct": {c: 100 * v / tot for c, v in cats.items()}, "top": rows[:20]}


# ============================================================================================
def header(out):
    import numpy as np
    la = os.getloadavg()
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "host_cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__,
            "loadavg_start": la}
    try:
        from threadpoolctl import threadpool_info
        info["blas"] = [f"{i['internal_api']} {i.get('version')} ({i.get('architecture')})"
                        for i in threadpool_info() if i["user_api"] == "blas"]
    except Exception:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except Exception:
        pass
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
                                                   "block_nc", "block_c", "tssa_nc", "tssa_c"])
    ap.add_argument("--skip-check", action="store_true")
    ap.add_argument("--profile", action="store_true", help="also run part 3 (profile)")
    ap.add_argument("--profile-only", action="store_true")
    ap.add_argument("--no-perf", action="store_true", help="skip the perf sampling in part 3")
    ap.add_argument("--json", default=None, help="write all results here")
    args = ap.parse_args()
    if args.worker:
        worker_main(args.worker[0], args.worker[1], int(args.worker[2]))
        return
    if args.rounds < 5:
        ap.error("--rounds must be >= 5")
    out = {}
    header(out)
    torch = torch_defs()["torch"]
    out["env"]["torch"] = torch.__version__
    print(f"torch {torch.__version__}")
    t0 = time.time()
    if not args.skip_check and not args.profile_only:
        run_checks(out)
    if not args.profile_only:
        run_timing(args, out)
        print_table(out)
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
