"""A sequence classifier built from the same blocks: features -> blocks -> CLS token -> head.

    x      = [cls; features @ W_in + b_in] + pos_embed[:1+N]          # (B, 1+N, C)
    for each block:  x = tost_block(x, mixer=cfg.mixer)                # non-causal
    logits = head(LayerNorm(x[:, 0]))                                  # (B, num_classes)

The class is read from the CLS token (position 0) after the blocks, so whatever the label
depends on must reach that token through the token mixer: this is the model of the synthetic
tasks (:mod:`tostnp.data.synthetic`), where the question is exactly what each mixer can route. Token
ids are given as one-hot features (then ``W_in`` is an embedding table).

Parameters: "embed.W" (d, C), "embed.b" (C,), "cls_token" (1, 1, C), "pos_embed"
(1, 1 + max_len, C), "blocks.{i}.<block keys>", "norm.gamma", "norm.beta", "head.W", "head.b".
"""
from __future__ import annotations

from .. import backend
from ..backend.validate import check_array
from ..nn import layers as L
from ..nn import block as Bk
from ..nn.params import sub, prefixed, num_params
from .configs import SeqConfig

__all__ = ["seqcls_init", "seqcls_forward", "seqcls_backward", "seqcls_loss_and_grads"]


def seqcls_init(cfg: SeqConfig, rng, xp, dtype=None, device=None) -> dict:
    """Fresh parameters (weights N(0, init_std^2), the input map N(0, 1/d), biases 0)."""
    cfg.validate()
    dtype = xp.float32 if dtype is None else dtype
    C, std = cfg.width, cfg.init_std
    params = {
        "embed.W": rng.normal(xp, (cfg.in_dim, C), dtype, std=cfg.in_dim ** -0.5, device=device),
        "embed.b": xp.zeros((C,), dtype=dtype, device=device),
        "cls_token": rng.normal(xp, (1, 1, C), dtype, std=std, device=device),
        "pos_embed": rng.normal(xp, (1, 1 + cfg.max_len, C), dtype, std=std, device=device),
    }
    for i in range(cfg.depth):
        bp = Bk.tost_block_init(rng, xp, C, cfg.num_heads, causal=False, bias=True,
                                layer_scale_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio,
                                dtype=dtype, device=device, std=std, mixer=cfg.mixer)
        params.update(prefixed(bp, f"blocks.{i}"))
    params["norm.gamma"] = xp.ones((C,), dtype=dtype, device=device)
    params["norm.beta"] = xp.zeros((C,), dtype=dtype, device=device)
    params["head.W"] = rng.normal(xp, (C, cfg.num_classes), dtype, std=std, device=device)
    params["head.b"] = xp.zeros((cfg.num_classes,), dtype=dtype, device=device)
    return params


def seqcls_forward(features, params: dict, cfg: SeqConfig):
    """features (B, N, d) float, N <= max_len -> (logits (B, num_classes), cache).

    cache["blocks"][i] is block i's cache (cache["blocks"][i]["Pi"]: (B, h, 1 + N) for TSSA).
    """
    xp = check_array(features, "features", ndim=3, shape_desc="(B, N, d)")
    B, N, d = features.shape
    if d != cfg.in_dim or not 1 <= N <= cfg.max_len:
        raise ValueError(f"features must have shape (B, N, {cfg.in_dim}) with 1 <= N <= "
                         f"max_len = {cfg.max_len}, got {tuple(features.shape)}")
    e, c_in = L.linear_forward(features, params["embed.W"], params["embed.b"])   # (B, N, C)
    cls = xp.broadcast_to(params["cls_token"], (B, 1, cfg.width))
    x = xp.concat([cls, e], axis=1) + params["pos_embed"][:, :1 + N, :]          # (B, 1+N, C)
    c_blocks = []
    for i in range(cfg.depth):
        x, c = Bk.tost_block_forward(x, sub(params, f"blocks.{i}"), cfg.num_heads,
                                     causal=False, ln_eps=cfg.ln_eps, mixer=cfg.mixer)
        c_blocks.append(c)
    hn, c_norm = L.layer_norm_forward(x[:, 0, :], params["norm.gamma"], params["norm.beta"],
                                      cfg.ln_eps)                                # (B, C)
    logits, c_head = L.linear_forward(hn, params["head.W"], params["head.b"])
    return logits, {"in": c_in, "blocks": c_blocks, "norm": c_norm, "head": c_head,
                    "shape": (B, N), "cfg": cfg}


def seqcls_backward(dlogits, cache) -> dict:
    """dlogits (B, num_classes) -> grads with the keys of the parameters."""
    xp = backend.namespace(dlogits)
    cfg, (B, N) = cache["cfg"], cache["shape"]
    grads = {}
    dh, g = L.linear_backward(dlogits, cache["head"]); grads.update(prefixed(g, "head"))
    d0, g = L.layer_norm_backward(dh, cache["norm"]); grads.update(prefixed(g, "norm"))
    zeros = xp.zeros((B, N, cfg.width), dtype=d0.dtype, device=backend.device_of(d0))
    dx = xp.concat([xp.reshape(d0, (B, 1, cfg.width)), zeros], axis=1)          # (B, 1+N, C)
    for i in reversed(range(cfg.depth)):
        dx, g = Bk.tost_block_backward(dx, cache["blocks"][i])
        grads.update(prefixed(g, f"blocks.{i}"))
    dpos = xp.sum(dx, axis=0, keepdims=True)                                     # (1, 1+N, C)
    if N < cfg.max_len:
        dpos = xp.concat([dpos, xp.zeros((1, cfg.max_len - N, cfg.width), dtype=dpos.dtype,
                                         device=backend.device_of(dpos))], axis=1)
    grads["pos_embed"] = dpos
    grads["cls_token"] = xp.sum(dx[:, :1, :], axis=0, keepdims=True)            # (1, 1, C)
    _, g = L.linear_backward(dx[:, 1:, :], cache["in"])
    grads.update(prefixed(g, "embed"))
    return grads


def seqcls_loss_and_grads(params: dict, features, labels, cfg: SeqConfig):
    """Mean softmax cross-entropy and its gradient -> (loss (0-d array), grads, logits)."""
    with backend.backward_ahead():     # a training step: the backward follows
        logits, cache = seqcls_forward(features, params, cfg)
    loss, c_loss = L.softmax_cross_entropy_forward(logits, labels)
    dlogits, _ = L.softmax_cross_entropy_backward(backend.namespace(logits).ones_like(loss),
                                                  c_loss)
    return loss, seqcls_backward(dlogits, cache), logits


def describe(cfg: SeqConfig, params: dict) -> str:
    return (f"sequence classifier ({cfg.mixer}): {cfg.depth} blocks, width {cfg.width}, "
            f"{cfg.num_heads} heads, up to {cfg.max_len} tokens: {num_params(params):,} parameters")
