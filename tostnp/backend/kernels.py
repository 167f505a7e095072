"""The NumPy fast path: the hot elementwise chains of training, with fewer passes over memory,
in cache-sized pieces, on several threads for large arrays.

The plain array-API code in :mod:`tostnp.nn` and :mod:`tostnp.train.optim` is the
specification; every function here computes the same quantity for NumPy arrays, under the name
of its plain twin and with the same cache fields (GELU's gate s, LayerNorm's xhat and rstd), and
is chosen by :func:`tostnp.backend.fused` only (CuPy and ``array_api_strict`` run the plain
code). The plain forms write one fresh temporary per operator (``0.5 * (1.0 + xp.tanh(u))`` is
three passes and three new arrays); here each chain runs in place with ``out=`` arguments, and
reductions that would need a temporary become matrix-vector products. ``tests/test_kernels.py``
checks each against the plain path on random shapes in float32 and float64.

What it does beyond the plain code:

* **In place**: a chain of operators writes into the output buffers, no temporary per operator.
* **In cache-sized pieces**: every kernel works on its arrays as rows ``(M, L)`` and runs the
  whole chain on one piece of about ``tuning.CHUNK`` elements before the next, so the passes
  of a chain read and write a piece that sits in the core's cache instead of sweeping the whole
  array from memory each time. Arrays under ``tuning.PIECES_MIN`` elements run whole: they
  stay in the caches anyway, and a piece costs Python calls (:mod:`tostnp.backend.tuning` says
  how both were chosen).
* **On several threads, for large arrays**: with :func:`set_threads` above 1 (``--threads``)
  the pieces of a kernel are split between threads (NumPy releases the GIL inside its loops;
  its own elementwise operations use one thread). This pays only where BLAS's idle threads
  sleep: OpenBLAS's spin for a while after each matrix product and take the second core
  (:mod:`tostnp.backend.openblas` shortens the spin when tostnp is imported before NumPy). The pieces, and the order in which their partial sums
  are added, depend only on the shapes, so the result is bit-identical for any thread count.

Why plain NumPy and not a fused-expression library: numexpr (2.14, the usual choice) was
measured against these in-place forms on the LM's MLP shape and lost (its tanh and exp are
scalar libm calls, NumPy 2.x's are vectorised, and its per-block interpreter costs more than an
in-place NumPy pass over arrays that sit in cache); the thread pool here is the standard
library's.

Besides the chains: :func:`add_rows`, the bias add of every linear map (through
:func:`tostnp.backend.add_bias`; the MLP's first bias is added inside :func:`gelu_forward`'s
pieces instead, and its gradient summed inside :func:`gelu_backward`'s), and :func:`adamw_update_flat`, the AdamW update of a group of
parameters in one call on flat moments (:class:`tostnp.train.optim.AdamW` keeps one group per
dtype and weight decay).

Shapes: ``(..., C)`` arrays with the statistics over the last axis, as in :mod:`tostnp.nn.layers`.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import tuning
from . import compiled as _compiled

__all__ = ["add_rows", "gelu_forward", "gelu_backward", "gelu_forward_slope",
           "gelu_slope_backward", "log_softmax", "layer_norm_forward",
           "layer_norm_backward", "adamw_update", "softmax_cross_entropy_backward", "sum_leading",
           "set_threads", "get_threads", "on_threads", "shard_bounds", "flat_zeros", "adamw_update_flat",
           "matmul_into", "tssa_in_pieces", "tssa_statistics", "output_weights_ones",
           "head_indicator", "softmax_heads"]

# ---------------------------------------------------------------------------------------------
# the piece executor: rows of an (M, L) view, in pieces of about tuning.CHUNK elements
# ---------------------------------------------------------------------------------------------
_threads = 1
_pool: ThreadPoolExecutor | None = None
_pool_pid = None


def set_threads(n: int) -> int:
    """Threads for the fast path's kernels (``tostnp.backend.threads`` sets it with BLAS's);
    returns the old count. 1 runs every piece on the calling thread."""
    global _threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"threads must be a positive int, got {n!r}")
    old, _threads = _threads, n
    return old


def get_threads() -> int:
    return _threads


def _executor(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid() or _pool._max_workers < n:
        if _pool is not None and _pool_pid == os.getpid():
            _pool.shutdown(wait=False)        # (a forked child has none of the parent's threads)
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tostnp-fused")
        with _signals_held():
            barrier = threading.Barrier(n + 1)    # every worker started and registered now
            for _ in range(n):
                pool.submit(barrier.wait)
            barrier.wait()
        _pool, _pool_pid = pool, os.getpid()
    return _pool


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM noted, not handled, inside the block (on the main thread; elsewhere
    nothing to do: Python runs signal handlers on the main thread only), then handled as they
    would have been. Around the start of the pool's threads: a handler that raises (SIGINT
    during an evaluation in training, :class:`tostnp.train.signals.SignalFlag`) would otherwise
    land inside ``Thread.start`` -- leaving a thread that Python's exit waits for forever, or
    one that prints a KeyError traceback as it starts (both seen in CI's random-kill test,
    tests/test_reliability_kills.py)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []
    old = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        old[sig] = signal.signal(sig, lambda signum, frame: seen.append(signum))
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
        for sig in seen:
            signal.raise_signal(sig)      # the handler of before, now, outside the block


def close_pool() -> None:
    """Stop the pool's threads (each ends once idle; nothing waits for them); the next
    :func:`on_threads` starts a new pool. The command line calls it on its way out
    (``tostnp.__main__.main``).

    Why: the pool's threads are ThreadPoolExecutor's, which Python's exit joins, and which its
    own exit hook stops only if each was registered. A signal whose handler raises (SIGINT
    during an evaluation in training, :class:`tostnp.train.signals.SignalFlag`) can land in the
    first ``submit`` between a thread's start and its registration: that thread then waits for
    work forever and the interpreter never exits (seen once in CI, in the random-kill test of
    tests/test_reliability_kills.py). ``shutdown`` wakes every thread of the pool, registered
    or not, through the pool's own queue."""
    global _pool
    if _pool is not None and _pool_pid == os.getpid():
        _pool.shutdown(wait=False)
    _pool = None


def _pieces(M: int, L: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of about tuning.CHUNK elements each covering rows 0..M (shapes only);
    one range for arrays under tuning.PIECES_MIN elements, which fit in the caches as they are."""
    if M * L < tuning.PIECES_MIN:
        return [(0, M)]
    rows = max(1, tuning.CHUNK // max(1, L))
    return [(lo, min(lo + rows, M)) for lo in range(0, M, rows)]


def on_threads(thunks) -> list:
    """Call every thunk, the first on the calling thread and each other on a thread of the
    pool; returns their results in order (an exception in any is raised here, after all have
    finished). The pool is the fast path's own, so the caller decides how many run at once."""
    thunks = list(thunks)
    if len(thunks) <= 1:
        return [t() for t in thunks]
    futures = [_executor(len(thunks) - 1).submit(t) for t in thunks[1:]]
    try:
        first = thunks[0]()
    finally:
        rest = [f.exception() for f in futures]        # waits: no thunk outlives the call
    for e in rest:
        if e is not None:
            raise e
    return [first] + [f.result() for f in futures]


def shard_bounds(rows: int, row_elements: int, min_elements: int) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) that cut ``rows`` rows (a batch along axis 0) into one slice per
    thread (:func:`set_threads`), as many as keep at least ``min_elements`` numbers (rows x
    ``row_elements``) in each; ``[(0, rows)]`` when that is one. Shapes and the thread count
    decide, nothing else."""
    n = max(1, min(_threads, rows, rows * row_elements // max(1, min_elements)))
    return [(s * rows // n, (s + 1) * rows // n) for s in range(n)]


def _summed_pieces(fn, M: int, L: int):
    """The sum of ``fn(lo, hi)`` over the pieces of :func:`_run_pieces` (None when ``fn``
    returns None): per-piece partial sums, added in piece order."""
    parts = _run_pieces(fn, M, L)
    total = parts[0]
    if total is not None:
        for part in parts[1:]:
            total += part
    return total


def _run_pieces(fn, M: int, L: int):
    """fn(lo, hi) for every piece of rows of an (M, L) view; returns the list of the results in
    piece order."""
    pieces = _pieces(M, L)
    n = min(_threads, len(pieces))
    if n <= 1:
        return [fn(lo, hi) for lo, hi in pieces]
    k = len(pieces)
    groups = [pieces[i * k // n:(i + 1) * k // n] for i in range(n)]
    out = []
    for part in on_threads([lambda g=g: [fn(lo, hi) for lo, hi in g] for g in groups]):
        out.extend(part)
    return out


def _rows(a):
    """(..., L) -> an (M, L) view (a 0-d or 1-d array is one row; empty arrays work too)."""
    if a.ndim == 0:
        return a.reshape(1, 1)
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


# ---------------------------------------------------------------------------------------------
# sums over rows as vector-matrix products
# ---------------------------------------------------------------------------------------------
_ONES: dict = {}


def _ones(n: int, dtype):
    """A read-only vector of n ones (kept: the same few lengths come back every step)."""
    key = (n, np.dtype(dtype))
    v = _ONES.get(key)
    if v is None:
        if len(_ONES) > 64:
            _ONES.clear()
        v = _ONES[key] = np.ones(n, dtype)
        v.flags.writeable = False
    return v


def sum_leading(a):
    """Sum over every axis but the last: (..., L) -> (L,), as ones @ a (BLAS).

    NumPy's ``sum(axis=0)`` of a (M, L) array and its row sums over a short last axis loop
    element by element, the matrix-vector product runs in BLAS; bias and LayerNorm/LayerScale
    gradients are such sums."""
    a2 = _rows(a)
    return _ones(a2.shape[0], a2.dtype) @ a2


def add_rows(a, b):
    """a += b in place for a (..., C) and b (C,): the bias add of every linear map.

    NumPy's broadcast add runs its inner loop once per row of C numbers; here a C-contiguous
    ``a`` is viewed as rows of k*C numbers (k rows at a time, about ``tuning.ADD_ROWS_TILE``
    numbers) and b repeated k times is added to each: the same sums, a fraction of the loop
    calls (the rows left over, fewer than k, get the plain add)."""
    C = b.shape[0]
    M = a.size // C if C else 0
    k = min(M, tuning.ADD_ROWS_TILE // max(1, C))
    if k <= 1 or not a.flags.c_contiguous:
        a += b
        return a
    a2 = a.reshape(M, C)
    full = M - M % k
    a2[:full].reshape(full // k, k * C).__iadd__(np.tile(b, k))
    if full < M:
        a2[full:] += b
    return a


_GELU_A = math.sqrt(2.0 / math.pi)
_GELU_B = 0.044715


# ---------------------------------------------------------------------------------------------
# GELU, tanh form, with the bias add of the linear map before it and that bias's gradient
# ---------------------------------------------------------------------------------------------
def gelu_forward(x, b=None):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as y = x s with the gate
    s = 0.5 (1 + tanh(u)) (what the plain path caches too).

    x: (...) -> (y (...), s (...)). With ``b`` ((L,) for x (..., L)): x += b first, in place,
    piece by piece (x must then be the caller's own fresh array: the product of the linear map
    before the GELU, whose bias add this is), so the add costs no pass of its own over memory.
    (NumPy's float32 tanh has SIMD loops for AVX2 and AVX-512 from NumPy 2.x: the tanh form was
    faster than the sigmoid form 1 / (1 + exp(-2u)) here, whose reciprocal has none; docs/tuning.md.)
    """
    x2 = _rows(x)
    y, s = np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)
    y2, s2 = _rows(y), _rows(s)

    def piece(lo, hi):
        xi, si = x2[lo:hi], s2[lo:hi]
        if b is not None:
            xi += b
        np.multiply(xi, xi, out=si)                                # x^2
        si *= _GELU_A * _GELU_B
        si += _GELU_A                                              # a (1 + b x^2)
        si *= xi                                                   # u
        np.tanh(si, out=si)
        si += 1.0
        si *= 0.5                                                  # s = 0.5 (1 + tanh u)
        np.multiply(xi, si, out=y2[lo:hi])
    _run_pieces(piece, *x2.shape)
    return y, s


def gelu_backward(dy, x, s, bias_grad: bool = False):
    """dx = dy * dy/dx with dy/dx = s (1 + 2 sqrt(2/pi) x (1 - s) (1 + 3 * 0.044715 x^2)),
    the formula of :func:`tostnp.nn.layers.gelu_backward` (s, the gate, cached by both paths).
    With ``bias_grad``: (dx, db), db the sum of dx over every axis but the last (the gradient
    of the bias :func:`gelu_forward` added), summed piece by piece while each is in cache."""
    dy2, x2, s2 = _rows(dy), _rows(x), _rows(s)
    g = np.empty(dy.shape, np.result_type(dy, x))
    g2 = _rows(g)

    def piece(lo, hi):
        xi, si, gi = x2[lo:hi], s2[lo:hi], g2[lo:hi]
        np.multiply(xi, xi, out=gi)
        gi *= 6.0 * _GELU_A * _GELU_B
        gi += 2.0 * _GELU_A
        gi *= xi                                                   # 2a x (1 + 3b x^2)
        one_minus_s = np.subtract(1.0, si, dtype=si.dtype)         # a piece: stays in cache
        gi *= one_minus_s
        gi += 1.0
        gi *= si
        gi *= dy2[lo:hi]
        return sum_leading(gi) if bias_grad else None
    db = _summed_pieces(piece, *g2.shape)
    return (g, db) if bias_grad else g


def gelu_forward_slope(x, b=None):
    """The GELU of :func:`gelu_forward`, y = x s, and its slope D = dy/dx, for a training step's
    MLP: its backward is then dh = dy D, one pass, and the cache holds D alone instead of x and
    the gate s (one (..., L) array less a layer). The same y, bit for bit (0.5 (1 + t) x, with
    t = tanh u, rounds as x (1 + t) 0.5: a product by 0.5 is exact).

    D = s (1 + 2 x (1 - s) u') with s = (1 + t) / 2 and u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    (:func:`tostnp.nn.layers.gelu_backward`), written with 1 - s = (1 - t) / 2 as
    D = 0.5 (1 + t) (1 + x (1 - t) u'); 1 - t comes from t itself, not from 1 - s, so no digits
    are lost where s is near 1. x^2 is computed once for u and u', while the piece is in cache.

    x: (...), b: (L,) or None (x += b first, in place, as :func:`gelu_forward`) -> (y, D).
    """
    x2 = _rows(x)
    y, D = np.empty(x.shape, x.dtype), np.empty(x.shape, x.dtype)
    y2, D2 = _rows(y), _rows(D)

    def piece(lo, hi):
        xi, yi, Di = x2[lo:hi], y2[lo:hi], D2[lo:hi]
        if b is not None:
            xi += b
        p = np.multiply(xi, xi)                                    # x^2 (a piece: in cache)
        t = np.multiply(p, _GELU_A * _GELU_B)
        t += _GELU_A
        t *= xi                                                    # u
        np.tanh(t, out=t)
        np.subtract(1.0, t, out=Di)                                # 1 - t
        t += 1.0                                                   # 1 + t
        np.multiply(xi, t, out=yi)
        yi *= 0.5                                                  # y = x (1 + t) / 2
        p *= 3.0 * _GELU_A * _GELU_B
        p += _GELU_A
        p *= xi                                                    # x u'
        Di *= p
        Di += 1.0
        Di *= t
        Di *= 0.5                                                  # D
    _run_pieces(piece, *x2.shape)
    return y, D


def gelu_slope_backward(dy, D, bias_grad: bool = False):
    """dx = dy D for D from :func:`gelu_forward_slope`; with ``bias_grad``: (dx, db), db the
    sum of dx over every axis but the last, summed piece by piece while each is in cache."""
    dy2, D2 = _rows(dy), _rows(D)
    g = np.empty(dy.shape, np.result_type(dy, D))
    g2 = _rows(g)

    def piece(lo, hi):
        gi = np.multiply(dy2[lo:hi], D2[lo:hi], out=g2[lo:hi])
        return sum_leading(gi) if bias_grad else None
    db = _summed_pieces(piece, *g2.shape)
    return (g, db) if bias_grad else g


# ---------------------------------------------------------------------------------------------
# LayerNorm over the last axis
# ---------------------------------------------------------------------------------------------
def layer_norm_forward(x, gamma, beta, eps: float):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta (beta None: no shift) -> (y, xhat, rstd).

    x: (..., C); the variance is a row-wise dot product (no squared temporary). gamma None
    (then beta None too): no scale and no shift, y is xhat itself (the block's LayerNorms whose
    gamma and beta are folded into the next product, :mod:`tostnp.nn.block_fold`).
    """
    C = x.shape[-1]
    x2 = _rows(x)
    M = x2.shape[0]
    xhat = np.empty(x.shape, x.dtype)
    y = xhat if gamma is None else np.empty(x.shape, x.dtype)
    rstd = np.empty(x.shape[:-1] + (1,), x.dtype)
    y2, xh2, r2 = _rows(y), _rows(xhat), rstd.reshape(M, 1)

    def piece(lo, hi):
        xi, xh, ri = x2[lo:hi], xh2[lo:hi], r2[lo:hi]
        mu = (xi @ _ones(C, xi.dtype))[:, None]                    # (rows, 1) C * mean
        mu *= 1.0 / C
        np.subtract(xi, mu, out=xh)                                # x - mu
        ri[:, 0] = np.vecdot(xh, xh)                               # C * var
        ri *= 1.0 / C
        ri += eps
        np.sqrt(ri, out=ri)
        np.reciprocal(ri, out=ri)                                  # (rows, 1)
        xh *= ri
        if gamma is None:
            return
        yi = y2[lo:hi]
        np.multiply(xh, gamma, out=yi)
        if beta is not None:
            yi += beta
    _run_pieces(piece, M, C)
    return y, xhat, rstd


def layer_norm_backward(dy, xhat, rstd, gamma, has_beta: bool = True):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma -> (dx, dgamma, dbeta);
    dbeta is None when ``has_beta`` is False. gamma None (no scale, no shift): g = dy, and
    dgamma and dbeta are None.

    The two row means are matrix-vector products with gamma (mean(g) = dy @ gamma / C and
    mean(g xhat) = (dy xhat) @ gamma / C), so per piece only dy * xhat and dx are written;
    dgamma and dbeta are sums of per-piece sums, added in piece order.
    """
    C = dy.shape[-1]
    dy2, xh2 = _rows(dy), _rows(xhat)
    M = dy2.shape[0]
    r2 = rstd.reshape(M, 1)
    dx = np.empty(dy.shape, np.result_type(dy, xhat))
    dx2 = dx.reshape(M, C)

    scale = _ones(C, dx.dtype) if gamma is None else gamma

    def piece(lo, hi):
        dyi, xh, dxi = dy2[lo:hi], xh2[lo:hi], dx2[lo:hi]
        p = np.multiply(dyi, xh)                                   # (rows, C) dy xhat
        dgamma = None if gamma is None else sum_leading(p)         # (C,) this piece's part
        dbeta = sum_leading(dyi) if has_beta else None
        a = (dyi @ scale)[:, None]                                 # (rows, 1) C mean(g)
        b = (p @ scale)[:, None]                                   # (rows, 1) C mean(g xhat)
        a *= 1.0 / C
        b *= 1.0 / C
        np.multiply(xh, b, out=p)                                  # xhat mean(g xhat)
        if gamma is None:
            np.subtract(dyi, a, out=dxi)                           # g - mean(g)
        else:
            np.multiply(dyi, gamma, out=dxi)                       # g
            dxi -= a
        dxi -= p
        dxi *= r2[lo:hi]
        return dgamma, dbeta
    parts = _run_pieces(piece, M, C)
    if gamma is None:
        return dx, None, None
    dgamma = parts[0][0]
    for part in parts[1:]:
        dgamma += part[0]
    dbeta = None
    if has_beta:
        dbeta = parts[0][1]
        for part in parts[1:]:
            dbeta += part[1]
    return dx, dgamma, dbeta


# ---------------------------------------------------------------------------------------------
# non-causal TSSA: the token statistics between the layer's two matrix products
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=64)
def head_indicator(C: int, h: int, dtype) -> np.ndarray:
    """E (C, h), E[c, k] = 1 where coordinate c belongs to head k (c // p == k): the plain
    line's array (:func:`tostnp.nn.tssa_heads.head_indicator`), built once per shape and dtype
    and read-only (every layer call and decoder step of that shape shares it)."""
    p = C // h
    E = (np.arange(C)[:, None] // p == np.arange(h)[None, :]).astype(dtype)
    E.flags.writeable = False
    return E


def softmax_heads(e, mx):
    """Softmax over the last (head) axis of e (..., h), in place; ``mx`` (..., 1): a buffer. The
    maximum and the sum as h - 1 elementwise ops on columns, head after head (NumPy reduces a
    short last axis element by element): the plain lines' order
    (:func:`tostnp.nn.tssa_heads.head_reduce`), so Pi is theirs bit for bit. (A product with
    ones, for the sum, rounds differently: it moved the published LM's float64 logits by
    2e-16.)"""
    h = e.shape[-1]
    mx[...] = e[..., 0:1]
    for k in range(1, h):
        np.maximum(mx, e[..., k:k + 1], out=mx)
    e -= mx
    np.exp(e, out=e)
    mx[...] = e[..., 0:1]
    for k in range(1, h):
        mx += e[..., k:k + 1]
    e /= mx
    return e


def matmul_into(a, b, out):
    """a @ b written into ``out`` (a view of a larger array: no copy of the product after)."""
    return np.matmul(a, b, out=out)


def tssa_in_pieces(B: int, N: int, C: int) -> bool:
    """Whether :func:`tssa_statistics` pays for a w of shape (B, N, C): from
    ``tuning.PIECES_MIN`` numbers on (smaller ones sit in the caches as they are)."""
    return B * N * C >= tuning.PIECES_MIN


def _token_pieces(B: int, N: int, C: int) -> list[tuple[int, int, int, int]]:
    """Blocks (b0, b1, lo, hi) of about ``tuning.TSSA_PIECE`` numbers covering (B, N, C): token
    ranges of one batch row for long sequences, whole rows together for short ones."""
    rows = max(1, tuning.TSSA_PIECE // max(1, C))               # tokens per piece
    if N >= rows:
        return [(b, b + 1, lo, min(lo + rows, N)) for b in range(B) for lo in range(0, N, rows)]
    k = max(1, rows // max(1, N))
    return [(b, min(b + k, B), 0, N) for b in range(0, B, k)]


def _piece_plan(w):
    """(pieces, biggest, buf) for the NumPy passes over w (B, N, C): its blocks of tokens
    (:func:`_token_pieces`), the most tokens in one, and a buffer of that many rows of C."""
    pieces = _token_pieces(*w.shape)
    biggest = max((b1 - b0) * (hi - lo) for b0, b1, lo, hi in pieces)
    return pieces, biggest, np.empty(biggest * w.shape[-1], w.dtype)


def _add_head_token_sums(acc, e, t):
    """acc_c += sum_n e_n,k(c) t_nc for a piece: acc (nb, C), e (nb, n, h), t (nb, n, C), k(c)
    the head of c. One matrix-vector product per head (BLAS reads each head's columns of t
    once; the per-coordinate product e t is never written)."""
    h = e.shape[-1]
    p = t.shape[-1] // h
    eT = np.ascontiguousarray(np.swapaxes(e, 1, 2))              # (nb, h, n)
    for k in range(h):
        acc[:, k * p:(k + 1) * p] += (eT[:, k:k + 1] @ t[:, :, k * p:(k + 1) * p])[:, 0]


def tssa_statistics(x, W_u, b_u, temp, h: int, eps2: float, pi_eps: float,
                    ones_column: bool = False):
    """The non-causal TSSA forward from x (B, N, C) to a: the lines of
    :func:`tostnp.nn.tssa.full_forward` from ``w = x @ W_u + b_u`` to ``a = w Pi``, with their
    names::

        w    = x @ W_u + b_u       (the bias added in the first pass; b_u (C,) or None)
        S1   = sum_n w^2            inv_S1 = 1 / max(S1, eps2)                   (B, C)
        q_nk = sum_{c in k} w_nc^2 inv_S1_c                                      (B, N, h)
        Pi   = softmax_k(temp_k q_nk)      n_Pi = sum_n Pi + pi_eps              (B, N, h), (B, h)
        S2_c = sum_n Pi_nk(c) w_nc^2       a = w Pi (per head)                   (B, C), (B, N, C)

    Returns (w, a_buf, S1, inv_S1, q, Pi, n_Pi, S2): a is ``a_buf[..., :C]``; with
    ``ones_column`` a_buf is (B, N, C + 1), its last column 1: [a | 1] @ [W; b] is the output
    projection with its bias added inside the matrix product (:func:`output_weights_ones`).

    Two passes over w, the second needing S1 of every token: the first adds the bias and sums
    the squares, the second does the rest. Where the compiled kernels are on
    (:func:`tostnp.backend.compiled.loops`) each pass is one compiled loop over the tokens of
    a batch row, and the second writes a over w, in place: w = x @ W_u goes straight into
    a_buf, and w comes back None. An a of its own costs the memory traffic of a copy (each of
    its lines is read from memory before it is written) and a second (B, N, C) array; over w,
    into the lines just read, neither: the layer's forward at B 4, N 4096, C 384 (float32, 2
    threads, Intel Xeon) went from 1.15-1.17x its two products to 1.08-1.17x, its peak memory
    from 75.5 to 51.5 MiB (docs/benchmarks.md, *a over w*). The backward reads w as a / Pi
    where :func:`w_recoverable` says it may; where not, w is computed again here (the same
    product and bias add) and returned. Else NumPy calls on pieces of tokens that sit in the
    core's cache (:func:`_token_pieces`), w^2 a piece-sized temporary, and a written apart from
    w (in place, the NumPy passes were slower: w as a strided view, and w read back as a / Pi
    in every backward pass). The plain lines sweep memory about ten times and write two
    (B, N, C) temporaries. Runs on the calling thread (the layer's batch slices are already one
    per thread).
    """
    B, N, C = x.shape
    dt = x.dtype
    loops = _compiled.loops()
    a_buf = np.empty((B, N, C + 1 if ones_column else C), dt)   # returned: a, or [a | 1]
    w = a_buf if loops is not None else np.empty((B, N, C), dt)  # w's buffer
    _project(x, W_u, w)
    S1 = np.zeros((B, C), dt)
    if loops is not None:
        bias = b_u if b_u is not None else np.zeros(C, dt)
        for b in range(B):
            loops["forward_sums"](w[b], bias, b_u is not None, S1[b])
    else:
        _forward_sums_in_pieces(w, b_u, S1)
    inv_S1 = np.maximum(S1, eps2)
    np.reciprocal(inv_S1, out=inv_S1)
    q = np.empty((B, N, h), dt)
    Pi = np.empty((B, N, h), dt)
    n_Pi = np.zeros((B, h), dt)
    S2 = np.zeros((B, C), dt)
    if loops is not None:                                        # (writes the ones too)
        t = np.ascontiguousarray(temp.reshape(h), dtype=dt)
        for b in range(B):
            loops["forward_rest"](a_buf[b], inv_S1[b], t, q[b], Pi[b], n_Pi[b], S2[b],
                                  ones_column, dt.type(0))
        w = None if w_recoverable(Pi) else _project(x, W_u, np.empty((B, N, C), dt), b_u)
    else:
        if ones_column:
            a_buf[..., C] = 1.0
        _forward_rest_in_pieces(w, inv_S1, temp, q, Pi, n_Pi, S2, a_buf[..., :C])
    n_Pi += pi_eps
    return w, a_buf, S1, inv_S1, q, Pi, n_Pi, S2


def _project(x, W, out, b=None):
    """out[..., :C] = x @ W (+ b) for x (B, N, C), W (C, C), ``out`` a C-contiguous (B, N, L)
    array, L >= C (an [a | 1] buffer): one product of B*N rows, written into out's first C
    columns (BLAS takes the row stride L). Returns out."""
    B, N, C = x.shape
    rows = out.reshape(B * N, out.shape[-1])[:, :C]             # a view: out is C-contiguous
    np.matmul(x.reshape(B * N, C), W, out=rows)
    if b is not None:
        add_rows(out, b)
    return out


def w_recoverable(Pi) -> bool:
    """Whether w can be had back from a = w Pi (written over it by :func:`tssa_statistics`) as
    a / Pi: every Pi at least the square root of the dtype's smallest subnormal number (2^-74.5
    in float32, 2^-537 in float64). Then a / Pi is w to within two roundings where a is a
    normal number, and within 2^-74.5 (float64: 2^-537) of it where a underflowed. False for
    a NaN in Pi (a NaN or an infinity in w): the layer then computes w again, exactly as the
    forward did. A softmax over h heads is at least exp(-spread)/h, the spread of its logits
    temp_k q_nk: Pi this small needs a spread above 50 in float32."""
    tiny = math.sqrt(float(np.finfo(Pi.dtype).smallest_subnormal))
    return bool(Pi.size == 0 or np.min(Pi) >= tiny)


def _forward_sums_in_pieces(w, b_u, S1):
    """:func:`tssa_statistics`'s first pass on NumPy: w += b_u, S1 += sum_n w^2."""
    for b0, b1, lo, hi in _token_pieces(*w.shape):
        wi = w[b0:b1, lo:hi]
        if b_u is not None:
            add_rows(wi, b_u)
        # sum_n w_nc^2 as one sum of products, no w^2 written: 71 against 208 us for the
        # square and a matrix-vector product at a piece of 1365 x 384 (Intel Xeon)
        S1[b0:b1] += np.einsum("bnc,bnc->bc", wi, wi)             # (nb, C)


def _forward_rest_in_pieces(w, inv_S1, temp, q, Pi, n_Pi, S2, a):
    """:func:`tssa_statistics`'s second pass on NumPy: q, Pi, n_Pi (without pi_eps), S2 and
    a = w Pi, in pieces of tokens."""
    B, N, C = w.shape
    h = q.shape[-1]
    p = C // h
    dt = w.dtype
    pieces, biggest, t_buf = _piece_plan(w)                      # t_buf: w^2 of a piece
    m_buf = np.empty(biggest, dt)                                # a per-token maximum / sum
    ones = _ones(max(h, max(hi - lo for _, _, lo, hi in pieces)), dt)
    inv_h = inv_S1.reshape(B, 1, h, p)
    temp = temp.reshape(1, 1, h)
    for b0, b1, lo, hi in pieces:
        wi = w[b0:b1, lo:hi]
        nb, n = wi.shape[0], wi.shape[1]
        t = t_buf[:wi.size].reshape(wi.shape)
        np.multiply(wi, wi, out=t)                               # sq
        qi, e = q[b0:b1, lo:hi], Pi[b0:b1, lo:hi]                # (nb, n, h)
        np.vecdot(t.reshape(nb, n, h, p), inv_h[b0:b1], out=qi)
        np.multiply(qi, temp, out=e)
        softmax_heads(e, m_buf[:nb * n].reshape(nb, n, 1))      # Pi
        n_Pi[b0:b1] += ones[:n] @ e
        _add_head_token_sums(S2[b0:b1], e, t)                    # S2
        np.einsum("bnkp,bnk->bnkp", wi.reshape(nb, n, h, p), e,   # a = w Pi (einsum: 196
                  out=a[b0:b1, lo:hi].reshape(nb, n, h, p))      # against 224 us broadcast)


def tssa_statistics_backward(w, g_a, Pi, q, temp, g_S2, g_n, inv_S1, active, b_u_grad: bool,
                             a_buf=None):
    """The non-causal TSSA backward from g_a (the gradient of a = w Pi) to g_w, the lines of
    :func:`tostnp.nn.tssa._backward_middle`, with their names::

        g_Pi_nk = sum_{c in k} (g_a_nc w_nc + w_nc^2 g_S2_c) + g_n_k                 (B, N, h)
        g_l     = Pi (g_Pi - sum_k Pi g_Pi)      g_temp_k = sum_{b,n} g_l q           (h, 1)
        g_q     = g_l temp                       gq_sq_c = sum_n g_q_nk(c) w_nc^2      (B, C)
        g_S1    = -gq_sq inv_S1^2 active                                             (B, C)
        g_w     = 2 w (Pi_nk(c) g_S2_c + g_q_nk(c) inv_S1_c + g_S1_c) + g_a Pi

    w, g_a: (B, N, C); Pi, q: (B, N, h); temp (h, 1); g_S2, inv_S1, active: (B, C); g_n (B, h).
    ``w`` None: the forward wrote a = w Pi over w (:func:`tssa_statistics`), and ``a_buf``
    (B, N, C[+1]) holds a in its first C columns; w is a / Pi, computed where it is read
    (:func:`w_recoverable` was true). Returns (g_w, g_temp, g_b_u): g_w is written into g_a's
    buffer (g_a is the caller's and not needed after); g_b_u = the sum of g_w over (B, N) with
    ``b_u_grad``, else None.

    Two passes over w and g_a: the first, up to the sums gq_sq (which need every token), the
    second g_w. Compiled loops over tokens where they are on, else NumPy calls on pieces of
    tokens (w^2 and the factor of 2 w piece-sized temporaries). The plain lines sweep memory
    about eleven times and write three (B, N, C) arrays.
    """
    B, N, C = g_a.shape
    h = Pi.shape[-1]
    dt = g_a.dtype
    from_a = w is None
    src = a_buf if from_a else w                                 # what the passes read
    loops = _compiled.loops()
    g_q = np.empty((B, N, h), dt)
    gq_sq = np.zeros((B, C), dt)
    g_temp = np.zeros(h, dt)
    if loops is not None:
        t = np.ascontiguousarray(temp.reshape(h), dtype=dt)
        for b in range(B):
            loops["backward_sums"](src[b], g_a[b], Pi[b], q[b], t, g_S2[b], g_n[b], g_q[b],
                                   gq_sq[b], g_temp, dt.type(0), dt.type(1), from_a)
    else:
        _backward_sums_in_pieces(src[..., :C], g_a, Pi, q, temp, g_S2, g_n, g_q, gq_sq, g_temp,
                                 from_a)
    g_S1 = gq_sq
    g_S1 *= inv_S1
    g_S1 *= inv_S1
    g_S1 *= active
    np.negative(g_S1, out=g_S1)                                  # -gq_sq inv_S1^2 active
    g_b = np.zeros((B, C), dt) if b_u_grad else None
    if loops is not None:
        bias_grad = g_b if b_u_grad else np.zeros((B, C), dt)
        for b in range(B):
            loops["backward_rest"](src[b], g_a[b], Pi[b], g_q[b], g_S2[b], inv_S1[b], g_S1[b],
                                   bias_grad[b], b_u_grad, dt.type(1), from_a)
    else:
        _backward_rest_in_pieces(src[..., :C], g_a, Pi, g_q, g_S2, inv_S1, g_S1, g_b, from_a)
    return g_a, g_temp.reshape(h, 1), (None if g_b is None else g_b.sum(axis=0))


def _w_piece(src, Pi, from_a, buf):
    """A piece of w for the NumPy backward: ``src`` itself, or with ``from_a`` (src then a piece
    of a = w Pi) a / Pi per head, written into ``buf`` (piece-sized): a times 1 / Pi, as the
    compiled loops compute it."""
    if not from_a:
        return src
    nb, n, C = src.shape
    h = Pi.shape[-1]
    wi = buf[:src.size].reshape(src.shape)
    np.multiply(src.reshape(nb, n, h, C // h), np.reciprocal(Pi)[..., None],
                out=wi.reshape(nb, n, h, C // h))
    return wi


def _backward_sums_in_pieces(w, g_a, Pi, q, temp, g_S2, g_n, g_q, gq_sq, g_temp, from_a):
    """:func:`tssa_statistics_backward`'s first pass on NumPy: g_q, gq_sq and g_temp. With
    ``from_a``, ``w`` is a = w Pi (:func:`_w_piece`)."""
    B, N, C = w.shape
    h = Pi.shape[-1]
    p = C // h
    dt = w.dtype
    pieces, biggest, t_buf = _piece_plan(w)                      # t_buf: w^2 of a piece
    w_buf = np.empty(biggest * C, dt) if from_a else None        # w of a piece, from a
    s_buf = np.empty(biggest * h, dt)                            # a per-token, per-head temporary
    m_buf = np.empty(biggest, dt)                                # a per-token sum
    ones = _ones(max(h, biggest), dt)
    g_S2_h = g_S2.reshape(B, 1, h, p)
    temp_r = temp.reshape(1, 1, h)
    g_n_r = g_n.reshape(B, 1, h)
    for b0, b1, lo, hi in pieces:
        wi = _w_piece(w[b0:b1, lo:hi], Pi[b0:b1, lo:hi], from_a, w_buf)
        gi = g_a[b0:b1, lo:hi]
        nb, n = wi.shape[0], wi.shape[1]
        t = t_buf[:wi.size].reshape(wi.shape)
        np.multiply(wi, wi, out=t)                               # sq
        gP = g_q[b0:b1, lo:hi]                                   # g_Pi here, then g_q
        np.vecdot(gi.reshape(nb, n, h, p), wi.reshape(nb, n, h, p), out=gP)
        s = s_buf[:nb * n * h].reshape(nb, n, h)
        np.vecdot(t.reshape(nb, n, h, p), g_S2_h[b0:b1], out=s)
        gP += s
        gP += g_n_r[b0:b1]                                       # g_Pi
        Pii = Pi[b0:b1, lo:hi]
        np.multiply(Pii, gP, out=s)
        sm = m_buf[:nb * n].reshape(nb, n, 1)
        np.matmul(s, ones[:h], out=sm[..., 0])                   # sum_k Pi g_Pi
        gP -= sm
        gP *= Pii                                                # g_l
        np.multiply(gP, q[b0:b1, lo:hi], out=s)
        g_temp += (ones[:nb * n] @ s.reshape(nb * n, h))
        gP *= temp_r                                             # g_q
        _add_head_token_sums(gq_sq[b0:b1], gP, t)                # gq_sq


def _backward_rest_in_pieces(w, g_a, Pi, g_q, g_S2, inv_S1, g_S1, g_b, from_a):
    """:func:`tssa_statistics_backward`'s second pass on NumPy: g_w into g_a's buffer, and
    g_b (B, C) += its sum over tokens when g_b is not None. With ``from_a``, ``w`` is
    a = w Pi (:func:`_w_piece`)."""
    B, N, C = w.shape
    h = Pi.shape[-1]
    p = C // h
    dt = w.dtype
    pieces, biggest, t_buf = _piece_plan(w)                      # t_buf: 2 w g_sq of a piece
    w_buf = np.empty(biggest * C, dt) if from_a else None        # w of a piece, from a
    ones = _ones(biggest, dt)
    # 2 g_sq_nc = [Pi | g_q | 1]_n @ [E^T 2 g_S2; E^T 2 inv_S1; 2 g_S1]_c: one product of inner
    # size 2h + 1 per piece (the plain lines' matmul)
    coord = np.zeros((B, 2 * h + 1, C), dt)
    for k in range(h):
        coord[:, k, k * p:(k + 1) * p] = g_S2[:, k * p:(k + 1) * p]
        coord[:, h + k, k * p:(k + 1) * p] = inv_S1[:, k * p:(k + 1) * p]
    coord[:, 2 * h] = g_S1
    coord *= 2.0
    tok_buf = np.empty(biggest * (2 * h + 1), dt)
    for b0, b1, lo, hi in pieces:
        wi = _w_piece(w[b0:b1, lo:hi], Pi[b0:b1, lo:hi], from_a, w_buf)
        gi = g_a[b0:b1, lo:hi]
        nb, n = wi.shape[0], wi.shape[1]
        tok = tok_buf[:nb * n * (2 * h + 1)].reshape(nb, n, 2 * h + 1)
        tok[..., :h] = Pi[b0:b1, lo:hi]
        tok[..., h:2 * h] = g_q[b0:b1, lo:hi]
        tok[..., 2 * h] = 1.0
        t = t_buf[:wi.size].reshape(wi.shape)
        np.matmul(tok, coord[b0:b1], out=t)                      # 2 g_sq
        t *= wi                                                  # 2 w g_sq
        gi4 = gi.reshape(nb, n, h, p)
        np.multiply(gi4, Pi[b0:b1, lo:hi, :, None], out=gi4)     # g_a Pi
        gi += t                                                  # g_w
        if g_b is not None:
            g_b[b0:b1] += ones[:n] @ gi


def output_weights_ones(r, W, b):
    """[diag(-r) W; b] for each batch row: (B, C + 1, D) from r (B, C), W (C, D), b (D,).
    [a | 1] @ it = a @ (diag(-r) W) + b, the output projection with its bias added inside the
    matrix product (one (.., D) pass less; a from :func:`tssa_statistics` with
    ``ones_column``). The layer keeps its first C rows as W_eff (a view): diag(-r) W is
    written once, into this array."""
    B, C = r.shape
    Wb = np.empty((B, C + 1, W.shape[-1]), W.dtype)
    np.multiply(np.negative(r)[:, :, None], W, out=Wb[:, :C])
    Wb[:, C] = b
    return Wb


# ---------------------------------------------------------------------------------------------
# softmax cross-entropy, backward
# ---------------------------------------------------------------------------------------------
def log_softmax(z):
    """log softmax(z) over the last axis of z (M, V), the row maximum subtracted first (the
    lines of :func:`tostnp.nn.loss.softmax_cross_entropy_forward`), in pieces of rows: exp
    writes into a piece-sized temporary that stays in cache, not into an (M, V) array."""
    logp = np.empty(z.shape, z.dtype)

    def piece(lo, hi):
        zi, li = z[lo:hi], logp[lo:hi]
        np.subtract(zi, np.max(zi, axis=-1, keepdims=True), out=li)
        lse = np.sum(np.exp(li), axis=-1, keepdims=True)
        np.log(lse, out=lse)
        li -= lse
    _run_pieces(piece, *z.shape)
    return logp


def softmax_cross_entropy_backward(logp, t, w, dloss):
    """dlogits = (softmax - onehot(t)) * w * dloss for logp (M, V) = log-softmax, t (M,) the
    targets, w (M,) the per-row weights -> (M, V).

    exp(logp) into the output, the targets' entries lowered by one where they are (M scattered
    elements, instead of an (M, V) comparison mask and a select), one scaling pass."""
    g = np.exp(logp)                                               # (M, V) softmax
    rows = np.arange(g.shape[0])
    g[rows, t] -= 1.0
    g *= (w * np.asarray(dloss, dtype=g.dtype))[:, None]
    return g


# ---------------------------------------------------------------------------------------------
# AdamW (tostnp.train.optim.AdamW.step), one parameter
# ---------------------------------------------------------------------------------------------
def adamw_update(p, g, m, v, *, b1: float, b2: float, lr: float, wd: float, eps: float,
                 bc1: float, bc2: float, out=None):
    """m, v updated in place (they belong to the optimizer); returns the new parameter.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    new = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), written into ``out``
    (a buffer the optimizer owns, or a fresh array when None); ``p`` is not modified.
    """
    new = np.empty(p.shape, p.dtype) if out is None else out
    p2, g2, m2, v2, n2 = _rows(p), _rows(g), _rows(m), _rows(v), _rows(new)
    for name, a in (("m", m), ("v", v), ("out", new)):
        if not a.flags.c_contiguous:        # updated through row views: a copy would be lost
            raise ValueError(f"adamw_update: {name} must be C-contiguous")

    def piece(lo, hi):
        mi, vi = m2[lo:hi], v2[lo:hi]
        gi = g2[lo:hi]
        mi *= b1
        tmp = np.multiply(gi, 1.0 - b1, dtype=gi.dtype)
        mi += tmp
        np.multiply(gi, gi, out=tmp)
        tmp *= 1.0 - b2
        vi *= b2
        vi += tmp
        np.sqrt(vi, out=tmp)
        tmp *= 1.0 / math.sqrt(bc2)
        tmp += eps
        np.divide(mi, tmp, out=tmp)                                # mhat-ish / (sqrt(vhat) + eps)
        tmp *= lr / bc1
        ni = n2[lo:hi]
        np.multiply(p2[lo:hi], 1.0 - lr * wd, out=ni, dtype=p.dtype)
        ni -= tmp
    _run_pieces(piece, *n2.shape)
    return new



# ---------------------------------------------------------------------------------------------
# AdamW over a group of parameters at once: one kernel call instead of one per parameter
# ---------------------------------------------------------------------------------------------
def flat_zeros(shapes, dtype):
    """One zeroed flat buffer and its C-contiguous views of ``shapes``, in order (the
    optimizer's moments of one group: updated by :func:`adamw_update_flat` through the buffer,
    read and restored by name through the views)."""
    sizes = [math.prod(s) for s in shapes]
    flat = np.zeros(sum(sizes), dtype)
    views, off = [], 0
    for s, n in zip(shapes, sizes):
        views.append(flat[off:off + n].reshape(s))
        off += n
    return flat, views


def adamw_update_flat(ps, gs, m, v, **hyper):
    """:func:`adamw_update` for a group of parameters ``ps`` with gradients ``gs`` (lists of
    arrays of one dtype) whose moments are the flat buffers ``m`` and ``v`` of
    :func:`flat_zeros` (same order). Returns the new parameters: views, of the old shapes, into
    one fresh buffer; ``ps`` are not modified.

    The same arithmetic, element by element, as :func:`adamw_update` on each parameter (so the
    same bits): a training step's few dozen parameters cost one kernel call and two
    concatenations instead of a few dozen calls, which is what a small model's update spends
    its time on."""
    p = np.concatenate([a.reshape(-1) for a in ps])
    g = np.concatenate([a.reshape(-1) for a in gs])
    new = adamw_update(p[:, None], g[:, None], m[:, None], v[:, None], **hyper)[:, 0]
    out, off = [], 0
    for a in ps:
        out.append(new[off:off + a.size].reshape(a.shape))
        off += a.size
    return out
