"""Reference solutions of exercises/02_coding_rate.md, one section per cell tagged ex-<name>."""
# %% ex-coding_rate
import numpy as np


def coding_rate_mine(Z, eps):
    """R(Z) for Z of shape (n, d) -> a Python float."""
    n, d = Z.shape
    a = d / (n * eps**2)
    G = np.eye(n) + a * (Z @ Z.T) if n < d else np.eye(d) + a * (Z.T @ Z)   # the smaller Gram
    return 0.5 * float(np.linalg.slogdet(G)[1])


# %% ex-compression
import numpy as np


def compression_mine(Z, Pi, eps):
    """R_c(Z, Pi) for Z (n, d) and memberships Pi (n, K) -> a Python float."""
    n, d = Z.shape
    total = 0.0
    for k in range(Pi.shape[1]):
        n_k = Pi[:, k].sum()
        if n_k <= 0:                                 # an empty group codes nothing
            continue
        S = Z.T @ (Pi[:, k:k + 1] * Z)               # (d, d) = Z^T Diag(pi_k) Z
        total += 0.5 * (n_k / n) * np.linalg.slogdet(np.eye(d) + d / (n_k * eps**2) * S)[1]
    return float(total)


# %% ex-coding_rate_grad
import numpy as np


def coding_rate_grad_mine(Z, eps):
    """grad_Z R(Z) for Z (n, d) -> (n, d).

    dR = 1/2 tr(X^-1 a (dZ^T Z + Z^T dZ)) = a tr(X^-1 Z^T dZ), X = I + a Z^T Z, so
    grad = a Z X^-1 (X symmetric).
    """
    n, d = Z.shape
    a = d / (n * eps**2)
    X = np.eye(d) + a * (Z.T @ Z)                    # (d, d)
    return a * np.linalg.solve(X, Z.T).T             # (n, d) = a Z X^-1


# %% ex-max_rate_design
import numpy as np


def max_rate_design_mine(n, d, eps):
    """A Z of shape (n, d), n >= d, with ||Z||_F^2 = n and the largest R(Z): equal singular
    values (the log is concave), e.g. sqrt(n/d) times d orthonormal columns."""
    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, d)))   # (n, d) orthonormal
    return np.sqrt(n / d) * Q
