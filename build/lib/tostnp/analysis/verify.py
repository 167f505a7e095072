"""Check every identity of the derivation numerically, in float64, and print a PASS/FAIL table.

Each row compares tostnp (objective.py, variational.py) with an INDEPENDENT reference: a plain
formula written here with loops and explicit eigenvalues (numpy.linalg.eigvalsh), or the
gradient that autograd computes from such a plain formula (written with autograd.numpy, not
with tostnp code). Both Gram branches (n < d and n > d) and a batch axis are exercised.

Errors are relative, max|tostnp - reference| / max|reference|. The exit status is 1 when any
row FAILs, so ``python -m tostnp verify`` (:mod:`tostnp.cli.verify_command`) can gate a CI run.
"""
from __future__ import annotations

import numpy as np

from ..math import objective, variational

# (batch B, tokens n, width d, groups K): n > d uses the d x d Gram matrix, n < d the n x n one.
SHAPES = [(2, 12, 6, 3), (2, 5, 8, 3)]
EPS = 0.7          # precision eps
TAU = 0.05         # TSSA step size
ETA = 0.5          # membership temperature


# ---------------------------------------------------------------------------------------------
# plain references (NumPy loops and eigenvalues), unbatched: Z (n, d), Pi (n, K), U (K, d, p)
# ---------------------------------------------------------------------------------------------
def _ref_coding_rate(Z, eps):
    n, d = Z.shape
    lam = np.linalg.eigvalsh(Z.T @ Z)                           # eigenvalues of Z^T Z
    return 0.5 * sum(np.log(1.0 + d / (n * eps**2) * max(l, 0.0)) for l in lam)


def _ref_compression(Z, Pi, eps):
    n, d = Z.shape
    total = 0.0
    for k in range(Pi.shape[1]):
        n_k = Pi[:, k].sum()
        if n_k == 0:
            continue
        cov = sum(Pi[j, k] * np.outer(Z[j], Z[j]) for j in range(n))   # Z^T Diag(pi_k) Z
        lam = np.linalg.eigvalsh(cov)
        total += (n_k / n) * sum(np.log(1.0 + d / (n_k * eps**2) * max(l, 0.0)) for l in lam)
    return 0.5 * total


def _ref_variational(Z, Pi, U, eps):
    n, d = Z.shape
    total = 0.0
    for k in range(U.shape[0]):
        n_k = Pi[:, k].sum()
        for i in range(U.shape[2]):
            stat = sum(Pi[j, k] * (Z[j] @ U[k, :, i]) ** 2 for j in range(n)) / n_k
            total += (n_k / n) * np.log(1.0 + d / eps**2 * stat)
    return 0.5 * total


def _ref_membership(Z, U, eta):
    n, K = Z.shape[0], U.shape[0]
    Pi = np.zeros((n, K))
    for j in range(n):
        logits = [np.sum((U[k].T @ Z[j]) ** 2) / (2 * eta) for k in range(K)]
        e = [np.exp(v - max(logits)) for v in logits]
        Pi[j] = np.array(e) / sum(e)
    return Pi


def _grad_coding_rate_closed_form(Z, eps):
    """grad_Z R = a Z (I + a Z^T Z)^{-1}, a = d/(n eps^2): the gradient of eq-R, rows convention."""
    n, d = Z.shape
    a = d / (n * eps**2)
    return a * np.linalg.solve(np.eye(d) + a * Z.T @ Z, Z.T).T


# ---------------------------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------------------------
def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))


def _data(rng, B, n, d, K):
    Z = rng.standard_normal((B, n, d))                          # (B, n, d)
    Pi = rng.dirichlet(np.ones(K), size=(B, n))                 # (B, n, K) rows on the simplex
    return Z, Pi


def _orthogonal(rng, K, d):
    q, r = np.linalg.qr(rng.standard_normal((K, d, d)))
    return q * np.sign(np.diagonal(r, axis1=-2, axis2=-1))[:, None, :]   # (K, d, d)


def checks(rng, draws, ag, anp):
    """Yield rows (identity, value, criterion text, passed)."""
    # autograd references: plain formulas in autograd.numpy, independent of tostnp's code
    def ag_coding_rate(Z, eps):
        n, d = Z.shape
        return 0.5 * anp.linalg.slogdet(anp.eye(d) + d / (n * eps**2) * anp.dot(Z.T, Z))[1]

    def ag_variational(Z, Pi, U, eps):
        n, d = Z.shape
        total = 0.0
        for k in range(U.shape[0]):
            n_k = anp.sum(Pi[:, k])
            stat = anp.sum(Pi[:, k:k + 1] * anp.dot(Z, U[k]) ** 2, axis=0) / n_k   # (p,)
            total = total + (n_k / n) * anp.sum(anp.log(1.0 + d / eps**2 * stat))
        return 0.5 * total

    data = [(_data(rng, B, n, d, K), (B, n, d, K)) for (B, n, d, K) in SHAPES]
    tight, grad_tol = 1e-10, 1e-8

    def worst(fn):
        return max(fn(Z, Pi, shape) for (Z, Pi), shape in data)

    # eq. (R) vs eigenvalues
    err = worst(lambda Z, Pi, s: _rel(objective.coding_rate(Z, EPS),
                                      [_ref_coding_rate(z, EPS) for z in Z]))
    yield "R = 1/2 sum_i log(1 + d/(n eps^2) lambda_i)   (eigvalsh)", err, f"rel <= {tight:.0e}", err <= tight

    # eq. (Rc) vs a loop over groups
    err = worst(lambda Z, Pi, s: _rel(objective.compression(Z, Pi, EPS),
                                      [_ref_compression(z, p, EPS) for z, p in zip(Z, Pi)]))
    yield "R_c = loop over groups of eigenvalue formula", err, f"rel <= {tight:.0e}", err <= tight

    err = worst(lambda Z, Pi, s: _rel(
        objective.rate_reduction(Z, Pi, EPS),
        [_ref_coding_rate(z, EPS) - _ref_compression(z, p, EPS) for z, p in zip(Z, Pi)]))
    yield "Delta R = R - R_c   (references)", err, f"rel <= {tight:.0e}", err <= tight

    # Delta R >= 0 for valid memberships
    gap = min(float(np.min(objective.rate_reduction(*_data(rng, 4, n, d, K), EPS)))
              for (_, n, d, K) in SHAPES for _ in range(max(1, draws // 4)))
    yield "Delta R >= 0   (min over random Z, Pi)", gap, ">= 0", gap >= 0.0

    # grad R closed form vs autograd
    g_ag = ag.grad(ag_coding_rate)
    err = worst(lambda Z, Pi, s: max(_rel(_grad_coding_rate_closed_form(z, EPS), g_ag(z, EPS))
                                     for z in Z))
    yield "grad R = a Z (I + a Z^T Z)^-1   vs autograd", err, f"rel <= {grad_tol:.0e}", err <= grad_tol

    # eq. (Rvar) vs loops, eq. (grad-Rvar) vs autograd, eq. (TSSA)
    g_var = ag.grad(ag_variational)
    e_val = e_grad = e_step = 0.0
    for (Z, Pi), (B, n, d, K) in data:
        for p in (d, 2):
            U = _orthogonal(rng, K, d)[:, :, :p]               # (K, d, p) orthonormal columns
            e_val = max(e_val, _rel(variational.variational_compression(Z, Pi, U, EPS),
                                    [_ref_variational(z, q, U, EPS) for z, q in zip(Z, Pi)]))
            G_ref = np.stack([g_var(z, q, U, EPS) for z, q in zip(Z, Pi)])   # (B, n, d)
            e_grad = max(e_grad, _rel(variational.variational_compression_grad(Z, Pi, U, EPS), G_ref))
            e_step = max(e_step, _rel(variational.tssa_step(Z, Pi, U, EPS, TAU), Z - TAU * G_ref))
    yield "R^var_c = loop over groups and directions", e_val, f"rel <= {tight:.0e}", e_val <= tight
    yield "grad R^var_c closed form   vs autograd", e_grad, f"rel <= {grad_tol:.0e}", e_grad <= grad_tol
    yield "tssa_step = Z - tau * (autograd gradient)", e_step, f"rel <= {grad_tol:.0e}", e_step <= grad_tol

    # membership vs a loop with an explicit softmax
    e_pi = 0.0
    for (Z, _), (B, n, d, K) in data:
        U = _orthogonal(rng, K, d)[:, :, :2]
        e_pi = max(e_pi, _rel(variational.membership(Z, U, ETA),
                              np.stack([_ref_membership(z, U, ETA) for z in Z])))
    yield "Pi = softmax_k ||U_k^T z_j||^2 / (2 eta)   (loop)", e_pi, f"rel <= {tight:.0e}", e_pi <= tight

    # the variational bound: R_c <= R^var_c for every orthogonal U (p = d)
    gap = np.inf
    for (Z, Pi), (B, n, d, K) in data:
        R_c = objective.compression(Z, Pi, EPS)
        for _ in range(draws):
            gap = min(gap, float(np.min(variational.variational_compression(
                Z, Pi, _orthogonal(rng, K, d), EPS) - R_c)))
    yield f"R^var_c - R_c >= 0   (min, {draws} random orthogonal U)", gap, ">= 0", gap >= -1e-12

    # equality at the eigenbasis of each group's weighted covariance (p = d)
    err = 0.0
    for (Z, Pi), (B, n, d, K) in data:
        for z, q in zip(Z, Pi):
            U = np.stack([np.linalg.eigh((z * q[:, k:k + 1]).T @ z)[1] for k in range(K)])
            err = max(err, _rel(variational.variational_compression(z, q, U, EPS),
                                objective.compression(z, q, EPS)))
    yield "R^var_c = R_c at the eigenbasis (p = d)", err, f"rel <= {tight:.0e}", err <= tight

    # p < d: equality when each (hard) group has rank p and U_k spans it
    n_k, d, K, p = 6, 8, 3, 2
    Z = np.concatenate([rng.standard_normal((n_k, p)) @ rng.standard_normal((p, d))
                        for _ in range(K)])                     # (K n_k, d) group k has rank p
    Pi = np.repeat(np.eye(K), n_k, axis=0)                      # (K n_k, K) hard memberships
    U = np.stack([np.linalg.eigh(Z[k * n_k:(k + 1) * n_k].T @ Z[k * n_k:(k + 1) * n_k])[1][:, -p:]
                  for k in range(K)])                           # (K, d, p) top-p eigenvectors
    err = _rel(variational.variational_compression(Z, Pi, U, EPS), objective.compression(Z, Pi, EPS))
    yield "R^var_c = R_c, rank-p groups, U_k spans (p < d)", err, f"rel <= {tight:.0e}", err <= tight

    # a small TSSA step decreases R^var_c, by tau ||grad||^2 to first order
    ratio = np.inf
    for (Z, Pi), (B, n, d, K) in data:
        U = _orthogonal(rng, K, d)[:, :, :2]
        G_ref = np.stack([g_var(z, q, U, EPS) for z, q in zip(Z, Pi)])
        tau = 1e-4 / float(np.max(np.abs(G_ref)))
        drop = (variational.variational_compression(Z, Pi, U, EPS)
                - variational.variational_compression(variational.tssa_step(Z, Pi, U, EPS, tau),
                                                      Pi, U, EPS))
        ratio = min(ratio, float(np.min(drop / (tau * np.sum(G_ref**2, axis=(-2, -1))))))
    yield "TSSA step decreases R^var_c: drop / (tau ||grad||^2)", ratio, "in [0.99, 1.01]", \
        0.99 <= ratio <= 1.01
