"""The causal TSSA layer's fast path on NumPy, forward and backward: NumPy kernels for short
sequences, and the compiled loops (:mod:`tostnp.backend.compiled`) for large layers.

The plain lines (:func:`tostnp.nn.tssa_causal.causal_forward` and ``causal_backward``) are the
specification; these compute the same quantities, with the same cache. Which runs: from
``tuning.CAUSAL_COMPILED_MIN`` numbers per layer call, where Numba is installed and on, the
compiled loops (any length); else, for up to ``tuning.SCAN_WHOLE`` tokens (the default LM's 64),
where every prefix or suffix sum is one product with a (T, T) triangle, the NumPy kernels; else
the plain lines (the functions return None). What the NumPy kernels do beyond the plain lines:

* **Constants folded into the scans.** The backward's suffix sums come out already scaled: the
  triangle is scaled instead of the (B, T, C) array -- 2 on and above the diagonal gives
  ``2 G2``; -1 strictly above it, applied to ``-2 g_S1``, gives the *exclusive* ``2 G1`` (so no
  shifted copy, no sign pass, no doubling pass). Powers of two and signs are exact, so the sums
  are the plain ones to float rounding.
* **Fewer passes, in place, in pieces.** The chain runs on pieces of batch rows
  (``tuning.CAUSAL_PIECE``) in three piece-sized buffers, between whole products; the backward
  holds two (B, T, C) arrays where the plain lines write about a dozen. ``keep / S1`` is
  ``S1_{t-1} / S1_t^2``, a product with S1 shifted by one token (a view), not a shifted copy.
  Per-head numbers reach the coordinates by a product with the head indicator, not by NumPy's
  broadcast over p numbers at a time (several times slower per number).
* **Direct NumPy calls**, no array-API wrappers in the chain.

A clamped S1 (some ``w_0c`` with ``w_0c^2 <= s1_eps``: an exactly zero first token) goes to the
plain lines on every path. ``tests/test_kernels_causal.py`` checks both paths against the plain
lines in float64 and float32; tests/test_tssa_causal.py runs its autograd checks on each.
"""
from __future__ import annotations

import functools

import numpy as np

from . import compiled as _compiled
from . import tuning
from .kernels import _ones, head_indicator, softmax_heads

__all__ = ["causal_tssa_forward", "causal_tssa_backward", "causal_fast_length"]


def causal_fast_length(T: int) -> bool:
    """Whether these kernels take a sequence of T tokens (one triangular block)."""
    return 1 < T <= tuning.SCAN_WHOLE


@functools.lru_cache(maxsize=64)
def _triangle(T: int, dtype, kind: str) -> np.ndarray:
    """A read-only (T, T) matrix for the scans as products ``tri @ a`` over the token axis:
    "prefix" (ones on and below the diagonal: row t sums tokens 0..t), "suffix" (ones on and
    above it: tokens t..T-1), "suffix2" (2 there: twice those sums) or "strict_suffix_neg" (-1
    above it: minus the sums over tokens t+1..T-1, the exclusive suffix)."""
    i = np.arange(T)
    if kind == "prefix":
        m = (i[:, None] >= i[None, :]).astype(dtype)
    elif kind == "suffix":
        m = (i[:, None] <= i[None, :]).astype(dtype)
    elif kind == "suffix2":
        m = 2 * (i[:, None] <= i[None, :]).astype(dtype)
    elif kind == "strict_suffix_neg":
        m = -(i[:, None] < i[None, :]).astype(dtype)
    else:
        raise ValueError(kind)
    m.flags.writeable = False
    return m


def _row_pieces(B: int, T: int, C: int) -> list[tuple[int, int]]:
    """Ranges [b0, b1) of batch rows, about ``tuning.CAUSAL_PIECE`` numbers of a (B, T, C)
    array each: the whole chain of the layer runs on one piece while it sits in the cache."""
    R = max(1, tuning.CAUSAL_PIECE // max(1, T * C))
    return [(b, min(b + R, B)) for b in range(0, B, R)]


def _loops(B: int, T: int, C: int):
    """The compiled loops (:func:`tostnp.backend.compiled.loops`) for a layer of this size, or
    None: not from ``tuning.CAUSAL_COMPILED_MIN`` numbers on, or where they are off."""
    if B * T * C < tuning.CAUSAL_COMPILED_MIN:
        return None
    return _compiled.loops()


def causal_tssa_forward(x, w, params, h: int, s1_eps: float, pi_eps: float):
    """The causal TSSA forward from w = x @ W_u + b_u (B, T, C) (cached, not written) ->
    (y, cache) as :func:`tostnp.nn.tssa_causal.causal_forward`; None where the plain lines must
    run (without the compiled loops: T above one block; either way: a clamped S1)."""
    B, T, C = w.shape
    p = C // h
    loops = _loops(B, T, C)
    if loops is not None:
        return _forward_compiled(loops, x, w, params, h, s1_eps, pi_eps)
    if not causal_fast_length(T):
        return None
    w0 = w[:, 0, :]
    if bool((w0 * w0 <= s1_eps).any()):     # S1 at the first token is w^2 there (or NaN)
        return None                         # the clamp bites: the plain lines
    dt = w.dtype
    pieces = _row_pieces(B, T, C)
    R = pieces[0][1] - pieces[0][0]
    tri = _triangle(T, dt, "prefix")
    ones = _ones(p, dt)
    E = head_indicator(C, h, dt).T         # (h, C): a per-head (m, h) @ E is per coordinate
    bias = float(p) * params["denom_bias"][:, :T, 0].T                           # (T, h)
    temp = params["temp"][:, 0]                                                  # (h,)
    S1, r, v = (np.empty((B, T, C), dt) for _ in range(3))
    q, Pi, n_Pi = (np.empty((B, T, h), dt) for _ in range(3))
    state = {"S1": np.empty((B, C), dt), "S2": np.empty((B, C), dt),
             "S3": np.empty((B, h), dt), "t": T}
    buf_sq, buf_e, buf_m = (np.empty(R * T * C, dt), np.empty(R * T * C, dt),
                            np.empty(R * T, dt))
    for b0, b1 in pieces:
        n = b1 - b0
        m = n * T
        wp, S1p, rp, vp, Pip, nP = w[b0:b1], S1[b0:b1], r[b0:b1], v[b0:b1], Pi[b0:b1], n_Pi[b0:b1]
        sq = buf_sq[:m * C].reshape(n, T, C)
        e = buf_e[:m * C].reshape(n, T, C)
        np.multiply(wp, wp, out=sq)
        np.matmul(tri, sq, out=S1p)                                              # prefix(sq)
        sq /= S1p                                                                # sq / S1
        qp = q[b0:b1]
        np.vecdot(sq.reshape(n, T, h, p), ones, out=qp)
        qp += bias                                                               # + p bias
        np.multiply(qp, temp, out=Pip)
        softmax_heads(Pip, buf_m[:m].reshape(n, T, 1))                          # Pi
        np.matmul(Pip.reshape(m, h), E, out=e.reshape(m, C))                     # Pi per coord
        np.multiply(wp, e, out=vp)                                               # a = w Pi
        np.multiply(vp, wp, out=sq)                                              # Pi sq
        np.matmul(tri, sq, out=rp)                                               # S2, in r
        np.matmul(tri, Pip, out=nP)                                              # S3
        state["S2"][b0:b1] = rp[:, T - 1, :]
        state["S3"][b0:b1] = nP[:, T - 1, :]
        nP += pi_eps                                                             # n
        np.matmul(nP.reshape(m, h), E, out=e.reshape(m, C))                      # n per coord
        rp += e                                                                  # n + S2
        np.divide(e, rp, out=rp)                                                 # r = n/(n+S2)
        vp *= rp                                                                 # v = a r
    state["S1"][...] = S1[:, T - 1, :]
    y = (v.reshape(B * T, C) @ np.negative(params["W_o"])).reshape(B, T, C)     # v @ (-W_o)
    if "b_o" in params:
        y += params["b_o"]
    return y, _cache(x, w, params, h, S1, q, n_Pi, r, state, Pi)


def _cache(x, w, params, h, S1, q, n_Pi, r, state, Pi):
    return {"causal": True, "x": x, "params": params, "h": h, "p": w.shape[-1] // h,
            "w": w, "S1": S1, "clamped": False, "q": q, "n_Pi": n_Pi, "r": r,
            "decode_state": state, "Pi": np.swapaxes(Pi, 1, 2)}                  # (B, h, T)


def _forward_compiled(loops, x, w, params, h: int, s1_eps: float, pi_eps: float):
    """:func:`causal_tssa_forward` with the statistics as one compiled loop over the tokens."""
    B, T, C = w.shape
    p = C // h
    dt = w.dtype
    w = np.ascontiguousarray(w)
    S1, r, v = (np.empty((B, T, C), dt) for _ in range(3))
    q, Pi, n_Pi = (np.empty((B, T, h), dt) for _ in range(3))
    state = {"S1": np.empty((B, C), dt), "S2": np.empty((B, C), dt),
             "S3": np.empty((B, h), dt), "t": T}
    bias = np.ascontiguousarray(float(p) * params["denom_bias"][:, :T, 0].T)     # (T, h)
    temp = np.ascontiguousarray(params["temp"][:, 0])
    if not loops["causal_forward"](w, bias, temp, S1, q, Pi, n_Pi, r, v, state["S1"],
                                   state["S2"], state["S3"], dt.type(s1_eps),
                                   dt.type(pi_eps), dt.type(0)):
        return None                                       # the clamp bites: the plain lines
    y = (v.reshape(B * T, C) @ np.negative(params["W_o"])).reshape(B, T, C)     # v @ (-W_o)
    if "b_o" in params:
        y += params["b_o"]
    return y, _cache(x, w, params, h, S1, q, n_Pi, r, state, Pi)


def _backward_compiled(loops, dy, cache):
    """:func:`causal_tssa_backward` with the chain from G to g_w as one compiled loop."""
    params, h, p = cache["params"], cache["h"], cache["p"]
    B, T, C = dy.shape
    dt = dy.dtype
    x, w, S1, r = cache["x"], cache["w"], cache["S1"], cache["r"]
    Pi = np.ascontiguousarray(np.swapaxes(cache["Pi"], 1, 2))                   # (B, T, h)
    dy2 = dy.reshape(B * T, C)
    G = (dy2 @ params["W_o"].T).reshape(B, T, C)                                 # -g_v
    v = np.empty((B, T, C), dt)
    g_temp, g_db = np.zeros(h, dt), np.zeros((T, h), dt)
    # g_w is written into G's buffer: the loop reads each G[b, t, c] once, before it writes
    # g_w[b, t, c]; dx goes into v's buffer once g_W_o has it (the peak: two arrays, not four)
    loops["causal_backward"](np.ascontiguousarray(w), S1, r, Pi, cache["n_Pi"], cache["q"], G,
                             np.ascontiguousarray(params["temp"][:, 0]), v, G, g_temp, g_db,
                             dt.type(0), dt.type(1))
    return _finish_backward(params, x, dy2, _output_weight_grad(v, dy2), G, g_temp, g_db, v)


def _output_weight_grad(v, dy2):
    """g_W_o = -(v^T dy): y = v @ (-W_o)."""
    gWo = v.reshape(dy2.shape).T @ dy2
    return np.negative(gWo, out=gWo)


def _finish_backward(params, x, dy2, gWo, g_w, g_temp, g_db, dx):
    """Both backwards' end: the gradients from g_W_o, the sums g_temp (h,) and g_db (T, h)
    over the batch, and g_w (B, T, C); through w = x @ W_u + b_u, dx written into ``dx``, a
    (B, T, C) buffer of the caller's -> (dx, grads)."""
    B, T, C = dx.shape
    h = g_temp.shape[0]
    dt = dx.dtype
    g_w2 = g_w.reshape(B * T, C)
    grads = {"W_o": gWo, "temp": g_temp.reshape(h, 1)}
    if "b_o" in params:
        grads["b_o"] = np.ones(B * T, dt) @ dy2                                  # (C,)
    db = np.zeros((h, params["denom_bias"].shape[1], 1), dt)
    db[:, :T, 0] = (float(C // h) * g_db).T                                      # p g_q sums
    grads["denom_bias"] = db
    grads["W_u"] = x.reshape(B * T, C).T @ g_w2
    if "b_u" in params:
        grads["b_u"] = np.ones(B * T, dt) @ g_w2
    np.matmul(g_w2, params["W_u"].T, out=dx.reshape(B * T, C))
    return dx, grads


def causal_tssa_backward(dy, cache):
    """The backward of :func:`causal_tssa_forward` (or of the plain forward, when nothing was
    clamped and the sequence is one block), through w = x @ W_u + b_u too -> (dx, grads) as
    :func:`tostnp.nn.tssa_causal.causal_backward`; None where the plain lines must run.

    The plain lines' quantities, with G = dy W_o^T = -g_v (the sign folded into the products):
    -g_a = G r; -u = G v / n; g_S2 = -u r = (-u) r; sum_head u (1 - r) = sum_head g_S2 -
    sum_head (-u); 2 G2 = (2 suffix) @ g_S2; g_Pi = sum_head (g_a w + G2 sq) + suffix(g_n).
    With Q = 2 g_q / S1^2 per coordinate: Q sq = -2 g_S1, so 2 G1 (the exclusive suffix sum of
    g_S1) = (-strict suffix) @ (Q sq), and g_w = w (Q S1_{t-1} + 2 G1) + Pi (g_a + 2 w G2).
    """
    if cache["clamped"]:
        return None
    params, h, p = cache["params"], cache["h"], cache["p"]
    B, T, C = dy.shape
    loops = _loops(B, T, C)
    if loops is not None:
        return _backward_compiled(loops, dy, cache)
    if not causal_fast_length(T):
        return None
    dt = dy.dtype
    x, w, S1, r = cache["x"], cache["w"], cache["S1"], cache["r"]
    Pi = np.ascontiguousarray(np.swapaxes(cache["Pi"], 1, 2))                   # (B, T, h)
    n_Pi, qc = cache["n_Pi"], cache["q"]
    temp = params["temp"][:, 0]
    ones = _ones(p, dt)
    E = head_indicator(C, h, dt).T         # (h, C): a per-head (m, h) @ E is per coordinate
    pieces = _row_pieces(B, T, C)
    R = pieces[0][1] - pieces[0][0]
    bufs = [np.empty(R * T * C, dt) for _ in range(3)]
    ones_rows = np.ones(R * T, dt)
    tri_s2, tri_s = _triangle(T, dt, "suffix2"), _triangle(T, dt, "suffix")
    tri_g1 = _triangle(T, dt, "strict_suffix_neg")
    dy2 = dy.reshape(B * T, C)
    # v = w Pi r; y = v @ (-W_o): g_W_o = -(v^T dy); G = dy W_o^T = -g_v (whole products)
    v = np.empty((B, T, C), dt)
    for b0, b1 in pieces:
        n = b1 - b0
        Pc = bufs[0][:n * T * C].reshape(n * T, C)
        np.matmul(Pi[b0:b1].reshape(n * T, h), E, out=Pc)                       # Pi per coord
        np.multiply(w[b0:b1], Pc.reshape(n, T, C), out=v[b0:b1])
        v[b0:b1] *= r[b0:b1]
    gWo = _output_weight_grad(v, dy2)
    G = (dy2 @ params["W_o"].T).reshape(B, T, C)        # -g_v; g_w is written into it, piece by piece
    g_temp, g_db = np.zeros(h, dt), np.zeros(T * h, dt)
    for b0, b1 in pieces:
        n = b1 - b0
        m = n * T
        wp, S1p, rp, vp, Gp = w[b0:b1], S1[b0:b1], r[b0:b1], v[b0:b1], G[b0:b1]
        w4 = wp.reshape(n, T, h, p)
        Pip = Pi[b0:b1]
        Pc, ga_neg, X = (b[:m * C].reshape(n, T, C) for b in bufs)
        np.matmul(Pip.reshape(m, h), E, out=Pc.reshape(m, C))                   # Pi per coord
        np.multiply(Gp, rp, out=ga_neg)                                          # -g_a
        Gp *= vp                                                                 # -g_v v
        np.matmul(n_Pi[b0:b1].reshape(m, h), E, out=X.reshape(m, C))            # n per coord
        U = Gp
        U /= X                                                                   # -u
        gS2 = np.multiply(U, rp, out=vp)                                         # g_S2 = -u r
        g_n = np.vecdot(gS2.reshape(n, T, h, p), ones)
        g_n -= np.vecdot(U.reshape(n, T, h, p), ones)                            # sum u (1 - r)
        H = np.matmul(tri_s2, gS2, out=U)                                        # 2 G2
        sq = np.multiply(wp, wp, out=vp)
        g_Pi = np.vecdot(H.reshape(n, T, h, p), sq.reshape(n, T, h, p))
        g_Pi *= 0.5                                                              # G2 sq
        g_Pi -= np.vecdot(ga_neg.reshape(n, T, h, p), w4)                        # + g_a w
        g_Pi += np.matmul(tri_s, g_n)                                            # + suffix(g_n)
        H *= wp                                                                  # 2 w G2
        ga_neg -= H                                                              # -(g_a + 2 w G2)
        ga_neg *= Pc                                                             # -Pi (...)
        # Pi = softmax_k(temp_k q_k): g_l = Pi (g_Pi - sum_k Pi g_Pi), g_q = temp g_l
        g_Pi -= np.vecdot(Pip, g_Pi)[..., None]
        g_Pi *= Pip                                                              # g_l
        g_temp += ones_rows[:m] @ (g_Pi * qc[b0:b1]).reshape(m, h)
        g_q = g_Pi
        g_q *= temp
        g_db += ones_rows[:n] @ g_q.reshape(n, T * h)
        # q = sum_head sq / S1 + p bias; Q = 2 g_q / S1^2 per coordinate, in G's slot
        g_q *= 2.0
        Q = Gp
        np.matmul(g_q.reshape(m, h), E, out=Q.reshape(m, C))
        Q /= S1p
        Q /= S1p
        sq *= Q                                                                  # -2 g_S1
        G1x2 = np.matmul(tri_g1, sq, out=X)                                      # 2 G1
        Q[:, 1:, :] *= S1p[:, :-1, :]                                            # 2 g_q keep/S1
        Q[:, 0, :] = 0.0
        Q += G1x2
        Q *= wp
        Q -= ga_neg                                                              # g_w
    # w = x @ W_u + b_u (whole products); g_w is in G's buffer, dx goes into v's
    return _finish_backward(params, x, dy2, gWo, G, g_temp, g_db.reshape(T, h), v)
