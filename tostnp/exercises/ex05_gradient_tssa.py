"""Checkers for exercises/05_gradient_tssa.md: the gradient of the variational bound,
memberships and one TSSA gradient step."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import call_student, run_specs
from ._compare import compare
from .ex04_variational import _FORBID, _HIDDEN, _SIZES, _problem, _size_label


def check_variational_compression_grad(fn, hidden=None):
    """fn(Z, Pi, U, eps) -> grad_Z R^var_c, shape (n, d), Pi held fixed (derived by hand)."""
    def one(rng, n, d, K, p, eps):
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
                shape_desc="(n, d), like Z", diagnoses=diag, derived=True,
                factors={"n": n, "d/eps^2": c, "d": d, "K": K})
    return run_specs("variational_compression_grad", one, _SIZES, _HIDDEN, hidden=hidden,
                     seed=23, label=_size_label)


def check_membership(fn, hidden=None):
    """fn(Z, U, eta) -> Pi (n, K): softmax over the K groups of ||U_k^T z_j||^2 / (2 eta)."""
    specs = [(20, 6, 3, 2, 1.0), (9, 4, 2, 2, 0.3), (15, 5, 4, 1, 2.0),
             (30, 8, 3, 3, 1e-3)]          # tiny eta: exp overflows unless shifted
    hidden_specs = [(1, 3, 2, 1, 0.5), (12, 6, 1, 2, 1.0)]

    def one(rng, n, d, K, p, eta):
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
    return run_specs("membership", one, specs, hidden_specs, hidden=hidden, seed=24,
                     label=lambda n, d, K, p, eta: f"n={n}, K={K}, eta={eta}")


def check_tssa_step(fn, hidden=None):
    """fn(Z, Pi, U, eps, tau) -> Z_plus (n, d): one gradient-descent step on R^var_c."""
    specs = [size + (tau,) for size, tau in zip(_SIZES, (0.5, 1.0, 0.1, 2.0))]
    hidden_specs = [size + (tau,) for size, tau in zip(_HIDDEN, (0.3, 1.5))]

    def one(rng, n, d, K, p, eps, tau):
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
    return run_specs("tssa_step", one, specs, hidden_specs, hidden=hidden, seed=25,
                     label=lambda n, d, K, p, eps, tau: f"n={n}, d={d}, tau={tau}")
