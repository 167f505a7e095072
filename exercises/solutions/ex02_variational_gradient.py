"""Reference solution of exercises/02_variational_gradient.md (the cell tagged "student")."""
import numpy as np


def variational_compression_grad_mine(Z, Pi, U, eps):
    """Gradient of R_c^var in Z: Z (n, d), Pi (n, K), U (K, d, p) -> (n, d)."""
    n, d = Z.shape
    c = d / eps**2
    grad = np.zeros_like(Z)
    for k in range(U.shape[0]):
        P = Z @ U[k]                                         # (n, p)  coordinates in basis k
        pi = Pi[:, k:k + 1]                                  # (n, 1)
        s = np.sum(pi * P**2, axis=0) / pi.sum()             # (p,)    token statistic
        D = c / (1.0 + c * s)                                # (p,)    grad f(s)
        grad += pi * (P * D) @ U[k].T                        # (n, d)  Diag(pi_k) Z U_k D_k U_k^T
    return grad / n
