"""The ToST image classifier: patch tokens -> ToST blocks -> class-attention pooling -> head.

    tokens = patch_embed(images) + pos_embed                       # (B, N, C)
    for each block:  tokens = tost_block(tokens)                    # TSSA over patch tokens only
    cls    = class_attention_blocks(cls_token, tokens)              # (B, 1, C), CLS = only query
    logits = head(LayerNorm(cls))                                   # (B, num_classes)

Pooling by class attention (CaiT/XCiT style, :mod:`tostnp.nn.class_attention`) keeps the whole
model linear in N: the CLS token is the only query, so its cost is O(N C). Every preset uses the
published block (XCiT with tokens_norm, which also re-normalises the patch tokens that the next
class-attention block sees); ``cab="cls-only"`` is CaiT's variant and ``pool="mean"`` replaces
class attention by the mean of the patch tokens.

The published ToST-T/S (built on XCiT) are the configs "T" and "S": stem "conv"
(3x3 stride-2 convolutions with BatchNorm and GELU, :mod:`tostnp.nn.stem`), pos "fourier"
(fixed Fourier features with a learned projection, :mod:`tostnp.nn.position`), gelu "erf", and
the published class-attention block; their parameter counts are the published 5,769,328 and
22,589,944. The small presets keep the lighter ViT form: one linear map per patch ("linear")
and a learned position table ("learned"). XCiT's local patch interaction is absent in both
(the published ToST does not use it either).

Registers (``cfg.num_registers`` = R > 0, Darcet et al. 2024, "Vision Transformers Need
Registers"): R learned tokens (no position embedding) are appended to the patch tokens, mixed
with them in every block, and dropped before pooling; they give the model somewhere other than
a patch to keep global information. The token mixer of the blocks is ``cfg.mixer`` (TSSA for
ToST; the baselines of :mod:`tostnp.nn.mixers` in the same model for comparisons).

BatchNorm makes the model stateful: ``vision_forward(..., train=True)`` normalises with batch
statistics and returns the updated running statistics in ``cache["state"]``;
:func:`vision_loss_and_grads` with ``train=True`` writes them into ``params`` (PyTorch's
``model.train()``). Every other use -- evaluation, figures, prediction -- is evaluation mode.

Parameters are one flat dict with dotted names: "patch.W", "patch.b" (linear stem) or
"stem.{s}.conv.W", "stem.{s}.bn.*" (conv stem; the bn running statistics are state), "pos_embed"
(learned) or "pos.W" (64, C), "pos.b" (Fourier), "registers" (1, R, C) if R > 0,
"blocks.{i}.<tost block keys>", "cls_token",
"cab.{j}.<class-attention block keys>", "norm.gamma", "norm.beta", "head.W", "head.b".
"""
from __future__ import annotations

import math

from .. import backend
from ..backend.validate import check_array, check_params
from ..nn import layers as L
from ..nn import block as Bk
from ..nn.class_attention import (class_attention_block_init, _class_attention_block_forward,
                                  class_attention_block_backward)
from ..nn.stem import conv_stem_init, _conv_stem_forward, conv_stem_backward
from ..nn.params import tost_block_spec, class_attention_block_spec, conv_stem_spec
from ..nn.position import fourier_features, FOURIER_DIM
from ..nn.params import sub, prefixed, num_params
from .configs import VisionConfig

__all__ = ["vision_init", "vision_forward", "vision_backward", "vision_loss_and_grads",
           "vision_predict", "vision_spec"]


def _normal(rng, xp, shape, dtype, std, device):
    return rng.normal(xp, shape, dtype, std=std, device=device)


def vision_init(cfg: VisionConfig, rng, xp, dtype=None, device=None) -> dict:
    """Fresh parameters for ``cfg`` (weights N(0, init_std), biases 0, norms 1/0).

    rng: :class:`tostnp.backend.RNG`; xp: namespace (``backend.get_xp("cpu")``); dtype default
    float32. Returns the flat dict described in the module docstring.
    """
    cfg.validate()
    dtype = xp.float32 if dtype is None else dtype
    C, P, std = cfg.width, cfg.patch_size, cfg.init_std
    if cfg.stem == "conv":
        params = prefixed(conv_stem_init(rng, xp, cfg.in_chans, C, P, dtype, device), "stem")
    else:
        # The patch stem sees only P*P*Cin inputs: a fan-in init keeps its output O(1).
        fan_in = P * P * cfg.in_chans
        params = {
            "patch.W": _normal(rng, xp, (fan_in, C), dtype, 1.0 / math.sqrt(fan_in), device),
            "patch.b": xp.zeros((C,), dtype=dtype, device=device),
        }
    if cfg.pos == "fourier":
        # PyTorch's default init width for the published 1x1 convolution: U(+-1/sqrt(64))
        params["pos.W"] = _normal(rng, xp, (2 * FOURIER_DIM, C), dtype,
                                  1.0 / math.sqrt(3 * 2 * FOURIER_DIM), device)
        params["pos.b"] = xp.zeros((C,), dtype=dtype, device=device)
    else:
        params["pos_embed"] = _normal(rng, xp, (1, cfg.num_patches, C), dtype, std, device)
    if cfg.num_registers:
        params["registers"] = _normal(rng, xp, (1, cfg.num_registers, C), dtype, std, device)
    for i in range(cfg.depth):
        bp = Bk.tost_block_init(rng, xp, C, cfg.num_heads, causal=False, bias=True,
                                layer_scale_init=cfg.layer_scale_init, mlp_ratio=cfg.mlp_ratio,
                                dtype=dtype, device=device, std=std, mixer=cfg.mixer)
        params.update(prefixed(bp, f"blocks.{i}"))
    if cfg.pool == "cls":
        params["cls_token"] = _normal(rng, xp, (1, 1, C), dtype, std, device)
        for j in range(cfg.num_cls_blocks):
            cab = class_attention_block_init(rng, xp, C, mlp_ratio=cfg.mlp_ratio,
                                             layer_scale_init=cfg.layer_scale_init,
                                             dtype=dtype, device=device, std=std)
            params.update(prefixed(cab, f"cab.{j}"))
    params["norm.gamma"] = xp.ones((C,), dtype=dtype, device=device)
    params["norm.beta"] = xp.zeros((C,), dtype=dtype, device=device)
    params["head.W"] = _normal(rng, xp, (C, cfg.num_classes), dtype, std, device)
    params["head.b"] = xp.zeros((cfg.num_classes,), dtype=dtype, device=device)
    return params



def vision_spec(cfg: VisionConfig) -> dict:
    """{key: (shape, required)} of the parameters (and BatchNorm state) of ``cfg``, as
    :func:`vision_init` makes them (the ToST blocks' linear biases optional)."""
    C, P, H = cfg.width, cfg.patch_size, cfg.mlp_ratio * cfg.width
    if cfg.stem == "conv":
        spec = prefixed(conv_stem_spec(cfg.in_chans, C, P), "stem")
    else:
        spec = {"patch.W": ((P * P * cfg.in_chans, C), True), "patch.b": ((C,), True)}
    if cfg.pos == "fourier":
        spec.update({"pos.W": ((2 * FOURIER_DIM, C), True), "pos.b": ((C,), True)})
    else:
        spec["pos_embed"] = ((1, cfg.num_patches, C), True)
    if cfg.num_registers:
        spec["registers"] = ((1, cfg.num_registers, C), True)
    block = tost_block_spec(C, cfg.num_heads, False, cfg.mixer, H=H)
    for i in range(cfg.depth):
        spec.update(prefixed(block, f"blocks.{i}"))
    if cfg.pool == "cls":
        spec["cls_token"] = ((1, 1, C), True)
        cab = class_attention_block_spec(C, H)
        for j in range(cfg.num_cls_blocks):
            spec.update(prefixed(cab, f"cab.{j}"))
    spec.update({"norm.gamma": ((C,), True), "norm.beta": ((C,), True),
                 "head.W": ((C, cfg.num_classes), True), "head.b": ((cfg.num_classes,), True)})
    return spec


def _check_inputs(images, params, cfg):
    """The door: images (B, S, S, Cin) floating, params those of ``cfg`` in the images' dtype."""
    spec = vision_spec(cfg)
    xp = check_array(images, "images", ndim=4, shape_desc="(B, H, W, Cin)")
    S, Cin = cfg.image_size, cfg.in_chans
    if tuple(images.shape[1:]) != (S, S, Cin):
        raise ValueError(f"images must have shape (B, {S}, {S}, {Cin}) for this config, "
                         f"got {tuple(images.shape)}")
    check_params(params, spec, images.dtype)
    return xp


# --------------------------------------------------------------------------------------------
# whole model
# --------------------------------------------------------------------------------------------
def vision_forward(images, params: dict, cfg: VisionConfig, train: bool = False):
    """images (B, H, W, Cin) channels-last, float -> (logits (B, num_classes), cache).

    ``train``: BatchNorm (conv stem only) normalises with the batch's statistics and
    ``cache["state"]`` holds the updated running statistics (keys as in ``params``); otherwise
    evaluation mode and ``cache["state"]`` is empty. cache["blocks"][i] is the i-th ToST block's
    cache (the TSSA memberships live there; see
    :func:`tostnp.analysis.figures.layer_statistics`), cache["tokens_in"][i] its input
    (B, N + R, C): the N patch tokens, then the R = cfg.num_registers register tokens.
    """
    xp = _check_inputs(images, params, cfg)
    return _forward(images, params, cfg, xp, train)


def _forward(images, params, cfg, xp, train):
    """vision_forward after the input checks (the layers below trust them)."""
    B = images.shape[0]
    state = {}
    if cfg.stem == "conv":
        x, c_patch = _conv_stem_forward(images, sub(params, "stem"), cfg.patch_size,
                                        train=train, gelu=cfg.gelu)        # (B, N, C)
        state = prefixed(c_patch["state"], "stem")
    else:
        x, c_patch = L._patch_embed_forward(images, params["patch.W"], params["patch.b"],
                                            cfg.patch_size)                # (B, N, C)
    c_pos = None
    if cfg.pos == "fourier":
        F = fourier_features(xp, cfg.grid, cfg.grid, x.dtype, backend.device_of(x))  # (N, 64)
        pos, c_pos = L._linear_forward(F, params["pos.W"], params["pos.b"])            # (N, C)
        x = x + pos
    else:
        x = x + params["pos_embed"]
    N = x.shape[1]
    if cfg.num_registers:                                                  # (B, N + R, C)
        R = cfg.num_registers
        x = xp.concat([x, xp.broadcast_to(params["registers"], (B, R, cfg.width))], axis=1)
    c_blocks, tokens_in = [], []
    for i in range(cfg.depth):
        tokens_in.append(x)
        x, c = Bk._tost_block_forward(x, sub(params, f"blocks.{i}"), cfg.num_heads, False,
                                      cfg.ln_eps, cfg.gelu, cfg.mixer)
        c_blocks.append(c)
    x = x[:, :N, :]                                                        # registers dropped
    c_cab = []
    if cfg.pool == "cls":
        C = cfg.width
        cls = xp.broadcast_to(params["cls_token"], (B, 1, C))              # (B, 1, C)
        tok = x
        for j in range(cfg.num_cls_blocks):
            cls, tok, c = _class_attention_block_forward(cls, tok, sub(params, f"cab.{j}"),
                                                         cfg.num_heads, cfg.ln_eps, cfg.cab,
                                                         cfg.gelu)
            c_cab.append(c)
        pooled = cls[:, 0, :]                                              # (B, C)
    else:
        pooled = xp.mean(x, axis=1)                                        # (B, C)
    hn, c_norm = L._layer_norm_forward(pooled, params["norm.gamma"], params["norm.beta"],
                                       cfg.ln_eps)
    logits, c_head = L._linear_forward(hn, params["head.W"], params["head.b"])
    cache = {"patch": c_patch, "pos": c_pos, "blocks": c_blocks, "tokens_in": tokens_in,
             "tokens_out": x, "cab": c_cab, "norm": c_norm, "head": c_head, "B": B, "cfg": cfg,
             "state": state}
    return logits, cache


def vision_backward(dlogits, cache) -> dict:
    """dlogits (B, num_classes) -> grads: a dict with the trainable keys of the parameters
    (every key but the BatchNorm state)."""
    check_array(dlogits, "dlogits", ndim=2, shape_desc="(B, num_classes)")
    want = (cache["B"], cache["cfg"].num_classes)
    if tuple(dlogits.shape) != want or dlogits.dtype != cache["tokens_out"].dtype:
        raise ValueError(f"dlogits must have the logits' shape {want} and dtype "
                         f"{cache['tokens_out'].dtype}, got {dlogits.dtype} {tuple(dlogits.shape)}")
    return _backward(dlogits, cache)


def _backward(dlogits, cache) -> dict:
    xp = backend.namespace(dlogits)
    cfg, B = cache["cfg"], cache["B"]
    grads = {}
    dhn, g = L.linear_backward(dlogits, cache["head"]); grads.update(prefixed(g, "head"))
    dpooled, g = L.layer_norm_backward(dhn, cache["norm"]); grads.update(prefixed(g, "norm"))
    x = cache["tokens_out"]
    if cfg.pool == "cls":
        dcls = xp.reshape(dpooled, (B, 1, cfg.width))
        dx = None                                        # the last block's patch tokens: unused
        for j in reversed(range(cfg.num_cls_blocks)):
            dcls, dx, g = class_attention_block_backward(dcls, dx, cache["cab"][j])
            grads.update(prefixed(g, f"cab.{j}"))
        grads["cls_token"] = xp.sum(dcls, axis=0, keepdims=True)          # (1, 1, C)
    else:
        N = x.shape[1]
        dx = xp.broadcast_to(xp.reshape(dpooled, (B, 1, cfg.width)) / N, x.shape)
    if cfg.num_registers:                       # the registers leave the blocks without a gradient
        dx = xp.concat([dx, xp.zeros((B, cfg.num_registers, cfg.width), dtype=dx.dtype,
                                     device=backend.device_of(dx))], axis=1)
    for i in reversed(range(cfg.depth)):
        dx, g = Bk._tost_block_backward(dx, cache["blocks"][i])
        grads.update(prefixed(g, f"blocks.{i}"))
    if cfg.num_registers:
        N = cfg.num_patches
        grads["registers"] = xp.sum(dx[:, N:, :], axis=0, keepdims=True)  # (1, R, C)
        dx = dx[:, :N, :]
    if cfg.pos == "fourier":
        _, g = L.linear_backward(xp.sum(dx, axis=0), cache["pos"])        # (N, C) -> W, b
        grads.update(prefixed(g, "pos"))
    else:
        grads["pos_embed"] = xp.sum(dx, axis=0, keepdims=True)            # (1, N, C)
    if cfg.stem == "conv":
        _, g = conv_stem_backward(dx, cache["patch"])
        grads.update(prefixed(g, "stem"))
    else:
        _, g = L.patch_embed_backward(dx, cache["patch"])
        grads.update(prefixed(g, "patch"))
    return grads


def vision_loss_and_grads(params: dict, images, labels, cfg: VisionConfig,
                          train: bool = False):
    """Mean softmax cross-entropy and its gradient -> (loss (0-d array), grads, logits).

    ``train=True`` (the training loop): BatchNorm in training mode, and its updated running
    statistics are written into ``params`` (new arrays under the same keys), like a PyTorch
    module's buffers in ``model.train()``. They get no gradient.
    """
    with backend.backward_ahead():     # a training step: the backward follows
        logits, cache = vision_forward(images, params, cfg, train=train)
    loss, c_loss = L.softmax_cross_entropy_forward(logits, labels)
    dlogits, _ = L.softmax_cross_entropy_backward(backend.namespace(logits).ones_like(loss),
                                                  c_loss)
    grads = _backward(dlogits, cache)
    params.update(cache["state"])
    return loss, grads, logits


def vision_predict(params: dict, images, cfg: VisionConfig, batch_size: int = 512):
    """Class predictions (B,) int, computed in chunks of ``batch_size`` images.

    Images holding NaN or Inf are refused (argmax over NaN logits would answer class 0)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    xp = _check_inputs(images, params, cfg)
    if xp.isdtype(images.dtype, "real floating") and not bool(xp.all(xp.isfinite(images))):
        raise ValueError("images holds NaN or Inf; vision_predict needs finite pixel values")
    out = []
    for s in range(0, images.shape[0], batch_size):
        logits, _ = _forward(images[s:s + batch_size], params, cfg, xp, False)
        out.append(xp.argmax(logits, axis=-1))
    return xp.concat(out, axis=0)


def describe(cfg: VisionConfig, params: dict) -> str:
    extra = f", {cfg.num_registers} registers" if cfg.num_registers else ""
    return (f"ToST vision ({cfg.mixer}): {cfg.depth} blocks, width {cfg.width}, "
            f"{cfg.num_heads} heads, {cfg.num_patches} patch tokens{extra}, pool={cfg.pool}: "
            f"{num_params(params):,} parameters")
