"""Checkers for exercises/01_attention_cost.md: softmax attention, a log-log slope fit, and a
measured complexity exponent."""
from __future__ import annotations

import math

import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, case, compare, hidden_enabled, run_cases

_FORBID = ("tostnp.nn", "tostnp.bench")


def check_softmax_attention(fn, hidden=None):
    """fn(Q, K, V) -> softmax(Q K^T / sqrt(d)) V, shape (N, d_v); Q, K (N, d), V (N, d_v)."""
    rng = np.random.default_rng(41)
    specs = [(6, 4, 3, 1.0), (1, 2, 2, 1.0), (9, 5, 7, 1.0), (8, 8, 8, 1.0),
             (5, 3, 2, 1000.0)]                # large scores: exp overflows unless shifted
    if hidden_enabled(hidden):
        specs += [(2, 1, 1, 1.0), (16, 4, 4, 100.0)]
    cases = []
    for N, d, dv, s in specs:
        def one(N=N, d=d, dv=dv, s=s):
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
        cases.append(case(f"N={N}, d={d}, d_v={dv}, scale {s}", one))
    return run_cases("softmax_attention", cases)


def check_loglog_slope(fn, hidden=None):
    """fn(Ns, times) -> a, the least-squares slope of log(time) against log(N)."""
    rng = np.random.default_rng(42)
    specs = [(2.0, 0.05), (1.0, 0.2), (1.5, 0.0), (2.7, 0.3)]
    if hidden_enabled(hidden):
        specs += [(0.0, 0.1)]
    cases = []
    for a, noise in specs:
        def one(a=a, noise=noise):
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
        cases.append(case(f"N^{a}, noise {noise}", one))
    return run_cases("loglog_slope", cases)


def check_attention_scaling(result, hidden=None):
    """result = {"N": sizes, "seconds": times, "slope": fitted exponent} from timing your own
    softmax attention: at least 4 sizes over at least a factor 8, a slope that fits the data,
    and an exponent near 2."""
    def one():
        got = result
        if callable(got):
            got = call_student(got, forbidden=_FORBID, what="attention_scaling")
        if not isinstance(got, dict) or not {"N", "seconds", "slope"} <= set(got):
            raise Fail('return a dict with keys "N", "seconds" and "slope"')
        Ns = np.asarray(got["N"], dtype=float)
        ts = np.asarray(got["seconds"], dtype=float)
        if Ns.ndim != 1 or Ns.shape != ts.shape or Ns.size < 4:
            raise Fail(f"N and seconds must be two lists of the same length >= 4, got shapes "
                       f"{Ns.shape} and {ts.shape}")
        if np.any(ts <= 0) or not np.all(np.isfinite(ts)):
            raise Fail("every time must be a positive number of seconds")
        if Ns.max() / Ns.min() < 8:
            raise Fail(f"your sizes span a factor {Ns.max() / Ns.min():.3g}; use at least a factor "
                       "8 so that the exponent is measurable")
        fit = np.polyfit(np.log(Ns), np.log(ts), 1)[0]
        slope = float(got["slope"])
        if abs(slope - fit) > 1e-6 * max(1.0, abs(fit)):
            raise Fail(f"your slope {slope:.4g} is not the least-squares slope of your own data "
                       f"in log-log coordinates")
        if not 1.3 <= fit <= 2.7:
            raise Fail(f"your measured exponent is {fit:.2f}: softmax attention should grow like "
                       "N^2 once the N x N products dominate. Are your N large enough (hundreds "
                       "to thousands), and did you keep the best of several repeats?")
    return run_cases("attention_scaling", [case("your measurement", one)])
