"""Checkers for exercises/01_attention_cost.md: softmax attention, a log-log slope fit, and a
measured complexity exponent."""
from __future__ import annotations

import math

import numpy as np

from . import _reference as ref
from ._core import Fail, answer_of, call_student, case, measure, run_cases, run_specs
from ._compare import compare
from ._core import one_blas_thread
from ._core import rng as _rng

_FORBID = ("tostnp.nn", "tostnp.bench")


def check_softmax_attention(fn, hidden=None):
    """fn(Q, K, V) -> softmax(Q K^T / sqrt(d)) V, shape (N, d_v); Q, K (N, d), V (N, d_v)."""
    specs = [(6, 4, 3, 1.0), (1, 2, 2, 1.0), (9, 5, 7, 1.0), (8, 8, 8, 1.0),
             (5, 3, 2, 1000.0)]                # large scores: exp overflows unless shifted
    hidden_specs = [(2, 1, 1, 1.0), (16, 4, 4, 100.0)]

    def one(rng, N, d, dv, s):
        Q, K, V = s * rng.standard_normal((N, d)), rng.standard_normal((N, d)), \
            rng.standard_normal((N, dv))
        want = ref.softmax_attention(Q, K, V)

        def soft(S, axis):
            e = np.exp(S - S.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)
        S = Q @ K.T
        diag = [("each query's weights must sum to 1 over the keys: the softmax runs over the "
                 "wrong axis", lambda: soft(S / math.sqrt(d), 0) @ V),
                ("the scores are not scaled by 1/sqrt(d)", lambda: soft(S, 1) @ V),
                ("the scores are scaled by 1/d; the scale is 1/sqrt(d)",
                 lambda: soft(S / d, 1) @ V),
                ("the scores are Q^T-K-shaped the wrong way round (K Q^T)",
                 lambda: soft(S.T / math.sqrt(d), 1) @ V)]
        got = call_student(fn, Q.copy(), K.copy(), V.copy(), forbidden=_FORBID,
                           what="softmax_attention")
        compare(got, want, f"attention for N={N}, d={d}, d_v={dv}", shape_desc="(N, d_v)",
                diagnoses=diag, rtol=1e-9)
    return run_specs("softmax_attention", one, specs, hidden_specs, hidden=hidden, seed=41,
                     label=lambda N, d, dv, s: f"N={N}, d={d}, d_v={dv}, scale {s}")


def check_loglog_slope(fn, hidden=None):
    """fn(Ns, times) -> a, the least-squares slope of log(time) against log(N)."""
    specs = [(2.0, 0.05), (1.0, 0.2), (1.5, 0.0), (2.7, 0.3)]
    hidden_specs = [(0.0, 0.1)]

    def one(rng, a, noise):
        Ns = np.array([64, 128, 256, 512, 1024, 2048, 4096], dtype=float)
        times = 3e-6 * Ns**a * np.exp(noise * rng.standard_normal(Ns.size))
        X = np.stack([np.log(Ns), np.ones_like(Ns)], axis=1)
        want = np.linalg.lstsq(X, np.log(times), rcond=None)[0][0]
        diag = [("you fitted a line to time against N: the exponent is the slope in log-log "
                 "coordinates", lambda: np.polyfit(Ns, times, 1)[0]),
                ("a slope from the two end points only ignores the points between: fit all "
                 "of them (least squares)",
                 lambda: np.log(times[-1] / times[0]) / np.log(Ns[-1] / Ns[0])),
                ("you fitted log(time) against N (semi-log)",
                 lambda: np.polyfit(Ns, np.log(times), 1)[0]),
                ("you returned the intercept", lambda: np.polyfit(np.log(Ns), np.log(times), 1)[1]),
                ("you fitted log N against log time (the axes are swapped)",
                 lambda: np.polyfit(np.log(times), np.log(Ns), 1)[0])]
        got = call_student(fn, Ns.copy(), times.copy(), forbidden=_FORBID, what="loglog_slope")
        compare(got, want, f"slope of data growing like N^{a} (noise {noise})",
                diagnoses=diag, rtol=1e-8)
    return run_specs("loglog_slope", one, specs, hidden_specs, hidden=hidden, seed=42,
                     label=lambda a, noise: f"N^{a}, noise {noise}")


EXPONENT_BAND = (1.2, 2.8)      # generous: minima of interleaved repeats on a loaded 2-core machine
TIME_AGREEMENT = 8.0            # your seconds vs the check's own timing of your function


def check_attention_scaling(result, attention=None, hidden=None):
    """result = {"N": sizes, "seconds": times, "slope": fitted exponent} from timing your own
    softmax attention (or a function returning it); attention = that softmax attention.

    The check wants at least 4 sizes over at least a factor 8 and a slope that is the
    least-squares fit of your data; then it times ``attention`` itself at your sizes (CPU time,
    one thread, the best of 5 interleaved repeats, d = 64): the exponent it measures must lie in the band
    EXPONENT_BAND, and your seconds must agree with its timing within a factor TIME_AGREEMENT
    (made-up timings do not)."""
    def one():
        got = answer_of(result, forbidden=_FORBID, what="attention_scaling")
        if not isinstance(got, dict) or not {"N", "seconds", "slope"} <= set(got):
            raise Fail('return a dict with keys "N", "seconds" and "slope"')
        try:
            Ns = np.asarray(got["N"], dtype=float)
            ts = np.asarray(got["seconds"], dtype=float)
            slope = float(got["slope"])
        except (TypeError, ValueError):
            raise Fail('"N" and "seconds" must be lists of numbers, "slope" a number') from None
        if Ns.ndim != 1 or Ns.shape != ts.shape or Ns.size < 4:
            raise Fail(f"N and seconds must be two lists of the same length >= 4, got shapes "
                       f"{Ns.shape} and {ts.shape}")
        if np.any(ts <= 0) or not np.all(np.isfinite(ts)):
            raise Fail("every time must be a positive number of seconds")
        if np.any(Ns < 1) or np.any(Ns != np.round(Ns)) or Ns.max() > 8192:
            raise Fail("the sizes N must be whole numbers from 1 to 8192")
        if Ns.max() / Ns.min() < 8:
            raise Fail(f"your sizes span a factor {Ns.max() / Ns.min():.3g}; use at least a factor "
                       "8 so that the exponent is measurable")
        fit = np.polyfit(np.log(Ns), np.log(ts), 1)[0]
        if abs(slope - fit) > 1e-6 * max(1.0, abs(fit)):
            raise Fail(f"your slope {slope:.4g} is not the least-squares slope of your own data "
                       f"in log-log coordinates")
        lo, hi = EXPONENT_BAND
        if attention is None:                       # an old check cell: only your own data
            if not lo <= fit <= hi:
                raise Fail(f"your measured exponent is {fit:.2f}: softmax attention should grow "
                           "like N^2 once the N x N products dominate. Are your N large enough "
                           "(hundreds to thousands), and did you keep the best of several "
                           "repeats?")
            return
        theirs, best, wall = timed_exponent(attention, [int(n) for n in Ns])
        if not lo <= theirs <= hi:
            raise Fail(f"timed by the check at your sizes, your attention grows like "
                       f"N^{theirs:.2f}: softmax attention should grow like N^2 once the N x N "
                       "products dominate. Are your N large enough (hundreds to thousands)?")
        # your wall-clock seconds lie between the check's CPU seconds (no load) and its
        # wall-clock seconds (the load of the moment), give or take TIME_AGREEMENT
        lo_r = float(np.median(ts / np.asarray(best)))
        hi_r = float(np.median(ts / np.asarray(wall)))
        ratio = ts / np.asarray(best)
        if lo_r < 1 / TIME_AGREEMENT or hi_r > TIME_AGREEMENT or \
                float(ratio.max() / ratio.min()) > TIME_AGREEMENT ** 2:
            raise Fail(f"your seconds are {lo_r:.3g} times (from {ratio.min():.3g} to "
                       f"{ratio.max():.3g} times) the CPU time the check measures for your own "
                       "function at the same sizes: report the times you measure, not made-up "
                       "ones")
    return run_cases("attention_scaling", [case("your measurement", one)])


def timed_exponent(attention, Ns, repeats: int = 5, d: int = 64):
    """(fitted exponent, best CPU seconds per size, best wall-clock seconds per size) of
    ``attention`` at sizes ``Ns``: the best of ``repeats`` runs per size, interleaved across
    sizes so that a burst of load on a shared machine does not land on every run of one size;
    the exponent is fitted to the CPU seconds (one thread), which load barely changes."""
    rng = _rng(43)
    inputs = [tuple(rng.standard_normal((n, d)) for _ in range(3)) for n in Ns]
    best, wall = [math.inf] * len(Ns), [math.inf] * len(Ns)
    with one_blas_thread():                       # the grading child runs on one thread too
        for _ in range(repeats):
            for i, (Q, K, V) in enumerate(inputs):
                _, t, _, w = measure(attention, Q, K, V, what="softmax_attention")
                best[i], wall[i] = min(best[i], t), min(wall[i], w)
    best = [max(t, 1e-9) for t in best]
    return float(np.polyfit(np.log(Ns), np.log(best), 1)[0]), best, wall
