"""Reference solutions of exercises/05_gradient_tssa.md, one section per cell tagged ex-<name>."""
# %% ex-variational_compression_grad
import numpy as np


def variational_compression_grad_mine(Z, Pi, U, eps):
    """grad_Z R^var_c = (1/n) sum_k Diag(pi_k) Z U_k D_k U_k^T, D_k = f'(s_k): the 1/n_k of the
    statistic cancels the weight n_k/n, and the 2 of the square cancels the 1/2."""
    n, d = Z.shape
    c = d / eps**2
    grad = np.zeros_like(Z)
    for k in range(U.shape[0]):
        P = Z @ U[k]                                         # (n, p)
        pi = Pi[:, k:k + 1]                                  # (n, 1)
        s = np.sum(pi * P**2, axis=0) / pi.sum()             # (p,)
        D = c / (1.0 + c * s)                                # (p,)   f'(s)
        grad += pi * (P * D) @ U[k].T                        # (n, d)
    return grad / n


# %% ex-membership
import numpy as np


def membership_mine(Z, U, eta):
    """Pi (n, K): softmax over groups of ||U_k^T z_j||^2 / (2 eta), shifted by the row max."""
    E = np.stack([np.sum((Z @ U[k]) ** 2, axis=1) for k in range(U.shape[0])], axis=1)  # (n, K)
    L = E / (2.0 * eta)
    e = np.exp(L - L.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# %% ex-tssa_step
import numpy as np


def tssa_step_mine(Z, Pi, U, eps, tau):
    """Z+ = Z - tau grad R^var_c (a descent step compresses)."""
    return Z - tau * variational_compression_grad_mine(Z, Pi, U, eps)
