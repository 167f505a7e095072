"""Compiled kernels (optional): the TSSA layer's statistics, non-causal and causal, forward and
backward, as loops over tokens compiled by Numba.

The NumPy kernels of :mod:`tostnp.backend.kernels` run each line of the layer on a piece of
tokens; every line is a NumPy call that reads its piece again, and the chain from ``w^2`` to
``a = w Pi`` sweeps a piece six times. Here one loop over tokens does the whole chain on a
token's row of C numbers while it sits in the first-level cache: the forward reads w twice
(the bias and S1, then the rest) and writes a once, over w (the backward reads w back as
a / Pi); the backward reads w (or a) and g_a twice and writes g_w once. That is the least
memory traffic the lines allow: S1 (and in the backward gq_sq) is a sum over every token that
the second loop needs.

The causal layer is a loop over tokens by nature: its prefix sums (S1, S2, S3) are running
sums in the forward, its suffix sums (G2, of g_n, the exclusive G1) running sums in a backward
that starts from the last token, so each direction is one loop over a batch row, reading each
(B, T, C) input once; the NumPy kernels (:mod:`tostnp.backend.kernels_causal`) need a product
with a (T, T) triangle for each sum and a pass per line.

Optional. Numba is a well-kept compiler made for exactly this (NumPy loops to machine code);
numexpr, the other candidate, has no reductions worth using here (several times slower than
NumPy's, measured) and cannot fuse the per-head softmax. Without Numba -- not installed, too
old for this NumPy, in Pyodide, or switched off (``TOSTNP_JIT=0`` in the environment, or
:func:`set_jit`, also ``tostnp.backend.set_jit``) -- the NumPy kernels run instead;
:func:`loops` is None then. Each loop is compiled on its first call in a process, per dtype,
and never cached on disk. :mod:`tostnp.backend.kernels` owns the arrays and the order of the
lines; this module holds only the loops over tokens.

Sums over tokens accumulate in the arrays' dtype, token after token, as the NumPy kernels'
einsum does; sums over a head's coordinates may be reordered (``fastmath`` reassociation, for
vector instructions). NaN and infinity propagate as in the plain lines: no ``nnan``/``ninf``
(one difference: the causal running sums leave the tokens before a NaN finite, where the plain
lines' product with a triangle of ones spreads it to them, 0 NaN being NaN). The tests check
these loops against the plain lines in float64 (tests/test_kernels.py,
``test_tssa_statistics_in_pieces_match_plain``; tests/test_kernels_causal.py), and the causal
ones against autograd and a naive loop too (tests/test_tssa_causal.py, ``causal_path``).
"""
from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

_state = {}          # "numba": the module, or "why": why the kernels are unavailable
_on = os.environ.get("TOSTNP_JIT", "1") != "0"


def set_jit(on: bool) -> bool:
    """Switch the compiled kernels on or off for the whole process; returns the old setting."""
    global _on
    old, _on = _on, bool(on)
    return old


def active() -> bool:
    """Whether the kernels that have a compiled twin hand over to it: on, and Numba imports."""
    return _on and available()


def available() -> bool:
    """Whether Numba imports here (tried once per process; never in Pyodide)."""
    if "numba" not in _state and "why" not in _state:
        if sys.platform == "emscripten":
            _state["why"] = "not in Pyodide"
        else:
            try:
                import numba
                _state["numba"] = numba
            except Exception as e:          # not installed, or built for another NumPy
                _state["why"] = f"numba does not import: {type(e).__name__}: {e}"[:200]
    return "numba" in _state


def describe() -> str:
    """One line for reports: the Numba version in use, or why there is none."""
    if not _on:
        return "off (TOSTNP_JIT=0 or set_jit(False))"
    if available():
        return f"numba {_state['numba'].__version__}"
    return _state["why"]


_loops = {}
_lock = threading.Lock()     # the layer's batch slices may ask for the loops at once


def loops():
    """The compiled loops ({"forward_sums", "forward_rest", "backward_sums", "backward_rest"}
    of the non-causal layer, {"causal_forward", "causal_backward"} of the causal one; Numba
    dispatchers, each compiled per dtype on its first call) where they are on (:func:`active`),
    else None. :func:`tostnp.backend.kernels.tssa_statistics` and ``tssa_statistics_backward``
    own the arrays and the order of the lines, and run the first four on each batch row;
    :mod:`tostnp.backend.kernels_causal` runs the causal two on the whole batch."""
    if not active():
        return None
    with _lock:
        if not _loops:
            _loops.update(_define(_state["numba"]))
    return _loops


def _define(numba) -> dict:
    """The loops, as Numba dispatchers."""
    # reassociation lets a head's dot product use vector registers; contraction allows FMA
    jit = numba.njit(nogil=True, fastmath={"reassoc", "contract"}, boundscheck=False,
                     error_model="numpy", cache=False)

    # inlined into the loops that call it (Numba's own inlining: no call per token)
    @numba.njit(nogil=True, fastmath={"reassoc", "contract"}, boundscheck=False,
                error_model="numpy", cache=False, inline="always")
    def softmax_exp(l):
        """l (h,) := exp(l - max l), in place (a NaN is the maximum); returns their sum: the
        softmax is l / the sum, divided where the caller writes it."""
        h = l.shape[0]
        mx = l[0]
        for k in range(1, h):
            if l[k] > mx or l[k] != l[k]:
                mx = l[k]
        tot = 0.0
        for k in range(h):
            e = math.exp(l[k] - mx)
            l[k] = e
            tot += e
        return tot

    @numba.njit(nogil=True, boundscheck=False, error_model="numpy", cache=False,
                inline="always")
    def w_scale(pi, from_a, one):
        """What a token's a = w Pi of one head is multiplied by to give its w: 1 / Pi with
        ``from_a`` (the forward wrote a over w; :func:`tostnp.backend.kernels.w_recoverable`
        checked Pi), else 1 (w * 1 is w exactly). ``one``: 1 in the arrays' dtype."""
        return one / pi if from_a else one

    @jit
    def forward_sums(w, b, has_b, S1):
        """w (N, C) += b (in place, with has_b); S1 (C,) += sum_n w^2. w may be the first C
        columns of an (N, C + 1) buffer: its C is S1's."""
        N, C = w.shape[0], S1.shape[0]
        for n in range(N):
            if has_b:
                for c in range(C):
                    v = w[n, c] + b[c]
                    w[n, c] = v
                    S1[c] += v * v
            else:
                for c in range(C):
                    v = w[n, c]
                    S1[c] += v * v

    @jit
    def forward_rest(w, inv_S1, temp, q, Pi, n_Pi, S2, ones_column, zero):
        """q, Pi (N, h), n_Pi (h,) += sum_n Pi, S2 (C,) += sum_n Pi w^2, and a = w Pi written
        over w, in place: w is (N, C), or (N, C + 1) with ones_column, its last column then
        set to 1 ([a | 1]); one batch row. Each token's w is read before its a is written."""
        N, C = w.shape[0], inv_S1.shape[0]
        h = q.shape[1]
        p = C // h
        l = np.empty(h, np.float64)
        nP = np.zeros(h, np.float64)
        for n in range(N):
            for k in range(h):
                acc = zero
                for i in range(p):
                    c = k * p + i
                    v = w[n, c]
                    acc += v * v * inv_S1[c]
                q[n, k] = acc
                l[k] = temp[k] * acc
            tot = softmax_exp(l)
            for k in range(h):
                Pi[n, k] = l[k] / tot
                pi = Pi[n, k]
                nP[k] += pi
                for i in range(p):
                    c = k * p + i
                    v = w[n, c]
                    w[n, c] = v * pi
                    S2[c] += pi * (v * v)
            if ones_column:
                w[n, C] = 1
        for k in range(h):
            n_Pi[k] += nP[k]

    @jit
    def backward_sums(w, g_a, Pi, q, temp, g_S2, g_n, g_q, gq_sq, g_temp, zero, one, from_a):
        """g_q (N, h), gq_sq (C,) += sum_n g_q w^2 and g_temp (h,) += sum_n g_l q, one row.
        With from_a, ``w`` is a = w Pi (N, C[+1]) and w is a / Pi (:func:`w_scale`)."""
        N, C = g_a.shape
        h = q.shape[1]
        p = C // h
        gP = np.empty(h, np.float64)
        gt = np.zeros(h, np.float64)
        for n in range(N):
            s = 0.0
            for k in range(h):
                f = w_scale(Pi[n, k], from_a, one)
                acc = zero
                for i in range(p):
                    c = k * p + i
                    v = w[n, c] * f
                    acc += g_a[n, c] * v + (v * v) * g_S2[c]
                gP[k] = acc + g_n[k]
                s += Pi[n, k] * gP[k]
            for k in range(h):
                gl = Pi[n, k] * (gP[k] - s)
                gt[k] += gl * q[n, k]
                g_q[n, k] = gl * temp[k]
                gq = g_q[n, k]
                f = w_scale(Pi[n, k], from_a, one)
                for i in range(p):
                    c = k * p + i
                    v = w[n, c] * f
                    gq_sq[c] += gq * (v * v)
        for k in range(h):
            g_temp[k] += gt[k]

    @jit
    def backward_rest(w, g_a, Pi, g_q, g_S2, inv_S1, g_S1, g_b, has_b, one, from_a):
        """g_a (N, C) := 2 w (Pi g_S2 + g_q inv_S1 + g_S1) + g_a Pi, in place; g_b (C,) +=
        sum_n of it with has_b. With from_a, ``w`` is a = w Pi (N, C[+1]), as in
        backward_sums."""
        N, C = g_a.shape
        h = Pi.shape[1]
        p = C // h
        for n in range(N):
            for k in range(h):
                pi = Pi[n, k]
                gq = g_q[n, k]
                f = w_scale(pi, from_a, one)
                if has_b:
                    for i in range(p):
                        c = k * p + i
                        v = w[n, c] * f
                        gw = (v + v) * (pi * g_S2[c] + gq * inv_S1[c] + g_S1[c]) + g_a[n, c] * pi
                        g_a[n, c] = gw
                        g_b[c] += gw
                else:
                    for i in range(p):
                        c = k * p + i
                        v = w[n, c] * f
                        g_a[n, c] = (v + v) * (pi * g_S2[c] + gq * inv_S1[c] + g_S1[c]) \
                            + g_a[n, c] * pi

    @jit
    def causal_forward(w, bias, temp, S1, q, Pi, n_Pi, r, v, st_S1, st_S2, st_S3, s1_eps,
                       pi_eps, zero):
        """The causal layer's statistics, token after token, every batch row: S1, q, Pi,
        n_Pi = S3 + pi_eps, r = n / (n + S2) and v = w Pi r (B, T, *), and the last token's
        sums (st_*); bias (T, h) is p denom_bias. False, at once, where S1 at the first
        token is at most s1_eps (the clamp: the caller runs the plain lines)."""
        B, T, C = w.shape
        h = q.shape[2]
        p = C // h
        s1 = np.empty(C, w.dtype)
        s2 = np.empty(C, w.dtype)
        s3 = np.empty(h, w.dtype)
        l = np.empty(h, np.float64)
        for b in range(B):
            for c in range(C):
                v0 = w[b, 0, c]
                if v0 * v0 <= s1_eps:
                    return False
                s1[c] = zero
                s2[c] = zero
            for k in range(h):
                s3[k] = zero
            for t in range(T):
                for c in range(C):
                    x = w[b, t, c]
                    s1[c] += x * x
                    S1[b, t, c] = s1[c]
                for k in range(h):
                    acc = zero
                    for i in range(p):
                        c = k * p + i
                        x = w[b, t, c]
                        acc += x * x / s1[c]
                    q[b, t, k] = acc + bias[t, k]
                    l[k] = temp[k] * q[b, t, k]
                tot = softmax_exp(l)
                for k in range(h):
                    Pi[b, t, k] = l[k] / tot
                    pi = Pi[b, t, k]
                    s3[k] += pi
                    nk = s3[k] + pi_eps
                    n_Pi[b, t, k] = nk
                    for i in range(p):
                        c = k * p + i
                        x = w[b, t, c]
                        a = x * pi
                        s2[c] += a * x
                        rr = nk / (nk + s2[c])
                        r[b, t, c] = rr
                        v[b, t, c] = a * rr
            for c in range(C):
                st_S1[b, c] = s1[c]
                st_S2[b, c] = s2[c]
            for k in range(h):
                st_S3[b, k] = s3[k]
        return True

    @jit
    def causal_backward(w, S1, r, Pi, n_Pi, q, G, temp, v, g_w, g_temp, g_db, zero, one):
        """The causal layer's backward from G = dy W_o^T = -g_v to g_w, every batch row,
        token after token from the last: the suffix sums G2 (of g_S2), of g_n, and G1 (of
        g_S1, exclusive) are running sums. Writes v = w Pi r (B, T, C) for g_W_o; adds to
        g_temp (h,) and to g_db (T, h) the sums over the batch of g_l q and of g_q. g_w may
        be G itself: each G[b, t, c] is read once, before g_w[b, t, c] is written."""
        B, T, C = w.shape
        h = q.shape[2]
        p = C // h
        G2 = np.empty(C, w.dtype)
        G1 = np.empty(C, w.dtype)
        sgn = np.empty(h, w.dtype)
        gP = np.empty(h, np.float64)
        gt = np.zeros(h, np.float64)
        gqs = np.empty(h, w.dtype)                  # g_q of a token, in the arrays' dtype
        for b in range(B):
            for c in range(C):
                G2[c] = zero
                G1[c] = zero
            for k in range(h):
                sgn[k] = zero
            for t in range(T - 1, -1, -1):
                s = 0.0
                for k in range(h):
                    pi = Pi[b, t, k]
                    nk = n_Pi[b, t, k]
                    acc = zero
                    gn = zero
                    for i in range(p):
                        c = k * p + i
                        x = w[b, t, c]
                        rr = r[b, t, c]
                        Gc = G[b, t, c]
                        vv = x * pi * rr
                        v[b, t, c] = vv
                        ga = -(Gc * rr)                      # g_a = g_v r
                        u = -(Gc * vv) / nk                  # u = g_v v / n
                        gs2 = -(u * rr)                      # g_S2
                        gn += u + gs2                        # u (1 - r)
                        G2[c] += gs2                         # suffix, t included
                        acc += ga * x + G2[c] * (x * x)
                        g_w[b, t, c] = ga + (x + x) * G2[c]  # g_a + 2 w G2, times Pi below
                    sgn[k] += gn
                    gP[k] = acc + sgn[k]
                    s += pi * gP[k]
                for k in range(h):
                    pi = Pi[b, t, k]
                    gl = pi * (gP[k] - s)
                    gt[k] += gl * q[b, t, k]
                    gqs[k] = gl * temp[k]
                    gq = gqs[k]
                    g_db[t, k] += gq
                    for i in range(p):
                        c = k * p + i
                        x = w[b, t, c]
                        inv = one / S1[b, t, c]
                        prev = S1[b, t - 1, c] if t > 0 else zero
                        g_w[b, t, c] = (x + x) * (gq * (prev * inv * inv) + G1[c]) \
                            + pi * g_w[b, t, c]
                        G1[c] -= gq * (x * x) * inv * inv     # g_S1, after its use: exclusive
        for k in range(h):
            g_temp[k] += gt[k]

    # ``zero`` (a scalar of the arrays' dtype) starts the per-head sums: a literal 0 would make
    # them float64 (Numba types float32 * int as float64), half as fast in float32
    return {"forward_sums": forward_sums, "forward_rest": forward_rest,
            "backward_sums": backward_sums, "backward_rest": backward_rest,
            "causal_forward": causal_forward, "causal_backward": causal_backward}
