"""Reliability of the numerics: no float16, float32 log-determinants as good as float64 allows,
no NaN/inf where the input is merely large, and a hypothesis fuzz of the public API.

References are independent of the code under test: float64 eigenvalues of the Gram matrix
(numpy.linalg.eigvalsh) for the log-determinants, the same call in float64 for the fuzz.
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st

from tostnp.math.objective import coding_rate, compression, rate_reduction
from tostnp.math.variational import membership, variational_compression, variational_compression_grad
from tostnp.nn.block import tost_block_forward, tost_block_init
from tostnp.nn.tssa import tssa_forward, tssa_init
from tostnp.backend import RNG


def _logdet_ref(Z, c):
    """log det(I + c Z^T Z) in float64 from the eigenvalues of the smaller Gram matrix."""
    Z = np.asarray(Z, np.float64)
    G = Z.T @ Z if Z.shape[0] >= Z.shape[1] else Z @ Z.T
    return float(np.sum(np.log1p(c * np.clip(np.linalg.eigvalsh(G), 0, None))))


# ---------------------------------------------------------------------------------------------
# item 7: float16 refused; float32 coding rate accurate for small data; no NaN at |Z| ~ 1e19
# ---------------------------------------------------------------------------------------------
def test_float16_refused_everywhere():
    r = np.random.default_rng(0)
    Z = r.standard_normal((6, 4)).astype(np.float16)
    Pi = np.full((6, 2), 0.5, np.float16)
    U = r.standard_normal((2, 4, 2)).astype(np.float16)
    for call in (lambda: coding_rate(Z, 1.0), lambda: compression(Z, Pi, 1.0),
                 lambda: membership(Z, U, 1.0), lambda: variational_compression(Z, Pi, U, 1.0)):
        with pytest.raises(TypeError, match="Z must have a real floating dtype, float32 or float64, got float16"):
            call()
    x = r.standard_normal((1, 8, 4)).astype(np.float16)
    params = tost_block_init(RNG(0), np, 4, 2, causal=True, max_len=8, dtype=np.float16)
    with pytest.raises(TypeError, match="float16"):
        tost_block_forward(x, params, 2, causal=True)


@pytest.mark.parametrize("scale", [1e-6, 1e-4, 1e-3, 1e-2, 1.0, 1e2, 1e4])
@pytest.mark.parametrize("shape", [(20, 8), (8, 20)])
def test_coding_rate_float32_matches_float64_eigenvalues(scale, shape):
    r = np.random.default_rng(1)
    Z = (r.standard_normal(shape) * scale).astype(np.float32)
    n, d = shape
    eps = 0.5
    want = 0.5 * _logdet_ref(Z, d / (n * eps**2))
    got = float(coding_rate(Z, eps))
    assert abs(got - want) <= 1e-5 * abs(want) + 1e-30, (got, want)


@pytest.mark.parametrize("scale", [1e-4, 1e-3, 1e-2])
def test_rate_reduction_float32_nonnegative_for_small_data(scale):
    r = np.random.default_rng(2)
    Z = (r.standard_normal((30, 6)) * scale).astype(np.float32)
    Pi = r.dirichlet(np.ones(3), size=30).astype(np.float32)
    dr32 = float(rate_reduction(Z, Pi, 0.5))
    dr64 = float(rate_reduction(Z.astype(np.float64), Pi.astype(np.float64), 0.5))
    R64 = 0.5 * _logdet_ref(Z, 6 / (30 * 0.5**2))
    # Delta R = R - R_c is a difference: float32 can resolve it to the rounding of R
    assert dr32 >= 0 and abs(dr32 - dr64) <= 1e-5 * R64, (dr32, dr64, R64)


def test_huge_Z_gives_right_memberships_or_a_clear_error():
    r = np.random.default_rng(3)
    Z = (r.standard_normal((5, 8)) * 1e19).astype(np.float32)
    U = r.standard_normal((3, 8, 2)).astype(np.float32)
    P32 = membership(Z, U, 0.5)
    P64 = membership(Z.astype(np.float64), U.astype(np.float64), 0.5)
    assert np.isfinite(P32).all() and np.abs(P32 - P64).max() < 1e-6
    with pytest.raises(ValueError, match="Z is too large"):
        variational_compression(Z, P32, U, 0.5)
    with pytest.raises(ValueError, match="Z is too large"):
        variational_compression_grad(Z, P32, U, 0.5)


@pytest.mark.parametrize("ln_eps", [0.0, -1e-5, float("nan"), float("inf")])
def test_ln_eps_checked(ln_eps):
    x = np.random.default_rng(4).standard_normal((1, 4, 8))
    params = tost_block_init(RNG(0), np, 8, 2, dtype=np.float64)
    with pytest.raises(ValueError, match="ln_eps"):
        tost_block_forward(x, params, 2, ln_eps=ln_eps)


# ---------------------------------------------------------------------------------------------
# fuzz: every call returns a finite result close to float64, or a clear ValueError/TypeError
# ---------------------------------------------------------------------------------------------
_ARG = re.compile(r"\b(Z|Pi|U|eps|eta|x)\b")


def _inputs(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16, np.int64]))
    n = draw(st.integers(0, 6))
    d = draw(st.integers(0, 5))
    K = draw(st.integers(1, 3))
    p = draw(st.integers(1, 3))
    scale = draw(st.sampled_from([1e-30, 1e-12, 1e-6, 1e-3, 1.0, 1e2, 1e4]))
    seed = draw(st.integers(0, 2**16))
    special = draw(st.sampled_from([None, np.nan, np.inf, -np.inf]))
    view = draw(st.sampled_from(["plain", "transposed", "strided"]))
    r = np.random.default_rng(seed)
    Z64 = r.standard_normal((n, d)) * scale
    if special is not None and Z64.size:
        Z64.flat[r.integers(Z64.size)] = special
    if view == "transposed":
        Z64 = np.ascontiguousarray(Z64.T).T          # a non-C-contiguous view
    elif view == "strided":
        big = np.zeros((n, 2 * d))
        big[:, ::2] = Z64
        Z64 = big[:, ::2]
    Pi64 = r.dirichlet(np.ones(K), size=n) if n else np.zeros((0, K))
    U64 = r.standard_normal((K, d, p))
    eps = draw(st.sampled_from([1e-3, 0.5, 1.0, 0.0, -1.0, float("nan")]))
    return dtype, Z64, Pi64, U64, eps


_FUNCS = {
    "coding_rate": lambda Z, Pi, U, e: coding_rate(Z, e),
    "compression": lambda Z, Pi, U, e: compression(Z, Pi, e),
    "rate_reduction": lambda Z, Pi, U, e: rate_reduction(Z, Pi, e),
    "membership": lambda Z, Pi, U, e: membership(Z, U, e),
    "variational_compression": lambda Z, Pi, U, e: variational_compression(Z, Pi, U, e),
    "variational_compression_grad": lambda Z, Pi, U, e: variational_compression_grad(Z, Pi, U, e),
}


@pytest.mark.parametrize("name", sorted(_FUNCS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_public_api(name, data):
    dtype, Z64, Pi64, U64, eps = _inputs(data.draw)
    f = _FUNCS[name]
    Z, Pi, U = (np.asarray(a).astype(dtype) if dtype is not np.float64 else a
                for a in (Z64, Pi64, U64))
    if dtype is np.float32:  # make the float64 reference see exactly the float32 inputs
        Z64, Pi64, U64 = (np.asarray(a, np.float64) for a in (Z, Pi, U))
    try:
        out = np.asarray(f(Z, Pi, U, eps))
    except (ValueError, TypeError) as e:
        assert _ARG.search(str(e)), f"error does not name an argument: {e}"
        return
    assert dtype in (np.float32, np.float64) and np.isfinite(Z64).all() and eps > 0
    assert out.dtype == dtype and np.isfinite(out).all(), out
    ref = np.asarray(f(Z64, Pi64, U64, eps))
    tol = 1e-12 if dtype is np.float64 else 2e-4
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    assert np.max(np.abs(out - ref), initial=0.0) <= tol * scale, (out, ref)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), T=st.integers(1, 40),
       scale=st.sampled_from([1e-6, 1e-3, 1.0, 1e2, 1e4]),
       causal=st.booleans())
def test_fuzz_tssa_layer_float32_close_to_float64(seed, T, scale, causal):
    r = np.random.default_rng(seed)
    params = tssa_init(RNG(seed), np, 8, 2, causal=causal, max_len=40, dtype=np.float64)
    x = r.standard_normal((2, T, 8)) * scale
    y64, _ = tssa_forward(x, params, 2, causal=causal)
    p32 = {k: v.astype(np.float32) for k, v in params.items()}
    y32, _ = tssa_forward(x.astype(np.float32), p32, 2, causal=causal)
    assert y32.dtype == np.float32 and np.isfinite(y32).all()
    err = np.max(np.abs(y32 - y64)) / max(1e-30, np.max(np.abs(y64)))
    assert err < 1e-3, err


# ---------------------------------------------------------------------------------------------
# item 9: the causal TSSA backward keeps float32 accuracy (exclusive scans without subtraction)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("small,tol", [(None, 1e-5), (1e-3, 3e-4)], ids=["random", "small-early-w"])
def test_causal_backward_float32_close_to_float64(small, tol):
    """Gradients of the float32 layer against the float64 layer at T = 256, on the same
    (float32-representable) inputs. Token 0 scaled by 1e-3 makes S1 tiny early in the sequence,
    where a suffix sum formed as total - own cancelled catastrophically (errors of 1e-2)."""
    from tostnp.nn.tssa import tssa_backward
    T, C, h = 256, 32, 4
    r = np.random.default_rng(7)
    p = tssa_init(RNG(7), np, C, h, causal=True, max_len=T, dtype=np.float64, std=0.1)
    p["b_u"] = np.zeros_like(p["b_u"])
    p["denom_bias"] = r.standard_normal(p["denom_bias"].shape) * 0.1
    x = r.standard_normal((2, T, C))
    if small:
        x[:, 0, :] *= small
    dy = r.standard_normal((2, T, C))
    f32 = lambda a: a.astype(np.float32)
    p = {k: f32(v).astype(np.float64) for k, v in p.items()}
    x, dy = f32(x).astype(np.float64), f32(dy).astype(np.float64)
    _, c64 = tssa_forward(x, p, h, causal=True)
    dx64, g64 = tssa_backward(dy, c64)
    _, c32 = tssa_forward(f32(x), {k: f32(v) for k, v in p.items()}, h, causal=True)
    dx32, g32 = tssa_backward(f32(dy), c32)
    for name, a, b in [("dx", dx32, dx64)] + [(k, g32[k], g64[k]) for k in g64]:
        err = np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b))
        assert err < tol, (name, err)
