"""The variational compression term R^var_c, its gradient, TSSA as one gradient step, memberships.

book/04_variational.md and book/05_gradient_tssa.md (labels eq-Rvar, eq-grad, eq-tssa, eq-membership). Tokens are ROWS:
``Z`` has shape (..., n, d); the paper's U_k^T Z (columns) is Z U_k here. Each group k has a
fixed basis U_k (d, p) with orthonormal columns, stacked as ``U`` (K, d, p); U has no batch
axes and is shared by every sample of the batch. dtype is preserved (float32 in, float32 out).

With f(x) = log(1 + (d/eps^2) x), the token statistic of group k is the Pi-weighted second
moment of each projected coordinate,

    stat_k,i = sum_j Pi_jk (Z U_k)_ji^2 / n_k,       n_k = sum_j Pi_jk,

and R^var_c = 1/2 sum_k (n_k/n) sum_i f(stat_k,i). It upper-bounds R_c (tostnp.compression),
with equality when U_k diagonalises group k's weighted covariance. No n x n token-pair matrix
appears: the cost is O(K n d p).
"""
from __future__ import annotations

from ..backend.validate import check_array, check_finite, check_positive, check_same_dtype
from .objective import _check_Pi, _check_Z

__all__ = ["variational_compression", "variational_compression_grad", "tssa_step", "membership"]


def _check_U(U, Z):
    """U must be (K, d, p) with Z's feature width d and dtype, finite, K >= 1 and p >= 1."""
    want = f"(K, d, p) with d = {Z.shape[-1]}"
    check_array(U, "U", ndim=3, shape_desc=want)
    if U.shape[1] != Z.shape[-1]:
        raise ValueError(f"U must have shape {want} (Z's feature width), "
                         f"got shape {tuple(U.shape)}")
    if U.shape[0] == 0 or U.shape[2] == 0:
        raise ValueError(f"U must have shape {want} with K >= 1 and p >= 1, "
                         f"got shape {tuple(U.shape)}")
    check_same_dtype(Z=Z, U=U)
    check_finite(U, "U")


def _check_K(Pi, U):
    if Pi.shape[-1] != U.shape[0]:
        raise ValueError(f"U must have shape (K, d, p) with K = {Pi.shape[-1]} groups "
                         f"(the last axis of Pi), got shape {tuple(U.shape)}")


def _finite(xp, out, Z):
    """``out``, or a ValueError naming Z when its statistics overflowed Z's dtype (never NaN)."""
    if not bool(xp.all(xp.isfinite(out))):
        raise ValueError(f"Z is too large for {Z.dtype}: the token statistics (squared "
                         f"projections) overflow, max |Z| = {float(xp.max(xp.abs(Z))):.3g} "
                         f"(rescale Z or use float64)")
    return out


def _swap_last_two(xp, x):
    return xp.permute_dims(x, tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2))


def _statistics(xp, Z, Pi, U):
    """Projections, token weights and statistics shared by R^var_c and its gradient.

    Returns ZU (..., K, n, p), Pi_T (..., K, n), n_k (..., K), stat (..., K, p).
    """
    ZU = Z[..., None, :, :] @ U                                # (..., K, n, p)  rows z_j^T U_k
    Pi_T = _swap_last_two(xp, Pi)                              # (..., K, n)
    n_k = xp.sum(Pi_T, axis=-1)                                # (..., K)
    # An empty group (n_k = 0) has pi_k = 0: its statistic is 0 whatever we divide by.
    safe = xp.where(n_k > 0, n_k, xp.ones_like(n_k))           # (..., K)
    w = Pi_T / safe[..., None]                                 # (..., K, n)     pi_k / n_k
    stat = (w[..., None, :] @ (ZU * ZU))[..., 0, :]            # (..., K, p)     token statistic
    return ZU, Pi_T, n_k, stat


def _variational_compression(xp, Z, Pi, U, eps):
    n, d = Z.shape[-2], Z.shape[-1]
    _, _, n_k, stat = _statistics(xp, Z, Pi, U)
    f = xp.log1p((d / eps**2) * stat)                          # (..., K, p)     f(stat)
    return 0.5 * xp.sum((n_k / n) * xp.sum(f, axis=-1), axis=-1)   # (...)       eq. (Rvar)


def _variational_compression_grad(xp, Z, Pi, U, eps):
    n, d = Z.shape[-2], Z.shape[-1]
    c = d / eps**2
    ZU, Pi_T, _, stat = _statistics(xp, Z, Pi, U)
    D = c / (1.0 + c * stat)                                   # (..., K, p)     diag of D_k = f'(stat_k)
    A = ZU * D[..., None, :]                                   # (..., K, n, p)  Z U_k D_k
    B = A @ xp.matrix_transpose(U)                             # (..., K, n, d)  Z U_k D_k U_k^T
    # The 1/n_k inside stat cancels the n_k/n weight: the gradient carries 1/n and pi_k only.
    return xp.sum(Pi_T[..., None] * B, axis=-3) / n           # (..., n, d)     eq. (grad-Rvar)


def variational_compression(Z, Pi, U, eps):
    """Variational compression term R^var_c(Z, Pi | U), eq. (Rvar).

    R^var_c = 1/2 sum_k (n_k/n) sum_{i=1..p} f( (1/n_k) sum_j Pi_jk (z_j^T u_k,i)^2 ),
    f(x) = log(1 + (d/eps^2) x),  n_k = sum_j Pi_jk,

    i.e. f applied to the diagonal of U_k^T (Z^T Diag(pi_k) Z / n_k) U_k instead of to its
    eigenvalues. For orthonormal U_k, R_c <= R^var_c, with equality at the eigenbasis.

    Parameters
    ----------
    Z : array (..., n, d), float32 or float64 -- tokens as rows.
    Pi : array (..., n, K) -- memberships, same leading axes and dtype as Z, rows on the simplex.
    U : array (K, d, p) -- one basis U_k (d, p) per group, same dtype as Z; shared by the batch.
    eps : float > 0 -- precision.

    Returns
    -------
    R^var_c : array (...), the dtype of Z.
    """
    xp = _check_Z(Z)
    _check_Pi(Pi, Z)
    _check_U(U, Z)
    _check_K(Pi, U)
    eps = check_positive(eps, "eps")
    return _finite(xp, _variational_compression(xp, Z, Pi, U, eps), Z)


def variational_compression_grad(Z, Pi, U, eps):
    """Closed-form gradient of R^var_c with respect to Z, Pi held fixed, eq. (grad-Rvar).

    Rows convention (the paper's (1/n) sum_k U_k D_k U_k^T Z Diag(pi_k), transposed):

    grad_Z R^var_c = (1/n) sum_k Diag(pi_k) Z U_k D_k U_k^T,
    D_k = Diag(f'(stat_k)),  stat_k,i = sum_j Pi_jk (Z U_k)_ji^2 / n_k,
    f'(x) = (d/eps^2) / (1 + (d/eps^2) x).

    D_k shrinks the directions of U_k in which group k has little energy and lets the
    high-energy directions pass. Computed for all k at once with batched matmuls.

    Parameters
    ----------
    Z : array (..., n, d); Pi : array (..., n, K); U : array (K, d, p); eps : float > 0.

    Returns
    -------
    grad : array (..., n, d), the dtype of Z.
    """
    xp = _check_Z(Z)
    _check_Pi(Pi, Z)
    _check_U(U, Z)
    _check_K(Pi, U)
    eps = check_positive(eps, "eps")
    return _finite(xp, _variational_compression_grad(xp, Z, Pi, U, eps), Z)


def tssa_step(Z, Pi, U, eps, tau):
    """One gradient-descent step on R^var_c: the TSSA operator, eq. (TSSA).

    Z+ = Z - tau * grad_Z R^var_c(Z, Pi | U) = Z + TSSA(Z),
    TSSA(Z) = -(tau/n) sum_k Diag(pi_k) Z U_k D_k U_k^T   (rows convention).

    Parameters
    ----------
    Z : array (..., n, d); Pi : array (..., n, K); U : array (K, d, p); eps : float > 0;
    tau : float > 0 -- step size.

    Returns
    -------
    Z+ : array (..., n, d), the dtype of Z.
    """
    tau = check_positive(tau, "tau")
    return Z - tau * variational_compression_grad(Z, Pi, U, eps)


def membership(Z, U, eta):
    """Soft memberships of the tokens to the K subspaces, eq. (Pi).

    Pi_jk = softmax_k( ||U_k^T z_j||^2 / (2 eta) )

    a softmax over the K groups (one probability vector per token), the posterior of a
    Gaussian mixture over the subspaces at temperature eta. Computed stably (the largest logit
    of each token is subtracted before exponentiating).

    Parameters
    ----------
    Z : array (..., n, d) -- tokens as rows.
    U : array (K, d, p) -- one basis per group, same dtype as Z.
    eta : float > 0 -- temperature (small eta: hard assignment to the best-fitting subspace).

    Returns
    -------
    Pi : array (..., n, K), the dtype of Z; every row sums to 1.
    """
    xp = _check_Z(Z)
    _check_U(U, Z)
    eta = check_positive(eta, "eta")
    ZU = Z[..., None, :, :] @ U                                # (..., K, n, p)
    if not bool(xp.all(xp.isfinite(ZU))):
        raise ValueError(f"Z is too large for {Z.dtype}: its projections U_k^T z overflow "
                         f"(rescale Z or use float64)")
    # The softmax needs only differences of the logits ||U_k^T z||^2 / (2 eta). Squares of
    # |Z| ~ 1e19 overflow float32, so each token's projections are scaled by their largest
    # magnitude m first: logit_k - logit_max = ((q_k - q_max) m) m / (2 eta), q = ||U^T z / m||^2.
    m = xp.max(xp.abs(ZU), axis=(-3, -1), keepdims=True)       # (..., 1, n, 1) per token
    m = xp.where(m > 0, m, xp.ones_like(m))
    q = _swap_last_two(xp, xp.sum((ZU / m) ** 2, axis=-1))     # (..., n, K) in [0, p]
    m = _swap_last_two(xp, m[..., 0])                          # (..., n, 1)
    d = (q - xp.max(q, axis=-1, keepdims=True)) * m            # (..., n, K) <= 0, finite
    # exp(d m / (2 eta)) = 0 below -1000: clip there first, so that nothing overflows
    fi = xp.finfo(Z.dtype)
    c = 2000.0 * eta
    if c < float(fi.max) / 4:                                  # else nothing can overflow
        m_c = xp.clip(m, min=c / (float(fi.max) / 2))          # so that c / m_c <= max / 2
        d = xp.maximum(d, xp.clip(-c / m_c, max=-float(fi.smallest_normal)))
    e = xp.exp((d / (2.0 * eta)) * m)                                              # (..., n, K) in [0, 1], max 1
    return e / xp.sum(e, axis=-1, keepdims=True)               # (..., n, K)
