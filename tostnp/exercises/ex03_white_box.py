"""Checkers for exercises/03_white_box.md: CRATE's multi-head subspace self-attention (MSSA)
and the order of its series approximation. Tokens are rows: Z (n, d), U (K, d, p)."""
from __future__ import annotations

import numpy as np

from ._core import Fail, call_student, run_specs
from ._compare import compare

_FORBID = ("tostnp.nn", "tostnp.math.variational")


def _bases(rng, d, K, p):
    return np.stack([np.linalg.qr(rng.standard_normal((d, p)))[0] for _ in range(K)])


def _mssa_loop(Z, U, beta):
    """beta sum_k softmax_rows(P_k P_k^T) P_k U_k^T, token by token."""
    n = Z.shape[0]
    out = np.zeros_like(Z)
    for k in range(U.shape[0]):
        P = Z @ U[k]
        for i in range(n):
            s = np.array([P[i] @ P[j] for j in range(n)])
            a = np.exp(s - s.max())
            out[i] += beta * ((a / a.sum()) @ P) @ U[k].T
    return out


def check_mssa(fn, hidden=None):
    """fn(Z, U, beta) -> MSSA(Z | U) (n, d) = beta sum_k softmax_rows((Z U_k)(Z U_k)^T) Z U_k U_k^T."""
    specs = [(8, 6, 3, 2, 0.3), (1, 4, 2, 2, 1.0), (12, 8, 2, 4, 0.1), (5, 3, 1, 3, 2.0)]
    hidden_specs = [(6, 4, 4, 1, 0.3)]

    def one(rng, n, d, K, p, beta):
        Z, U = rng.standard_normal((n, d)), _bases(rng, d, K, p)
        want = _mssa_loop(Z, U, beta)

        def soft(S, ax):
            e = np.exp(S - S.max(ax, keepdims=True))
            return e / e.sum(ax, keepdims=True)
        diag = [("each token's attention weights must sum to 1 over the other tokens: the "
                 "softmax runs over the wrong axis",
                 lambda: sum(beta * soft((Z @ U[k]) @ (Z @ U[k]).T, 0) @ (Z @ U[k]) @ U[k].T
                             for k in range(K))),
                ("the similarity is a plain Gram matrix here: MSSA replaces it by a row-wise "
                 "softmax", lambda: sum(beta * (Z @ U[k]) @ (Z @ U[k]).T @ (Z @ U[k]) @ U[k].T
                                        for k in range(K))),
                ("the result must be mapped back with U_k^T (coordinates -> tokens)",
                 lambda: sum(beta * soft((Z @ U[k]) @ (Z @ U[k]).T, 1) @ Z for k in range(K)))]
        got = call_student(fn, Z.copy(), U.copy(), beta, forbidden=_FORBID, what="mssa")
        compare(got, want, f"MSSA for n={n}, d={d}, K={K}, p={p}", shape_desc="(n, d)",
                diagnoses=diag, factors={"beta": beta, "K": K, "n": n})
    return run_specs("mssa", one, specs, hidden_specs, hidden=hidden, seed=91,
                     label=lambda n, d, K, p, beta: f"n={n}, d={d}, K={K}, p={p}")


def _series_error(Z, U, beta):
    """|| sum_k [(I + b G_k)^-1 - (I - b G_k)] P_k U_k^T ||_F / || sum_k (I + b G_k)^-1 P_k U_k^T ||_F.

    Computed independently of the n x n form a student writes: with G_k = P_k P_k^T, the
    push-through identity (I + b P P^T)^-1 P = P (I + b P^T P)^-1 needs only a p x p inverse, and
    the series term is expanded as P - b P (P^T P)."""
    exact = 0.0
    approx = 0.0
    for k in range(U.shape[0]):
        P = Z @ U[k]                                   # (n, p)
        S = P.T @ P                                    # (p, p)
        exact = exact + P @ np.linalg.inv(np.eye(S.shape[0]) + beta * S) @ U[k].T
        approx = approx + (P - beta * (P @ S)) @ U[k].T
    return float(np.linalg.norm(exact - approx) / np.linalg.norm(exact))


def check_series_error(fn, hidden=None):
    """fn(Z, U, beta) -> the relative Frobenius error of the two-term series (I - beta G_k) for
    (I + beta G_k)^{-1} in the compression gradient sum_k (I + beta G_k)^{-1} P_k U_k^T,
    G_k = P_k P_k^T, P_k = Z U_k. The check also fits the order of the error in beta."""
    specs = [(10, 6, 3, 2), (6, 4, 2, 2), (15, 8, 4, 2)]
    hidden_specs = [(3, 3, 1, 3)]

    def one(rng, n, d, K, p):
        Z, U = rng.standard_normal((n, d)) / np.sqrt(d), _bases(rng, d, K, p)
        betas = np.array([1e-3, 2e-3, 4e-3, 8e-3])
        got = []
        for b in betas:
            e = call_student(fn, Z.copy(), U.copy(), float(b), forbidden=_FORBID,
                             what="series_error")
            compare(e, _series_error(Z, U, b), f"the error at beta={b:g} for n={n}, K={K}",
                    rtol=1e-6,
                    diagnoses=[("the error of a ONE-term series (I): keep the -beta G term",
                                lambda b=b: _one_term(Z, U, b)),
                               ("relative to the approximation; divide by the exact "
                                "gradient's norm", lambda b=b: _rel_to_approx(Z, U, b))])
            got.append(float(e))
        order = np.polyfit(np.log(betas), np.log(got), 1)[0]
        if not 1.8 < order < 2.2:
            raise Fail(f"your errors fall like beta^{order:.2f} for n={n}: a two-term series "
                       "leaves an error of second order")
    return run_specs("series_error", one, specs, hidden_specs, hidden=hidden, seed=92,
                     label=lambda n, d, K, p: f"n={n}, d={d}, K={K}, p={p}")


def _exact_nxn(Z, U, beta):
    """sum_k (I + beta G_k)^-1 P_k U_k^T in the n x n form a student writes (for the hints)."""
    n = Z.shape[0]
    return sum(np.linalg.solve(np.eye(n) + beta * (Z @ U[k]) @ (Z @ U[k]).T, Z @ U[k]) @ U[k].T
               for k in range(U.shape[0]))


def _one_term(Z, U, beta):
    ex = _exact_nxn(Z, U, beta)
    ap = sum((Z @ U[k]) @ U[k].T for k in range(U.shape[0]))
    return float(np.linalg.norm(ex - ap) / np.linalg.norm(ex))


def _rel_to_approx(Z, U, beta):
    ex = _exact_nxn(Z, U, beta)
    ap = sum(((Z @ U[k]) - beta * (Z @ U[k]) @ (Z @ U[k]).T @ (Z @ U[k])) @ U[k].T
             for k in range(U.shape[0]))
    return float(np.linalg.norm(ex - ap) / np.linalg.norm(ap))
