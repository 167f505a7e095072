"""The convolutional patch stem of the published ToST vision models (XCiT's ``ConvPatchEmbed``).

For a patch size P = 2^k it is k stages of [3x3 conv, stride 2, padding 1, no bias ->
BatchNorm2d], with a GELU between stages (not after the last); each stage halves the image and
the channels double up to the width C:

    P = 16:  Cin -> C/8 -> C/4 -> C/2 -> C          P = 8:  Cin -> C/4 -> C/2 -> C
    P = 2^k: stage s (0..k-1) has C / 2^(k-1-s) output channels.

images (B, H, W, Cin) -> tokens (B, N, C), N = Hp Wp with Hp = H/P, Wp = W/P, row-major on the
grid (token n = r Wp + c), the order of :func:`tostnp.nn.layers.patch_embed_forward`.

Keys, relative to the stem: "{s}.conv.W" (3, 3, Cin_s, Cout_s), "{s}.bn.gamma", "{s}.bn.beta"
(Cout_s,), and the BatchNorm state "{s}.bn.running_mean", "{s}.bn.running_var" (Cout_s,),
"{s}.bn.num_batches_tracked" () (see :mod:`tostnp.nn.batchnorm`: never trained).
"""
from __future__ import annotations

import math

from .. import backend
from .batchnorm import batch_norm2d_forward, batch_norm2d_backward, STATE_LEAVES
from .conv import conv3x3s2_forward, conv3x3s2_backward
from .layers import GELUS

__all__ = ["stem_channels", "conv_stem_init", "conv_stem_forward", "conv_stem_backward"]


def stem_channels(in_chans: int, width: int, patch_size: int) -> list:
    """[Cin, C/2^(k-1), ..., C/2, C] for patch_size = 2^k (k >= 1); ValueError otherwise."""
    P = patch_size
    if isinstance(P, bool) or not isinstance(P, int) or P < 2 or P & (P - 1):
        raise ValueError(f"the convolutional stem needs a patch size that is a power of two "
                         f">= 2 (8 and 16 as published), got {P!r}")
    k = int(round(math.log2(P)))
    if width % 2 ** (k - 1):
        raise ValueError(f"the convolutional stem with patch size {P} needs a width divisible "
                         f"by {2 ** (k - 1)}, got {width}")
    return [in_chans] + [width // 2 ** (k - 1 - s) for s in range(k)]


def conv_stem_init(rng, xp, in_chans: int, width: int, patch_size: int, dtype, device=None):
    """Fresh stem: He-normal conv kernels, BatchNorm gamma 1, beta 0, running mean 0, var 1."""
    ch = stem_channels(in_chans, width, patch_size)
    p = {}
    for s, (ci, co) in enumerate(zip(ch[:-1], ch[1:])):
        p[f"{s}.conv.W"] = rng.normal(xp, (3, 3, ci, co), dtype, std=math.sqrt(2.0 / (9 * ci)),
                                      device=device)
        p[f"{s}.bn.gamma"] = xp.ones((co,), dtype=dtype, device=device)
        p[f"{s}.bn.beta"] = xp.zeros((co,), dtype=dtype, device=device)
        p[f"{s}.bn.running_mean"] = xp.zeros((co,), dtype=dtype, device=device)
        p[f"{s}.bn.running_var"] = xp.ones((co,), dtype=dtype, device=device)
        p[f"{s}.bn.num_batches_tracked"] = xp.zeros((), dtype=dtype, device=device)
    return p


def conv_stem_forward(images, params: dict, patch_size: int, *, train: bool,
                      gelu: str = "erf"):
    """images (B, H, W, Cin) -> (tokens (B, N, C), cache).

    ``cache["state"]``: in training mode the updated BatchNorm state, keyed like ``params``
    ("0.bn.running_mean", ...); an empty dict in evaluation mode. ``cache["grid"]`` = (Hp, Wp).
    """
    xp = backend.namespace(images)
    stem_channels(images.shape[-1], patch_size, patch_size)      # checks the patch size
    k = int(round(math.log2(patch_size)))                         # number of stages
    gelu_fwd, gelu_bwd = GELUS[gelu]
    x, caches, new_state = images, [], {}
    for s in range(k):
        x, c_conv = conv3x3s2_forward(x, params[f"{s}.conv.W"])   # (B, H/2^(s+1), ., C_s)
        st = {leaf: params.get(f"{s}.bn.{leaf}") for leaf in STATE_LEAVES}
        x, c_bn = batch_norm2d_forward(x, params[f"{s}.bn.gamma"], params[f"{s}.bn.beta"], st,
                                       train=train)
        if train:
            new_state.update({f"{s}.bn.{leaf}": v for leaf, v in c_bn["state"].items()})
        c_act = None
        if s < k - 1:
            x, c_act = gelu_fwd(x)
        caches.append((c_conv, c_bn, c_act))
    B, Hp, Wp, C = x.shape
    tokens = xp.reshape(x, (B, Hp * Wp, C))                          # row-major grid
    return tokens, {"stages": caches, "gelu_bwd": gelu_bwd, "grid": (Hp, Wp),
                    "state": new_state, "shape": (B, Hp, Wp, C)}


def conv_stem_backward(dtokens, cache):
    """dtokens (B, N, C) -> (None, grads) with the trainable keys ("{s}.conv.W", "{s}.bn.gamma",
    "{s}.bn.beta"); the images get no gradient."""
    xp = backend.namespace(dtokens)
    dx = xp.reshape(dtokens, cache["shape"])                        # (B, Hp, Wp, C)
    grads = {}
    for s in reversed(range(len(cache["stages"]))):
        c_conv, c_bn, c_act = cache["stages"][s]
        if c_act is not None:
            dx, _ = cache["gelu_bwd"](dx, c_act)
        dx, g = batch_norm2d_backward(dx, c_bn)
        grads[f"{s}.bn.gamma"], grads[f"{s}.bn.beta"] = g["gamma"], g["beta"]
        dx, g = conv3x3s2_backward(dx, c_conv, need_dx=s > 0)
        grads[f"{s}.conv.W"] = g["W"]
    return None, grads
