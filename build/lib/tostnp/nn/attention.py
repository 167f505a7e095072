"""Attention baselines with hand-derived backward passes, so ToST can be compared in one package.

* softmax attention (multi-head, non-causal or causal): O(N^2) time and memory;
* linear attention (Katharopoulos et al. 2020), phi(x) = elu(x) + 1: O(N) in the tokens;

Class attention (the CLS token is the only query) lives in :mod:`tostnp.nn.class_attention`.

Shapes: x (B, N, C); h = num_heads; p = C / h; heads are contiguous slices of width p.
The fused projection W_qkv (C, 3C) produces [q | k | v] along its output axis, each of
width C and split into heads as (h, p). Weights are stored (in, out): y = x @ W + b.
"""
from __future__ import annotations

import math

from .. import backend
from ..backend.validate import check_array
from .params import check_params
from .layers import linear_forward, linear_backward

__all__ = [
    "softmax_attention_forward", "softmax_attention_backward",
    "linear_attention_forward", "linear_attention_backward",
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
    """(B, N, m*C) -> (m, B, h, N, p): m stacked projections (q, k, v), each split into heads."""
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


# Softmax attention is computed in blocks of query rows so that every temporary (scores, their
# gradient) stays below _BLOCK_ELEMS elements; the attention weights A are kept for the
# backward pass as a list of row blocks (O(N^2) memory in all). Causal blocks stop at their
# last query's key, which skips about half of the work and of the memory.
_BLOCK_ELEMS = 1 << 26                 # 256 MB of float32 per temporary


def _row_blocks(batch, Nq, Nk, causal):
    """[(i0, i1, nk)]: query rows i0..i1-1 see keys 0..nk-1."""
    rows = max(1, _BLOCK_ELEMS // max(1, batch * Nk))
    if causal and Nq >= 512:
        rows = min(rows, -(-Nq // 8))  # >= 8 blocks, so the skipped future keys add up
    return [(i0, min(Nq, i0 + rows), min(Nq, i0 + rows) if causal else Nk)
            for i0 in range(0, Nq, rows)]


def _softmax_rows(xp, qs, k, i0, causal):
    """Rows i0.. of A = softmax(qs k^T [+ causal mask]), over keys.

    qs: (B, h, r, p) scaled queries i0..i0+r-1; k: (B, h, nk, p) -> A block (B, h, r, nk).
    """
    s = qs @ xp.matrix_transpose(k)                                # (B, h, r, nk)
    if causal:
        r, nk = s.shape[-2], s.shape[-1]
        dev = backend.device_of(s)
        keep = (xp.reshape(xp.arange(i0, i0 + r, device=dev), (r, 1))
                >= xp.reshape(xp.arange(nk, device=dev), (1, nk)))  # (r, nk) key j <= query i
        # an additive 0 / -inf mask, in place, BEFORE the max-subtraction: a future score
        # must not set the row's shift (every row keeps its diagonal, so no row is all -inf)
        s += xp.where(keep, xp.zeros((), dtype=s.dtype, device=dev),
                      xp.full((), -math.inf, dtype=s.dtype, device=dev))
    s -= xp.max(s, axis=-1, keepdims=True)
    A = xp.exp(s)                                                  # (B, h, r, nk)
    del s
    A /= xp.sum(A, axis=-1, keepdims=True)
    return A


def _softmax_core_forward(xp, qs, k, v, causal):
    """o = A v with A = softmax(qs k^T [+ causal mask]), rows over keys.

    qs: (B, h, Nq, p) queries already scaled by 1/sqrt(p); k, v: (B, h, Nk, p)
    -> o (B, h, Nq, p), A as a list of row blocks [((i0, i1, nk), A[..., i0:i1, :nk])],
    each (B, h, i1 - i0, nk); one block (B, h, Nq, Nk) when it fits in _BLOCK_ELEMS.
    """
    B, h, Nq, p = qs.shape
    blocks = _row_blocks(B * h, Nq, k.shape[2], causal)
    A, outs = [], []
    for i0, i1, nk in blocks:
        A_blk = _softmax_rows(xp, qs[..., i0:i1, :], k[..., :nk, :], i0, causal)
        A.append(((i0, i1, nk), A_blk))
        outs.append(A_blk @ v[..., :nk, :])                        # (B, h, i1 - i0, p)
    o = outs[0] if len(outs) == 1 else xp.concat(outs, axis=2)     # (B, h, Nq, p)
    return o, A


def _softmax_core_backward(xp, dO, qs, k, v, A, o):
    """Gradients of o = A v, A = softmax(qs k^T): returns d(qs), dk, dv, each like its input.

    dS = A * (dA - rowsum(dA * A)) with dA = dO v^T, and rowsum(dA * A)_i = dO_i . o_i.
    """
    if len(A) == 1:
        dk = dv = None
    else:
        dk = xp.zeros(k.shape, dtype=k.dtype, device=backend.device_of(k))
        dv = xp.zeros(v.shape, dtype=v.dtype, device=backend.device_of(v))
    dqs = []
    for (i0, i1, nk), A_blk in A:                                  # A_blk (B, h, r, nk)
        dO_blk = dO[..., i0:i1, :]                                 # (B, h, r, p)
        dS = dO_blk @ xp.matrix_transpose(v[..., :nk, :])          # (B, h, r, nk)  dA
        dS -= xp.sum(dO_blk * o[..., i0:i1, :], axis=-1, keepdims=True)
        dS *= A_blk                                                # masked entries: A = 0
        dqs.append(dS @ k[..., :nk, :])                            # (B, h, r, p)
        if dk is None:                                             # a single block
            dv = xp.matrix_transpose(A_blk) @ dO_blk               # (B, h, Nk, p)
            dk = xp.matrix_transpose(dS) @ qs                      # (B, h, Nk, p)
        else:
            dv[..., :nk, :] += xp.matrix_transpose(A_blk) @ dO_blk
            dk[..., :nk, :] += xp.matrix_transpose(dS) @ qs[..., i0:i1, :]
    dqs = dqs[0] if len(dqs) == 1 else xp.concat(dqs, axis=2)      # (B, h, Nq, p)
    return dqs, dk, dv


# ---------------------------------------------------------------------------------------------
# multi-head softmax attention
# ---------------------------------------------------------------------------------------------
def softmax_attention_forward(x, params, num_heads, causal=False):
    """Multi-head softmax attention: y = concat_h(softmax(q k^T / sqrt(p) [mask]) v) @ W_o + b_o.

    x: (B, N, C); params {"W_qkv": (C, 3C), "b_qkv": (3C,) opt, "W_o": (C, C), "b_o": (C,) opt};
    num_heads: h dividing C; causal: query i sees keys j <= i -> y: (B, N, C).
    Memory O(B h N^2): the weights A (B, h, N, N), in row blocks and only up to the diagonal
    when causal, are kept for the backward pass; other temporaries stay below _BLOCK_ELEMS.
    """
    xp = _check_x_heads(x, num_heads, "softmax_attention")
    C = x.shape[2]
    check_params(params, _qkv_spec(C), x.dtype, "softmax_attention")
    scale = 1.0 / math.sqrt(C // num_heads)
    qkv, c_qkv = linear_forward(x, params["W_qkv"], params.get("b_qkv"))   # (B, N, 3C)
    a = _split(xp, qkv, 3, num_heads)                              # (3, B, h, N, p)
    qs, k, v = a[0, ...] * scale, a[1, ...], a[2, ...]             # (B, h, N, p) each
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
    dO = _split(xp, dom, 1, h)[0, ...]                             # (B, h, N, p)
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
    e = xp.exp(-xp.abs(a))                                         # exp(a) where a <= 0, no overflow
    phi = xp.where(pos, a + 1.0, e)
    dphi = e + xp.astype(pos, a.dtype) * (1.0 - e)                 # 1 where a > 0, else exp(a)
    return phi, dphi


# Causal linear attention is computed in chunks of _LIN_CHUNK tokens (the "chunked" form):
# inside a chunk a masked c x c product, across chunks the prefix sums of the per-chunk
# statistics K_c^T V_c (p x p) and sum K_c. Same numbers as the per-token prefix sums
# S_i = sum_{j<=i} phi(k_j) v_j^T, but all the work is matmul and memory is O(N (c + p^2/c)).
_LIN_CHUNK = 64


def _excl_cumsum(xp, a):
    """Exclusive prefix sums along axis 2: out_n = sum_{m < n} a_m."""
    # (not include_initial=True: array_api_strict 2.3 builds its zeros on the wrong device)
    head = xp.zeros_like(a[:, :, :1, ...])
    return xp.concat([head, xp.cumulative_sum(a[:, :, :-1, ...], axis=2)], axis=2)


def _excl_revcumsum(xp, a):
    """Exclusive suffix sums along axis 2: out_n = sum_{m > n} a_m."""
    return xp.flip(_excl_cumsum(xp, xp.flip(a, axis=2)), axis=2)


def _chunks(xp, a, c, fill):
    """(B, h, N, p) -> (B, h, nc, c, p), nc = ceil(N / c), the end padded with ``fill``."""
    B, h, N, p = a.shape
    nc = -(-N // c)
    if nc * c > N:
        pad = xp.full((B, h, nc * c - N, p), fill, dtype=a.dtype, device=backend.device_of(a))
        a = xp.concat([a, pad], axis=2)
    return xp.reshape(a, (B, h, nc, c, p))


def _unchunk(xp, a, N):
    """(B, h, nc, c, p) -> (B, h, N, p), dropping the padding."""
    B, h, nc, c, p = a.shape
    return xp.reshape(a, (B, h, nc * c, p))[:, :, :N, :]


def _causal_linear_forward(xp, Q, K, v):
    """o_i = Q_i^T S_i / (Q_i . z_i) with S_i = sum_{j<=i} K_j v_j^T, z_i = sum_{j<=i} K_j.

    Q, K, v: (B, h, N, p), Q and K > 0 -> o (B, h, N, p) and the chunked arrays for backward.
    """
    N = Q.shape[2]
    c = min(N, _LIN_CHUNK)
    dev = backend.device_of(Q)
    Qc = _chunks(xp, Q, c, 1.0)        # (B, h, nc, c, p); padded queries 1 keep den > 0, dropped
    Kc = _chunks(xp, K, c, 0.0)        # padded keys and values add nothing
    vc = _chunks(xp, v, c, 0.0)
    r = xp.arange(c, device=dev)
    M = xp.astype(xp.reshape(r, (c, 1)) >= xp.reshape(r, (1, c)), Q.dtype)   # (c, c) j <= i
    Att = (Qc @ xp.matrix_transpose(Kc)) * M                       # (B, h, nc, c, c)
    Sp = _excl_cumsum(xp, xp.matrix_transpose(Kc) @ vc)            # (B, h, nc, p, p) earlier chunks
    zp = _excl_cumsum(xp, xp.sum(Kc, axis=3, keepdims=True))       # (B, h, nc, 1, p)
    num = Qc @ Sp + Att @ vc                                       # (B, h, nc, c, p)
    den = Qc @ xp.matrix_transpose(zp) + xp.sum(Att, axis=-1, keepdims=True)   # (B, h, nc, c, 1)
    oc = num / den                                                 # (B, h, nc, c, p)
    return _unchunk(xp, oc, N), (Qc, Kc, vc, M, Sp, zp, den, oc)


def _causal_linear_backward(xp, dO, saved):
    """Gradients of _causal_linear_forward: dO (B, h, N, p) -> dQ, dK, dv, each (B, h, N, p)."""
    Qc, Kc, vc, M, Sp, zp, den, oc = saved
    N = dO.shape[2]
    dOc = _chunks(xp, dO, Qc.shape[3], 0.0)                        # (B, h, nc, c, p)
    dnum = dOc / den                                               # (B, h, nc, c, p)
    dden = -xp.sum(dOc * oc, axis=-1, keepdims=True) / den         # (B, h, nc, c, 1)
    dAtt = (dnum @ xp.matrix_transpose(vc) + dden) * M             # (B, h, nc, c, c)
    Att = (Qc @ xp.matrix_transpose(Kc)) * M                       # recomputed (B, h, nc, c, c)
    dQ = dnum @ xp.matrix_transpose(Sp) + dden * zp + dAtt @ Kc   # (B, h, nc, c, p)
    # Sp of chunk n sums chunks m < n, so chunk m receives the gradients of all later chunks
    G = _excl_revcumsum(xp, xp.matrix_transpose(Qc) @ dnum)        # (B, h, nc, p, p)
    gz = _excl_revcumsum(xp, xp.matrix_transpose(dden) @ Qc)       # (B, h, nc, 1, p)
    dK = xp.matrix_transpose(dAtt) @ Qc + vc @ xp.matrix_transpose(G) + gz
    dv = xp.matrix_transpose(Att) @ dnum + Kc @ G
    return _unchunk(xp, dQ, N), _unchunk(xp, dK, N), _unchunk(xp, dv, N)


def linear_attention_forward(x, params, num_heads, causal=False):
    """Multi-head linear attention: out_i = phi(q_i)^T S / (phi(q_i)^T z), phi = elu + 1.

    Non-causal: S = sum_j phi(k_j) v_j^T (p, p), z = sum_j phi(k_j) (p,), per batch and head.
    Causal: S_i, z_i are prefix sums over j <= i, computed chunk-wise (c = _LIN_CHUNK tokens):
    time O(B h N p (c + p)), memory O(B h N (c + p^2 / c)); no N x N matrix.
    x: (B, N, C); params as softmax_attention_forward; num_heads: h -> y: (B, N, C).
    There is no epsilon in the denominator (phi > 0), as in the formula; inputs so negative
    that every phi(q_i) underflows to 0 give 0/0.
    """
    xp = _check_x_heads(x, num_heads, "linear_attention")
    C = x.shape[2]
    check_params(params, _qkv_spec(C), x.dtype, "linear_attention")
    qkv, c_qkv = linear_forward(x, params["W_qkv"], params.get("b_qkv"))   # (B, N, 3C)
    a = _split(xp, qkv, 3, num_heads)                              # (3, B, h, N, p)
    Q, dQphi = _phi(xp, a[0, ...])                                 # (B, h, N, p)
    K, dKphi = _phi(xp, a[1, ...])                                 # (B, h, N, p)
    v = a[2, ...]                                                  # (B, h, N, p)
    if causal:
        o, saved = _causal_linear_forward(xp, Q, K, v)             # (B, h, N, p)
    else:
        S = xp.matrix_transpose(K) @ v                             # (B, h, p, p)
        z = xp.sum(K, axis=2, keepdims=True)                       # (B, h, 1, p)
        den = Q @ xp.matrix_transpose(z)                           # (B, h, N, 1)
        o = (Q @ S) / den                                          # (B, h, N, p)
        saved = (Q, K, v, S, z, den, o)
    y, c_o = linear_forward(_merge(xp, [o]), params["W_o"], params.get("b_o"))
    return y, (c_qkv, c_o, dQphi, dKphi, saved, causal)


def linear_attention_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the keys of params.

    With num = Q S, den = Q . z, o = num / den:
    dnum = dO / den, dden = -(dO . o) / den, dQ = dnum S^T + dden z,
    dS = sum_i Q_i dnum_i^T, dz = sum_i dden_i Q_i, dK_j = dS v_j + dz, dv_j = dS^T K_j,
    then through phi. Causal: the same per chunk, plus suffix sums over later chunks.
    """
    c_qkv, c_o, dQphi, dKphi, saved, causal = cache
    xp = backend.namespace(dy)
    h = dQphi.shape[1]
    dom, g_o = linear_backward(dy, c_o)                            # (B, N, C)
    dO = _split(xp, dom, 1, h)[0, ...]                             # (B, h, N, p)
    if causal:
        dQ, dK, dv = _causal_linear_backward(xp, dO, saved)
    else:
        Q, K, v, S, z, den, o = saved
        dnum = dO / den                                            # (B, h, N, p)
        dden = -xp.sum(dO * o, axis=-1, keepdims=True) / den      # (B, h, N, 1)
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
