"""Checkers for exercises/04_variational.md: the variational bound, a basis that makes it
tight, a counter-example when p < rank (the problem generator is shared with
:mod:`.ex05_gradient_tssa`)."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import Fail, answer_of, call_student, case, run_cases, run_specs
from ._compare import compare

_FORBID = ("tostnp.math.objective", "tostnp.math.variational")


def _orthonormal(rng, K, d, p):
    return np.stack([np.linalg.qr(rng.standard_normal((d, p)))[0] for _ in range(K)])  # (K, d, p)


def _problem(rng, n, d, K, p):
    Z = rng.standard_normal((n, d)) * rng.uniform(0.3, 2.0, size=d)    # unequal directions
    Pi = rng.dirichlet(np.ones(K), size=n)
    return Z, Pi, _orthonormal(rng, K, d, p)


# (n, d, K, p, eps): the visible and the hidden problems of both notebooks
_SIZES = [(20, 6, 3, 2, 0.5), (50, 10, 2, 4, 1.3), (8, 4, 1, 4, 0.7), (30, 5, 4, 1, 0.2)]
_HIDDEN = [(3, 7, 2, 7, 0.4), (1, 2, 2, 1, 1.0)]


def _size_label(n, d, K, p, eps):
    return f"n={n}, d={d}, K={K}, p={p}"


def check_variational_compression(fn, hidden=None):
    """fn(Z, Pi, U, eps) -> R^var_c(Z, Pi | U), a float; U (K, d, p) orthonormal columns."""
    def one(rng, n, d, K, p, eps):
        Z, Pi, U = _problem(rng, n, d, K, p)
        want = ref.variational_compression(Z, Pi, U, eps)

        def variant(stat_n=False, weight_n=False, scale_n=False):
            def f():
                tot = 0.0
                for k in range(K):
                    n_k = Pi[:, k].sum()
                    s = Pi[:, k] @ (Z @ U[k]) ** 2 / (n if stat_n else n_k)
                    a = d / ((n if scale_n else 1.0) * eps**2)
                    tot += 0.5 * (1.0 / K if weight_n else n_k / n) * np.sum(np.log1p(a * s))
                return tot
            return f
        diag = [("you computed R_c from eigenvalues; the variational form uses the diagonal "
                 "of U_k^T M_k U_k in the given bases", lambda: ref.compression(Z, Pi, eps)),
                ("the statistic divides by n instead of the group's size n_k",
                 variant(stat_n=True)),
                ("the scale inside the log of R^var_c has no 1/n: the statistic already "
                 "averages over the group", variant(scale_n=True))]
        got = call_student(fn, Z.copy(), Pi.copy(), U.copy(), eps, forbidden=_FORBID,
                           what="variational_compression")
        compare(got, want, f"R^var_c for n={n}, d={d}, K={K}, p={p}",
                factors={"n": n, "K": K, "d": d, "p": p}, diagnoses=diag)
    return run_specs("variational_compression", one, _SIZES, _HIDDEN, hidden=hidden, seed=21,
                     label=_size_label)


def _check_bases(U, K, d, p, what):
    U = np.asarray(U, dtype=float)
    if U.shape != (K, d, p):
        raise Fail(f"{what}: U must have shape (K, d, p) = {(K, d, p)}, got {U.shape}")
    for k in range(K):
        G = U[k].T @ U[k]
        err = np.max(np.abs(G - np.eye(p)))
        if err > 1e-8:
            raise Fail(f"{what}: the columns of U[{k}] are not orthonormal (U_k^T U_k differs from "
                       f"I by {err:.1e}); the bound holds only for orthonormal bases")
    return U


def check_tight_basis(fn, hidden=None):
    """fn(Z, Pi) -> U (K, d, d) with orthonormal columns for which R^var_c = R_c (for every eps)."""
    specs = [(30, 5, 3), (12, 8, 2), (40, 3, 1)]
    hidden_specs = [(5, 9, 2)]

    def one(rng, n, d, K):
        Z, Pi, _ = _problem(rng, n, d, K, d)
        U = call_student(fn, Z.copy(), Pi.copy(), forbidden=_FORBID, what="tight_basis")
        U = _check_bases(U, K, d, d, f"n={n}, d={d}, K={K}")
        for eps in (0.3, 1.0):
            gap = ref.variational_compression(Z, Pi, U, eps) - ref.compression(Z, Pi, eps)
            if gap > 1e-8:
                k = int(np.argmax([np.abs(np.triu(U[k].T @ Z.T @ (Pi[:, k:k + 1] * Z) @ U[k], 1)).max()
                                   for k in range(K)]))
                raise Fail(f"n={n}, d={d}, K={K}, eps={eps}: R^var_c exceeds R_c by {gap:.2e}. "
                           f"For group {k}, U_k^T (Z^T Diag(pi_k) Z) U_k is not diagonal: which "
                           "basis makes a symmetric matrix diagonal?")
    return run_specs("tight_basis", one, specs, hidden_specs, hidden=hidden, seed=22,
                     label=lambda n, d, K: f"n={n}, d={d}, K={K}")


def check_bound_counterexample(result, hidden=None):
    """result = (Z, Pi, U, eps), or a function returning it, with U (K, d, p), p < d, orthonormal columns, for which
    R^var_c(Z, Pi | U) < R_c(Z, Pi): the bound R_c <= R^var_c needs p >= the rank."""
    def one():
        got = answer_of(result, forbidden=_FORBID, what="counterexample")
        if not isinstance(got, (tuple, list)) or len(got) != 4:
            raise Fail("return a tuple (Z, Pi, U, eps)")
        Z, Pi, U, eps = (np.asarray(a, dtype=float) for a in got)
        if Z.ndim != 2 or Pi.ndim != 2 or U.ndim != 3:
            raise Fail(f"shapes: Z (n, d), Pi (n, K), U (K, d, p); got {Z.shape}, {Pi.shape}, "
                       f"{U.shape}")
        n, d = Z.shape
        K, p = Pi.shape[1], U.shape[2]
        if Pi.shape[0] != n or np.any(Pi < 0) or np.max(np.abs(Pi.sum(axis=1) - 1)) > 1e-9:
            raise Fail("Pi must be (n, K) with non-negative rows that sum to 1")
        _check_bases(U, K, d, p, "counter-example")
        if not p < d:
            raise Fail(f"p = {p} and d = {d}: with p = d the bound always holds; the point is "
                       "p < d")
        eps = float(eps)
        if not eps > 0:
            raise Fail("eps must be positive")
        Rv, Rc = ref.variational_compression(Z, Pi, U, eps), ref.compression(Z, Pi, eps)
        if not Rv < Rc - 1e-6:
            raise Fail(f"here R^var_c - R_c = {Rv - Rc:.3e} >= 0: the bound holds for your "
                       f"example. How many directions does each group's data span, compared "
                       f"with p = {p}?")
    return run_cases("bound_counterexample", [case("your example", one)])
