"""Checkers for exercises/04_variational.md and 05_gradient_tssa.md: the variational bound, a
basis that makes it tight, a counter-example when p < rank, its gradient, memberships and one
TSSA gradient step."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, case, compare, hidden_enabled, run_cases

_FORBID = ("tostnp.math.objective", "tostnp.math.variational")


def _orthonormal(rng, K, d, p):
    return np.stack([np.linalg.qr(rng.standard_normal((d, p)))[0] for _ in range(K)])  # (K, d, p)


def _problem(rng, n, d, K, p):
    Z = rng.standard_normal((n, d)) * rng.uniform(0.3, 2.0, size=d)    # unequal directions
    Pi = rng.dirichlet(np.ones(K), size=n)
    return Z, Pi, _orthonormal(rng, K, d, p)


_SIZES = [(20, 6, 3, 2, 0.5), (50, 10, 2, 4, 1.3), (8, 4, 1, 4, 0.7), (30, 5, 4, 1, 0.2)]
_HIDDEN = [(3, 7, 2, 7, 0.4), (1, 2, 2, 1, 1.0)]


def check_variational_compression(fn, hidden=None):
    """fn(Z, Pi, U, eps) -> R^var_c(Z, Pi | U), a float; U (K, d, p) orthonormal columns."""
    rng = np.random.default_rng(21)
    cases = []
    for n, d, K, p, eps in _SIZES + (_HIDDEN if hidden_enabled(hidden) else []):
        def one(n=n, d=d, K=K, p=p, eps=eps):
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
        cases.append(case(f"n={n}, d={d}, K={K}, p={p}", one))
    return run_cases("variational_compression", cases)


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
    rng = np.random.default_rng(22)
    specs = [(30, 5, 3), (12, 8, 2), (40, 3, 1)]
    if hidden_enabled(hidden):
        specs += [(5, 9, 2)]
    cases = []
    for n, d, K in specs:
        def one(n=n, d=d, K=K):
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
        cases.append(case(f"n={n}, d={d}, K={K}", one))
    return run_cases("tight_basis", cases)


def check_bound_counterexample(result, hidden=None):
    """result = (Z, Pi, U, eps), or a function returning it, with U (K, d, p), p < d, orthonormal columns, for which
    R^var_c(Z, Pi | U) < R_c(Z, Pi): the bound R_c <= R^var_c needs p >= the rank."""
    def one():
        got = result
        if callable(got):
            got = call_student(got, forbidden=_FORBID, what="counterexample")
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


def check_variational_compression_grad(fn, hidden=None):
    """fn(Z, Pi, U, eps) -> grad_Z R^var_c, shape (n, d), Pi held fixed (derived by hand)."""
    rng = np.random.default_rng(23)
    cases = []
    for n, d, K, p, eps in _SIZES + (_HIDDEN if hidden_enabled(hidden) else []):
        def one(n=n, d=d, K=K, p=p, eps=eps):
            Z, Pi, U = _problem(rng, n, d, K, p)
            want = ref.variational_compression_grad(Z, Pi, U, eps)
            c = d / eps**2

            def variant(use_pi=True, stat_n=False, pi_sq=False):
                def f():
                    g = np.zeros_like(Z)
                    for k in range(K):
                        P = Z @ U[k]
                        pi = Pi[:, k:k + 1]
                        s = np.sum(pi * P**2, axis=0) / (n if stat_n else pi.sum())
                        D = c / (1 + c * s)
                        wgt = pi**2 if pi_sq else (pi if use_pi else 1.0)
                        g += wgt * (P * D) @ U[k].T
                    return g / n
                return f
            diag = [("each token's contribution must be weighted by its membership pi_k "
                     "(Diag(pi_k) is missing)", variant(use_pi=False)),
                    ("the statistic inside D_k divides by n instead of the group's size n_k",
                     variant(stat_n=True)),
                    ("the membership weight appears twice (pi_k^2)", variant(pi_sq=True))]
            got = call_student(fn, Z.copy(), Pi.copy(), U.copy(), eps,
                               forbidden=_FORBID + ("autograd",),
                               what="variational_compression_grad")
            compare(got, want, f"grad R^var_c for n={n}, d={d}, K={K}, p={p}",
                    shape_desc="(n, d), like Z", diagnoses=diag,
                    factors={"n": n, "d/eps^2": c, "d": d, "K": K})
        cases.append(case(f"n={n}, d={d}, K={K}, p={p}", one))
    return run_cases("variational_compression_grad", cases)


def check_membership(fn, hidden=None):
    """fn(Z, U, eta) -> Pi (n, K): softmax over the K groups of ||U_k^T z_j||^2 / (2 eta)."""
    rng = np.random.default_rng(24)
    specs = [(20, 6, 3, 2, 1.0), (9, 4, 2, 2, 0.3), (15, 5, 4, 1, 2.0),
             (30, 8, 3, 3, 1e-3)]          # tiny eta: exp overflows unless shifted
    if hidden_enabled(hidden):
        specs += [(1, 3, 2, 1, 0.5), (12, 6, 1, 2, 1.0)]
    cases = []
    for n, d, K, p, eta in specs:
        def one(n=n, d=d, K=K, p=p, eta=eta):
            Z, _, U = _problem(rng, n, d, K, p)
            want = ref.membership(Z, U, eta)
            E = np.stack([np.sum((Z @ U[k]) ** 2, axis=1) for k in range(K)], axis=1)  # (n, K)

            def soft(L, axis):
                e = np.exp(L - L.max(axis=axis, keepdims=True))
                return e / e.sum(axis=axis, keepdims=True)
            diag = [("each token's memberships must sum to 1 over the K groups: the softmax runs "
                     "over the wrong axis", lambda: soft(E / (2 * eta), 0)),
                    ("the temperature: check the factor that divides the energies",
                     lambda: soft(E / eta, 1)),
                    ("the temperature: check the factor that divides the energies",
                     lambda: soft(E * (2 * eta), 1)),
                    ("the energy of a token in group k is a squared norm",
                     lambda: soft(np.sqrt(E) / (2 * eta), 1))]
            got = call_student(fn, Z.copy(), U.copy(), eta, forbidden=_FORBID, what="membership")
            compare(got, want, f"Pi for n={n}, K={K}, eta={eta}", shape_desc="(n, K)",
                    diagnoses=diag, rtol=1e-9)
        cases.append(case(f"n={n}, K={K}, eta={eta}", one))
    return run_cases("membership", cases)


def check_tssa_step(fn, hidden=None):
    """fn(Z, Pi, U, eps, tau) -> Z_plus (n, d): one gradient-descent step on R^var_c."""
    rng = np.random.default_rng(25)
    cases = []
    for (n, d, K, p, eps), tau in zip(_SIZES + (_HIDDEN if hidden_enabled(hidden) else []),
                                      (0.5, 1.0, 0.1, 2.0, 0.3, 1.5)):
        def one(n=n, d=d, K=K, p=p, eps=eps, tau=tau):
            Z, Pi, U = _problem(rng, n, d, K, p)
            g = ref.variational_compression_grad(Z, Pi, U, eps)
            want = Z - tau * g
            diag = [("the step goes up the gradient: a descent step on R^var_c compresses",
                     lambda: Z + tau * g),
                    ("you returned the update; return the new tokens", lambda: -tau * g),
                    ("the step is divided by n once too often", lambda: Z - tau * g / n)]
            got = call_student(fn, Z.copy(), Pi.copy(), U.copy(), eps, tau, forbidden=_FORBID,
                               what="tssa_step")
            compare(got, want, f"Z+ for n={n}, d={d}, tau={tau}", shape_desc="(n, d)",
                    diagnoses=diag)
        cases.append(case(f"n={n}, d={d}, tau={tau}", one))
    return run_cases("tssa_step", cases)
