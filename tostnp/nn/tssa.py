r"""Token Statistics Self-Attention (TSSA): the learned layer, causal in O(T), recurrent decoder.

Reference semantics: tost-math.md §4 (book chapter "The TSSA layer"). Shapes: x (B, N, C),
h heads, p = C / h. Weights are stored (in, out): y = x @ W + b. Heads are contiguous slices of
the width: coordinate c = k*p + i belongs to head k, so "split heads" is a free reshape
(B, N, C) -> (B, N, h, p) and nothing is ever transposed.

Forward (non-causal), per batch element and head k, coordinates c in head k::

    w      = x @ W_u + b_u                     (N, C)  w plays U_k^T z_j
    sq     = w^2                               (N, C)
    S1_c   = sum_n sq_nc                       (C,)    S1c = max(S1, 1e-24) = max(||w_.c||, 1e-12)^2
    q_nk   = sum_{c in k} sq_nc / S1c_c        (N, h)  pre-temperature logits
    Pi_n.  = softmax_k(temp_k * q_nk)          (N, h)  softmax over HEADS
    D_k    = sum_n Pi_nk + 1e-8                (h,)
    m_c    = sum_n Pi_nk sq_nc / D_k           (C,)    Pi-weighted 2nd moment of RAW w
    r_c    = 1 / (1 + m_c)                     (C,)    = f'(m) for f(x) = log(1 + x)
    out_nc = -w_nc Pi_nk r_c                   (N, C)  = -n grad_w R^var_c (Pi held fixed)
    y      = out @ W_o + b_o                   (N, C)

Causal: every token sum becomes a prefix sum over s <= t along the token axis
(``xp.cumulative_sum``; computed blockwise by :func:`_scan`, see there)::

    S1_tc = sum_{s<=t} sq_sc, clamped at 1e-12
    q_tk  = sum_{c in k} (sq_tc / S1_tc + denom_bias[k, t])
    S2_tc = sum_{s<=t} Pi_sk sq_sc,   S3_tk = sum_{s<=t} Pi_sk,   D_tk = S3_tk + 1e-8
    m_tc  = S2_tc / D_tk,   r_tc = 1 / (1 + m_tc),   out_tc = -w_tc Pi_tk r_tc

Memory and time are O(T p) per head: no T x T array exists, forward or backward. The code
computes r = D / (D + S2) (the same 1/(1+m)) and v = a r = -out, and multiplies by -W_o.

Backward (derived by hand; ``g_v`` denotes dLoss/dv). Write a = w * Pi (per head).

* Output projection. Non-causal: r depends only on the coordinate, so we fold it into the
  weight, W_eff = diag(-r) W_o (one per batch element), and y = a @ W_eff + b_o. Then
  g_W_eff = a^T g_y, so g_W_o = sum_b diag(-r) a^T g_y, g_r_c = -sum_j (a^T g_y)_cj (W_o)_cj and
  g_a = g_y @ W_eff^T, and g_m = -g_r r^2 (r = 1/(1+m): dr/dm = -r^2).
  Causal: y = v @ (-W_o) with v = a D / (D + S2), so g_W_o = -v^T g_y, g_v = -g_y W_o^T and
  g_a = g_v r, g_S2 = -g_v v r / D, g_D = sum_{c in k} g_v v (1 - r) / D.
* Non-causal statistic m = S2 / D: g_S2 = g_m / D, g_D_k = -sum_{c in k} g_m m / D.
* Sums over tokens: the adjoint of a full sum is a broadcast; the adjoint of a prefix sum
  (cumsum over s <= t) is a SUFFIX sum (sum over t >= s): reverse, cumsum, reverse. So
  g_(Pi sq)_s = suffix(g_S2)_s, g_Pi_s += suffix(g_D)_s (non-causal: the plain broadcast).
* a = w Pi and S2 = cumsum(Pi sq): g_Pi_sk = sum_{c in k} (g_a w + G2 sq)_sc,
  with G2 = suffix(g_S2); and sq receives Pi G2.
* Softmax over heads: g_l = Pi * (g_Pi - sum_k Pi g_Pi). g_temp_k = sum_{b,n} g_l q, g_q = temp g_l,
  causal: g_denom_bias[k, t] = p * sum_b g_q[b, t, k] (the bias sits inside the p-term sum).
* Normalised logits q = sum sq / S1c: sq receives g_q / S1c; S1c receives
  -g_q sq / S1c^2 (only where the clamp is inactive), and S1 = (cum)sum(sq) sends it back to sq
  by a broadcast (non-causal) or a suffix sum (causal).
* Finally g_w = 2 w g_sq + g_a Pi, g_x = g_w W_u^T, g_W_u = x^T g_w, g_b_u = sum g_w.

Head-wise reductions "sum over c in head k" are dot products over each head's p coordinates
(``vecdot`` on the (B, N, h, p) view) or small matmuls with the (C, h) head indicator E
(E_ck = 1 if c is in head k); per-head scalars become per-coordinate ones through E^T. Pi-weighted
sums over tokens (S2, and its adjoint's sum_n gq sq) are one matrix-vector product per head
(:func:`_head_token_sums`). All of them read the big array once and write no (B, N, C) temporary.
"""
from __future__ import annotations

from ..backend import namespace, device_of
from .._validate import check_array, check_same_dtype

__all__ = ["tssa_forward", "tssa_backward", "tssa_init", "tssa_decode_init", "tssa_decode_step"]

_NORM_EPS2 = 1e-24   # max(||w||, 1e-12)^2: the token-axis L2 normalisation clamp, squared
_S1_EPS = 1e-12      # causal: clamp of the prefix sum of squares
_PI_EPS = 1e-8       # in m = (Pi / (sum Pi + 1e-8)) @ w^2


# --------------------------------------------------------------------------------------------
# checks and small helpers
# --------------------------------------------------------------------------------------------
def _check_params(params, C: int, num_heads: int, causal: bool, dtype, T: int | None = None):
    """Validate ``params`` against width C and ``num_heads``; returns (h, p)."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    h = num_heads
    if C % h != 0:
        raise ValueError(f"num_heads={h} must divide the width C={C}")
    want = {"W_u": (C, C), "temp": (h, 1), "W_o": (C, C)}
    optional = {"b_u": (C,), "b_o": (C,)}
    if causal:
        if "denom_bias" not in params:
            raise ValueError(f"params is missing key 'denom_bias' of shape ({h}, max_len, 1), "
                             "needed for causal=True")
    for key, shape in want.items():
        if key not in params:
            raise ValueError(f"params is missing key {key!r} of shape {shape}")
    known = set(want) | set(optional) | {"denom_bias"}
    for key in params:
        if key not in known:
            raise ValueError(f"params has unknown key {key!r}; expected keys {sorted(known)}")
    for key, a in params.items():
        if key == "denom_bias":
            check_array(a, "params['denom_bias']", shape_desc=f"({h}, max_len, 1)")
            if a.ndim != 3 or a.shape[0] != h or a.shape[2] != 1:
                raise ValueError(f"params['denom_bias'] must have shape ({h}, max_len, 1), "
                                 f"got {tuple(a.shape)}")
            if T is not None and causal and T > a.shape[1]:
                raise ValueError(f"sequence length T={T} exceeds max_len={a.shape[1]} of "
                                 f"params['denom_bias'] (shape {tuple(a.shape)})")
        else:
            shape = want.get(key) or optional[key]
            check_array(a, f"params[{key!r}]", shape_desc=str(shape))
            if tuple(a.shape) != shape:
                raise ValueError(f"params[{key!r}] must have shape {shape}, got {tuple(a.shape)}")
        if a.dtype != dtype:
            raise TypeError(f"params[{key!r}] has dtype {a.dtype} but x has {dtype}; "
                            "pass arrays of one dtype")
    return h, C // h


def _head_indicator(xp, C: int, h: int, dtype, device):
    """E (C, h): E[c, k] = 1 if coordinate c belongs to head k (c // p == k)."""
    p = C // h
    c = xp.arange(C, device=device)
    k = xp.arange(h, device=device)
    return xp.astype(xp.reshape(c // p, (C, 1)) == xp.reshape(k, (1, h)), dtype)   # (C, h)


def _head_reduce(op, a, xp):
    """op-reduction over the short last (head) axis of a (..., h) -> (..., 1), by h - 1
    elementwise ops on slices (NumPy's reductions along a length-h last axis are ~3x slower)."""
    out = a[..., 0:1]
    for k in range(1, a.shape[-1]):
        out = op(out, a[..., k:k + 1])
    return out


def _softmax_heads(l, xp):
    """Softmax over the last (head) axis. l: (..., h)."""
    e = xp.exp(l - _head_reduce(xp.maximum, l, xp))
    e /= _head_reduce(xp.add, e, xp)
    return e


def _head_token_sums(Pi, X, h: int, p: int, xp):
    """S (B, C) with S_c = sum_n Pi_{n,k(c)} X_nc (k(c) = the head of c); Pi (B, N, h), X (B, N, C).

    One matrix-vector product per head, (B, 1, N) @ (B, N, p), on strided views: it reads X
    once and writes no (B, N, C) temporary (the product Pi X, then a sum over tokens, would
    write and read one more 25 MB array at B=4, N=4096, C=384).
    """
    B, N, C = X.shape
    PiT = xp.permute_dims(Pi, (0, 2, 1))                                         # (B, h, N)
    parts = [PiT[:, k:k + 1, :] @ X[:, :, k * p:(k + 1) * p] for k in range(h)]  # (B, 1, p) each
    return xp.reshape(xp.concat(parts, axis=-1), (B, C))                         # (B, C)


def _per_coord(s, xp):
    """Broadcast a per-head array s (..., h) to per-coordinate shape (..., h, 1) for (..., h, p)."""
    return xp.reshape(s, tuple(s.shape) + (1,))


def _heads(a, h: int, p: int, xp):
    """(..., C) -> (..., h, p): split heads (a view for contiguous arrays)."""
    return xp.reshape(a, tuple(a.shape[:-1]) + (h, p))


def _merge(a, xp):
    """(..., h, p) -> (..., h*p)."""
    return xp.reshape(a, tuple(a.shape[:-2]) + (a.shape[-2] * a.shape[-1],))


# --------------------------------------------------------------------------------------------
# prefix and suffix sums along the token axis, O(T)
# --------------------------------------------------------------------------------------------
_SCAN_BLOCK = 32     # tokens per block of the blocked scan (tests shrink it to exercise blocks)


def _scan(a, xp, reverse: bool = False):
    """Inclusive prefix sums sum_{s<=t} a_s along axis 1 of a (B, T, F) -- or, with
    ``reverse``, suffix sums sum_{s>=t} a_s (the adjoint of the prefix sum).

    Same result as ``xp.cumulative_sum(a, axis=1)``, computed in blocks of L tokens: inside a
    block by one matmul with an (L, L) triangular matrix of ones, across blocks by a cumulative
    sum of the block totals. Still O(T L F) = O(T) work, but a matmul instead of NumPy's
    strided, one-element-at-a-time accumulate along a non-last axis (about 10x faster on CPU),
    and more accurate in float32 (sums of L terms, then T/L terms).
    """
    B, T, F = a.shape
    L = _SCAN_BLOCK
    nb = T // L
    if nb < 2:
        if reverse:
            return xp.flip(xp.cumulative_sum(xp.flip(a, axis=1), axis=1), axis=1)
        return xp.cumulative_sum(a, axis=1)
    T0 = nb * L
    dev = device_of(a)
    i = xp.arange(L, device=dev)
    tri = xp.reshape(i, (L, 1)) >= xp.reshape(i, (1, L))                         # s <= t
    tri = xp.astype(xp.matrix_transpose(tri) if reverse else tri, a.dtype)        # (L, L)
    main = a[:, :T0, :] if T0 < T else a
    within = tri @ xp.reshape(main, (B, nb, L, F))                               # (B, nb, L, F)
    tot = within[:, :, 0 if reverse else L - 1, :]                               # (B, nb, F)
    carry = _scan(tot, xp, reverse) - tot            # exclusive scan of the block totals
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


# --------------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------------
def tssa_forward(x, params, num_heads: int, causal: bool = False):
    """TSSA layer. x: (B, N, C) -> y: (B, N, C).

    params: "W_u" (C, C), "b_u" (C,) optional, "temp" (h, 1), "W_o" (C, C), "b_o" (C,) optional,
    and for ``causal=True`` "denom_bias" (h, max_len, 1) with N <= max_len.
    Returns (y, cache); cache["Pi"] is the membership Pi of shape (B, h, N) (softmax over h).
    For ``causal=True``, cache["decode_state"] holds the prefix statistics after the last
    token, ready for :func:`tssa_decode_step` (prefill).
    """
    xp = check_array(x, "x", ndim=3, shape_desc="(B, N, C)")
    B, N, C = x.shape
    if isinstance(params, dict) and getattr(params.get("W_u"), "ndim", 0) == 2 \
            and params["W_u"].shape[0] != C:
        raise ValueError(f"x has width C={C} but params['W_u'] has shape "
                         f"{tuple(params['W_u'].shape)}; expected ({C}, {C})")
    h, p = _check_params(params, C, num_heads, causal, x.dtype, T=N)
    if N < 1:
        raise ValueError(f"x must have at least one token, got shape {tuple(x.shape)}")
    if causal:
        return _causal_forward(x, params, h, p, xp)
    return _full_forward(x, params, h, p, xp)


def _project_in(x, params, xp):
    B, N, C = x.shape
    w = xp.reshape(xp.reshape(x, (B * N, C)) @ params["W_u"], (B, N, C))        # (B, N, C)
    if "b_u" in params:
        w += params["b_u"]
    return w


def _full_forward(x, params, h, p, xp):
    B, N, C = x.shape
    dt, dev = x.dtype, device_of(x)
    E = _head_indicator(xp, C, h, dt, dev)                                       # (C, h)
    Et = xp.matrix_transpose(E)                                                  # (h, C)
    temp = xp.reshape(params["temp"], (1, 1, h))                                 # (1, 1, h)

    w = _project_in(x, params, xp)                                               # (B, N, C)
    sq = w * w                                                                   # (B, N, C)
    S1 = xp.sum(sq, axis=1)                                                      # (B, C)
    inv_S1 = 1.0 / xp.clip(S1, min=_NORM_EPS2)                                   # (B, C)
    # q_nk = sum_{c in k} sq_nc inv_S1_c: a dot product over each head's p coordinates
    q = xp.vecdot(_heads(sq, h, p, xp), xp.reshape(inv_S1, (B, 1, h, p)))        # (B, N, h)
    Pi = _softmax_heads(temp * q, xp)                                            # (B, N, h)
    Pic = _per_coord(Pi, xp)                                                     # (B, N, h, 1)

    D = xp.sum(Pi, axis=1) + _PI_EPS                                             # (B, h)
    # S2_c = sum_n Pi_nk sq_nc: per-head matrix-vector products read sq once (backward
    # recomputes sq, which is cheaper than keeping it)
    S2 = _head_token_sums(Pi, sq, h, p, xp)                                      # (B, C)
    # a = w Pi, written into sq's buffer (sq is not needed any more): a copy and an in-place
    # product on warm memory beat a fresh array, whose pages fault on first touch
    a, sq = sq, None
    a[...] = w
    a4 = _heads(a, h, p, xp)                                                     # view of a
    a4 *= Pic                                                                    # (B, N, C)  w Pi
    m = S2 / (D @ Et)                                                            # (B, C)
    r = 1.0 / (1.0 + m)                                                          # (B, C)

    # out = -a r and y = out @ W_o = a @ (diag(-r) W_o): r is per coordinate here, so fold
    # it into the weight (C x C per batch) instead of scaling the (N, C) array
    W_eff = xp.reshape(-r, (B, C, 1)) * params["W_o"]                            # (B, C, C)
    y = a @ W_eff                                                                # (B, N, C)
    if "b_o" in params:
        y += params["b_o"]
    cache = {"causal": False, "x": x, "params": params, "h": h, "p": p,
             "w": w, "S1": S1, "inv_S1": inv_S1, "q": q, "Pi_nh": Pi, "D": D,
             "m": m, "r": r, "a": a, "W_eff": W_eff,
             "Pi": xp.permute_dims(Pi, (0, 2, 1))}                               # (B, h, N)
    return y, cache


def _causal_forward(x, params, h, p, xp):
    B, T, C = x.shape
    E = _head_indicator(xp, C, h, x.dtype, device_of(x))                         # (C, h)
    temp = xp.reshape(params["temp"], (1, 1, h))                                 # (1, 1, h)
    bias = xp.reshape(xp.permute_dims(params["denom_bias"][:, :T, 0], (1, 0)), (1, T, h))

    w = _project_in(x, params, xp)                                               # (B, T, C)
    sq = w * w                                                                   # (B, T, C)
    S1 = _scan(sq, xp)                                                           # (B, T, C)
    # S1 is non-decreasing in t, so the clamp can only bite if it bites at t = 0
    clamped = bool(xp.any(S1[:, 0, :] <= _S1_EPS))
    active = xp.astype(S1 > _S1_EPS, x.dtype) if clamped else None              # (B, T, C)
    inv_S1 = 1.0 / (xp.clip(S1, min=_S1_EPS) if clamped else S1)                 # (B, T, C)
    state_S1 = xp.asarray(S1[:, T - 1, :], copy=True)                            # (B, C)
    del S1
    ratio = sq * inv_S1                                                          # (B, T, C)
    # head sums over the p coordinates (contiguous) instead of the skinny matmul ratio @ E:
    # small multi-threaded BLAS calls stall when other jobs share the cores
    q = xp.sum(_heads(ratio, h, p, xp), axis=-1) + float(p) * bias               # (B, T, h)
    Pi = _softmax_heads(temp * q, xp)                                            # (B, T, h)

    a = _merge(_heads(w, h, p, xp) * _per_coord(Pi, xp), xp)                     # (B, T, C)  w Pi
    aw = a * w                                                                   # (B, T, C)  Pi sq
    S2 = _scan(aw, xp)                                                           # (B, T, C)
    del aw
    S3 = _scan(Pi, xp)                                                           # (B, T, h)
    D = S3 + _PI_EPS                                                             # (B, T, h)
    Dc = _per_coord(D, xp)                                                       # (B, T, h, 1)
    state = {"S1": state_S1, "S2": xp.asarray(S2[:, T - 1, :], copy=True),
             "S3": xp.asarray(S3[:, T - 1, :], copy=True), "t": T}
    S2_4 = _heads(S2, h, p, xp)                                                  # (B, T, h, p)
    S2_4 += Dc                                   # S2 is ours: in place, D + S2
    r = _merge(Dc / S2_4, xp)                    # (B, T, C)  1/(1+m) = D/(D+S2)
    del S2, S2_4
    a *= r                                       # a is ours and not cached: v = a r in place
    v = a                                                                        # (B, T, C)  = -out
    y = xp.reshape(xp.reshape(v, (B * T, C)) @ (-params["W_o"]), (B, T, C))     # (B, T, C)
    if "b_o" in params:
        y += params["b_o"]
    cache = {"causal": True, "x": x, "params": params, "h": h, "p": p,
             "w": w, "sq": sq, "inv_S1": inv_S1, "active": active, "ratio": ratio, "q": q,
             "Pi_nh": Pi, "D": D, "r": r, "v": v, "decode_state": state,
             "Pi": xp.permute_dims(Pi, (0, 2, 1))}                               # (B, h, T)
    return y, cache


# --------------------------------------------------------------------------------------------
# backward
# --------------------------------------------------------------------------------------------
def tssa_backward(dy, cache):
    """Backward of :func:`tssa_forward`. dy: (B, N, C) -> (dx (B, N, C), grads).

    grads has the same keys as the params that went in (a present "denom_bias" gets a zero
    gradient in the non-causal mode, where it is unused).
    """
    x = cache["x"]
    xp = namespace(x)
    check_array(dy, "dy", ndim=3, shape_desc=str(tuple(x.shape)))
    if tuple(dy.shape) != tuple(x.shape):
        raise ValueError(f"dy must have shape {tuple(x.shape)} (that of x), got {tuple(dy.shape)}")
    check_same_dtype(x=x, dy=dy)
    if cache["causal"]:
        return _causal_backward(dy, cache, xp)
    return _full_backward(dy, cache, xp)


def _softmax_backward(gPi, cache, grads, xp):
    """Through Pi = softmax_k(temp_k q_nk): returns g_q (B, N, h); sets grads["temp"]."""
    Pi, q, h = cache["Pi_nh"], cache["q"], cache["h"]
    gl = Pi * (gPi - _head_reduce(xp.add, Pi * gPi, xp))                          # (B, N, h)
    grads["temp"] = xp.reshape(xp.sum(xp.reshape(gl * q, (-1, h)), axis=0), (h, 1))
    return gl * xp.reshape(cache["params"]["temp"], (1, 1, h))                   # (B, N, h)


def _input_backward(gw, grads, cache, xp):
    """Through w = x @ W_u + b_u: returns dx; sets grads["W_u"], grads["b_u"]."""
    x, params = cache["x"], cache["params"]
    B, N, C = x.shape
    gw2 = xp.reshape(gw, (B * N, C))
    grads["W_u"] = xp.matrix_transpose(xp.reshape(x, (B * N, C))) @ gw2          # (C, C)
    if "b_u" in params:
        grads["b_u"] = xp.sum(gw2, axis=0)                                       # (C,)
    return xp.reshape(gw2 @ xp.matrix_transpose(params["W_u"]), (B, N, C))       # (B, N, C)


def _full_backward(dy, cache, xp):
    params, h, p = cache["params"], cache["h"], cache["p"]
    B, N, C = dy.shape
    dt, dev = dy.dtype, device_of(dy)
    E = _head_indicator(xp, C, h, dt, dev)                                       # (C, h)
    Et = xp.matrix_transpose(E)                                                  # (h, C)
    w, Pi, a = cache["w"], cache["Pi_nh"], cache["a"]
    r, m, D, inv_S1 = cache["r"], cache["m"], cache["D"], cache["inv_S1"]
    Pic = _per_coord(Pi, xp)                                                     # (B, N, h, 1)
    sq4 = _heads(w * w, h, p, xp)        # (B, N, h, p) recomputed: cheaper than caching it
    grads = {}
    if "b_o" in params:
        grads["b_o"] = xp.sum(xp.reshape(dy, (B * N, C)), axis=0)               # (C,)
    # y = a @ W_eff, W_eff = diag(-r) W_o
    G = xp.matrix_transpose(a) @ dy                                              # (B, C, C) g_W_eff
    grads["W_o"] = xp.sum(xp.reshape(-r, (B, C, 1)) * G, axis=0)                 # (C, C)
    g_r = -xp.sum(G * params["W_o"], axis=-1)                                    # (B, C)
    ga = dy @ xp.matrix_transpose(cache["W_eff"])                                # (B, N, C)
    # r = 1/(1+m), m = S2/D
    g_m = -g_r * r * r                                                           # (B, C)
    g_S2 = g_m / (D @ Et)                                                        # (B, C)
    g_D = -((g_m * m) @ E) / D                                                   # (B, h)
    # Pi is used by a = w Pi, by S2 = sum_n Pi sq and by D = sum_n Pi (a broadcast back):
    # g_Pi_nk = sum_{c in k} (ga_nc w_nc + sq_nc g_S2_c) + g_D_k, dot products over heads
    gPi = xp.vecdot(_heads(ga, h, p, xp), _heads(w, h, p, xp)) \
        + xp.vecdot(sq4, xp.reshape(g_S2, (B, 1, h, p))) \
        + xp.reshape(g_D, (B, 1, h))                                             # (B, N, h)
    gq = _softmax_backward(gPi, cache, grads, xp)                                # (B, N, h)
    # q = sq @ (E inv_S1): S1 receives -sum_n gq_nk sq_nc inv_S1_c^2 (unclamped c only)
    t1 = _head_token_sums(gq, _merge(sq4, xp), h, p, xp)                         # (B, C)
    del sq4
    active = xp.astype(cache["S1"] > _NORM_EPS2, dt)
    g_S1 = -t1 * inv_S1 * inv_S1 * active                                        # (B, C)
    # g_sq_nc = Pi_nk g_S2_c + gq_nk inv_S1_c + g_S1_c: one matmul with inner dim 2h + 1
    A = xp.concat([Pi, gq, xp.ones((B, N, 1), dtype=dt, device=dev)], axis=-1)   # (B, N, 2h+1)
    Bm = xp.concat([Et * xp.reshape(2.0 * g_S2, (B, 1, C)),
                    Et * xp.reshape(2.0 * inv_S1, (B, 1, C)),
                    xp.reshape(2.0 * g_S1, (B, 1, C))], axis=1)                  # (B, 2h+1, C)
    gw = A @ Bm                                                                  # (B, N, C) 2 g_sq
    gw *= w                                                                      # 2 w g_sq
    ga4 = _heads(ga, h, p, xp)                                                   # view of ga
    ga4 *= Pic                                                                   # ga is ours
    gw += _merge(ga4, xp)                                                        # + g_a Pi
    if "denom_bias" in params:
        grads["denom_bias"] = xp.zeros_like(params["denom_bias"])
    return _input_backward(gw, grads, cache, xp), grads


def _causal_backward(dy, cache, xp):
    params, h, p = cache["params"], cache["h"], cache["p"]
    B, T, C = dy.shape
    E = _head_indicator(xp, C, h, dy.dtype, device_of(dy))                       # (C, h)
    w, sq, Pi, v = cache["w"], cache["sq"], cache["Pi_nh"], cache["v"]
    r, D = cache["r"], cache["D"]
    Dc = _per_coord(D, xp)                                                       # (B, T, h, 1)
    Pic = _per_coord(Pi, xp)                                                     # (B, T, h, 1)
    dy2 = xp.reshape(dy, (B * T, C))
    grads = {}
    if "b_o" in params:
        grads["b_o"] = xp.sum(dy2, axis=0)                                       # (C,)
    # y = v @ (-W_o), v = -out = a r = a D / (D + S2)
    grads["W_o"] = -(xp.matrix_transpose(xp.reshape(v, (B * T, C))) @ dy2)       # (C, C)
    g_v = xp.reshape(dy2 @ xp.matrix_transpose(-params["W_o"]), (B, T, C))       # (B, T, C)
    ga = g_v * r                                                                 # (B, T, C)
    # dv/dS2 = -v r / D and dv/dD = v (1 - r) / D; with u = g_v v / D:
    # g_S2 = -u r =: -g_S2n and g_D_k = sum_{c in k} (u - u r)
    u = g_v * v                                                                  # (B, T, C)
    u4 = _heads(u, h, p, xp)                                                     # (B, T, h, p)
    u4 /= Dc                                                                     # u = g_v v / D
    g_S2n = u * r                                                                # (B, T, C)
    u -= g_S2n                                                                   # u - u r
    g_D = xp.sum(_heads(u, h, p, xp), axis=-1)                                   # (B, T, h)
    del u, u4
    # adjoints of the prefix sums S2, S3 are suffix sums
    G2n = _scan(g_S2n, xp, reverse=True)                                         # (B, T, C) = -G2
    del g_S2n
    # head-wise dot products (vecdot) read the (B, T, C) arrays once, with no temporaries
    gPi = xp.vecdot(_heads(ga, h, p, xp), _heads(w, h, p, xp)) \
        - xp.vecdot(_heads(G2n, h, p, xp), _heads(sq, h, p, xp)) \
        + _scan(g_D, xp, reverse=True)                                           # (B, T, h)
    gq = _softmax_backward(gPi, cache, grads, xp)                                # (B, T, h)
    # q_tk = sum_{c in k} sq_tc inv_S1_tc + p denom_bias[k, t]
    db = float(p) * xp.permute_dims(xp.sum(gq, axis=0), (1, 0))                  # (h, T)
    max_len = params["denom_bias"].shape[1]
    db = xp.reshape(db, (h, T, 1))
    if max_len > T:
        db = xp.concat([db, xp.zeros((h, max_len - T, 1), dtype=dy.dtype,
                                     device=device_of(dy))], axis=1)
    grads["denom_bias"] = db                                                     # (h, max_len, 1)
    gqc = _per_coord(gq, xp)                                                     # (B, T, h, 1)
    # S1 receives -gq sq inv_S1^2 = -gq ratio inv_S1 (unclamped entries), sent back to sq by
    # a suffix sum: G1 = suffix(gq ratio inv_S1)
    g1 = cache["ratio"] * cache["inv_S1"]                                        # (B, T, C)
    g1_4 = _heads(g1, h, p, xp)
    g1_4 *= gqc
    g1 = _merge(g1_4, xp)
    if cache["active"] is not None:
        g1 *= cache["active"]
    G1 = _scan(g1, xp, reverse=True)                                             # (B, T, C)
    # g_w = 2 w g_sq + g_a Pi with g_sq = Pi G2 + gq inv_S1 - G1:
    #     = 2 w (gq inv_S1 - G1) + Pi (g_a - 2 w G2n)
    gw = _merge(_heads(cache["inv_S1"], h, p, xp) * gqc, xp)                     # (B, T, C)
    gw -= G1
    gw *= w
    gw *= 2.0                                                                    # 2 w (gq inv_S1 - G1)
    G2n *= w
    G2n *= 2.0
    ga -= G2n                                                                    # g_a - 2 w G2n
    ga4 = _heads(ga, h, p, xp)
    ga4 *= Pic                                                                   # ga is ours
    gw += _merge(ga4, xp)
    return _input_backward(gw, grads, cache, xp), grads


# --------------------------------------------------------------------------------------------
# initialisation
# --------------------------------------------------------------------------------------------
def tssa_init(rng, xp, C: int, num_heads: int, *, causal: bool = False, max_len: int | None = None,
              bias: bool = True, dtype, device=None, std: float = 0.02):
    """Parameters of a TSSA layer: W_u, W_o ~ N(0, std^2) (C, C); b_u, b_o = 0 (C,) if ``bias``;
    temp = 1 (h, 1); causal: denom_bias = 0 (h, max_len, 1)."""
    if isinstance(C, bool) or not isinstance(C, int) or C < 1:
        raise ValueError(f"C must be a positive int, got {C!r}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    if C % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} must divide C={C}")
    h = num_heads
    params = {"W_u": rng.normal(xp, (C, C), dtype, std=std, device=device)}
    if bias:
        params["b_u"] = xp.zeros((C,), dtype=dtype, device=device)
    params["temp"] = xp.ones((h, 1), dtype=dtype, device=device)
    params["W_o"] = rng.normal(xp, (C, C), dtype, std=std, device=device)
    if bias:
        params["b_o"] = xp.zeros((C,), dtype=dtype, device=device)
    if causal:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"causal=True needs max_len, a positive int; got {max_len!r}")
        params["denom_bias"] = xp.zeros((h, max_len, 1), dtype=dtype, device=device)
    return params


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
    xp = namespace(W_u)
    C = W_u.shape[0]
    _check_params(params, C, num_heads, True, W_u.dtype)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
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
    xp = check_array(x_t, "x_t", ndim=2, shape_desc="(B, C)")
    B, C = x_t.shape
    if "W_u" in params and getattr(params["W_u"], "ndim", 0) == 2 \
            and params["W_u"].shape[0] != C:
        raise ValueError(f"x_t has width C={C} but params['W_u'] has shape "
                         f"{tuple(params['W_u'].shape)}; expected ({C}, {C})")
    h, p = _check_params(params, C, num_heads, True, x_t.dtype)
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
    dev = device_of(x_t)
    E = _head_indicator(xp, C, h, x_t.dtype, dev)                                # (C, h)
    w = x_t @ params["W_u"]                                                      # (B, C)
    if "b_u" in params:
        w += params["b_u"]
    sq = w * w                                                                   # (B, C)
    S1 = state["S1"] + sq                                                        # (B, C)
    q = (sq / xp.clip(S1, min=_S1_EPS)) @ E \
        + float(p) * xp.reshape(params["denom_bias"][:, t, 0], (1, h))           # (B, h)
    Pi = _softmax_heads(xp.reshape(params["temp"], (1, h)) * q, xp)              # (B, h)
    Pic = xp.reshape(Pi, (B, h, 1))
    a = _merge(_heads(w, h, p, xp) * Pic, xp)                                    # (B, C)
    S2 = state["S2"] + a * w                                                     # (B, C)
    S3 = state["S3"] + Pi                                                        # (B, h)
    m = _merge(_heads(S2, h, p, xp) / xp.reshape(S3 + _PI_EPS, (B, h, 1)), xp)   # (B, C)
    y = (-(a / (1.0 + m))) @ params["W_o"]                                       # (B, C)
    if "b_o" in params:
        y += params["b_o"]
    return y, {"S1": S1, "S2": S2, "S3": S3, "t": t + 1}
