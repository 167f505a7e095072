"""coding_rate, compression, rate_reduction against plain references (eigenvalues, loops).

References are written independently of tostnp: explicit eigenvalues from numpy.linalg.eigvalsh
and a Python loop over groups and tokens. float64 for truth (rel. tolerance 1e-10), float32
for dtype preservation (rel. tolerance 1e-5).
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tostnp import coding_rate, compression, rate_reduction
from references import rel_err, ref_coding_rate, ref_compression

EPS = 0.7


def make(seed, shape, K, dtype=np.float64):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal(shape).astype(dtype)                # (..., n, d)
    Pi = rng.dirichlet(np.ones(K), size=shape[:-1]).astype(dtype)   # (..., n, K)
    return Z, Pi


# ----- values ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n,d", [(4, 9), (9, 4), (6, 6)])       # n < d, n > d, n = d
def test_coding_rate_matches_eigenvalues(n, d):
    Z, _ = make(0, (n, d), 2)
    assert rel_err(coding_rate(Z, EPS), ref_coding_rate(Z, EPS)) < 1e-10


@pytest.mark.parametrize("n,d", [(4, 9), (9, 4), (6, 6)])
def test_compression_matches_loop(n, d):
    Z, Pi = make(1, (n, d), 3)
    assert rel_err(compression(Z, Pi, EPS), ref_compression(Z, Pi, EPS)) < 1e-10


@pytest.mark.parametrize("n,d", [(4, 9), (9, 4)])
def test_rate_reduction_matches_references(n, d):
    Z, Pi = make(2, (n, d), 3)
    want = ref_coding_rate(Z, EPS) - ref_compression(Z, Pi, EPS)
    assert abs(float(rate_reduction(Z, Pi, EPS)) - want) < 1e-10 * abs(ref_coding_rate(Z, EPS))


def test_single_group_compression_equals_coding_rate():
    # K = 1, Pi = 1: R_c = (n/n) * 1/2 log det(I + d/(n eps^2) Z^T Z) = R, so Delta R = 0.
    Z, _ = make(3, (7, 5), 1)
    Pi = np.ones((7, 1))
    assert abs(float(compression(Z, Pi, EPS)) - ref_coding_rate(Z, EPS)) < 1e-12
    assert abs(float(rate_reduction(Z, Pi, EPS))) < 1e-12


def test_empty_group_contributes_zero():
    Z, Pi = make(4, (8, 5), 2)
    Pi3 = np.concatenate([Pi, np.zeros((8, 1))], axis=1)       # (8, 3) group 2 is empty
    got = compression(Z, Pi3, EPS)
    assert np.isfinite(got)
    assert rel_err(got, ref_compression(Z, Pi, EPS)) < 1e-12


def test_hard_memberships_low_rank_groups_float32():
    # Groups on 2-dim subspaces with small eps: I + c Z^T Diag(pi_k) Z is huge and nearly
    # singular; the QR-based log det must stay finite and close to the float64 reference.
    rng = np.random.default_rng(5)
    Z = np.concatenate([rng.standard_normal((40, 2)) @ rng.standard_normal((2, 16))
                        for _ in range(3)])                     # (120, 16)
    Pi = np.repeat(np.eye(3), 40, axis=0)                       # (120, 3)
    got = compression(Z.astype(np.float32), Pi.astype(np.float32), 0.01)
    assert got.dtype == np.float32
    assert rel_err(got, ref_compression(Z, Pi, 0.01)) < 1e-5


# ----- batching and dtype ---------------------------------------------------------------------
@pytest.mark.parametrize("n,d", [(4, 9), (9, 4)])
def test_batched_equals_per_sample(n, d):
    Z, Pi = make(6, (2, 3, n, d), 3)                            # leading axes (2, 3)
    for fn, args in [(coding_rate, (Z,)), (compression, (Z, Pi)), (rate_reduction, (Z, Pi))]:
        out = fn(*args, EPS)
        assert out.shape == (2, 3)
        for a in range(2):
            for b in range(3):
                one = fn(*[x[a, b] for x in args], EPS)
                assert abs(float(out[a, b]) - float(one)) < 1e-12 * abs(float(one)) + 1e-14


@pytest.mark.parametrize("n,d", [(4, 9), (9, 4)])
def test_float32_in_float32_out(n, d):
    Z, Pi = make(7, (2, n, d), 3, dtype=np.float32)
    Z64, Pi64 = Z.astype(np.float64), Pi.astype(np.float64)
    for fn, args, args64 in [(coding_rate, (Z,), (Z64,)), (compression, (Z, Pi), (Z64, Pi64))]:
        out = fn(*args, EPS)
        assert out.dtype == np.float32
        assert rel_err(out, fn(*args64, EPS)) < 1e-5
    assert rate_reduction(Z, Pi, EPS).dtype == np.float32


# ----- properties -----------------------------------------------------------------------------
dims = st.tuples(st.integers(1, 7), st.integers(1, 7), st.integers(1, 4), st.integers(0, 2**31 - 1))


@settings(max_examples=25, deadline=None)
@given(dims, st.floats(0.1, 3.0))
def test_rate_reduction_nonnegative(shape, eps):
    n, d, K, seed = shape
    Z, Pi = make(seed, (n, d), K)
    assert float(rate_reduction(Z, Pi, eps)) >= -1e-12 * max(1.0, float(coding_rate(Z, eps)))


@settings(max_examples=25, deadline=None)
@given(dims)
def test_invariant_under_orthogonal_feature_basis(shape):
    n, d, K, seed = shape
    Z, Pi = make(seed, (n, d), K)
    Q, _ = np.linalg.qr(np.random.default_rng(seed + 1).standard_normal((d, d)))   # (d, d)
    for fn, args, argsQ in [(coding_rate, (Z,), (Z @ Q,)), (compression, (Z, Pi), (Z @ Q, Pi)),
                            (rate_reduction, (Z, Pi), (Z @ Q, Pi))]:
        a, b = float(fn(*args, EPS)), float(fn(*argsQ, EPS))
        assert abs(a - b) <= 1e-10 * max(1.0, abs(a))
