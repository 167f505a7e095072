r"""Memory-efficient exact softmax attention: the FlashAttention algorithm, written plainly.

The same function as :func:`tostnp.nn.attention.softmax_attention_forward` (same parameters,
same outputs to rounding), computed without ever holding the (N, N) attention matrix:

* **forward** -- for each block of query rows, an *online softmax* over blocks of keys
  (Milakov & Gimelshein 2018; Dao et al. 2022, FlashAttention-2's loop order). For every query
  row it keeps a running maximum ``m``, a running normaliser ``l`` and an unnormalised output
  ``acc``; a new key block with scores ``s`` updates them by

      m'  = max(m, max_j s_j)          alpha = exp(m - m')       P_j = exp(s_j - m')
      l'  = alpha l + sum_j P_j        acc' = alpha acc + P @ v_block

  and at the end ``o = acc / l``. Only ``o`` (B, h, N, p) and the log-normaliser
  ``L = m + log l`` (B, h, N, 1) are kept for the backward pass.
* **backward** -- recomputation: for each key block and each query block that sees it, the
  probabilities are rebuilt from the scores and ``L`` (``P = exp(s - L)``, exact), then

      dv += P^T dO       dP = dO v^T       dS = P * (dP - D)       dq += dS k     dk += dS^T q

  with ``D_i = sum_p dO_ip o_ip`` (= sum_j P_ij dP_ij), computed once.

Memory O(B h N p) plus one (B, h, _BLOCK_Q, _BLOCK_K) block of scores at a time: linear in N.
Time O(B h N^2 p), like the plain form (the backward recomputes the scores once more). On a GPU
the real FlashAttention also keeps each block in on-chip memory; in NumPy the blocks are simply
small arrays, so the point here is the memory, not the speed.

Shapes: x (B, N, C), h heads, p = C / h; params as softmax attention: "W_qkv" (C, 3C),
"b_qkv" (3C,) optional, "W_o" (C, C), "b_o" (C,) optional. Causal: query i sees keys j <= i;
key blocks entirely in a query block's future are skipped (about half the work).
"""
from __future__ import annotations

import math

from .. import backend
from .attention import _check_x_heads, _qkv_spec, _split, _merge, _rename
from .params import check_params
from .layers import linear_forward, linear_backward

__all__ = ["flash_attention_forward", "flash_attention_backward"]

_BLOCK_Q = 128      # query rows per block (tests shrink both to exercise the blocking)
_BLOCK_K = 128      # keys per block


def _scores(xp, q_blk, k_blk, i0, j0, causal):
    """s = q_blk k_blk^T for queries i0.. and keys j0.., with -inf on future keys if causal.

    q_blk: (B, h, r, p) scaled queries; k_blk: (B, h, c, p) -> s (B, h, r, c).
    """
    s = q_blk @ xp.matrix_transpose(k_blk)                         # (B, h, r, c)
    r, c = s.shape[-2], s.shape[-1]
    if causal and j0 + c - 1 > i0:                                 # the block reaches the future
        dev = backend.device_of(s)
        keep = (xp.reshape(xp.arange(i0, i0 + r, device=dev), (r, 1))
                >= xp.reshape(xp.arange(j0, j0 + c, device=dev), (1, c)))   # key j <= query i
        s += xp.where(keep, xp.zeros((), dtype=s.dtype, device=dev),
                      xp.full((), -math.inf, dtype=s.dtype, device=dev))
    return s


def _key_end(i1, N, causal):
    """Keys a query block ending at row i1 (exclusive) can see: 0..end-1."""
    return i1 if causal else N


def _flash_core_forward(xp, qs, k, v, causal):
    """o = softmax(qs k^T [+ mask]) v by the online softmax, and L = logsumexp of each row.

    qs: (B, h, N, p) queries scaled by 1/sqrt(p); k, v: (B, h, N, p) -> o (B, h, N, p),
    L (B, h, N, 1).
    """
    B, h, N, p = qs.shape
    dt, dev = qs.dtype, backend.device_of(qs)
    outs, logs = [], []
    for i0 in range(0, N, _BLOCK_Q):
        i1 = min(N, i0 + _BLOCK_Q)
        q_blk = qs[:, :, i0:i1, :]                                 # (B, h, r, p)
        m = xp.full((B, h, i1 - i0, 1), -math.inf, dtype=dt, device=dev)   # running max
        l = xp.zeros((B, h, i1 - i0, 1), dtype=dt, device=dev)    # running sum of exp
        acc = xp.zeros((B, h, i1 - i0, p), dtype=dt, device=dev)  # running sum of exp * v
        for j0 in range(0, _key_end(i1, N, causal), _BLOCK_K):
            j1 = min(_key_end(i1, N, causal), j0 + _BLOCK_K)
            s = _scores(xp, q_blk, k[:, :, j0:j1, :], i0, j0, causal)   # (B, h, r, c)
            # key block 0 holds key 0 <= every query, so m is finite from the first block on
            m_new = xp.maximum(m, xp.max(s, axis=-1, keepdims=True))
            alpha = xp.exp(m - m_new)                              # (B, h, r, 1); 0 at the start
            s -= m_new
            P = xp.exp(s)                                          # (B, h, r, c); 0 where masked
            l = alpha * l + xp.sum(P, axis=-1, keepdims=True)
            acc = alpha * acc + P @ v[:, :, j0:j1, :]
            m = m_new
        outs.append(acc / l)                                       # (B, h, r, p)
        logs.append(m + xp.log(l))                                 # (B, h, r, 1)
    return xp.concat(outs, axis=2), xp.concat(logs, axis=2)


def _flash_core_backward(xp, dO, qs, k, v, o, L, causal):
    """Gradients of the core by recomputation: -> d(qs), dk, dv, each (B, h, N, p)."""
    B, h, N, p = qs.shape
    dev = backend.device_of(qs)
    D = xp.sum(dO * o, axis=-1, keepdims=True)                     # (B, h, N, 1)
    dqs = xp.zeros(qs.shape, dtype=qs.dtype, device=dev)
    dk_blocks, dv_blocks = [], []
    for j0 in range(0, N, _BLOCK_K):
        j1 = min(N, j0 + _BLOCK_K)
        k_blk, v_blk = k[:, :, j0:j1, :], v[:, :, j0:j1, :]      # (B, h, c, p)
        dk_j = xp.zeros(k_blk.shape, dtype=k.dtype, device=dev)
        dv_j = xp.zeros(v_blk.shape, dtype=v.dtype, device=dev)
        # causal: only query blocks that end after j0 see any key of this block
        first = (j0 // _BLOCK_Q) * _BLOCK_Q if causal else 0
        for i0 in range(first, N, _BLOCK_Q):
            i1 = min(N, i0 + _BLOCK_Q)
            q_blk, dO_blk = qs[:, :, i0:i1, :], dO[:, :, i0:i1, :]
            s = _scores(xp, q_blk, k_blk, i0, j0, causal)         # (B, h, r, c)
            s -= L[:, :, i0:i1, :]
            P = xp.exp(s)                                          # the forward's weights, exactly
            del s
            dv_j += xp.matrix_transpose(P) @ dO_blk                # (B, h, c, p)
            dS = dO_blk @ xp.matrix_transpose(v_blk)               # (B, h, r, c)  dP
            dS -= D[:, :, i0:i1, :]
            dS *= P                                                # dS = P (dP - D)
            dqs[:, :, i0:i1, :] += dS @ k_blk
            dk_j += xp.matrix_transpose(dS) @ q_blk
        dk_blocks.append(dk_j)
        dv_blocks.append(dv_j)
    return dqs, xp.concat(dk_blocks, axis=2), xp.concat(dv_blocks, axis=2)


def flash_attention_forward(x, params, num_heads, causal=False):
    """Multi-head softmax attention in O(N) memory: the same y as softmax_attention_forward.

    x: (B, N, C); params {"W_qkv": (C, 3C), "b_qkv": (3C,) opt, "W_o": (C, C), "b_o": (C,) opt};
    num_heads: h dividing C; causal: query i sees keys j <= i -> y: (B, N, C), cache.
    The cache holds q, k, v, o (B, h, N, p) and L (B, h, N, 1): no N x N array.
    """
    xp = _check_x_heads(x, num_heads, "flash_attention")
    C = x.shape[2]
    if x.shape[1] < 1:
        raise ValueError(f"flash_attention: x must have at least one token, got shape "
                         f"{tuple(x.shape)}")
    check_params(params, _qkv_spec(C), x.dtype, "flash_attention")
    scale = 1.0 / math.sqrt(C // num_heads)
    qkv, c_qkv = linear_forward(x, params["W_qkv"], params.get("b_qkv"))   # (B, N, 3C)
    a = _split(xp, qkv, 3, num_heads)                              # (3, B, h, N, p)
    qs, k, v = a[0, ...] * scale, a[1, ...], a[2, ...]             # (B, h, N, p) each
    o, L = _flash_core_forward(xp, qs, k, v, causal)               # (B, h, N, p), (B, h, N, 1)
    y, c_o = linear_forward(_merge(xp, [o]), params["W_o"], params.get("b_o"))   # (B, N, C)
    return y, (c_qkv, c_o, qs, k, v, o, L, scale, causal)


def flash_attention_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the keys of params."""
    c_qkv, c_o, qs, k, v, o, L, scale, causal = cache
    xp = backend.namespace(dy)
    h = qs.shape[1]
    dom, g_o = linear_backward(dy, c_o)                            # (B, N, C)
    dO = _split(xp, dom, 1, h)[0, ...]                             # (B, h, N, p)
    dqs, dk, dv = _flash_core_backward(xp, dO, qs, k, v, o, L, causal)
    dx, g_qkv = linear_backward(_merge(xp, [dqs * scale, dk, dv]), c_qkv)  # (B, N, C)
    grads = _rename(g_qkv, "qkv")
    grads.update(_rename(g_o, "o"))
    return dx, grads
