"""Reference solutions of exercises/04_variational.md, one section per cell tagged ex-<name>."""
# %% ex-variational_compression
import numpy as np


def variational_compression_mine(Z, Pi, U, eps):
    """R^var_c(Z, Pi | U): Z (n, d), Pi (n, K), U (K, d, p) -> a Python float."""
    n, d = Z.shape
    total = 0.0
    for k in range(U.shape[0]):
        n_k = Pi[:, k].sum()
        s = Pi[:, k] @ (Z @ U[k]) ** 2 / n_k                 # (p,) weighted energy per direction
        total += 0.5 * n_k / n * np.sum(np.log1p(d / eps**2 * s))
    return float(total)


# %% ex-tight_basis
import numpy as np


def tight_basis_mine(Z, Pi):
    """U (K, d, d): the eigenvectors of each group's weighted second moment Z^T Diag(pi_k) Z."""
    return np.stack([np.linalg.eigh(Z.T @ (Pi[:, k:k + 1] * Z))[1] for k in range(Pi.shape[1])])


# %% ex-bound_counterexample
import numpy as np


def counterexample_mine():
    """One group, d = 2, tokens spread over both axes, p = 1: R^var_c keeps one direction's
    log(1 + c s) and drops the other, so it falls below R_c, which counts both."""
    Z = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])   # (4, 2)
    Pi = np.ones((4, 1))                                              # (4, 1)
    U = np.array([[[1.0], [0.0]]])                                    # (1, 2, 1)
    return Z, Pi, U, 1.0
