"""The two systems' setups, shared by the equivalence checks and the workers: tostnp's Task and
per-update step for the default presets (as `python -m tostnp train` builds them), the same
model and update in PyTorch with tostnp's initial weights, and one ToST block of each at
BLOCK_SHAPE."""
from __future__ import annotations

import math
import time

from .torch_models import torch_defs
from .weights import make_torch_adamw, transplant

BLOCK_SHAPE = dict(B=4, N=4096, C=384, h=6, mlp_ratio=4)


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
