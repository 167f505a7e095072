r"""TSSA written as the book's equations read: the reference for the fast code.

One function for the forward and one for the backward, non-causal and causal alike; every
intermediate has a name and, in the backward, its adjoint ``g_<name>`` on its own line, in the
reverse order of the forward (the staged style of CS231n's ``batchnorm_backward``). Nothing is
fused, aliased or regrouped. :mod:`tostnp.nn.tssa` and :mod:`tostnp.nn.tssa_causal` compute the
same numbers faster; tests/test_tssa_reference.py checks them against this module in float64,
and checks this module against autograd.

Shapes: x (B, N, C), h heads, p = C / h; heads are the last axis split as (h, p), so
``wh[b, j, k, i]`` is coordinate i of head k of token j (the book's w_{jki}). Token statistics
keep a token axis of length 1 (non-causal: one sum over all tokens, broadcast back) or N
(causal: one prefix sum per position). Book symbols (book/06_tssa_layer.md; the backward: book/07_backprop_tssa.md):

    w   = x W_u + b_u                                   eq-layer-w
    Pi  = softmax_k(temp_k sum_i w^2 / S1)              eq-layer-pi   (causal: eq-causal-pi)
    m   = S2 / (S3 + 1e-8),  out = -Pi w / (1 + m)      eq-layer-out  (causal: eq-causal-out)
    y   = out W_o + b_o

with S1 = sum_j w_j^2 (clamped), S2 = sum_j Pi_j w_j^2, S3 = sum_j Pi_j; causal: sums over j <= t
and a learned offset beta = denom_bias inside the logits.
"""
from __future__ import annotations

from ..backend import namespace

__all__ = ["tssa_forward_reference", "tssa_backward_reference"]

NORM_EPS2 = 1e-24   # non-causal: max(||w_.ki||, 1e-12)^2
S1_EPS = 1e-12      # causal: clamp of the prefix sum of squares
PI_EPS = 1e-8       # in m = S2 / (S3 + 1e-8)


def _token_sum(a, causal, xp):
    """sum_j a_j over the token axis 1: all tokens (length-1 axis kept) or j <= t (prefix)."""
    if causal:
        return xp.cumulative_sum(a, axis=1)
    return xp.sum(a, axis=1, keepdims=True)


def _token_sum_backward(g, N, causal, xp):
    """Adjoint of :func:`_token_sum`: a broadcast back to N tokens, or a suffix sum over t >= j."""
    if causal:
        return xp.flip(xp.cumulative_sum(xp.flip(g, axis=1), axis=1), axis=1)
    return xp.broadcast_to(g, (g.shape[0], N) + tuple(g.shape[2:]))


def _sum_to(g, like, xp):
    """Adjoint of broadcasting ``like`` (token axis of length 1) up to g's shape."""
    if like.shape[1] == 1 and g.shape[1] != 1:
        return xp.sum(g, axis=1, keepdims=True)
    return g


def tssa_forward_reference(x, params, num_heads: int, causal: bool = False):
    """TSSA layer, plainly. x: (B, N, C) -> (y (B, N, C), cache with every intermediate).

    params as for :func:`tostnp.nn.tssa_forward`: "W_u", "b_u" (opt), "temp" (h, 1), "W_o",
    "b_o" (opt), "denom_bias" (h, max_len, 1) for ``causal``. cache["Pi"] is (B, h, N), as
    for the fast layer (one row of memberships per head: what the figures draw).
    """
    xp = namespace(x)
    B, N, C = x.shape
    h = num_heads
    p = C // h
    w = x @ params["W_u"]                                         # (B, N, C)        eq-layer-w
    if "b_u" in params:
        w = w + params["b_u"]
    wh = xp.reshape(w, (B, N, h, p))                              # (B, N, h, p)
    sq = wh * wh                                                  # (B, N, h, p)  w^2
    S1 = _token_sum(sq, causal, xp)                               # (B, 1|N, h, p)
    S1c = xp.clip(S1, min=S1_EPS if causal else NORM_EPS2)        # clamped
    ratio = sq / S1c                                              # (B, N, h, p)
    q = xp.sum(ratio, axis=-1)                                    # (B, N, h)
    if causal:                                                    # + sum_i beta[k, t]
        beta = xp.permute_dims(params["denom_bias"][:, :N, 0], (1, 0))   # (N, h)
        q = q + float(p) * beta
    temp = xp.reshape(params["temp"], (1, 1, h))                  # (1, 1, h)
    l = temp * q                                                  # (B, N, h)  logits
    e = xp.exp(l - xp.max(l, axis=-1, keepdims=True))
    Pi = e / xp.sum(e, axis=-1, keepdims=True)                    # (B, N, h)        eq-layer-pi
    Pi_h = xp.reshape(Pi, (B, N, h, 1))                            # per coordinate
    S2 = _token_sum(Pi_h * sq, causal, xp)                         # (B, 1|N, h, p)
    S3 = _token_sum(Pi, causal, xp)                               # (B, 1|N, h)
    n = xp.reshape(S3 + PI_EPS, S3.shape + (1,))                  # (B, 1|N, h, 1)
    m = S2 / n                                                    # (B, 1|N, h, p)
    r = 1.0 / (1.0 + m)                                           # grad f(m), f = log(1 + .)
    out = -Pi_h * wh * r                                           # (B, N, h, p)     eq-layer-out
    out2 = xp.reshape(out, (B, N, C))                             # (B, N, C)
    y = out2 @ params["W_o"]                                      # (B, N, C)
    if "b_o" in params:
        y = y + params["b_o"]
    cache = {"x": x, "params": params, "h": h, "p": p, "causal": causal, "w": w, "wh": wh,
             "sq": sq, "S1": S1, "S1c": S1c, "ratio": ratio, "q": q,
             "Pi": xp.permute_dims(Pi, (0, 2, 1)), "S2": S2,
             "S3": S3, "n": n, "m": m, "r": r, "out": out2}
    return y, cache


def tssa_backward_reference(dy, cache):
    """Backward of :func:`tssa_forward_reference`: one adjoint per intermediate, in reverse.

    dy: (B, N, C) -> (dx (B, N, C), grads with the keys of params).
    """
    xp = namespace(dy)
    params, h, p, causal = cache["params"], cache["h"], cache["p"], cache["causal"]
    x, wh, sq, r, n, m = (cache[k] for k in ("x", "wh", "sq", "r", "n", "m"))
    Pi = xp.permute_dims(cache["Pi"], (0, 2, 1))                              # (B, N, h)
    S1, S1c, q = cache["S1"], cache["S1c"], cache["q"]
    B, N, C = x.shape
    Pi_h = xp.reshape(Pi, (B, N, h, 1))
    grads = {}
    # y = out @ W_o + b_o
    if "b_o" in params:
        grads["b_o"] = xp.sum(dy, axis=(0, 1))                                  # (C,)
    grads["W_o"] = xp.sum(xp.matrix_transpose(cache["out"]) @ dy, axis=0)     # (C, C)
    g_out = xp.reshape(dy @ xp.matrix_transpose(params["W_o"]), (B, N, h, p))
    # out = -Pi w r
    g_Pi = xp.sum(g_out * (-wh * r), axis=-1)                                 # (B, N, h)
    g_wh = g_out * (-Pi_h * r)                                                 # (B, N, h, p)
    g_r = _sum_to(g_out * (-Pi_h * wh), r, xp)                                 # like r
    # r = 1 / (1 + m)
    g_m = -g_r * r * r
    # m = S2 / n
    g_S2 = g_m / n
    g_n = -xp.sum(g_m * m / n, axis=-1)                                       # like S3
    # n = S3 + 1e-8
    g_S3 = g_n
    # S3 = sum_j Pi_j,  S2 = sum_j Pi_j w_j^2
    g_Pi = g_Pi + _token_sum_backward(g_S3, N, causal, xp)
    g_Pisq = _token_sum_backward(g_S2, N, causal, xp)                         # (B, N, h, p)
    g_Pi = g_Pi + xp.sum(g_Pisq * sq, axis=-1)
    g_sq = g_Pisq * Pi_h
    # Pi = softmax_k(l)
    g_l = Pi * (g_Pi - xp.sum(Pi * g_Pi, axis=-1, keepdims=True))             # (B, N, h)
    # l = temp q
    grads["temp"] = xp.reshape(xp.sum(g_l * q, axis=(0, 1)), (h, 1))
    g_q = g_l * xp.reshape(params["temp"], (1, 1, h))                         # (B, N, h)
    # causal: q += p beta[k, t]
    if causal:
        g_beta = float(p) * xp.permute_dims(xp.sum(g_q, axis=0), (1, 0))       # (h, N)
        db = xp.zeros_like(params["denom_bias"])
        db[:, :N, 0] = g_beta
        grads["denom_bias"] = db
    elif "denom_bias" in params:
        grads["denom_bias"] = xp.zeros_like(params["denom_bias"])
    # q = sum_i ratio
    g_ratio = xp.reshape(g_q, (B, N, h, 1))
    # ratio = sq / S1c
    g_sq = g_sq + g_ratio / S1c
    g_S1c = _sum_to(-g_ratio * sq / (S1c * S1c), S1c, xp)
    # S1c = max(S1, eps): the gradient passes where the clamp is inactive
    g_S1 = g_S1c * xp.astype(S1 > (S1_EPS if causal else NORM_EPS2), S1.dtype)
    # S1 = sum_j w_j^2
    g_sq = g_sq + _token_sum_backward(g_S1, N, causal, xp)
    # sq = w^2
    g_wh = g_wh + 2.0 * wh * g_sq
    g_w = xp.reshape(g_wh, (B, N, C))
    # w = x @ W_u + b_u
    if "b_u" in params:
        grads["b_u"] = xp.sum(g_w, axis=(0, 1))
    grads["W_u"] = xp.sum(xp.matrix_transpose(x) @ g_w, axis=0)
    dx = g_w @ xp.matrix_transpose(params["W_u"])
    return dx, grads
