"""The error function for the exact GELU (the Array API standard has no erf)."""
from __future__ import annotations

import math

from .arrays import namespace, is_numpy, is_cupy


def erf(x):
    """The error function, elementwise, in the dtype of ``x`` (float32 or float64).

    NumPy -> ``scipy.special.erf``; CuPy -> ``cupyx.scipy.special.erf``; any other namespace
    (``array_api_strict``) -> :func:`erf_array_api`, written in standard operations only.
    """
    xp = namespace(x)
    if is_numpy(xp):
        from scipy.special import erf as _erf   # scipy: a scikit-learn dependency, pinned
        return _erf(x)
    if is_cupy(xp):
        from cupyx.scipy.special import erf as _erf
        return _erf(x)
    return erf_array_api(x)


# Where the power series hands over to the continued fraction, and how many terms each uses
# (both reach float64 rounding on their side of the switch; checked against scipy in
# tests/test_stem.py).
_ERF_SWITCH = 2.5
_ERF_SERIES_TERMS = 70
_ERF_CF_TERMS = 70


def erf_array_api(x):
    """erf written in Array API operations only, accurate to float64 rounding (≈ 1e-15).

    For |x| < 2.5 the series with positive terms (no cancellation)
        erf(a) = (2/√π) e^{-a²} Σ_n 2^n a^{2n+1} / (1·3·5···(2n+1));
    above, the continued fraction of the complement
        erfc(a) = e^{-a²}/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...))))).
    erf(-x) = -erf(x). Slow (≈ 140 elementwise passes): a fallback, not a fast path.
    """
    xp = namespace(x)
    a = xp.abs(x)
    small = a < _ERF_SWITCH
    # series on the small side (a is clamped on the other side so nothing overflows)
    s_a = xp.where(small, a, xp.zeros_like(a))
    a2 = s_a * s_a
    term = s_a
    total = s_a
    for n in range(1, _ERF_SERIES_TERMS):
        term = term * (2.0 * a2) / (2.0 * n + 1.0)
        total = total + term
    erf_small = (2.0 / math.sqrt(math.pi)) * xp.exp(-a2) * total
    # continued fraction on the large side, evaluated from the bottom up
    c_a = xp.where(small, xp.full_like(a, _ERF_SWITCH), a)
    f = c_a
    for k in range(_ERF_CF_TERMS, 0, -1):
        f = c_a + (0.5 * k) / f
    erfc_large = xp.exp(-c_a * c_a) / (math.sqrt(math.pi) * f)
    out = xp.where(small, erf_small, 1.0 - erfc_large)
    out = xp.where(x < 0, -out, out)
    return xp.where(xp.isnan(x), x, out)                   # NaN stays NaN
