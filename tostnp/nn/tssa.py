r"""Token Statistics Self-Attention (TSSA), the learned layer: public entry points and the
non-causal form. The causal form, its blocked scan and the recurrent decoder are in
:mod:`tostnp.nn.tssa_causal`; head helpers in :mod:`tostnp.nn.tssa_heads`; the same layer
written as the book's equations read, with a staged backward, in :mod:`tostnp.nn.tssa_reference`
(the tests check this fast code against it in float64).

Shapes: x (B, N, C), h heads, p = C / h. Weights are stored (in, out): y = x @ W + b. Heads are
contiguous slices of the width (coordinate c = k*p + i belongs to head k).

Forward (non-causal), per batch element and head k, coordinates c in head k (book/06_tssa_layer.md,
eq-layer-w, eq-layer-pi, eq-layer-out)::

    w      = x @ W_u + b_u                     (N, C)  w plays U_k^T z_j           eq-layer-w
    sq     = w^2                               (N, C)
    S1_c   = sum_n sq_nc                       (C,)    clamped: max(||w_.c||, 1e-12)^2
    q_nk   = sum_{c in k} sq_nc / S1_c         (N, h)  pre-temperature logits
    Pi_n.  = softmax_k(temp_k * q_nk)          (N, h)  softmax over HEADS           eq-layer-pi
    n_k    = sum_n Pi_nk + 1e-8                (h,)
    m_c    = sum_n Pi_nk sq_nc / n_k           (C,)    Pi-weighted 2nd moment of RAW w
    r_c    = 1 / (1 + m_c)                     (C,)    = f'(m) for f(x) = log(1 + x)
    out_nc = -w_nc Pi_nk r_c                   (N, C)  = -n grad_w R^var_c (eq-layer-grad)
    y      = out @ W_o + b_o                   (N, C)                               eq-layer-out

Names in the code that are not the book's symbols (book -> code):

    w^2 (entry-wise)                 sq          ``g_<name>``  dLoss/d<name>
    sum_j w_jki^2 (token axis)       S1          ``*_h``       a (..., h, p) view, split heads
    sum_j Pi_jk w_jki^2              S2          E             (C, h) head indicator
    sum_j Pi_jk + 1e-8               n_Pi        ``a``         w Pi (per head)
    1 / (1 + m)                      r           ``q``         the logits before temp

Two tricks keep it fast (each names the equation it implements where it is used):
r is per coordinate here, so for N >= C, y = a @ (diag(-r) W_o) folds r into the weight (one
C x C per batch element instead of an N x C pass, eq-layer-out); and the three terms of g_sq are produced by one matmul of inner
size 2h+1 (the adjoint of eq-layer-pi and eq-layer-out together).

Backward (by hand; ``g_v`` denotes dLoss/dv; the staged, one-adjoint-per-line form is
:func:`tostnp.nn.tssa_reference.tssa_backward_reference`):

* y = a @ W_eff, W_eff = diag(-r) W_o: g_W_eff = a^T g_y, so g_W_o = sum_b diag(-r) a^T g_y,
  g_r_c = -sum_j (a^T g_y)_cj (W_o)_cj, g_a = g_y @ W_eff^T, and g_m = -g_r r^2. (For N < C the
  layer computes out = -a r and y = out @ W_o instead: g_W_o = out^T g_y, g_out = g_y W_o^T,
  g_r_c = -sum_n g_out_nc a_nc, g_a = -g_out r.)
* m = S2 / n_Pi: g_S2 = g_m / n_Pi, g_n_k = -sum_{c in k} g_m m / n_Pi.
* a = w Pi and S2 = sum_n Pi sq: g_Pi_nk = sum_{c in k} (g_a w + g_S2 sq)_nc + g_n_k;
  sq receives Pi g_S2.
* Softmax over heads: g_l = Pi * (g_Pi - sum_k Pi g_Pi); g_temp_k = sum_{b,n} g_l q, g_q = temp g_l.
* q = sum sq / S1: sq receives g_q / S1; S1 receives -g_q sq / S1^2 (only where the clamp is
  inactive), and S1 = sum(sq) sends it back to every token (a broadcast).
* Finally g_w = 2 w g_sq + g_a Pi, g_x = g_w W_u^T, g_W_u = x^T g_w, g_b_u = sum g_w.
"""
from __future__ import annotations

from ..backend import add_bias, namespace, device_of, fused, tuning
from ..backend.openblas import spin_is_short
from ..backend.runtime import on_shards
from ..backend.validate import check_array, check_same_dtype
from .layers import sum_leading
from .tssa_heads import (check_tssa_params, check_width, head_indicator, head_token_sums,
                         per_coord, split_heads, merge_heads, project_in, project_in_backward,
                         softmax_heads, softmax_heads_backward, NORM_EPS2, PI_EPS)
from .tssa_causal import causal_forward, causal_backward, tssa_decode_init, tssa_decode_step

__all__ = ["tssa_forward", "tssa_backward", "tssa_init", "tssa_decode_init", "tssa_decode_step"]


def tssa_forward(x, params, num_heads: int, causal: bool = False):
    """TSSA layer. x: (B, N, C) -> y: (B, N, C).

    params: "W_u" (C, C), "b_u" (C,) optional, "temp" (h, 1), "W_o" (C, C), "b_o" (C,) optional,
    and for ``causal=True`` "denom_bias" (h, max_len, 1) with N <= max_len.
    Returns (y, cache); cache["Pi"] is the membership Pi of shape (B, h, N) (softmax over h).
    For ``causal=True``, cache["decode_state"] holds the prefix statistics after the last
    token, ready for :func:`tssa_decode_step` (prefill).
    """
    check_array(x, "x", ndim=3, shape_desc="(B, N, C)")
    B, N, C = x.shape
    check_width(x, "x", params)
    h, p = check_tssa_params(params, C, num_heads, causal, x.dtype, T=N)
    if N < 1:
        raise ValueError(f"x must have at least one token, got shape {tuple(x.shape)}")
    return _tssa_forward(x, params, h, causal)


def _tssa_forward(x, params, num_heads: int, causal: bool = False):
    """:func:`tssa_forward` without the checks (the caller checked x and params)."""
    xp = namespace(x)
    h = num_heads
    p = x.shape[-1] // h
    if not causal:
        bounds = batch_slices(x, xp)
        if len(bounds) > 1:
            return sliced_forward(x, params, h, p, xp, bounds)
    if causal:
        return causal_forward(x, project_in(x, params, xp), params, h, p, xp)   # eq-layer-w
    return full_forward(x, params, h, p, xp)


def tssa_backward(dy, cache):
    """Backward of :func:`tssa_forward`. dy: (B, N, C) -> (dx (B, N, C), grads).

    grads has the same keys as the params that went in (a present "denom_bias" gets a zero
    gradient in the non-causal mode, where it is unused).
    """
    x = cache["x"]
    check_array(dy, "dy", ndim=3, shape_desc=str(tuple(x.shape)))
    if tuple(dy.shape) != tuple(x.shape):
        raise ValueError(f"dy must have shape {tuple(x.shape)} (that of x), got {tuple(dy.shape)}")
    check_same_dtype(x=x, dy=dy)
    return _tssa_backward(dy, cache)


def _tssa_backward(dy, cache):
    """:func:`tssa_backward` without the checks."""
    xp = namespace(dy)
    if cache["causal"]:
        return causal_backward(dy, cache, xp)
    if "slices" in cache:
        return sliced_backward(dy, cache, xp)
    return full_backward(dy, cache, xp)


# --------------------------------------------------------------------------------------------
# non-causal TSSA: forward and backward
# --------------------------------------------------------------------------------------------
def full_forward(x, params, h, p, xp, out=None):
    """Non-causal TSSA of x (B, N, C) -> (y, cache). ``out``: a (B, N, C) NumPy array that
    receives y (the batch slices write into the whole layer's y; NumPy fast path only)."""
    B, N, C = x.shape
    dt, dev = x.dtype, device_of(x)
    Et = xp.matrix_transpose(head_indicator(xp, C, h, dt, dev))                  # (h, C)
    fast = fused(xp)
    a1 = a_buf = None
    in_pieces = fast is not None and fast.tssa_in_pieces(B, N, C)
    if in_pieces:
        # the same lines, from w = x @ W_u + b_u to a = w Pi, in pieces of tokens that stay in
        # cache or as compiled loops over tokens (tostnp.backend.kernels.tssa_statistics). For
        # long sequences a comes as [a | 1], so that y's bias is added inside its product
        # (kernels.output_weights_ones). w None: a was written over w, and the backward reads
        # w as a / Pi
        ones = N >= C and "b_o" in params
        w, a_buf, S1, inv_S1, q, Pi, n_Pi, S2 = fast.tssa_statistics(
            x, params["W_u"], params.get("b_u"), params["temp"], h, NORM_EPS2, PI_EPS,
            ones_column=ones)
        a = a_buf[..., :C]                                                       # a view
        a1 = a_buf if ones else None
    else:
        w = project_in(x, params, xp)                             # (B, N, C)  eq-layer-w
        temp = xp.reshape(params["temp"], (1, 1, h))                             # (1, 1, h)
        sq = w * w                                                               # (B, N, C)
        S1 = xp.sum(sq, axis=1)                                                  # (B, C)
        inv_S1 = 1.0 / xp.clip(S1, min=NORM_EPS2)                                # (B, C)
        # q_nk = sum_{c in k} sq_nc / S1_c: a dot product over each head's p coordinates
        q = xp.vecdot(split_heads(sq, h, p, xp), xp.reshape(inv_S1, (B, 1, h, p)))  # (B, N, h)
        Pi = softmax_heads(temp * q, xp)                             # (B, N, h)   eq-layer-pi

        n_Pi = xp.sum(Pi, axis=1) + PI_EPS                                       # (B, h)
        # S2_c = sum_n Pi_nk sq_nc (eq-layer-out): per-head matrix-vector products read sq
        # once (the backward recomputes sq, which is cheaper than keeping it)
        S2 = head_token_sums(Pi, sq, h, p, xp)                                   # (B, C)
        # a = w Pi, written into sq's buffer (sq is not needed any more): a copy and an
        # in-place product on warm memory beat a fresh array, whose pages fault on first touch
        a, sq = sq, None
        a[...] = w
        a_h = split_heads(a, h, p, xp)                                           # a view of a
        a_h *= per_coord(Pi, xp)                                                 # (B, N, C)  w Pi
    m = S2 / (n_Pi @ Et)                                                         # (B, C)
    r = 1.0 / (1.0 + m)                                                          # (B, C)

    # out = -a r, y = out @ W_o + b_o (eq-layer-out). r is per coordinate here, so for long
    # sequences (N >= C) fold it into the weight, y = a @ (diag(-r) W_o): one C x C per batch
    # element instead of an (N, C) pass; for short ones the (N, C) pass is the smaller
    W_eff = a_r = None
    if a1 is not None:                                # y = [a | 1] @ [W_eff; b_o] (N >= C)
        Wb = fast.output_weights_ones(r, params["W_o"], params["b_o"])           # (B, C+1, C)
        W_eff = Wb[:, :C]                                                        # a view
        y = a1 @ Wb if out is None else fast.matmul_into(a1, Wb, out)            # (B, N, C)
    elif N >= C:
        W_eff = xp.reshape(-r, (B, C, 1)) * params["W_o"]                        # (B, C, C)
        y = a @ W_eff if out is None else fast.matmul_into(a, W_eff, out)        # (B, N, C)
    else:
        a_r = a * xp.reshape(-r, (B, 1, C))                                      # (B, N, C)
        a_r2, W_o = xp.reshape(a_r, (B * N, C)), params["W_o"]
        y = xp.reshape(a_r2 @ W_o if out is None
                       else fast.matmul_into(a_r2, W_o, xp.reshape(out, (B * N, C))), (B, N, C))
    if "b_o" in params and a1 is None:
        add_bias(xp, y, params["b_o"])
    cache = {"causal": False, "x": x, "params": params, "h": h, "p": p,
             "w": w, "a_buf": a_buf, "S1": S1, "inv_S1": inv_S1, "q": q, "n_Pi": n_Pi,
             "m": m, "r": r, "a": a, "W_eff": W_eff, "out": a_r,
             "in_pieces": in_pieces,                       # the backward's middle in pieces too
             "Pi": xp.permute_dims(Pi, (0, 2, 1))}                               # (B, h, N)
    return y, cache


def full_backward(dy, cache, xp, out=None):
    """Backward of :func:`full_forward` -> (dx, grads). ``out``: a (B, N, C) NumPy array that
    receives dx (the batch slices write into the whole layer's dx; NumPy fast path only)."""
    params, h = cache["params"], cache["h"]
    B, N, C = dy.shape
    dt, dev = dy.dtype, device_of(dy)
    E = head_indicator(xp, C, h, dt, dev)                                        # (C, h)
    Et = xp.matrix_transpose(E)                                                  # (h, C)
    w, a = cache["w"], cache["a"]
    Pi = xp.permute_dims(cache["Pi"], (0, 2, 1))                 # (B, N, h): a view, tokens as rows
    r, m, n_Pi, inv_S1 = cache["r"], cache["m"], cache["n_Pi"], cache["inv_S1"]
    grads = {}
    if "b_o" in params:
        grads["b_o"] = sum_leading(xp, dy)                                       # (C,)
    if cache["W_eff"] is not None:
        # y = a @ W_eff, W_eff = diag(-r) W_o
        g_W_eff = xp.matrix_transpose(a) @ dy                                    # (B, C, C)
        grads["W_o"] = xp.sum(xp.reshape(-r, (B, C, 1)) * g_W_eff, axis=0)       # (C, C)
        g_r = -xp.sum(g_W_eff * params["W_o"], axis=-1)                          # (B, C)
        g_a = dy @ xp.matrix_transpose(cache["W_eff"])                           # (B, N, C)
    else:
        # y = out @ W_o, out = -a r
        dy2 = xp.reshape(dy, (B * N, C))
        grads["W_o"] = xp.matrix_transpose(xp.reshape(cache["out"], (B * N, C))) @ dy2
        g_out = xp.reshape(dy2 @ xp.matrix_transpose(params["W_o"]), (B, N, C))
        g_r = -xp.sum(g_out * a, axis=1)                                         # (B, C)
        g_a = g_out * xp.reshape(-r, (B, 1, C))                                  # (B, N, C)
    # r = 1/(1+m), m = S2/n
    g_m = -g_r * r * r                                                           # (B, C)
    g_S2 = g_m / (n_Pi @ Et)                                                     # (B, C)
    g_n = -((g_m * m) @ E) / n_Pi                                                # (B, h)
    active = xp.astype(cache["S1"] > NORM_EPS2, dt)                              # (B, C)
    fast = fused(xp) if cache.get("in_pieces") else None
    if fast is not None:
        # the same lines as _backward_middle, in pieces of tokens that stay in cache
        # (tostnp.backend.kernels.tssa_statistics_backward); g_w is written into g_a's buffer.
        # w None: the forward wrote a over it, and the kernels read w as a / Pi
        g_w, grads["temp"], g_b_u = fast.tssa_statistics_backward(
            w, g_a, Pi, cache["q"], params["temp"], g_S2, g_n, inv_S1, active, "b_u" in params,
            a_buf=cache["a_buf"])
    else:
        if w is None:         # a fast forward, the fast path switched off since: w = a / Pi
            w = merge_heads(split_heads(a, cache["h"], cache["p"], xp) / per_coord(Pi, xp), xp)
        g_b_u = None
        g_w = _backward_middle(w, g_a, Pi, g_S2, g_n, inv_S1, active, Et, cache, grads, xp)
    if "denom_bias" in params:
        grads["denom_bias"] = xp.zeros_like(params["denom_bias"])
    return project_in_backward(g_w, grads, cache, xp, g_b=g_b_u, out=out), grads


def _backward_middle(w, g_a, Pi, g_S2, g_n, inv_S1, active, Et, cache, grads, xp):
    """:func:`full_backward` from g_a (the gradient of a = w Pi) to g_w, through Pi, q and S1;
    sets grads["temp"]. g_a is the caller's (written into)."""
    h, p = cache["h"], cache["p"]
    B, N, C = w.shape
    dt, dev = w.dtype, device_of(w)
    sq_h = split_heads(w * w, h, p, xp)           # (B, N, h, p) recomputed: cheaper than caching it
    # Pi is used by a = w Pi, by S2 = sum_n Pi sq and by n = sum_n Pi (a broadcast back):
    # g_Pi_nk = sum_{c in k} (g_a_nc w_nc + sq_nc g_S2_c) + g_n_k, dot products over heads
    g_Pi = xp.vecdot(split_heads(g_a, h, p, xp), split_heads(w, h, p, xp)) \
        + xp.vecdot(sq_h, xp.reshape(g_S2, (B, 1, h, p))) \
        + xp.reshape(g_n, (B, 1, h))                                             # (B, N, h)
    g_q = softmax_heads_backward(g_Pi, cache, grads, xp)                         # (B, N, h)
    # q_nk = sum_{c in k} sq_nc / S1_c: S1 receives -sum_n g_q_nk sq_nc / S1_c^2 (unclamped c)
    gq_sq = head_token_sums(g_q, merge_heads(sq_h, xp), h, p, xp)                # (B, C)
    del sq_h
    g_S1 = -gq_sq * inv_S1 * inv_S1 * active                                     # (B, C)
    # g_sq_nc = Pi_nk g_S2_c + g_q_nk / S1_c + g_S1_c (S1 = sum_n sq: a broadcast back), as ONE
    # matmul of inner size 2h+1: per-token factors [Pi | g_q | 1] times per-coordinate rows
    # [E^T g_S2; E^T / S1; g_S1], each row doubled for g_w = 2 w g_sq
    tok = xp.concat([Pi, g_q, xp.ones((B, N, 1), dtype=dt, device=dev)], axis=-1)  # (B, N, 2h+1)
    coord = xp.concat([Et * xp.reshape(2.0 * g_S2, (B, 1, C)),
                       Et * xp.reshape(2.0 * inv_S1, (B, 1, C)),
                       xp.reshape(2.0 * g_S1, (B, 1, C))], axis=1)               # (B, 2h+1, C)
    g_w = tok @ coord                                                            # (B, N, C) 2 g_sq
    g_w *= w                                                                     # 2 w g_sq
    g_a_h = split_heads(g_a, h, p, xp)                                           # a view of g_a
    g_a_h *= per_coord(Pi, xp)
    g_w += merge_heads(g_a_h, xp)                                                # + g_a Pi
    return g_w


# --------------------------------------------------------------------------------------------
# NumPy fast path on several threads: the layer on slices of the batch, one per thread
# --------------------------------------------------------------------------------------------
# Every statistic of the non-causal layer (S1, Pi, n_Pi, S2) belongs to one batch element, so
# the layer on rows lo:hi of the batch is the layer's rows lo:hi. With ``--threads`` above 1
# and large inputs, each slice runs full_forward / full_backward above on its own thread with
# BLAS on one thread (tostnp.backend.runtime.on_shards): the elementwise passes over (N, C),
# which one NumPy call runs on one core, then use every core, as the matrix products do.
def batch_slices(x, xp):
    """The batch slices of x (B, N, C): one per thread on the NumPy fast path for inputs of at
    least ``tuning.LAYER_SLICE_MIN_ELEMENTS`` numbers per slice, else one, the whole batch."""
    fast = fused(xp)
    B, N, C = x.shape
    if fast is None:
        return [(0, B)]
    bounds = fast.shard_bounds(B, N * C, tuning.LAYER_SLICE_MIN_ELEMENTS)
    return bounds if len(bounds) > 1 and spin_is_short() else [(0, B)]


def sliced_forward(x, params, h, p, xp, bounds):
    """full_forward on each batch slice, on its own thread; y is written slice by slice."""
    y = xp.empty(x.shape, dtype=x.dtype)

    def one(lo, hi):
        return full_forward(x[lo:hi], params, h, p, xp, out=y[lo:hi])[1]
    caches = on_shards(one, bounds)
    return y, {"causal": False, "x": x, "params": params, "h": h, "p": p,
               "slices": list(zip(bounds, caches)),
               "Pi": xp.concat([c["Pi"] for c in caches], axis=0)}                # (B, h, N)


def sliced_backward(dy, cache, xp):
    """full_backward on each slice of :func:`sliced_forward`; the parameters' gradients, sums
    over the batch, add up over the slices."""
    dx = xp.empty(dy.shape, dtype=dy.dtype)
    caches = dict(cache["slices"])                       # (lo, hi) -> that slice's cache

    def one(lo, hi):
        return full_backward(dy[lo:hi], caches[(lo, hi)], xp, out=dx[lo:hi])[1]
    parts = on_shards(one, [b for b, _ in cache["slices"]])
    grads = parts[0]
    for more in parts[1:]:
        for k in grads:
            grads[k] += more[k]
    return dx, grads


# --------------------------------------------------------------------------------------------
# initialisation
# --------------------------------------------------------------------------------------------
def tssa_init(rng, xp, C: int, num_heads: int, *, causal: bool = False, max_len: int | None = None,
              bias: bool = True, dtype, device=None, std: float = 0.02,
              std_out: float | None = None):
    """Parameters of a TSSA layer: W_u ~ N(0, std^2), W_o ~ N(0, std_out^2) (C, C; std_out
    defaults to std); b_u, b_o = 0 (C,) if ``bias``; temp = 1 (h, 1); causal: denom_bias = 0
    (h, max_len, 1)."""
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
    params["W_o"] = rng.normal(xp, (C, C), dtype, std=std if std_out is None else std_out,
                               device=device)
    if bias:
        params["b_o"] = xp.zeros((C,), dtype=dtype, device=device)
    if causal:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"causal=True needs max_len, a positive int; got {max_len!r}")
        params["denom_bias"] = xp.zeros((h, max_len, 1), dtype=dtype, device=device)
    return params
