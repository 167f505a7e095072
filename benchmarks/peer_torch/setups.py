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
    """tostnp's training defaults for the default presets (tostnp.train.defaults, as `train`
    has them); vision: ``n_train`` training images."""
    from tostnp.train.defaults import default_train_config
    if kind.startswith("lm"):
        return default_train_config("lm")
    return default_train_config("vision", "tiny-digits", n_train=n_train)


_DATA = {}


def make_task(kind, seed=0, dtype=None):
    """tostnp's Task for the default presets, exactly as `python -m tostnp train ...` builds it.
    kind "lm_tiny": the LM preset at width 8 (same layers and op count, negligible FLOPs)."""
    from tostnp import backend
    from tostnp.models import configs as Cf
    from tostnp.train.tasks import LMTask, VisionTask
    from tostnp.data import load_lm_text, load_vision_data
    from tostnp.train.defaults import default_data_config
    xp = backend.get_xp("cpu")
    if kind.startswith("lm"):
        if "lm" not in _DATA:      # the default corpus with the default tokenizer
            d = default_data_config("lm")
            _DATA["lm"] = load_lm_text(d.text, kind=d.tokenizer, vocab_size=d.vocab_size)
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
                      augment_shift=default_data_config("vision", "tiny-digits").augment_shift,
                      xp=xp, dtype=dtype)
    return task, tcfg


def with_batches(task, body):
    """A trainer's step(batch=None): the task's next batch unless one is given, then
    ``body(batch, t0)`` with t0 the step's start (its data phase is timed from there)."""
    def step(batch=None):
        t0 = time.perf_counter()
        if batch is None:
            batch = task.next_batch()
        return body(batch, t0)
    return step


def tostnp_trainer(kind, dtype=None):
    """tostnp's own per-update path: tostnp.train.loop's optimizer and update_step (clip,
    schedule, loss to the host + finiteness check, AdamW), minus logging/eval/checkpoints."""
    from tostnp import backend
    from tostnp.train.loop import make_optimizer, update_step
    task, tcfg = make_task(kind, dtype=dtype)
    if hasattr(backend, "keep_freed_memory"):      # what tostnp.train.loop.train() does first
        backend.keep_freed_memory()
    params = task.init_params(backend.RNG(tcfg.seed))
    opt = make_optimizer(params, tcfg)
    state = {"step": 0}
    pc = time.perf_counter

    def body(batch, t0):
        t1 = pc()
        loss, grads, extra = task.loss_and_grads(params, batch)
        t2 = pc()
        loss_f, _, _ = update_step(opt, grads, loss, state["step"] % tcfg.steps, tcfg)
        t3 = pc()
        state["step"] += 1
        return {"data": t1 - t0, "fwd_bwd": t2 - t1, "update": t3 - t2, "total": t3 - t0,
                "loss": loss_f}

    return with_batches(task, body), task, tcfg, params, opt


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

    def body(batch, t0):
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
                "clip": t4 - t3, "opt": t5 - t4, "update": t5 - t3, "total": t5 - t0,
                "loss": loss_f}

    return with_batches(task, body), model, m, opt, task, tcfg


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
    return torch_fwd_bwd(blk, xt, torch.from_numpy(dy), out=(xt, m))


def torch_fwd_bwd(mod, xt, dyt, out=None):
    """step(): torch module ``mod``'s forward on xt and backward of dyt, timed, gradients
    cleared first; with ``out``, "_out" holds (y, *out)."""
    pc = time.perf_counter

    def step():
        for p in mod.parameters():
            p.grad = None
        xt.grad = None
        t0 = pc()
        y = mod(xt)
        t1 = pc()
        y.backward(dyt)
        t2 = pc()
        r = {"fwd": t1 - t0, "bwd": t2 - t1, "total": t2 - t0}
        if out is not None:
            r["_out"] = (y, *out)
        return r
    return step
