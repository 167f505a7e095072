"""Basic layers with hand-derived backward passes.

Contract (shared by every layer in tostnp.nn)::

    out, cache = xxx_forward(x, ...)
    dx, grads  = xxx_backward(dout, cache)

``grads`` is a dict keyed like the parameters (only the keys that were given); backward
returns new arrays and never mutates its inputs. Weights are stored (in, out): y = x @ W + b.
Every function keeps the dtype of its input (float32 in, float32 out) and is written against
the Python Array API standard, so it runs unchanged on NumPy, CuPy and array_api_strict.

Each public ``xxx_forward`` checks its arguments (:mod:`tostnp.backend.validate`: one line
naming the wrong one) and calls its core ``_xxx_forward``, which trusts its caller: the blocks
and models check their inputs once, at their own door, and call the cores.

Shapes: B batch, N (or T) tokens, C width, H hidden width, V vocabulary, P patch size.
"""
from __future__ import annotations

import math

from .. import backend
from ..backend import runtime
from ..backend.validate import check_array, check_positive, check_ids_range
from ..backend.validate import check_param, check_params
from .params import mlp_spec
# the training loss has a file of its own; its names stay here too (L.softmax_cross_entropy_*)
from .loss import softmax_cross_entropy_forward, softmax_cross_entropy_backward

# The one default LayerNorm eps of tostnp.nn (PyTorch's); the model configs set their own
# (VisionConfig.ln_eps = 1e-6 as in XCiT/ToST vision, LMConfig.ln_eps = 1e-5).
LN_EPS = 1e-5

__all__ = [
    "LN_EPS", "rows_matmul", "sum_leading", "linear_forward", "linear_backward",
    "layer_norm_forward", "layer_norm_backward",
    "gelu_forward", "gelu_backward", "gelu_erf_forward", "gelu_erf_backward", "GELUS",
    "mlp_forward", "mlp_backward", "check_gelu",
    "dropout_forward", "dropout_backward",
    "embedding_forward", "embedding_backward",
    "softmax_cross_entropy_forward", "softmax_cross_entropy_backward",
    "patch_embed_forward", "patch_embed_backward",
    "layer_scale_forward", "layer_scale_backward",
]


# ---------------------------------------------------------------------------------------------
# helpers (parameters are checked by tostnp.nn.params.check_param / check_params)
# ---------------------------------------------------------------------------------------------
def sum_leading(xp, a):
    """Sum over every axis but the last: (..., C) -> (C,) (bias and scale gradients)."""
    fast = backend.fused(xp)
    if fast is not None:                         # NumPy: as ones @ a (tostnp.backend.kernels.sum_leading)
        return fast.sum_leading(a)
    return xp.sum(xp.reshape(a, (-1, a.shape[-1])), axis=0)


def rows_matmul(xp, x, W):
    """x @ W as ONE matrix product over all leading axes: x (..., K), W (K, M) -> (..., M).

    The same numbers as ``x @ W`` up to float rounding. NumPy's batched ``matmul`` of a (B, N, K)
    array by a (K, M) matrix calls BLAS once per batch element, on N rows each; the model's
    token counts are small (16 patches, 64 characters), so one (B*N, K) x (K, M) product is the
    faster form (2.5x at the digits model's shapes on OpenBLAS).
    """
    if x.ndim == 2:
        return x @ W
    lead = tuple(x.shape[:-1])
    return xp.reshape(xp.reshape(x, (-1, x.shape[-1])) @ W, lead + (W.shape[-1],))


def _outer_sum(xp, a, b):
    """sum over leading axes of a^T b: a (..., Cin), b (..., Cout) -> (Cin, Cout)."""
    a2 = xp.reshape(a, (-1, a.shape[-1]))                          # (M, Cin)
    b2 = xp.reshape(b, (-1, b.shape[-1]))                          # (M, Cout)
    return xp.matrix_transpose(a2) @ b2                            # (Cin, Cout)


# ---------------------------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------------------------
def linear_forward(x, W, b=None):
    """y = x @ W + b.

    x: (..., Cin); W: (Cin, Cout); b: (Cout,) or None -> y: (..., Cout).
    """
    check_array(x, "x", min_ndim=1, shape_desc="(..., Cin)")
    check_array(W, "W", ndim=2, shape_desc="(Cin, Cout)")
    if W.shape[0] != x.shape[-1]:
        raise ValueError(f"W must have shape (Cin, Cout) with Cin = x.shape[-1] = {x.shape[-1]}, "
                         f"got shape {tuple(W.shape)}")
    check_param(W, "W", tuple(W.shape), x.dtype)
    if b is not None:
        check_param(b, "b", (W.shape[1],), x.dtype)
    return _linear_forward(x, W, b)


def _linear_forward(x, W, b=None):
    xp = backend.namespace(x)
    y = rows_matmul(xp, x, W)                                      # (..., Cout)
    if b is not None:
        backend.add_bias(xp, y, b)                 # y is a fresh array of ours: add in place
    return y, (x, W, b is not None)


def linear_backward(dy, cache):
    """dy: (..., Cout) -> dx (..., Cin), {"W": (Cin, Cout), "b": (Cout,) if b was given}."""
    x, W, has_b = cache
    xp = backend.namespace(dy)
    dx = rows_matmul(xp, dy, xp.matrix_transpose(W))               # (..., Cin)
    grads = {"W": _outer_sum(xp, x, dy)}                           # (Cin, Cout)
    if has_b:
        grads["b"] = sum_leading(xp, dy)                           # (Cout,)
    return dx, grads


# ---------------------------------------------------------------------------------------------
# layer norm (over the last axis)
# ---------------------------------------------------------------------------------------------
def layer_norm_forward(x, gamma, beta, eps=LN_EPS):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta, statistics over the last axis.

    x: (..., C); gamma: (C,); beta: (C,) or None (no shift, as in the published LM's
    ``bias=False``) -> y: (..., C). var is the biased (1/C) variance.
    """
    check_array(x, "x", min_ndim=1, shape_desc="(..., C)")
    C = x.shape[-1]
    check_param(gamma, "gamma", (C,), x.dtype)
    if beta is not None:
        check_param(beta, "beta", (C,), x.dtype)
    eps = check_positive(eps, "eps")
    return _layer_norm_forward(x, gamma, beta, eps)


def _layer_norm_forward(x, gamma, beta, eps):
    """:func:`layer_norm_forward` without the checks. gamma None (beta None too): no scale and
    no shift, y is xhat (a LayerNorm whose affine map is folded into the next product)."""
    xp = backend.namespace(x)
    fast = backend.fused(xp)
    if fast is not None:                         # NumPy: same y, fewer passes (tostnp.backend.kernels)
        y, xhat, rstd = fast.layer_norm_forward(x, gamma, beta, eps)
        return y, (xhat, rstd, gamma, beta is not None, fast)
    mu = xp.mean(x, axis=-1, keepdims=True)                        # (..., 1)
    xc = x - mu                                                    # (..., C)
    var = xp.mean(xc * xc, axis=-1, keepdims=True)                 # (..., 1)
    rstd = 1.0 / xp.sqrt(var + eps)                                # (..., 1)
    xhat = xc * rstd                                               # (..., C)
    if gamma is None:
        return xhat, (xhat, rstd, None, False, None)
    y = xhat * gamma                                               # (..., C)
    if beta is not None:
        y = y + beta
    return y, (xhat, rstd, gamma, beta is not None, None)


def layer_norm_backward(dy, cache):
    """dy: (..., C) -> dx (..., C), {"gamma": (C,), "beta": (C,) if beta was given}.

    With g = dy * gamma: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), means over C.
    """
    xhat, rstd, gamma, has_beta, fast = cache
    if fast is not None:
        dx, dgamma, dbeta = fast.layer_norm_backward(dy, xhat, rstd, gamma, has_beta)
        if gamma is None:
            return dx, {}
        return dx, ({"gamma": dgamma, "beta": dbeta} if has_beta else {"gamma": dgamma})
    xp = backend.namespace(dy)
    g = dy if gamma is None else dy * gamma                        # (..., C)
    dx = g - xp.mean(g, axis=-1, keepdims=True)
    dx = dx - xhat * xp.mean(g * xhat, axis=-1, keepdims=True)
    dx = dx * rstd                                                 # (..., C)
    if gamma is None:
        return dx, {}
    grads = {"gamma": sum_leading(xp, dy * xhat)}
    if has_beta:
        grads["beta"] = sum_leading(xp, dy)
    return dx, grads


# ---------------------------------------------------------------------------------------------
# GELU, tanh form
# ---------------------------------------------------------------------------------------------
_GELU_A = math.sqrt(2.0 / math.pi)
_GELU_B = 0.044715


def gelu_forward(x):
    """y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).  x: (...) -> y: (...).

    Written as y = x s with the gate s = 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (x +
    0.044715 x^3); the cache holds (x, s) on the plain and the fast path alike.
    """
    check_array(x, "x", shape_desc="(...)")
    return _gelu_forward(x)


def _gelu_forward(x):
    xp = backend.namespace(x)
    fast = backend.fused(xp)
    if fast is not None:                         # NumPy: same y, fewer passes (tostnp.backend.kernels)
        y, s = fast.gelu_forward(x)
        return y, (x, s, fast)
    u = _GELU_A * (x + _GELU_B * (x * x * x))                      # (...)
    s = 0.5 * (1.0 + xp.tanh(u))                                   # (...) = sigmoid(2u)
    return x * s, (x, s, None)


def gelu_backward(dy, cache):
    """dy: (...) -> dx (...), {}.

    With s = 0.5 (1 + tanh u): ds/dx = 0.5 (1 - tanh^2 u) u' = 2 s (1 - s) u', so
    dy/dx = s + x ds/dx = s (1 + 2 sqrt(2/pi) x (1 - s) (1 + 3 * 0.044715 x^2)).
    """
    x, s, fast = cache
    if fast is not None:
        return fast.gelu_backward(dy, x, s), {}
    dydx = s * (1.0 + (2.0 * _GELU_A) * x * (1.0 - s) * (1.0 + (3.0 * _GELU_B) * (x * x)))
    return dy * dydx, {}


# ---------------------------------------------------------------------------------------------
# GELU, exact form (erf), as in the published ToST models
# ---------------------------------------------------------------------------------------------
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu_erf_forward(x):
    """y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)).  x: (...) -> y: (...).

    The tanh form above approximates this to within about 5e-4; erf comes from the backend
    (the Array API standard has none).
    """
    check_array(x, "x", shape_desc="(...)")
    return _gelu_erf_forward(x)


def _gelu_erf_forward(x):
    Phi = 0.5 * (1.0 + backend.erf(x * _INV_SQRT2))                # (...) normal CDF
    return x * Phi, (x, Phi)


def gelu_erf_backward(dy, cache):
    """dy: (...) -> dx (...), {}.   dy/dx = Phi(x) + x phi(x), phi the normal density."""
    x, Phi = cache
    xp = backend.namespace(dy)
    phi = _INV_SQRT2PI * xp.exp(-0.5 * (x * x))                    # (...)
    return dy * (Phi + x * phi), {}


# name -> (forward, backward): the GELU a model uses is part of its config
GELUS = {"tanh": (gelu_forward, gelu_backward), "erf": (gelu_erf_forward, gelu_erf_backward)}
_GELU_CORES = {"tanh": (_gelu_forward, gelu_backward), "erf": (_gelu_erf_forward, gelu_erf_backward)}


def check_gelu(gelu: str) -> str:
    if gelu not in GELUS:
        raise ValueError(f"gelu must be one of {sorted(GELUS)}, got {gelu!r}")
    return gelu


# ---------------------------------------------------------------------------------------------
# MLP: Linear -> GELU -> Linear
# ---------------------------------------------------------------------------------------------
def mlp_forward(x, params, gelu: str = "tanh"):
    """y = GELU(x @ W1 + b1) @ W2 + b2.

    x: (..., C); params {"W1": (C, H), "b1": (H,) optional, "W2": (H, C), "b2": (C,) optional};
    gelu: "tanh" (approximation) or "erf" (exact) -> y: (..., C).
    """
    check_gelu(gelu)
    check_array(x, "x", min_ndim=1, shape_desc="(..., C)")
    C = x.shape[-1]
    W1 = params.get("W1") if isinstance(params, dict) else None
    if W1 is not None:
        check_array(W1, "W1", ndim=2, shape_desc=f"({C}, H)")
    Hd = W1.shape[1] if W1 is not None else "H"
    check_params(params, mlp_spec(C, Hd), x.dtype, "mlp")
    return _mlp_forward(x, params, gelu)


def _mlp_forward(x, params, gelu: str = "tanh"):
    fast = backend.fused(backend.namespace(x)) if gelu == "tanh" else None
    if fast is not None:     # NumPy: b1 is added, and its gradient summed, inside the GELU's pieces
        h, c1 = _linear_forward(x, params["W1"])                   # (..., H) without b1
        if runtime.is_backward_ahead():      # a training step: keep the slope D alone
            a, D = fast.gelu_forward_slope(h, params.get("b1"))    # h += b1, the GELU, its slope
            kept = (fast.gelu_slope_backward, (D,))
        else:                                # (the same a, bit for bit, with fewer passes)
            a, s = fast.gelu_forward(h, params.get("b1"))          # h += b1, then the GELU
            kept = (fast.gelu_backward, (h, s))
        c2 = (_gelu_bias_backward, kept + ("b1" in params,))
    else:
        gelu_fwd, gelu_bwd = _GELU_CORES[gelu]
        h, c1 = _linear_forward(x, params["W1"], params.get("b1"))    # (..., H)
        a, c2 = gelu_fwd(h)                                            # (..., H)
        c2 = (gelu_bwd, c2)
    y, c3 = _linear_forward(a, params["W2"], params.get("b2"))    # (..., C)
    return y, (c1, c2, c3)


def _gelu_bias_backward(da, cache):
    """The fast path's GELU backward in the MLP: (dh, {"b": the gradient of b1} or {}). The
    cache names its kernel and arrays: kernels.gelu_slope_backward with the slope D (a training
    step, :func:`tostnp.backend.backward_ahead`), or kernels.gelu_backward with the GELU's
    input and gate (a forward outside it)."""
    bwd, arrays, has_b = cache
    if not has_b:
        return bwd(da, *arrays), {}
    dh, db = bwd(da, *arrays, bias_grad=True)
    return dh, {"b": db}


def mlp_backward(dy, cache):
    """dy: (..., C) -> dx (..., C), {"W1", "b1", "W2", "b2"} (only the keys given)."""
    c1, c2, c3 = cache
    da, g3 = linear_backward(dy, c3)                               # (..., H)
    gelu_bwd, c2 = c2
    dh, g2 = gelu_bwd(da, c2)                                      # (..., H); {"b": b1's} or {}
    dx, g1 = linear_backward(dh, c1)                               # (..., C)
    g1.update(g2)
    grads = {k + "1": v for k, v in g1.items()}
    grads.update({k + "2": v for k, v in g3.items()})
    return dx, grads


# ---------------------------------------------------------------------------------------------
# dropout (inverted)
# ---------------------------------------------------------------------------------------------
def dropout_forward(x, p, rng, train=True):
    """Inverted dropout: y = x * mask / (1 - p), mask ~ Bernoulli(1 - p), drawn by ``rng``.

    x: (...) -> y: (...). Identity (y is x itself, no copy) when ``train`` is False or p == 0;
    ``rng`` (a tostnp.backend.RNG) is only used, and only required, when dropping.
    """
    xp = check_array(x, "x", shape_desc="(...)")
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise TypeError(f"p must be a number in [0, 1), got {type(p).__name__}") from None
    if not 0.0 <= p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p!r}")
    if not train or p == 0.0:
        return x, (None,)
    if not isinstance(rng, backend.RNG):
        raise TypeError(f"rng must be a tostnp.backend.RNG when train=True and p > 0, "
                        f"got {type(rng).__name__}")
    mask = rng.bernoulli(xp, x.shape, 1.0 - p, dtype=x.dtype, device=backend.device_of(x))
    mask = mask * (1.0 / (1.0 - p))                                # (...) values 0 or 1/(1-p)
    return x * mask, (mask,)


def dropout_backward(dy, cache):
    """dy: (...) -> dx (...), {}. Uses the forward's mask (a copy of dy at identity)."""
    (mask,) = cache
    if mask is None:
        xp = backend.namespace(dy)
        return xp.asarray(dy, copy=True), {}
    return dy * mask, {}


# ---------------------------------------------------------------------------------------------
# embedding
# ---------------------------------------------------------------------------------------------
def embedding_forward(ids, W):
    """out[b, t] = W[ids[b, t]].

    ids: (B, T) integer array (any number of axes works) with values in [0, V); W: (V, C)
    -> out: (B, T, C).
    """
    xp = check_array(ids, "ids", shape_desc="(B, T)", floating=False)
    if not xp.isdtype(ids.dtype, "integral"):
        raise TypeError(f"ids must be an integer array of shape (B, T), got dtype {ids.dtype}")
    check_array(W, "W", ndim=2, shape_desc="(V, C)")
    check_ids_range(ids, W.shape[0], f"for W of shape (V, C) = {tuple(W.shape)}")
    return _embedding_forward(ids, W)


def _embedding_forward(ids, W):
    xp = backend.namespace(ids)
    V, C = W.shape
    flat = xp.reshape(ids, (-1,))                                  # (B*T,)
    out = xp.take(W, backend.indices(flat), axis=0)               # (B*T, C)
    return xp.reshape(out, tuple(ids.shape) + (C,)), (flat, V)


def embedding_backward(dout, cache):
    """dout: (B, T, C) -> None, {"W": (V, C)}; repeated ids sum their gradients (scatter-add)."""
    flat, V = cache
    xp = backend.namespace(dout)
    d2 = xp.reshape(dout, (-1, dout.shape[-1]))                    # (B*T, C)
    return None, {"W": backend.scatter_add(flat, d2, V)}


# ---------------------------------------------------------------------------------------------
# patch embedding (ViT stem)
# ---------------------------------------------------------------------------------------------
def _patchify(xp, images, P):
    """(B, H, W, Cin) -> (B, N, P*P*Cin), patches row-major on the grid, (row, col, channel) inside."""
    B, H, Wd, Cin = images.shape
    Hp, Wp = H // P, Wd // P
    a = xp.reshape(images, (B, Hp, P, Wp, P, Cin))
    a = xp.permute_dims(a, (0, 1, 3, 2, 4, 5))                     # (B, Hp, Wp, P, P, Cin)
    return xp.reshape(a, (B, Hp * Wp, P * P * Cin))                # (B, N, P*P*Cin)


def patch_embed_forward(images, W, b, patch_size):
    """Split images into non-overlapping P x P patches and project each: tokens = patches @ W + b.

    images: (B, H, W, Cin) channels-last; W: (P*P*Cin, C); b: (C,) or None; patch_size: P
    -> tokens: (B, N, C), N = (H/P)(W/P), grid row-major; each patch flattened in
    (row, col, channel) order. H and W must be divisible by P.
    """
    check_array(images, "images", ndim=4, shape_desc="(B, H, W, Cin)")
    if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size < 1:
        raise ValueError(f"patch_size must be a positive int, got {patch_size!r}")
    P = patch_size
    B, H, Wd, Cin = images.shape
    if H % P or Wd % P:
        raise ValueError(f"images of shape (B, H, W, Cin) = {tuple(images.shape)}: H and W must "
                         f"be divisible by patch_size = {P}")
    check_array(W, "W", ndim=2, shape_desc=f"({P * P * Cin}, C)")
    check_param(W, "W", (P * P * Cin, W.shape[1]), images.dtype)
    if b is not None:
        check_param(b, "b", (W.shape[1],), images.dtype)
    return _patch_embed_forward(images, W, b, P)


def _patch_embed_forward(images, W, b, P):
    patches = _patchify(backend.namespace(images), images, P)      # (B, N, P*P*Cin)
    tokens, lin = _linear_forward(patches, W, b)                   # (B, N, C)
    return tokens, lin


def patch_embed_backward(dout, cache):
    """dout: (B, N, C) -> None, {"W": (P*P*Cin, C), "b": (C,) if b was given}."""
    _, grads = linear_backward(dout, cache)
    return None, grads


# ---------------------------------------------------------------------------------------------
# LayerScale
# ---------------------------------------------------------------------------------------------
def layer_scale_forward(x, gamma):
    """y = x * gamma.  x: (..., C); gamma: (C,) -> y: (..., C)."""
    check_array(x, "x", min_ndim=1, shape_desc="(..., C)")
    check_param(gamma, "gamma", (x.shape[-1],), x.dtype)
    return _layer_scale_forward(x, gamma)


def _layer_scale_forward(x, gamma):
    return x * gamma, (x, gamma)


def layer_scale_backward(dy, cache):
    """dy: (..., C) -> dx (..., C), {"gamma": (C,)}."""
    x, gamma = cache
    xp = backend.namespace(dy)
    return dy * gamma, {"gamma": sum_leading(xp, dy * x)}
