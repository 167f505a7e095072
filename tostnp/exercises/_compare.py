"""Comparing a student's answer with the reference: the hint computed from the error (a
constant factor, an axis, a sign, a transpose, float32 precision, a shape)."""
from __future__ import annotations

import math

import numpy as np

from ._core import Fail, real_numbers

# --------------------------------------------------------------------------------------------
# hints computed from the error
# --------------------------------------------------------------------------------------------
_NAMED_RATIOS = [
    (-1.0, "the sign is flipped"),
    (2.0, "it is twice the reference: a factor 1/2 is missing"),
    (0.5, "it is half the reference: an extra factor 1/2 (or a missing 2)"),
    (-2.0, "the sign is flipped and a factor 1/2 is missing"),
    (-0.5, "the sign is flipped and there is an extra factor 1/2"),
    (1.0 / math.log(2.0), "it is 1/ln 2 times the reference: a logarithm in base 2? (use the "
                          "natural log)"),
    (1.0 / math.log(10.0), "it is 1/ln 10 times the reference: a logarithm in base 10? (use "
                           "the natural log)"),
]


def _close(a: float, b: float, tol: float = 1e-6) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)


def ratio_hint(r: float, factors: dict | None = None) -> str | None:
    """Name a constant factor r (got = r * reference) from known ratios and the case's sizes."""
    for val, text in _NAMED_RATIOS:
        if _close(r, val):
            return text
    for name, val in (factors or {}).items():
        val = float(val)
        if val in (0.0, 1.0, -1.0):
            continue
        for s, sign in ((1.0, ""), (-1.0, "the sign is flipped and ")):
            if _close(r, s * val):
                return f"{sign}it is {name} times the reference: a missing division by {name}?"
            if _close(r, s / val):
                return f"{sign}it is the reference divided by {name}: an extra division by {name}?"
    return None


# a gradient derived by hand agrees with autograd to ~1e-13 in float64; centred finite
# differences cannot get below ~1e-10 (and far worse on the large-entry cases the derivation
# checks add), so a derivation check with this tolerance rejects them
DERIVED_RTOL = 1e-11
_DERIVED_HINT = ("a gradient derived by hand agrees with autograd to about 1e-13 in float64; "
                 "this is the accuracy of finite differences (or of float32): write the "
                 "derivative out, in float64")


def compare(got, want, what: str, *, rtol: float = 1e-8, factors: dict | None = None,
            diagnoses=(), shape_desc: str = "", need_float64: bool = True,
            floor: float = 1e-12, derived: bool = False) -> None:
    """Raise :class:`Fail` with a hint unless ``got`` matches ``want`` (relative error < rtol,
    relative to max(max |want|, floor)). ``diagnoses`` is a sequence of (hint, thunk): a thunk returns the
    value a known mistake gives; if ``got`` matches it, that hint is used. ``derived``: a
    derivation exercise, compared at :data:`DERIVED_RTOL` (finite differences do not pass)."""
    if derived:
        rtol = min(rtol, DERIVED_RTOL)
    if got is None:
        raise Fail(f"{what}: your function returned None (did you forget `return`?)")
    want = np.asarray(want)
    try:
        g = np.asarray(got)
    except Exception as e:                                    # ragged lists and the like
        raise Fail(f"{what}: could not read the result as an array ({e})") from None
    real_numbers(g, what)
    if g.shape != want.shape:
        desc = f" {shape_desc}" if shape_desc else ""
        if g.size == want.size and g.shape == want.shape[::-1] and g.ndim >= 2:
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: transposed?")
        if g.size == want.size and tuple(s for s in g.shape if s != 1) == \
                tuple(s for s in want.shape if s != 1):
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: an extra or missing "
                       "axis of length 1 (keepdims? a reshape?)")
        if g.size == want.size and sorted(g.shape) == sorted(want.shape):
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: the axes are in "
                       "the wrong order")
        if want.ndim == 0 and g.ndim >= 1:
            raise Fail(f"{what}: expected a single number, got an array of shape {g.shape} "
                       "(a sum or a reduction is missing, or it is over the wrong axis)")
        raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc} (an axis summed or "
                   "kept by mistake?)")
    if need_float64 and np.issubdtype(g.dtype, np.floating) and g.dtype.itemsize < 8:
        raise Fail(f"{what}: the result is {g.dtype}; compute in float64 (do not cast to "
                   "float32: its 1e-7 precision cannot pass a 1e-8 check)")
    g = g.astype(np.float64)
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, floor)
    err = float(np.max(np.abs(g - want))) / scale if want.size else 0.0
    if err <= rtol:
        return
    for hint, thunk in diagnoses:
        try:
            bad = np.asarray(thunk(), dtype=np.float64)
        except Exception:
            continue
        if bad.shape == g.shape and np.max(np.abs(g - bad)) <= 1e-6 * scale:
            raise Fail(f"{what}: {hint}")
    if np.all(g == 0) and np.any(want != 0):
        raise Fail(f"{what}: your result is all zeros (relative error {err:.1e})")
    ww = float(np.sum(want * want))
    if ww > 0:
        # a constant factor is named only when the data supports it: for a single number any
        # value is "a factor times" the reference, so only the factors a slip gives (1/2, ln 2,
        # the case's sizes) are named; for an array, the result must be the reference times r
        # entry by entry, and the reference must not be constant
        r = float(np.sum(g * want)) / ww
        resid = float(np.max(np.abs(g - r * want))) / scale
        named = ratio_hint(r, factors) if resid <= 1e-6 else None
        if named and not _close(r, 1.0, 1e-5):
            raise Fail(f"{what}: {named}")
        varied = want.size >= 2 and float(np.ptp(want)) > 1e-9 * scale
        if varied and resid <= 1e-6 and abs(r) > 1e-9 and not _close(r, 1.0, 1e-5):
            raise Fail(f"{what}: it is {r:.4g} times the reference, entry by entry: a constant "
                       "factor is wrong")
    if g.ndim >= 2 and g.shape[-1] == g.shape[-2]:
        wT = np.swapaxes(want, -1, -2)
        if np.max(np.abs(g - wT)) <= 1e-6 * scale:
            raise Fail(f"{what}: it is the transpose of the reference (rows and columns swapped)")
    if derived and err < 1e-3:
        raise Fail(f"{what}: agrees only to a relative error of {err:.1e}: {_DERIVED_HINT}")
    if 1e-9 < err < 1e-4:
        raise Fail(f"{what}: agrees only to a relative error of {err:.1e}, the precision of "
                   "float32 (or a wrong small constant such as a clamp); compute everything in "
                   "float64 and check the small constants")
    where = ""
    if g.ndim >= 1:
        idx = np.unravel_index(int(np.argmax(np.abs(g - want))), g.shape)
        where = f", largest at index {tuple(int(i) for i in idx)}"
    if g.size >= 3 and float(np.ptp(want)) > 0 and float(np.ptp(g)) > 0:
        c = float(np.corrcoef(g.ravel(), want.ravel())[0, 1])
        if abs(c) < 0.5:
            where += (f"; your result is barely related to the reference (correlation {c:.2f}): "
                      "not one slip but a different computation")
    raise Fail(f"{what}: relative error {err:.1e}{where}")
