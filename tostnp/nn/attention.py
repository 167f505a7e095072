"""Attention baselines with hand-derived backward passes, so ToST can be compared in one package.

* softmax attention (multi-head, non-causal or causal): O(N^2) time and memory;
* linear attention (Katharopoulos et al. 2020), phi(x) = elu(x) + 1: O(N) in the tokens;
* class attention (CaiT / XCiT): the CLS token is the only query, O(N).

Shapes: x (B, N, C); h = num_heads; p = C / h; heads are contiguous slices of width p.
The fused projection W_qkv (C, 3C) produces [q | k | v] along its output axis, each of
width C and split into heads as (h, p). Weights are stored (in, out): y = x @ W + b.
"""
from __future__ import annotations

import math

from .. import backend
from .._validate import check_array
from .layers import _check_params, linear_forward, linear_backward

__all__ = [
    "softmax_attention_forward", "softmax_attention_backward",
    "linear_attention_forward", "linear_attention_backward",
    "class_attention_forward", "class_attention_backward",
]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def _check_x_heads(x, num_heads, where):
    """x must be (B, N, C) floating and num_heads a positive int dividing C. Returns xp."""
    xp = check_array(x, "x", ndim=3, shape_desc="(B, N, C)")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"{where}: num_heads must be a positive int, got {num_heads!r}")
    if x.shape[2] % num_heads:
        raise ValueError(f"{where}: num_heads = {num_heads} must divide the width C = {x.shape[2]} "
                         f"of x (B, N, C)")
    return xp


def _qkv_spec(C):
    return {"W_qkv": ((C, 3 * C), True), "b_qkv": ((3 * C,), False),
            "W_o": ((C, C), True), "b_o": ((C,), False)}


def _split(xp, a, m, h):
    """(B, N, m*C) -> (m, B, h, N, p): m stacked projections (e.g. q, k, v), each split into heads."""
    B, N, mC = a.shape
    p = mC // (m * h)
    a = xp.reshape(a, (B, N, m, h, p))
    return xp.permute_dims(a, (2, 0, 3, 1, 4))                     # (m, B, h, N, p)


def _merge(xp, parts):
    """Inverse of _split: list of m arrays (B, h, N, p) -> (B, N, m*h*p)."""
    a = xp.stack(parts, axis=0)                                    # (m, B, h, N, p)
    m, B, h, N, p = a.shape
    a = xp.permute_dims(a, (1, 3, 0, 2, 4))                        # (B, N, m, h, p)
    return xp.reshape(a, (B, N, m * h * p))


def _rename(grads, suffix):
    """{"W": .., "b": ..} from linear_backward -> {"W_<suffix>": .., "b_<suffix>": ..}."""
    return {f"{k}_{suffix}": v for k, v in grads.items()}


def _softmax_core_forward(xp, qs, k, v, causal):
    """o = softmax(qs k^T [+ causal mask]) v, rows over keys.

    qs: (B, h, Nq, p) queries already scaled by 1/sqrt(p); k, v: (B, h, Nk, p)
    -> o (B, h, Nq, p), A (B, h, Nq, Nk).
    """
    s = qs @ xp.matrix_transpose(k)                                # (B, h, Nq, Nk)
    if causal:
        Nq, Nk = s.shape[-2], s.shape[-1]
        dev = backend.device_of(s)
        keep = (xp.reshape(xp.arange(Nq, device=dev), (Nq, 1))
                >= xp.reshape(xp.arange(Nk, device=dev), (1, Nk)))  # (Nq, Nk) key j <= query i
        # mask before the max-subtraction: a future score must not set the row's shift
        s = xp.where(keep, s, xp.asarray(-math.inf, dtype=s.dtype, device=dev))
    s -= xp.max(s, axis=-1, keepdims=True)
    A = xp.exp(s)                                                  # (B, h, Nq, Nk)
    del s
    A /= xp.sum(A, axis=-1, keepdims=True)
    return A @ v, A                                                # (B, h, Nq, p)


def _softmax_core_backward(xp, dO, qs, k, v, A, o):
    """Gradients of o = A v, A = softmax(qs k^T): returns d(qs), dk, dv, each like its input.

    dS = A * (dA - rowsum(dA * A)), and rowsum(dA * A)_i = dO_i . o_i (no N x N temporary).
    """
    dv = xp.matrix_transpose(A) @ dO                               # (B, h, Nk, p)
    dS = dO @ xp.matrix_transpose(v)                               # (B, h, Nq, Nk)  dA
    dS -= xp.sum(dO * o, axis=-1, keepdims=True)
    dS *= A                                                        # masked entries: A = 0
    dqs = dS @ k                                                   # (B, h, Nq, p)
    dk = xp.matrix_transpose(dS) @ qs                              # (B, h, Nk, p)
    return dqs, dk, dv


# ---------------------------------------------------------------------------------------------
# multi-head softmax attention
# ---------------------------------------------------------------------------------------------
def softmax_attention_forward(x, params, num_heads, causal=False):
    """Multi-head softmax attention: y = concat_h(softmax(q k^T / sqrt(p) [mask]) v) @ W_o + b_o.

    x: (B, N, C); params {"W_qkv": (C, 3C), "b_qkv": (3C,) opt, "W_o": (C, C), "b_o": (C,) opt};
    num_heads: h dividing C; causal: query i sees keys j <= i -> y: (B, N, C).
    Memory O(B h N^2): the attention matrix A (B, h, N, N) is kept for the backward pass.
    """
    xp = _check_x_heads(x, num_heads, "softmax_attention")
    C = x.shape[2]
    _check_params(params, _qkv_spec(C), x, "softmax_attention")
    scale = 1.0 / math.sqrt(C // num_heads)
    qkv, c_qkv = linear_forward(x, params["W_qkv"], params.get("b_qkv"))   # (B, N, 3C)
    a = _split(xp, qkv, 3, num_heads)                              # (3, B, h, N, p)
    qs, k, v = a[0, ...] * scale, a[1, ...], a[2, ...]                            # (B, h, N, p) each
    o, A = _softmax_core_forward(xp, qs, k, v, causal)             # (B, h, N, p)
    om = _merge(xp, [o])                                           # (B, N, C)
    y, c_o = linear_forward(om, params["W_o"], params.get("b_o"))  # (B, N, C)
    return y, (c_qkv, c_o, qs, k, v, A, o, scale)


def softmax_attention_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the keys of params."""
    c_qkv, c_o, qs, k, v, A, o, scale = cache
    xp = backend.namespace(dy)
    h = qs.shape[1]
    dom, g_o = linear_backward(dy, c_o)                            # (B, N, C)
    dO = _split(xp, dom, 1, h)[0, ...]                                  # (B, h, N, p)
    dqs, dk, dv = _softmax_core_backward(xp, dO, qs, k, v, A, o)
    dqkv = _merge(xp, [dqs * scale, dk, dv])                       # (B, N, 3C)
    dx, g_qkv = linear_backward(dqkv, c_qkv)                       # (B, N, C)
    grads = _rename(g_qkv, "qkv")
    grads.update(_rename(g_o, "o"))
    return dx, grads


# ---------------------------------------------------------------------------------------------
# linear attention, phi(x) = elu(x) + 1
# ---------------------------------------------------------------------------------------------
def _phi(xp, a):
    """phi(a) = elu(a) + 1 and its derivative: a + 1 for a > 0, exp(a) otherwise (both > 0)."""
    pos = a > 0
    e = xp.exp(-xp.abs(a))                                         # = exp(a) where a <= 0; no overflow
    phi = xp.where(pos, a + 1.0, e)
    dphi = e + xp.astype(pos, a.dtype) * (1.0 - e)                 # 1 where a > 0, else exp(a)
    return phi, dphi


def _revcumsum(xp, a, axis):
    """Suffix sums along ``axis``: out_s = sum_{t >= s} a_t."""
    return xp.flip(xp.cumulative_sum(xp.flip(a, axis=axis), axis=axis), axis=axis)


def linear_attention_forward(x, params, num_heads, causal=False):
    """Multi-head linear attention: out_i = phi(q_i)^T S / (phi(q_i)^T z), phi = elu + 1.

    Non-causal: S = sum_j phi(k_j) v_j^T (p, p), z = sum_j phi(k_j) (p,), per batch and head.
    Causal: S_i, z_i are prefix sums over j <= i (cumulative_sum; memory O(B h N p^2)).
    x: (B, N, C); params as softmax_attention_forward; num_heads: h -> y: (B, N, C).
    """
    xp = _check_x_heads(x, num_heads, "linear_attention")
    C = x.shape[2]
    _check_params(params, _qkv_spec(C), x, "linear_attention")
    qkv, c_qkv = linear_forward(x, params["W_qkv"], params.get("b_qkv"))   # (B, N, 3C)
    a = _split(xp, qkv, 3, num_heads)                              # (3, B, h, N, p)
    Q, dQphi = _phi(xp, a[0, ...])                                      # (B, h, N, p)
    K, dKphi = _phi(xp, a[1, ...])                                      # (B, h, N, p)
    v = a[2, ...]                                                     # (B, h, N, p)
    B, h, N, p = Q.shape
    if causal:
        S = xp.cumulative_sum(xp.reshape(K, (B, h, N, p, 1)) * xp.reshape(v, (B, h, N, 1, p)),
                              axis=2)                              # (B, h, N, p, p)
        z = xp.cumulative_sum(K, axis=2)                           # (B, h, N, p)
        num = xp.reshape(xp.reshape(Q, (B, h, N, 1, p)) @ S, (B, h, N, p))
        den = xp.sum(Q * z, axis=-1, keepdims=True)                # (B, h, N, 1)
    else:
        S = xp.matrix_transpose(K) @ v                             # (B, h, p, p)
        z = xp.sum(K, axis=2, keepdims=True)                       # (B, h, 1, p)
        num = Q @ S                                                # (B, h, N, p)
        den = Q @ xp.matrix_transpose(z)                           # (B, h, N, 1)
    o = num / den                                                  # (B, h, N, p)
    y, c_o = linear_forward(_merge(xp, [o]), params["W_o"], params.get("b_o"))
    return y, (c_qkv, c_o, Q, dQphi, K, dKphi, v, S, z, den, o, causal)


def linear_attention_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the keys of params.

    With num = Q S, den = Q . z, o = num / den:
    dnum = dO / den, dden = -(dO . o) / den, dQ = dnum S^T + dden z,
    dS = sum_i Q_i dnum_i^T (suffix sums when causal), dz = sum_i dden_i Q_i,
    dK_j = dS v_j + dz, dv_j = dS^T K_j, then through phi.
    """
    c_qkv, c_o, Q, dQphi, K, dKphi, v, S, z, den, o, causal = cache
    xp = backend.namespace(dy)
    B, h, N, p = Q.shape
    dom, g_o = linear_backward(dy, c_o)                            # (B, N, C)
    dO = _split(xp, dom, 1, h)[0, ...]                                  # (B, h, N, p)
    dnum = dO / den                                                # (B, h, N, p)
    dden = -xp.sum(dO * o, axis=-1, keepdims=True) / den          # (B, h, N, 1)
    if causal:
        dQ = xp.reshape(S @ xp.reshape(dnum, (B, h, N, p, 1)), (B, h, N, p)) + dden * z
        G = _revcumsum(xp, xp.reshape(Q, (B, h, N, p, 1)) * xp.reshape(dnum, (B, h, N, 1, p)),
                       axis=2)                                     # (B, h, N, p, p) dS_j
        dz = _revcumsum(xp, dden * Q, axis=2)                      # (B, h, N, p)
        dK = xp.reshape(G @ xp.reshape(v, (B, h, N, p, 1)), (B, h, N, p)) + dz
        dv = xp.reshape(xp.reshape(K, (B, h, N, 1, p)) @ G, (B, h, N, p))
    else:
        dQ = dnum @ xp.matrix_transpose(S) + dden * z              # (B, h, N, p)
        dS = xp.matrix_transpose(Q) @ dnum                         # (B, h, p, p)
        dz = xp.matrix_transpose(dden) @ Q                         # (B, h, 1, p)
        dK = v @ xp.matrix_transpose(dS) + dz                      # (B, h, N, p)
        dv = K @ dS                                                # (B, h, N, p)
    dqkv = _merge(xp, [dQ * dQphi, dK * dKphi, dv])                # (B, N, 3C)
    dx, g_qkv = linear_backward(dqkv, c_qkv)
    grads = _rename(g_qkv, "qkv")
    grads.update(_rename(g_o, "o"))
    return dx, grads


# ---------------------------------------------------------------------------------------------
# class attention (CLS token is the only query)
# ---------------------------------------------------------------------------------------------
def class_attention_forward(x, params, num_heads):
    """Class attention: the CLS token (position 0) attends to all 1+N tokens; linear in N.

    x: (B, 1+N, C); params {"W_q": (C, C), "b_q": (C,) opt, "W_kv": (C, 2C), "b_kv": (2C,) opt,
    "W_o": (C, C), "b_o": (C,) opt}; W_kv produces [k | v]. -> y: (B, 1, C), the updated CLS.
    """
    xp = _check_x_heads(x, num_heads, "class_attention")
    B, M, C = x.shape
    if M < 1:
        raise ValueError("class_attention: x must have shape (B, 1+N, C) with the CLS token at "
                         f"position 0, got shape {tuple(x.shape)}")
    _check_params(params, {"W_q": ((C, C), True), "b_q": ((C,), False),
                           "W_kv": ((C, 2 * C), True), "b_kv": ((2 * C,), False),
                           "W_o": ((C, C), True), "b_o": ((C,), False)}, x, "class_attention")
    h = num_heads
    scale = 1.0 / math.sqrt(C // h)
    q, c_q = linear_forward(x[:, 0:1, :], params["W_q"], params.get("b_q"))   # (B, 1, C)
    kv, c_kv = linear_forward(x, params["W_kv"], params.get("b_kv"))          # (B, 1+N, 2C)
    qs = _split(xp, q, 1, h)[0, ...] * scale                            # (B, h, 1, p)
    a = _split(xp, kv, 2, h)                                       # (2, B, h, 1+N, p)
    k, v = a[0, ...], a[1, ...]
    o, A = _softmax_core_forward(xp, qs, k, v, causal=False)       # (B, h, 1, p), A (B, h, 1, 1+N)
    y, c_o = linear_forward(_merge(xp, [o]), params["W_o"], params.get("b_o"))  # (B, 1, C)
    return y, (c_q, c_kv, c_o, qs, k, v, A, o, scale)


def class_attention_backward(dy, cache):
    """dy: (B, 1, C) -> dx (B, 1+N, C), grads with the keys of params."""
    c_q, c_kv, c_o, qs, k, v, A, o, scale = cache
    xp = backend.namespace(dy)
    h = qs.shape[1]
    dom, g_o = linear_backward(dy, c_o)                            # (B, 1, C)
    dO = _split(xp, dom, 1, h)[0, ...]                                  # (B, h, 1, p)
    dqs, dk, dv = _softmax_core_backward(xp, dO, qs, k, v, A, o)
    dx0, g_q = linear_backward(_merge(xp, [dqs * scale]), c_q)     # (B, 1, C)
    dx, g_kv = linear_backward(_merge(xp, [dk, dv]), c_kv)         # (B, 1+N, C)
    dx = xp.concat([dx[:, 0:1, :] + dx0, dx[:, 1:, :]], axis=1)    # the CLS row is also the query
    grads = _rename(g_q, "q")
    grads.update(_rename(g_kv, "kv"))
    grads.update(_rename(g_o, "o"))
    return dx, grads
