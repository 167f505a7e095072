"""Checkers for exercises/02_coding_rate.md: R(Z), R_c(Z, Pi), the gradient of R, a design."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, run_specs
from ._compare import compare

# the code these exercises replace: calling it is not solving the exercise
_FORBID = ("tostnp.math.objective", "tostnp.math.variational")


def _scale_diagnoses(Z, eps, n, d, R):
    """Values of R with the usual slips in the scale d/(n eps^2) inside the log."""
    def with_scale(a):
        return lambda: 0.5 * float(np.sum(np.log1p(a * np.clip(np.linalg.eigvalsh(Z.T @ Z), 0, None))))
    return [("the scale inside the log lacks the factor d", with_scale(1 / (n * eps**2))),
            ("the scale inside the log lacks the 1/n", with_scale(d / eps**2)),
            ("the scale inside the log has eps where the formula has eps^2",
             with_scale(d / (n * eps))),
            ("the scale inside the log has n and d swapped", with_scale(n / (d * eps**2)))]


def check_coding_rate(fn, hidden=None):
    """fn(Z, eps) -> R(Z), a float, for Z of shape (n, d) (tokens are rows)."""
    specs = [(40, 6, 0.5), (5, 30, 1.0), (200, 16, 0.1), (1, 3, 0.7),
             (120, 100, 0.01)]            # the last one overflows det(): a test of slogdet
    hidden_specs = [(3, 3, 1e-3), (64, 64, 2.0), (7, 1, 0.3)]

    def one(rng, n, d, eps):
        Z = rng.standard_normal((n, d))
        want = ref.coding_rate(Z, eps)
        got = call_student(fn, Z.copy(), eps, forbidden=_FORBID, what="coding_rate")
        compare(got, want, f"R(Z) for n={n}, d={d}, eps={eps}",
                factors={"n": n, "d": d, "eps": eps, "eps^2": eps**2},
                diagnoses=_scale_diagnoses(Z, eps, n, d, want))
    return run_specs("coding_rate", one, specs, hidden_specs, hidden=hidden, seed=11,
                     label=lambda n, d, eps: f"n={n}, d={d}")


def check_compression(fn, hidden=None):
    """fn(Z, Pi, eps) -> R_c(Z, Pi), a float; Z (n, d), memberships Pi (n, K) with rows summing to 1."""
    specs = [("soft", 30, 5, 3, 0.5), ("soft", 60, 8, 2, 0.2), ("one group", 25, 4, 1, 0.6),
             ("hard", 40, 6, 4, 0.3), ("few tokens", 4, 10, 2, 1.0)]
    hidden_specs = [("empty group", 30, 5, 3, 0.5), ("soft", 300, 200, 2, 0.05)]

    def one(rng, kind, n, d, K, eps):
        Z = rng.standard_normal((n, d))
        if kind == "one group":
            Pi = np.ones((n, 1))
        elif kind == "hard":
            Pi = np.eye(K)[np.arange(n) % K]
        elif kind == "empty group":                       # group K-1 holds no token
            Pi = np.zeros((n, K))
            Pi[:, :K - 1] = rng.dirichlet(np.ones(K - 1), size=n)
        else:
            Pi = rng.dirichlet(np.ones(K), size=n)
        want = ref.compression(Z, Pi, eps)

        def variant(scale_n=False, weight=True, square=False):
            def f():
                tot = 0.0
                for k in range(K):
                    n_k = Pi[:, k].sum()
                    w = Pi[:, k] ** 2 if square else Pi[:, k]
                    lam = np.clip(np.linalg.eigvalsh(Z.T @ (w[:, None] * Z)), 0, None)
                    a = d / ((n if scale_n else n_k) * eps**2)
                    tot += 0.5 * (n_k / n if weight else 1.0) * np.sum(np.log1p(a * lam))
                return tot
            return f
        diag = [("each group's scale must use the group's own size n_k, not n",
                 variant(scale_n=True)),
                ("the weight n_k/n of each group is missing", variant(weight=False)),
                ("the memberships are applied twice (pi_k^2): Z^T Diag(pi_k) Z weights each "
                 "token once", variant(square=True))]
        got = call_student(fn, Z.copy(), Pi.copy(), eps, forbidden=_FORBID, what="compression")
        compare(got, want, f"R_c(Z, Pi) for {kind} memberships, n={n}, d={d}, K={K}",
                factors={"n": n, "K": K, "d": d}, diagnoses=diag)
    return run_specs("compression", one, specs, hidden_specs, hidden=hidden, seed=12,
                     label=lambda kind, n, d, K, eps: f"{kind}, n={n}, d={d}, K={K}")


def check_coding_rate_grad(fn, hidden=None):
    """fn(Z, eps) -> the gradient of R(Z) in Z, shape (n, d), derived by hand (no autograd)."""
    # the last case has entries near 1e3: finite differences lose 6 digits there
    specs = [(20, 5, 0.5, 1.0), (4, 9, 1.0, 1.0), (50, 12, 0.2, 1.0), (6, 6, 0.8, 1.0),
             (20, 5, 0.5, 1e3)]
    hidden_specs = [(1, 4, 0.5, 1.0), (30, 1, 0.3, 1.0), (12, 4, 1.0, 3e3)]

    def one(rng, n, d, eps, scale):
        Z = scale * rng.standard_normal((n, d))
        want = ref.coding_rate_grad(Z, eps)
        got = call_student(fn, Z.copy(), eps, forbidden=_FORBID + ("autograd",),
                           what="coding_rate_grad")
        compare(got, want, f"grad R(Z) for n={n}, d={d}" + (
                    f", entries near {scale:g}" if scale != 1 else ""),
                shape_desc="(n, d), like Z", derived=True,
                factors={"n": n, "d": d, "eps^2": eps**2, "d/(n eps^2)": d / (n * eps**2)})
    return run_specs("coding_rate_grad", one, specs, hidden_specs, hidden=hidden, seed=13,
                     label=lambda n, d, eps, scale: f"n={n}, d={d}" + (
                         f", scale {scale:g}" if scale != 1 else ""))


def check_max_rate_design(fn, hidden=None):
    """fn(n, d, eps) -> Z (n, d) with ||Z||_F^2 = n and the largest coding rate possible."""
    specs = [(40, 4, 0.5), (30, 10, 1.0), (100, 25, 0.2)]
    hidden_specs = [(8, 8, 0.3), (9, 1, 1.0)]

    def one(_, n, d, eps):                    # no random input: the student builds Z
        Z = call_student(fn, n, d, eps, forbidden=_FORBID, what="max_rate_design")
        Z = np.asarray(Z, dtype=float) if Z is not None else None
        if Z is None or Z.shape != (n, d):
            raise Fail(f"return Z of shape (n, d) = {(n, d)}, got "
                       f"{None if Z is None else Z.shape}")
        energy = float(np.sum(Z**2))
        if abs(energy - n) > 1e-8 * n:
            raise Fail(f"||Z||_F^2 = {energy:.6g} for n={n}; the energy is fixed at n: rescale Z")
        R, best = ref.coding_rate(Z, eps), ref.max_coding_rate(n, d, eps, n)
        if R < best - 1e-9 * abs(best):
            s2 = np.linalg.svd(Z, compute_uv=False) ** 2
            raise Fail(f"R(Z) = {R:.6f} for n={n}, d={d}, but another Z with the same energy "
                       f"codes at a higher rate. The squared singular values of your Z range "
                       f"from {s2.min():.3g} to {s2.max():.3g}: how should a fixed energy be "
                       "spread to maximise a sum of logs?")
    return run_specs("max_rate_design", one, specs, hidden_specs, hidden=hidden,
                     label=lambda n, d, eps: f"n={n}, d={d}")
