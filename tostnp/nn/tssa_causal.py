r"""Causal TSSA in O(T): the forward and backward with prefix sums, the blocked scan that
computes them, and the recurrent decoder (O(C^2) work per token, independent of the context).

Every sum over tokens of the non-causal layer becomes a prefix sum over s <= t along the token
axis (book: eq-causal-pi, eq-causal-out); the readable form is
:func:`tostnp.nn.tssa_reference.tssa_forward_reference` with ``causal=True``::

    S1_tc = sum_{s<=t} w_sc^2, clamped at 1e-12                                     eq-causal-pi
    q_tk  = sum_{c in k} (w_tc^2 / S1_tc + denom_bias[k, t])
    Pi_t. = softmax_k(temp_k q_tk)
    S2_tc = sum_{s<=t} Pi_sk w_sc^2,   S3_tk = sum_{s<=t} Pi_sk                        eq-causal-out
    m_tc  = S2_tc / (S3_tk + 1e-8),   r_tc = 1 / (1 + m_tc),   out_tc = -w_tc Pi_tk r_tc

Row t is -(t+1) times the gradient, with respect to token t alone and Pi held fixed, of the
variational compression term of the prefix w_0..w_t (book: eq-causal-obj, eq-causal-grad); the
decoder carries the three sums from one prefix to the next (eq-causal-recur).

Memory and time are O(T p) per head: no T x T array exists, forward or backward. The code
computes r = n / (n + S2) with n = S3 + 1e-8 (the same 1/(1+m)) and v = a r = -out, and
multiplies by -W_o.

Backward: y = v @ (-W_o) with v = a n / (n + S2), so g_W_o = -v^T g_y, g_v = -g_y W_o^T,
g_a = g_v r, g_S2 = -g_v v r / n and g_n = sum_{c in k} g_v v (1 - r) / n. The adjoint of a
prefix sum (cumsum over s <= t) is a SUFFIX sum (sum over t >= s): g_(Pi sq)_s = suffix(g_S2)_s,
g_Pi_s += suffix(g_n)_s, and S1 sends -g_q sq / S1^2 back to sq by a suffix sum.
g_denom_bias[k, t] = p * sum_b g_q[b, t, k] (the bias sits inside the p-term sum).
"""
from __future__ import annotations

from ..backend import add_bias, namespace, device_of, fused, tuning
from ..backend import kernels_causal
from ..backend.validate import check_array
from .layers import sum_leading
from .tssa_heads import (check_tssa_params, check_width, head_indicator, head_sums, per_coord,
                         split_heads, merge_heads, project_in_backward,
                         softmax_heads, softmax_heads_backward, S1_EPS, PI_EPS)

__all__ = ["tssa_decode_init", "tssa_decode_step"]


# --------------------------------------------------------------------------------------------
# prefix and suffix sums along the token axis, O(T)
# --------------------------------------------------------------------------------------------


def _scan(a, xp, reverse: bool = False):
    """Inclusive prefix sums sum_{s<=t} a_s along axis 1 of a (B, T, F) -- or, with
    ``reverse``, suffix sums sum_{s>=t} a_s (the adjoint of the prefix sum).

    Same result as ``xp.cumulative_sum(a, axis=1)``, computed in blocks of L tokens: inside a
    block by one matmul with an (L, L) triangular matrix of ones, across blocks by a cumulative
    sum of the block totals. A sequence of at most ``tuning.SCAN_WHOLE`` tokens is one block
    (one (T, T) matmul: the LM's 64 tokens). Still O(T L F) = O(T) work, but a matmul instead of NumPy's
    strided, one-element-at-a-time accumulate along a non-last axis,
    and more accurate in float32 (sums of L terms, then T/L terms).
    """
    B, T, F = a.shape
    if 1 < T <= tuning.SCAN_WHOLE:          # short sequences: the whole of it as one block
        return _triangle(T, a, xp, reverse) @ a                                  # (B, T, F)
    L = tuning.SCAN_BLOCK                    # tokens per block (tostnp.backend.tuning)
    nb = T // L
    if nb < 2:
        if reverse:
            return xp.flip(xp.cumulative_sum(xp.flip(a, axis=1), axis=1), axis=1)
        return xp.cumulative_sum(a, axis=1)
    T0 = nb * L
    main = a[:, :T0, :] if T0 < T else a
    within = _triangle(L, a, xp, reverse) @ xp.reshape(main, (B, nb, L, F))      # (B, nb, L, F)
    tot = within[:, :, 0 if reverse else L - 1, :]                               # (B, nb, F)
    carry = _exclusive(_scan(tot, xp, reverse), xp, reverse)   # sums of the OTHER blocks before
    within += xp.reshape(carry, (B, nb, 1, F))
    out = xp.reshape(within, (B, T0, F))                                         # (B, T0, F)
    if T0 == T:
        return out
    tail = _scan(a[:, T0:, :], xp, reverse)                                      # (B, T-T0, F)
    if reverse:
        out += tail[:, :1, :]
    else:
        tail = tail + out[:, T0 - 1:, :]
    return xp.concat([out, tail], axis=1)


_TRIANGLES: dict = {}


def _triangle(L: int, a, xp, reverse: bool):
    """The (L, L) matrix of ones on and below the diagonal (s <= t: row t sums tokens 0..t), or
    above it with ``reverse`` (suffix sums), in a's dtype and on its device. Kept: a step asks
    for the same few dozen times (read only; nothing writes into it)."""
    dev = device_of(a)
    key = (getattr(xp, "__name__", ""), str(dev), L, str(a.dtype), reverse)
    tri = _TRIANGLES.get(key)
    if tri is None:
        if len(_TRIANGLES) > 32:
            _TRIANGLES.clear()
        i = xp.arange(L, device=dev)
        tri = xp.reshape(i, (L, 1)) >= xp.reshape(i, (1, L))                     # s <= t
        tri = _TRIANGLES[key] = xp.astype(xp.matrix_transpose(tri) if reverse else tri,
                                          a.dtype)                               # (L, L)
    return tri


def _exclusive(incl, xp, reverse: bool = False):
    """Exclusive prefix (or, with ``reverse``, suffix) sums from inclusive ones, by a shift:
    prefix: out_t = incl_{t-1} (out_0 = 0); suffix: out_t = incl_{t+1} (out_{T-1} = 0).

    Never ``incl - a``: when one term is much larger than the rest (a tiny S1 early in the
    sequence puts a huge 1/S1 into the backward), the subtraction would cancel every digit of
    the small remainder; the shift is exact.
    """
    zero = xp.zeros_like(incl[:, :1, ...])
    if reverse:
        return xp.concat([incl[:, 1:, ...], zero], axis=1)
    return xp.concat([zero, incl[:, :-1, ...]], axis=1)


# --------------------------------------------------------------------------------------------
# causal TSSA: forward and backward
# --------------------------------------------------------------------------------------------
def causal_forward(x, w, params, h, p, xp):
    """Causal TSSA from w = x @ W_u + b_u (B, T, C) -> (y, cache)."""
    if fused(xp) is not None:       # NumPy (tostnp.backend.kernels_causal); None: the lines below
        out = kernels_causal.causal_tssa_forward(x, w, params, h, S1_EPS, PI_EPS)
        if out is not None:
            return out
    B, T, C = x.shape
    temp = xp.reshape(params["temp"], (1, 1, h))                                 # (1, 1, h)
    bias = xp.reshape(xp.permute_dims(params["denom_bias"][:, :T, 0], (1, 0)), (1, T, h))

    sq = w * w                                                                   # (B, T, C)
    S1 = _scan(sq, xp)                                                           # (B, T, C)
    # S1 is non-decreasing in t, so the clamp can only bite if it bites at t = 0
    clamped = bool(xp.any(S1[:, 0, :] <= S1_EPS))
    state_S1 = xp.asarray(S1[:, T - 1, :], copy=True)                            # (B, C)
    # q_tk = sum_{c in k} sq_tc / S1_tc: a sum over each head's p contiguous coordinates
    # (eq-causal-pi); the ratio is a temporary, not kept for the backward
    ratio, sq = sq, None                                # sq is ours: the ratio in its buffer
    ratio /= _clamp_S1(S1, clamped, xp)                                          # sq / S1
    q = head_sums(ratio, h, p, xp) + float(p) * bias                             # (B, T, h)
    del ratio
    Pi = softmax_heads(temp * q, xp)                                             # (B, T, h)

    a = merge_heads(split_heads(w, h, p, xp) * per_coord(Pi, xp), xp)            # (B, T, C)  w Pi
    aw = a * w                                                                   # (B, T, C)  Pi sq
    S2 = _scan(aw, xp)                                                           # (B, T, C)
    del aw
    S3 = _scan(Pi, xp)                                                           # (B, T, h)
    n_Pi = S3 + PI_EPS                                                           # (B, T, h)
    n_h = per_coord(n_Pi, xp)                                                    # (B, T, h, 1)
    state = {"S1": state_S1, "S2": xp.asarray(S2[:, T - 1, :], copy=True),
             "S3": xp.asarray(S3[:, T - 1, :], copy=True), "t": T}
    # r = 1/(1+m) = n/(n + S2) (eq-causal-out), computed in S2's buffer (S2 is ours)
    S2_h = split_heads(S2, h, p, xp)                                             # a view of S2
    S2_h += n_h                                                                  # n + S2
    r = merge_heads(n_h / S2_h, xp)                                              # (B, T, C)
    del S2, S2_h
    a *= r                                              # a is ours and not cached: v = a r in place
    v = a                                                                        # (B, T, C)  = -out
    y = xp.reshape(xp.reshape(v, (B * T, C)) @ (-params["W_o"]), (B, T, C))      # (B, T, C)
    if "b_o" in params:
        add_bias(xp, y, params["b_o"])
    # The cache keeps three (B, T, C) arrays, w, S1 and r; the backward recomputes the
    # elementwise rest (sq = w^2, v = w Pi r, 1/S1) where it needs them, one at a time
    cache = {"causal": True, "x": x, "params": params, "h": h, "p": p,
             "w": w, "S1": S1, "clamped": clamped, "q": q,
             "n_Pi": n_Pi, "r": r, "decode_state": state,
             "Pi": xp.permute_dims(Pi, (0, 2, 1))}                               # (B, h, T)
    return y, cache


def _clamp_S1(S1, clamped: bool, xp):
    """max(S1, 1e-12) (eq-causal-pi): S1 itself, no copy, when nothing is clamped."""
    return xp.clip(S1, min=S1_EPS) if clamped else S1


def causal_backward(dy, cache, xp):
    if fused(xp) is not None:       # NumPy (tostnp.backend.kernels_causal)
        out = kernels_causal.causal_tssa_backward(dy, cache)
        if out is not None:
            return out
    params, h, p = cache["params"], cache["h"], cache["p"]
    B, T, C = dy.shape
    w, S1, r = cache["w"], cache["S1"], cache["r"]
    Pi = xp.permute_dims(cache["Pi"], (0, 2, 1))                 # (B, T, h): a view, tokens as rows
    n_h = per_coord(cache["n_Pi"], xp)                                           # (B, T, h, 1)
    Pi_h = per_coord(Pi, xp)                                                     # (B, T, h, 1)
    dy2 = xp.reshape(dy, (B * T, C))
    grads = {}
    if "b_o" in params:
        grads["b_o"] = sum_leading(xp, dy2)                                      # (C,)
    # y = v @ (-W_o) + b_o with v = -out = a r, a = w Pi, r = n / (n + S2)     (eq-causal-out)
    v = merge_heads(split_heads(w, h, p, xp) * Pi_h, xp)                         # (B, T, C)  a
    v *= r                                                                       # v = a r
    grads["W_o"] = -(xp.matrix_transpose(xp.reshape(v, (B * T, C))) @ dy2)       # (C, C)
    g_v = xp.reshape(dy2 @ xp.matrix_transpose(-params["W_o"]), (B, T, C))       # (B, T, C)
    g_a = g_v * r                                                                # (B, T, C)
    # dv/dS2 = -v r / n and dv/dn = v (1 - r) / n; with u = g_v v / n:
    # g_S2 = -u r and g_n_k = sum_{c in k} u (1 - r) = sum_{c in k} (u + g_S2)
    u, g_v = g_v, None
    u *= v                                                        # in g_v's buffer (g_v is ours)
    del v
    u_h = split_heads(u, h, p, xp)                                               # a view of u
    u_h /= n_h                                                                   # u = g_v v / n
    g_S2 = u * r                                                                 # (B, T, C)
    g_S2 *= -1.0                                                                 # -u r
    u += g_S2                                                                    # u (1 - r)
    g_n = head_sums(u, h, p, xp)                                                 # (B, T, h)
    del u, u_h
    # S2 = prefix(Pi sq), S3 = prefix(Pi): the adjoint of a prefix sum is a suffix sum
    G2 = _scan(g_S2, xp, reverse=True)                                           # (B, T, C)
    del g_S2
    # g_Pi_tk = sum_{c in k} (g_a w + G2 sq)_tc + suffix(g_n)_tk: head-wise dot products
    # (vecdot) read the (B, T, C) arrays once, with no temporaries
    sq = w * w                                                                   # (B, T, C)
    g_Pi = xp.vecdot(split_heads(g_a, h, p, xp), split_heads(w, h, p, xp)) \
        + xp.vecdot(split_heads(G2, h, p, xp), split_heads(sq, h, p, xp)) \
        + _scan(g_n, xp, reverse=True)                                           # (B, T, h)
    # g_w = 2 w g_sq + g_a Pi with g_sq = g_q keep / S1 + G1 + Pi G2 (below), grouped as
    # g_w = 2 w (g_q keep / S1 + G1) + Pi (g_a + 2 w G2): the second part now, in g_a's buffer
    G2 *= w
    G2 *= 2.0
    g_a += G2                                                                    # g_a + 2 w G2
    del G2
    g_a_h = split_heads(g_a, h, p, xp)                                           # a view of g_a
    g_a_h *= Pi_h                                                                # Pi (g_a + 2 w G2)
    g_q = softmax_heads_backward(g_Pi, cache, grads, xp)                         # (B, T, h)
    # q_tk = sum_{c in k} sq_tc / S1_tc + p denom_bias[k, t]                     (eq-causal-pi)
    db = float(p) * xp.permute_dims(xp.sum(g_q, axis=0), (1, 0))                 # (h, T)
    max_len = params["denom_bias"].shape[1]
    db = xp.reshape(db, (h, T, 1))
    if max_len > T:
        db = xp.concat([db, xp.zeros((h, max_len - T, 1), dtype=dy.dtype,
                                     device=device_of(dy))], axis=1)
    grads["denom_bias"] = db                                                     # (h, max_len, 1)
    g_q_h = per_coord(g_q, xp)                                                   # (B, T, h, 1)
    # S1 receives g_S1 = -g_q sq / S1^2 (unclamped entries only), in sq's buffer
    S1c = _clamp_S1(S1, cache["clamped"], xp)                                    # (B, T, C)
    active = xp.astype(S1 > S1_EPS, dy.dtype) if cache["clamped"] else None      # (B, T, C)
    g_S1, sq = sq, None
    g_S1 /= S1c
    g_S1 /= S1c                                                                  # sq / S1^2
    g_S1_h = split_heads(g_S1, h, p, xp)                                         # a view
    g_S1_h *= g_q_h
    g_S1 *= -1.0
    if active is not None:
        g_S1 *= active
    # S1 = prefix(sq): sq_s receives suffix(g_S1)_s = g_S1_s + sum_{t>s} g_S1_t. Token s's own
    # term joins the direct one: g_q / S1 + g_S1 = g_q (1 - sq / S1) / S1 = g_q keep / S1 with
    # keep = S1_{t-1} / S1_t, and only the EXCLUSIVE suffix sum G1 is added -- no huge g_q / S1
    # cancelled by its negative
    G1 = _scan(g_S1, xp, reverse=True)                                           # (B, T, C)
    del g_S1, g_S1_h
    G1 = _exclusive(G1, xp, reverse=True)                                        # (B, T, C)
    # keep from the exclusive prefix sum (exact; the difference 1 - sq / S1 would lose every
    # digit where w_t^2 dominates S1_t); 1 where clamped
    g_w = _exclusive(S1, xp)                                                     # (B, T, C)
    g_w /= S1c                                                                   # keep
    if active is not None:
        g_w = xp.where(active > 0, g_w, xp.ones_like(g_w))
    g_w /= S1c                                                                   # keep / S1
    g_w_h = split_heads(g_w, h, p, xp)                                           # a view
    g_w_h *= g_q_h                                                               # g_q keep / S1
    g_w += G1
    del G1
    g_w *= w
    g_w *= 2.0                                                        # 2 w (g_q keep/S1 + G1)
    g_w += g_a                                                        # + Pi (g_a + 2 w G2)
    del g_a, g_a_h
    return project_in_backward(g_w, grads, cache, xp), grads


# --------------------------------------------------------------------------------------------
# recurrent decoder: O(C^2) work per token, independent of the context length
# --------------------------------------------------------------------------------------------
def tssa_decode_init(batch: int, params, num_heads: int, dtype=None):
    """Empty prefix statistics for decoding ``batch`` sequences one token at a time.

    state: "S1" (B, C) = sum_s w_s^2, "S2" (B, C) = sum_s Pi_s w_s^2, "S3" (B, h) = sum_s Pi_s,
    "t" = number of tokens consumed. (A causal forward's cache["decode_state"] has the same form:
    prefill a prompt with :func:`tssa_forward`, then continue with :func:`tssa_decode_step`.)
    """
    if "W_u" not in params or getattr(params["W_u"], "ndim", 0) != 2:
        raise ValueError("params is missing key 'W_u' of shape (C, C)")
    W_u = params["W_u"]
    C = W_u.shape[0]
    check_tssa_params(params, C, num_heads, True, W_u.dtype)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    return _tssa_decode_init(batch, params, num_heads, dtype)


def _tssa_decode_init(batch: int, params, num_heads: int, dtype=None):
    W_u = params["W_u"]
    xp = namespace(W_u)
    C = W_u.shape[0]
    dtype = W_u.dtype if dtype is None else dtype
    dev = device_of(W_u)
    return {"S1": xp.zeros((batch, C), dtype=dtype, device=dev),
            "S2": xp.zeros((batch, C), dtype=dtype, device=dev),
            "S3": xp.zeros((batch, num_heads), dtype=dtype, device=dev), "t": 0}


def tssa_decode_step(state, x_t, params, num_heads: int, t: int):
    """One causal TSSA step. x_t: (B, C) is token t -> (y_t (B, C), new state).

    Equals row t of :func:`tssa_forward` (causal=True) on the sequence fed so far. The input
    state is not modified. Raises ValueError when t >= max_len or t differs from state["t"].
    """
    check_array(x_t, "x_t", ndim=2, shape_desc="(B, C)")
    B, C = x_t.shape
    check_width(x_t, "x_t", params)
    h, p = check_tssa_params(params, C, num_heads, True, x_t.dtype)
    check_decode_position(state, x_t, params, t)
    return _tssa_decode_step(state, x_t, params, h, t)


def check_decode_position(state, x_t, params, t) -> None:
    """t must be the state's next position, below max_len; the state must fit x_t (B, C)."""
    B, C = x_t.shape
    max_len = params["denom_bias"].shape[1]
    if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f"t must be a non-negative int, got {t!r}")
    if t >= max_len:
        raise ValueError(f"t={t} is out of range: the layer was built for max_len={max_len} "
                         f"positions (params['denom_bias'] has shape "
                         f"{tuple(params['denom_bias'].shape)})")
    if t != state["t"]:
        raise ValueError(f"t={t} but the state has consumed {state['t']} tokens; "
                         "feed tokens in order 0, 1, 2, ...")
    if tuple(state["S1"].shape) != (B, C):
        raise ValueError(f"state['S1'] has shape {tuple(state['S1'].shape)} but x_t has "
                         f"shape {(B, C)}; make the state with tssa_decode_init({B}, ...)")


def _tssa_decode_step(state, x_t, params, num_heads: int, t: int):
    """:func:`tssa_decode_step` without the checks (the caller checked its arguments)."""
    xp = namespace(x_t)
    B, C = x_t.shape
    h = num_heads
    p = C // h
    dev = device_of(x_t)
    E = head_indicator(xp, C, h, x_t.dtype, dev)                                 # (C, h)
    w = x_t @ params["W_u"]                                                      # (B, C)
    if "b_u" in params:
        w += params["b_u"]
    sq = w * w                                                                   # (B, C)
    S1 = state["S1"] + sq                                                        # (B, C)
    q = (sq / xp.clip(S1, min=S1_EPS)) @ E \
        + float(p) * xp.reshape(params["denom_bias"][:, t, 0], (1, h))           # (B, h)
    Pi = softmax_heads(xp.reshape(params["temp"], (1, h)) * q, xp)               # (B, h)
    a = merge_heads(split_heads(w, h, p, xp) * xp.reshape(Pi, (B, h, 1)), xp)                          # (B, C)
    S2 = state["S2"] + a * w                                                     # (B, C)
    S3 = state["S3"] + Pi                                                        # (B, h)
    m = merge_heads(split_heads(S2, h, p, xp) / xp.reshape(S3 + PI_EPS, (B, h, 1)), xp)  # (B, C)
    y = (-(a / (1.0 + m))) @ params["W_o"]                                       # (B, C)
    if "b_o" in params:
        y += params["b_o"]
    return y, {"S1": S1, "S2": S2, "S3": S3, "t": t + 1}
