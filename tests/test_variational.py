"""variational_compression, its gradient, tssa_step and membership against independent references.

R^var_c and Pi against plain loops; the closed-form gradient against autograd.grad of a plain
autograd.numpy formula (float64, rel. err < 1e-9) and against centred finite differences; the
variational bound R_c <= R^var_c and its equality case as hypothesis properties.
"""
import autograd
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tostnp import (compression, membership, tssa_step, variational_compression,
                    variational_compression_grad)
from references import rel_err, ref_variational, ag_variational, ref_membership

EPS = 0.7


ag_grad = autograd.grad(ag_variational)


def orthonormal(rng, K, d, p):
    q, _ = np.linalg.qr(rng.standard_normal((K, d, d)))
    return q[:, :, :p]                                          # (K, d, p)


def make(seed, shape, K, p, dtype=np.float64):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal(shape)                              # (..., n, d)
    Pi = rng.dirichlet(np.ones(K), size=shape[:-1])             # (..., n, K)
    U = orthonormal(rng, K, shape[-1], p)                       # (K, d, p)
    return Z.astype(dtype), Pi.astype(dtype), U.astype(dtype)


# ----- values and gradients -------------------------------------------------------------------
SHAPES = [(4, 9, 3, 2), (9, 4, 3, 4), (6, 6, 2, 3)]              # (n, d, K, p): n < d, n > d, p = d


@pytest.mark.parametrize("n,d,K,p", SHAPES)
def test_variational_matches_loop(n, d, K, p):
    Z, Pi, U = make(0, (n, d), K, p)
    assert rel_err(variational_compression(Z, Pi, U, EPS), ref_variational(Z, Pi, U, EPS)) < 1e-10


@pytest.mark.parametrize("n,d,K,p", SHAPES)
def test_grad_matches_autograd(n, d, K, p):
    Z, Pi, U = make(1, (n, d), K, p)
    assert rel_err(variational_compression_grad(Z, Pi, U, EPS), ag_grad(Z, Pi, U, EPS)) < 1e-9


def test_grad_matches_finite_differences():
    Z, Pi, U = make(2, (5, 4), 3, 2)
    G = variational_compression_grad(Z, Pi, U, EPS)
    h, fd = 1e-5, np.zeros_like(Z)
    for idx in np.ndindex(*Z.shape):
        Zp, Zm = Z.copy(), Z.copy()
        Zp[idx] += h
        Zm[idx] -= h
        fd[idx] = (ref_variational(Zp, Pi, U, EPS) - ref_variational(Zm, Pi, U, EPS)) / (2 * h)
    assert rel_err(G, fd) < 1e-7


def test_grad_with_nonorthogonal_U_matches_autograd():
    # The closed form never uses U_k^T U_k = I: it holds for any U.
    rng = np.random.default_rng(3)
    Z, Pi, _ = make(3, (6, 5), 2, 3)
    U = rng.standard_normal((2, 5, 3))
    assert rel_err(variational_compression_grad(Z, Pi, U, EPS), ag_grad(Z, Pi, U, EPS)) < 1e-9


def test_tssa_step_is_gradient_step():
    Z, Pi, U = make(4, (7, 5), 3, 2)
    tau = 0.3
    assert rel_err(tssa_step(Z, Pi, U, EPS, tau), Z - tau * ag_grad(Z, Pi, U, EPS)) < 1e-12


def test_small_tssa_step_decreases_variational_compression():
    Z, Pi, U = make(5, (8, 6), 3, 2)
    G = ag_grad(Z, Pi, U, EPS)
    tau = 1e-4 / np.max(np.abs(G))
    drop = variational_compression(Z, Pi, U, EPS) - variational_compression(
        tssa_step(Z, Pi, U, EPS, tau), Pi, U, EPS)
    assert drop > 0
    assert abs(drop / (tau * np.sum(G**2)) - 1.0) < 1e-2          # first-order prediction


def test_empty_group_is_finite_and_ignored():
    Z, Pi, U = make(6, (6, 4), 2, 2)
    Pi3 = np.concatenate([Pi, np.zeros((6, 1))], axis=1)       # (6, 3) group 2 empty
    U3 = np.concatenate([U, orthonormal(np.random.default_rng(7), 1, 4, 2)])   # (3, 4, 2)
    v = variational_compression(Z, Pi3, U3, EPS)
    g = variational_compression_grad(Z, Pi3, U3, EPS)
    assert np.isfinite(v) and np.all(np.isfinite(g))
    assert rel_err(v, ref_variational(Z, Pi, U, EPS)) < 1e-12
    assert rel_err(g, ag_grad(Z, Pi, U, EPS)) < 1e-9


@pytest.mark.parametrize("n,d,K,p", SHAPES)
def test_membership_matches_loop(n, d, K, p):
    Z, _, U = make(8, (n, d), K, p)
    Pi = membership(Z, U, 0.5)
    assert Pi.shape == (n, K)
    assert rel_err(Pi, ref_membership(Z, U, 0.5)) < 1e-12
    assert np.allclose(Pi.sum(-1), 1.0, atol=1e-14)


def test_membership_is_stable_at_tiny_temperature():
    # logits ~ 1e8: a naive exp overflows; the max-subtracted softmax gives hard memberships.
    Z, _, U = make(9, (5, 4), 3, 2)
    Pi = membership(Z, U, 1e-8)
    assert np.all(np.isfinite(Pi))
    norms = np.stack([np.sum((Z @ U[k]) ** 2, axis=-1) for k in range(3)], axis=-1)   # (5, 3)
    assert np.array_equal(np.argmax(Pi, -1), np.argmax(norms, -1))
    assert np.allclose(Pi.max(-1), 1.0)


# ----- batching and dtype ---------------------------------------------------------------------
@pytest.mark.parametrize("n,d,K,p", SHAPES[:2])
def test_batched_equals_per_sample(n, d, K, p):
    Z, Pi, U = make(10, (2, 3, n, d), K, p)                     # leading axes (2, 3)
    outs = [variational_compression(Z, Pi, U, EPS), variational_compression_grad(Z, Pi, U, EPS),
            tssa_step(Z, Pi, U, EPS, 0.1), membership(Z, U, 0.5)]
    for a in range(2):
        for b in range(3):
            z, q = Z[a, b], Pi[a, b]
            ones = [variational_compression(z, q, U, EPS), variational_compression_grad(z, q, U, EPS),
                    tssa_step(z, q, U, EPS, 0.1), membership(z, U, 0.5)]
            for out, one in zip(outs, ones):
                assert np.allclose(out[a, b], one, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n,d,K,p", SHAPES[:2])
def test_float32_in_float32_out(n, d, K, p):
    Z, Pi, U = make(11, (2, n, d), K, p, dtype=np.float32)
    Z64, Pi64, U64 = (x.astype(np.float64) for x in (Z, Pi, U))
    for fn, extra in [(variational_compression, (EPS,)), (variational_compression_grad, (EPS,)),
                      (tssa_step, (EPS, 0.1))]:
        out = fn(Z, Pi, U, *extra)
        assert out.dtype == np.float32
        assert rel_err(out, fn(Z64, Pi64, U64, *extra)) < 1e-5
    Pi32 = membership(Z, U, 0.5)
    assert Pi32.dtype == np.float32
    assert rel_err(Pi32, membership(Z64, U64, 0.5)) < 1e-5


# ----- the variational bound (properties) -----------------------------------------------------
dims = st.tuples(st.integers(1, 7), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))


@settings(max_examples=25, deadline=None)
@given(dims, st.floats(0.2, 3.0))
def test_bound_random_orthogonal_U(shape, eps):
    # p = d, U_k a random orthogonal matrix: R_c <= R^var_c (concavity of log, Schur-Horn).
    n, d, K, seed = shape
    Z, Pi, U = make(seed, (n, d), K, d)
    R_c, R_var = float(compression(Z, Pi, eps)), float(variational_compression(Z, Pi, U, eps))
    assert R_c <= R_var + 1e-10 * max(1.0, R_var)


@settings(max_examples=25, deadline=None)
@given(dims, st.floats(0.2, 3.0))
def test_equality_at_eigenbasis(shape, eps):
    n, d, K, seed = shape
    Z, Pi, _ = make(seed, (n, d), K, d)
    U = np.stack([np.linalg.eigh(Z.T @ (Pi[:, k:k + 1] * Z))[1] for k in range(K)])   # (K, d, d)
    R_c, R_var = float(compression(Z, Pi, eps)), float(variational_compression(Z, Pi, U, eps))
    assert abs(R_var - R_c) <= 1e-10 * max(1.0, R_c)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 3), st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_equality_low_rank_groups(p, K, seed):
    # p < d: equality needs each group's covariance to have rank <= p and U_k to span it.
    rng = np.random.default_rng(seed)
    d, n_k = 7, 5
    Z = np.concatenate([rng.standard_normal((n_k, p)) @ rng.standard_normal((p, d))
                        for _ in range(K)])                     # (K n_k, d)
    Pi = np.repeat(np.eye(K), n_k, axis=0)                      # (K n_k, K) hard memberships
    U = np.stack([np.linalg.eigh(Z[k * n_k:(k + 1) * n_k].T @ Z[k * n_k:(k + 1) * n_k])[1][:, -p:]
                  for k in range(K)])                           # (K, d, p)
    R_c, R_var = float(compression(Z, Pi, EPS)), float(variational_compression(Z, Pi, U, EPS))
    assert abs(R_var - R_c) <= 1e-9 * max(1.0, R_c)
