"""The coding rate R, the compression term R_c and the rate reduction Delta R = R - R_c.

book/02_coding_rate.md (labels eq-R, eq-Rc, eq-dR). Tokens are ROWS: ``Z`` has shape
(..., n, d), n tokens of width d; the paper's column form Z Z^T becomes Z^T Z here. Every function
is batched over the leading axes ``...`` and keeps the dtype of ``Z`` (float32 in, float32 out).

Log-determinants are computed as sum_i log1p(a sigma_i^2) from the singular values sigma_i of Z
(those of the smaller Gram matrix: log det(I_d + a Z^T Z) = log det(I_n + a Z Z^T)), never with
det: accurate in float32 from tiny to large data (see :func:`_logdet_I_plus`).
"""
from __future__ import annotations

from ..backend.validate import check_array, check_finite, check_positive, check_same_dtype
from ..backend import device_of

__all__ = ["coding_rate", "compression", "rate_reduction"]


# ---------------------------------------------------------------------------------------------
# input checks shared with tostnp.math.variational
# ---------------------------------------------------------------------------------------------
def _check_Z(Z):
    """Z must be a finite floating array (..., n, d) with n >= 1 and d >= 1. Returns xp."""
    xp = check_array(Z, "Z", min_ndim=2, shape_desc="(..., n, d)")
    n, d = Z.shape[-2], Z.shape[-1]
    if n == 0 or d == 0:
        raise ValueError(f"Z must have at least one token and one feature, shape (..., n, d) "
                         f"with n >= 1 and d >= 1, got shape {tuple(Z.shape)}")
    check_finite(Z, "Z")
    return xp


def _check_Pi(Pi, Z):
    """Pi must be (..., n, K) like Z's leading axes, same dtype, rows on the probability simplex."""
    xp = check_array(Pi, "Pi", min_ndim=2, shape_desc="(..., n, K)")
    want = tuple(Z.shape[:-1]) + ("K",)
    if Pi.ndim != Z.ndim or tuple(Pi.shape[:-1]) != tuple(Z.shape[:-1]):
        raise ValueError(f"Pi must have shape {want} (Z's leading axes and n = {Z.shape[-2]} "
                         f"tokens), got shape {tuple(Pi.shape)}")
    if Pi.shape[-1] == 0:
        raise ValueError(f"Pi must have at least one group, shape {want} with K >= 1, "
                         f"got shape {tuple(Pi.shape)}")
    check_same_dtype(Z=Z, Pi=Pi)
    check_finite(Pi, "Pi")
    # Tolerance 1000 machine eps, at least 1e-6: 1.2e-4 in float32, 1e-6 in float64 (loose
    # enough for memberships computed in float32 and then cast to float64; a Pi normalised over
    # the wrong axis is off by O(1)).
    tol = max(1e-6, 1000.0 * float(xp.finfo(Pi.dtype).eps))
    if bool(xp.any(Pi < -tol)):
        raise ValueError("Pi must be non-negative (each row is a probability vector over "
                         f"the K groups), got a minimum of {float(xp.min(Pi))!r}")
    err = float(xp.max(xp.abs(xp.sum(Pi, axis=-1) - 1.0)))
    if err > tol:
        raise ValueError(f"every row of Pi (shape (..., n, K)) must sum to 1 (tolerance "
                         f"{tol:.1e} for {Pi.dtype}), got a row sum off by {err:.3g}")
    return xp


# ---------------------------------------------------------------------------------------------
# log det(I + c X^T diag(w) X) over a stack of matrices, with the smaller Gram matrix
# ---------------------------------------------------------------------------------------------
def _logdet_I_plus(xp, X, c):
    """log det(I + c X^T X) for X (..., m, d), c a Python float, from the singular values of X.

    Returns (...). With sigma_i the s = min(m, d) singular values of X (those of the smaller
    Gram matrix are sigma_i^2), log det(I + c X^T X) = sum_i log1p(c sigma_i^2). The log1p form
    keeps float32 accuracy where c sigma_i^2 is tiny (small data, large eps: a log of a number
    next to 1 would lose every digit there -- float32 lost 11% at scale 1e-4 and everything at
    1e-6 when this was 2 sum log |R_ii| of a QR factor), and singular values have an absolute
    error of a few eps * sigma_max, half the relative error of eigenvalues of X^T X.
    Checked against float64 eigenvalues in tests/test_reliability_numerics.py.
    """
    t = c**0.5 * xp.linalg.svdvals(X)                          # (..., s) sqrt(c) sigma_i >= 0
    # log1p(t^2) for moderate t; 2 log t + log1p(1/t^2) where t^2 would overflow float32
    big = t > 1e4
    t_small = xp.where(big, xp.zeros_like(t), t)
    t_big = xp.where(big, t, xp.ones_like(t))
    terms = xp.where(big, 2.0 * xp.log(t_big) + xp.log1p(1.0 / (t_big * t_big)),
                     xp.log1p(t_small * t_small))              # (..., s)
    return xp.sum(terms, axis=-1)                              # (...)


def _coding_rate(xp, Z, eps):
    n, d = Z.shape[-2], Z.shape[-1]
    return 0.5 * _logdet_I_plus(xp, Z, d / (n * eps**2))       # (...)       eq. (R)


def _compression(xp, Z, Pi, eps):
    n, d = Z.shape[-2], Z.shape[-1]
    Pi = xp.where(Pi > 0, Pi, xp.zeros_like(Pi))               # (..., n, K) clip round-off < 0
    n_k = xp.sum(Pi, axis=-2)                                  # (..., K)    soft group sizes
    # Divide pi_k by n_k before forming the Gram matrix: (d / (n_k eps^2)) Z^T Diag(pi_k) Z
    # = (d / eps^2) Z^T Diag(pi_k / n_k) Z, whose weights are <= 1 (no overflow for tiny n_k).
    # An empty group (n_k = 0, so pi_k = 0) gives log det(I) = 0 and weight n_k / n = 0.
    safe = xp.where(n_k > 0, n_k, xp.ones_like(n_k))           # (..., K)
    w = Pi / safe[..., None, :]                                # (..., n, K) columns sum to 1
    sw = xp.permute_dims(xp.sqrt(w), _swap_last_two(w.ndim))   # (..., K, n)
    X = sw[..., :, :, None] * Z[..., None, :, :]               # (..., K, n, d) rows sqrt(w_jk) z_j
    logdet = _logdet_I_plus(xp, X, d / eps**2)                 # (..., K)
    return 0.5 * xp.sum((n_k / n) * logdet, axis=-1)           # (...)       eq. (Rc)


def _swap_last_two(ndim):
    return tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)


# ---------------------------------------------------------------------------------------------
# public API
# ---------------------------------------------------------------------------------------------
def coding_rate(Z, eps):
    """Coding rate of the tokens Z at precision eps, eq. (R).

    R(Z) = 1/2 log det(I_d + d/(n eps^2) Z^T Z) = 1/2 log det(I_n + d/(n eps^2) Z Z^T)

    (the paper's Z Z^T with tokens as columns; here tokens are rows). R is the number of nats
    needed to code the n tokens up to distortion eps, for a Gaussian model.

    Parameters
    ----------
    Z : array (..., n, d), float32 or float64 -- n tokens of width d (rows), batched over ``...``.
    eps : float > 0 -- precision.

    Returns
    -------
    R : array (...), the dtype of Z.
    """
    xp = _check_Z(Z)
    eps = check_positive(eps, "eps")
    return _coding_rate(xp, Z, eps)


def compression(Z, Pi, eps):
    """Compression term: the coding rate of each group, weighted by group size, eq. (Rc).

    R_c(Z, Pi) = 1/2 sum_k (n_k/n) log det(I_d + d/(n_k eps^2) Z^T Diag(pi_k) Z),
    n_k = sum_j Pi_jk (soft group size), pi_k = Pi[..., :, k].

    A group with n_k = 0 contributes 0.

    Parameters
    ----------
    Z : array (..., n, d) -- tokens as rows.
    Pi : array (..., n, K) -- memberships, same leading axes and dtype as Z; every row is a
        probability vector (Pi_jk >= 0, sum_k Pi_jk = 1).
    eps : float > 0 -- precision.

    Returns
    -------
    R_c : array (...), the dtype of Z.
    """
    xp = _check_Z(Z)
    _check_Pi(Pi, Z)
    eps = check_positive(eps, "eps")
    return _compression(xp, Z, Pi, eps)


def rate_reduction(Z, Pi, eps):
    """Rate reduction (MCR^2), eq. (MCR2): Delta R(Z, Pi) = R(Z) - R_c(Z, Pi) >= 0.

    Large when the whole set spans many directions (R large) while each group is compact
    (R_c small).

    Parameters
    ----------
    Z : array (..., n, d); Pi : array (..., n, K) rows on the simplex; eps : float > 0.

    Returns
    -------
    Delta R : array (...), the dtype of Z.
    """
    xp = _check_Z(Z)
    _check_Pi(Pi, Z)
    eps = check_positive(eps, "eps")
    # Delta R >= 0 always (log det is concave); a difference below the rounding of R itself
    # (tiny data in float32) is reported as 0 rather than as a negative number
    dR = _coding_rate(xp, Z, eps) - _compression(xp, Z, Pi, eps)
    return xp.where(dR > 0, dR, xp.zeros_like(dR))
