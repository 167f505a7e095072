"""Reference solution of exercises/01_coding_rate.md (the cell tagged "student")."""
import numpy as np


def coding_rate_mine(Z, eps):
    """R(Z) for Z of shape (n, d) -> a Python float."""
    n, d = Z.shape
    a = d / (n * eps**2)
    if n < d:                                    # the smaller Gram matrix: n x n
        G = np.eye(n) + a * (Z @ Z.T)
    else:                                        # d x d
        G = np.eye(d) + a * (Z.T @ Z)
    return 0.5 * np.linalg.slogdet(G)[1]


def compression_mine(Z, Pi, eps):
    """R_c(Z, Pi) for Z (n, d) and memberships Pi (n, K) -> a Python float."""
    n, d = Z.shape
    total = 0.0
    for k in range(Pi.shape[1]):
        n_k = Pi[:, k].sum()
        S = Z.T @ (Pi[:, k:k + 1] * Z)           # (d, d) = Z^T Diag(pi_k) Z
        total += 0.5 * (n_k / n) * np.linalg.slogdet(np.eye(d) + d / (n_k * eps**2) * S)[1]
    return total
