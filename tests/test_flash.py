"""tostnp.nn.flash (memory-efficient exact softmax attention) against autograd (float64), against
the plain softmax layer for many block shapes, its O(N) cache, stability, the strict device, and
bad inputs. The autograd reference is the plain per-head formula of tests/test_attention.py.
"""
import math

import numpy as np
import pytest
import array_api_strict as xps

from tostnp.nn import attention as A
from tostnp.nn import flash as F
from tostnp.backend import tuning
from references import rel_err, ref_softmax_attention
from test_attention import QKV, check_layer, make_params, to_dev, to_np

B, N, C, H = 2, 5, 6, 2                                            # p = 3
DEV = xps.Device("device1")


def _blocks(monkeypatch, bq, bk):
    monkeypatch.setattr(tuning, "FLASH_BLOCK_Q", bq)
    monkeypatch.setattr(tuning, "FLASH_BLOCK_K", bk)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("bq,bk", [(128, 128), (2, 2), (2, 3), (3, 2), (1, 4)])
def test_flash_grads_match_autograd(monkeypatch, causal, bias, bq, bk):
    """Every block shape (one block; even; queries and keys in different blocks; single rows)."""
    _blocks(monkeypatch, bq, bk)
    x = np.random.default_rng(1).standard_normal((B, N, C))
    P = make_params(2, QKV, bias)
    check_layer(lambda x, P: F.flash_attention_forward(x, P, H, causal=causal),
                F.flash_attention_backward,
                lambda x, P: ref_softmax_attention(x, P, H, causal), x, P)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bq,bk", [(4, 4), (3, 5), (7, 2)])
def test_flash_equals_plain_softmax_layer(monkeypatch, causal, bq, bk):
    """Same outputs and gradients as softmax_attention (which holds the N x N weights)."""
    _blocks(monkeypatch, bq, bk)
    r = np.random.default_rng(3)
    n = 17
    x = r.standard_normal((3, n, 8))
    P = make_params(4, {"W_qkv": (8, 24), "b_qkv": (24,), "W_o": (8, 8), "b_o": (8,)}, True)
    y1, c1 = A.softmax_attention_forward(x, P, 4, causal=causal)
    y2, c2 = F.flash_attention_forward(x, P, 4, causal=causal)
    assert rel_err(y2, y1) < 1e-13
    dy = r.standard_normal(y1.shape)
    dx1, g1 = A.softmax_attention_backward(dy, c1)
    dx2, g2 = F.flash_attention_backward(dy, c2)
    assert rel_err(dx2, dx1) < 1e-12
    assert set(g1) == set(g2)
    for k in g1:
        assert rel_err(g2[k], g1[k]) < 1e-12, k


def test_flash_cache_is_linear_in_n(monkeypatch):
    """The cache holds O(N) numbers (q, k, v, o, L, the layer inputs), never an N x N array,
    while the plain layer's cache grows with N^2."""
    _blocks(monkeypatch, 8, 8)

    def cache_elems(fwd, n):
        x = np.random.default_rng(5).standard_normal((1, n, C))
        _, cache = fwd(x, make_params(6, QKV, True), H)
        total, stack = 0, [cache]
        while stack:
            c = stack.pop()
            if isinstance(c, (tuple, list)):
                stack.extend(c)
            elif isinstance(c, dict):
                stack.extend(c.values())
            elif isinstance(c, np.ndarray):
                total += c.size
        return total

    f1, f2, f3 = (cache_elems(F.flash_attention_forward, n) for n in (64, 128, 192))
    s1, s2, s3 = (cache_elems(A.softmax_attention_forward, n) for n in (64, 128, 192))
    assert f3 - f2 == f2 - f1 > 0                                  # affine in N (+ the weights)
    assert s3 - s2 > 1.4 * (s2 - s1)                               # the plain form: quadratic


def test_flash_large_scores_are_stable(monkeypatch):
    """Scores far beyond exp's range (|s| ~ 1e4): the online max keeps every exp <= 1."""
    _blocks(monkeypatch, 2, 3)
    r = np.random.default_rng(7)
    x = 300.0 * r.standard_normal((B, 9, C))
    P = make_params(8, QKV, True)
    for causal in (False, True):
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            y, c = F.flash_attention_forward(x, P, H, causal=causal)
            dx, _ = F.flash_attention_backward(np.ones_like(y), c)
        assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))
        y_ref, _ = A.softmax_attention_forward(x, P, H, causal=causal)
        assert rel_err(y, y_ref) < 1e-10


def test_flash_causal_ignores_the_future(monkeypatch):
    _blocks(monkeypatch, 3, 2)
    r = np.random.default_rng(9)
    n = 10
    x = r.standard_normal((B, n, C))
    P = make_params(10, QKV, True)
    y, _ = F.flash_attention_forward(x, P, H, causal=True)
    for t in (0, 4, n - 2):
        x2 = x.copy()
        x2[:, t + 1:] = 50.0 * r.standard_normal((B, n - t - 1, C))
        y2, _ = F.flash_attention_forward(x2, P, H, causal=True)
        assert np.array_equal(y2[:, :t + 1], y[:, :t + 1])
        assert not np.allclose(y2[:, t + 1:], y[:, t + 1:])


@pytest.mark.parametrize("causal", [False, True])
def test_flash_strict_device_matches_numpy(monkeypatch, causal):
    """float32 on array_api_strict's device1 (the stand-in for CuPy) equals NumPy."""
    _blocks(monkeypatch, 2, 3)
    r = np.random.default_rng(11)
    x = r.standard_normal((B, N, C)).astype(np.float32)
    P = {k: v.astype(np.float32) for k, v in make_params(12, QKV, True).items()}
    y_np, c_np = F.flash_attention_forward(x, P, H, causal=causal)
    y_st, c_st = F.flash_attention_forward(to_dev(x), {k: to_dev(v) for k, v in P.items()}, H,
                                           causal=causal)
    assert y_np.dtype == np.float32 and y_st.dtype == xps.float32 and y_st.device == DEV
    np.testing.assert_allclose(to_np(y_st), y_np, rtol=1e-4, atol=1e-5)
    dy = r.standard_normal(y_np.shape).astype(np.float32)
    dx_np, g_np = F.flash_attention_backward(dy, c_np)
    dx_st, g_st = F.flash_attention_backward(to_dev(dy), c_st)
    assert dx_st.dtype == xps.float32 and dx_st.device == DEV
    np.testing.assert_allclose(to_np(dx_st), dx_np, rtol=1e-4, atol=1e-5)
    assert set(g_st) == set(g_np) == set(P)
    for k in P:
        assert g_st[k].dtype == xps.float32 and g_np[k].dtype == np.float32
        np.testing.assert_allclose(to_np(g_st[k]), g_np[k], rtol=1e-4, atol=1e-5)


def test_flash_bad_inputs():
    x = np.zeros((B, N, C))
    P = make_params(13, QKV, True)
    with pytest.raises(ValueError, match="num_heads"):
        F.flash_attention_forward(x, P, 4)
    with pytest.raises(ValueError, match=r"'W_o'.*\(6, 6\)"):
        F.flash_attention_forward(x, {k: v for k, v in P.items() if k != "W_o"}, H)
    with pytest.raises(ValueError, match=r"x.*\(B, N, C\)"):
        F.flash_attention_forward(np.zeros((N, C)), P, H)
    with pytest.raises(ValueError, match="at least one token"):
        F.flash_attention_forward(np.zeros((B, 0, C)), P, H)
    with pytest.raises(TypeError, match="dtype"):
        F.flash_attention_forward(x.astype(np.float32), P, H)
