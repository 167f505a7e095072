"""Reference solutions of exercises/03_white_box.md, one section per cell tagged ex-<name>."""
# %% ex-mssa
import numpy as np


def mssa_mine(Z, U, beta):
    out = np.zeros_like(Z)
    for k in range(U.shape[0]):
        P = Z @ U[k]                                       # (n, p)
        S = P @ P.T                                        # (n, n): the quadratic step
        A = np.exp(S - S.max(axis=1, keepdims=True))
        out += beta * (A / A.sum(axis=1, keepdims=True)) @ P @ U[k].T
    return out


# %% ex-series_error
import numpy as np


def series_error_mine(Z, U, beta):
    """Error of (I - beta G) for (I + beta G)^-1: the series' next term, O(beta^2)."""
    n = Z.shape[0]
    exact = np.zeros_like(Z)
    approx = np.zeros_like(Z)
    for k in range(U.shape[0]):
        P = Z @ U[k]
        G = P @ P.T
        exact += np.linalg.solve(np.eye(n) + beta * G, P) @ U[k].T
        approx += (P - beta * G @ P) @ U[k].T
    return float(np.linalg.norm(exact - approx) / np.linalg.norm(exact))
