"""tostnp.nn.attention baselines against plain autograd references (float64), causality,
the causal linear attention against a per-prefix loop, the strict device, and bad inputs.

Tolerance: relative error max|a - b| / max|b| < 1e-7 in float64.
"""
import math

import numpy as np
import pytest
import array_api_strict as xps

from tostnp.nn import attention as A
from tostnp.nn import class_attention as CA
from tostnp.backend import tuning
from references import (rel_err, check_backward, ref_class_attention, ref_softmax_attention,
                        ref_linear_attention)

TOL = 1e-7
DEV = xps.Device("device1")
B, N, C, H = 2, 5, 6, 2                                            # p = 3




def make_params(seed, keys_shapes, bias):
    r = np.random.default_rng(seed)
    P = {}
    for k, s in keys_shapes.items():
        if k.startswith("b_") and not bias:
            continue
        P[k] = r.standard_normal(s) / math.sqrt(s[0]) if len(s) == 2 else 0.3 * r.standard_normal(s)
    return P


QKV = {"W_qkv": (C, 3 * C), "b_qkv": (3 * C,), "W_o": (C, C), "b_o": (C,)}
CLS = {"W_q": (C, C), "b_q": (C,), "W_kv": (C, 2 * C), "b_kv": (2 * C,), "W_o": (C, C), "b_o": (C,)}


KINDS = {
    "softmax": (A.softmax_attention_forward, A.softmax_attention_backward, ref_softmax_attention),
    "linear": (A.linear_attention_forward, A.linear_attention_backward, ref_linear_attention),
}


def check_layer(fwd, bwd, ref, x, P, seed=3):
    """references.check_backward for a layer fwd(x, P), with this file's tolerance."""
    check_backward(fwd, bwd, ref, (x, P), tol=TOL, params_index=1, seed=seed)


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["softmax", "linear"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_attention_grads(kind, causal, bias):
    fwd, bwd, ref = KINDS[kind]
    x = np.random.default_rng(1).standard_normal((B, N, C))
    P = make_params(2, QKV, bias)
    check_layer(lambda x, P: fwd(x, P, H, causal=causal), bwd,
                lambda x, P: ref(x, P, H, causal), x, P)


@pytest.mark.parametrize("causal", [False, True])
def test_softmax_attention_row_blocks(monkeypatch, causal):
    """The blocked path (query rows in chunks; causal chunks skip future keys) is exact."""
    r = np.random.default_rng(19)
    n = 11
    x = r.standard_normal((B, n, C))
    P = make_params(20, QKV, True)
    y1, c1 = A.softmax_attention_forward(x, P, H, causal=causal)
    monkeypatch.setattr(tuning, "ATTENTION_BLOCK_ELEMS", B * H * n * 3)         # blocks of 3, 3, 3, 2 rows
    assert len(A._row_blocks(B * H, n, n, causal)) == 4
    y2, c2 = A.softmax_attention_forward(x, P, H, causal=causal)
    assert rel_err(y2, y1) < 1e-13
    full = np.zeros((B, H, n, n))                                  # reassemble A from its blocks
    for (i0, i1, nk), blk in c2[5]:
        full[..., i0:i1, :nk] = blk
    assert rel_err(full, c1[5][0][1]) < 1e-13
    assert np.allclose(full.sum(-1), 1.0)
    if causal:                                                     # no weight on the future
        assert [nk for (_, _, nk), _ in c2[5]] == [3, 6, 9, 11]
        assert np.array_equal(full, np.tril(full))
    check_layer(lambda x, P: A.softmax_attention_forward(x, P, H, causal=causal),
                A.softmax_attention_backward,
                lambda x, P: ref_softmax_attention(x, P, H, causal), x, P)


@pytest.mark.parametrize("bias", [True, False])
def test_class_attention_grads(bias):
    x = np.random.default_rng(4).standard_normal((B, 1 + N, C))
    P = make_params(5, CLS, bias)
    y, _ = CA.class_attention_forward(x, P, H)
    assert y.shape == (B, 1, C)
    check_layer(lambda x, P: CA.class_attention_forward(x, P, H), CA.class_attention_backward,
                lambda x, P: ref_class_attention(x, P, H), x, P)


def test_class_attention_only_cls_queries():
    """Permuting the non-CLS tokens leaves the output unchanged (they are keys/values only)."""
    r = np.random.default_rng(6)
    x = r.standard_normal((B, 1 + N, C))
    P = make_params(7, CLS, True)
    y, _ = CA.class_attention_forward(x, P, H)
    perm = np.concatenate([[0], 1 + r.permutation(N)])
    y2, _ = CA.class_attention_forward(x[:, perm], P, H)
    assert rel_err(y2, y) < 1e-12
    x3 = x.copy()
    x3[:, 0] += 1.0                                                # but the CLS token matters
    assert rel_err(CA.class_attention_forward(x3, P, H)[0], y) > 1e-3


# ---------------------------------------------------------------------------------------------
# causality and the prefix-sum form
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["softmax", "linear"])
def test_causal_outputs_ignore_the_future(kind):
    fwd = KINDS[kind][0]
    r = np.random.default_rng(8)
    n = 9
    x = r.standard_normal((B, n, C))
    P = make_params(9, QKV, True)
    y, _ = fwd(x, P, H, causal=True)
    for t in (0, 3, n - 2):
        x2 = x.copy()
        x2[:, t + 1:] = 100.0 * r.standard_normal((B, n - t - 1, C))
        y2, _ = fwd(x2, P, H, causal=True)
        assert np.array_equal(y2[:, :t + 1], y[:, :t + 1])
        assert not np.allclose(y2[:, t + 1:], y[:, t + 1:])
        # without the mask the same change does reach position 0
        assert not np.allclose(fwd(x2, P, H, causal=False)[0][:, 0], fwd(x, P, H)[0][:, 0])


@pytest.mark.parametrize("chunk", [64, 4, 5, 1])
def test_causal_linear_attention_equals_prefix_loop(monkeypatch, chunk):
    """Chunked prefix sums (one chunk; 3 chunks; 3 chunks with padding; 1 token each)."""
    monkeypatch.setattr(tuning, "LINEAR_CHUNK", chunk)
    r = np.random.default_rng(10)
    n = 12
    x = r.standard_normal((B, n, C))
    P = make_params(11, QKV, True)
    y, _ = A.linear_attention_forward(x, P, H, causal=True)
    # per prefix: run the NON-causal layer on x[:, :t+1] and keep its last row
    loop = np.stack([A.linear_attention_forward(x[:, :t + 1], P, H)[0][:, t] for t in range(n)], 1)
    assert rel_err(y, loop) < 1e-12


@pytest.mark.parametrize("chunk", [4, 3])
def test_causal_linear_attention_chunked_grads(monkeypatch, chunk):
    monkeypatch.setattr(tuning, "LINEAR_CHUNK", chunk)                   # N = 11: padded last chunk
    x = np.random.default_rng(21).standard_normal((B, 11, C))
    P = make_params(22, QKV, True)
    check_layer(lambda x, P: A.linear_attention_forward(x, P, H, causal=True),
                A.linear_attention_backward,
                lambda x, P: ref_linear_attention(x, P, H, True), x, P)


def test_causal_softmax_equals_prefix_loop_and_large_scores():
    r = np.random.default_rng(12)
    n = 7
    x = 30.0 * r.standard_normal((B, n, C))                        # large scores: stability
    P = make_params(13, QKV, True)
    y, _ = A.softmax_attention_forward(x, P, H, causal=True)
    assert np.all(np.isfinite(y))
    loop = np.stack([A.softmax_attention_forward(x[:, :t + 1], P, H)[0][:, t] for t in range(n)], 1)
    assert rel_err(y, loop) < 1e-12


def test_phi_no_overflow():
    """phi(a) = elu(a) + 1 and its derivative never evaluate exp of a large positive number."""
    a = np.array([-1e3, -2.0, 0.0, 0.5, 1e3])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        phi, dphi = A._phi(A.backend.namespace(a), a)
    assert np.allclose(phi, [0.0, math.exp(-2.0), 1.0, 1.5, 1001.0])
    assert np.allclose(dphi, [0.0, math.exp(-2.0), 1.0, 1.0, 1.0])
    x = np.random.default_rng(14).standard_normal((1, 4, C)) * 300.0   # scores far past exp's range
    P = make_params(14, QKV, True)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        for causal in (False, True):
            y, c = A.linear_attention_forward(x, P, H, causal=causal)
            dx, _ = A.linear_attention_backward(np.ones_like(y), c)
            assert np.all(np.isfinite(y)) and np.all(np.isfinite(dx))


# ---------------------------------------------------------------------------------------------
# strict device (stand-in for CuPy), float32
# ---------------------------------------------------------------------------------------------
def to_dev(a):
    return xps.asarray(a, device=DEV)


def to_np(a):
    return np.asarray(a.to_device(xps.Device("CPU_DEVICE")))


@pytest.mark.parametrize("name,causal", [("softmax", False), ("softmax", True), ("linear", False),
                                         ("linear", True), ("class", False),
                                         ("softmax-blocked", False), ("softmax-blocked", True),
                                         ("linear-chunked", True)])
def test_strict_device_matches_numpy(name, causal, monkeypatch):
    r = np.random.default_rng(15)
    if name == "softmax-blocked":
        monkeypatch.setattr(tuning, "ATTENTION_BLOCK_ELEMS", B * H * N * 2)     # row blocks of 2
        name = "softmax"
    if name == "linear-chunked":
        monkeypatch.setattr(tuning, "LINEAR_CHUNK", 2)                    # N = 5: 3 chunks, padded
        name = "linear"
    if name == "class":
        fwd, bwd = (lambda x, P: CA.class_attention_forward(x, P, H)), CA.class_attention_backward
        x, P = r.standard_normal((B, 1 + N, C)), make_params(16, CLS, True)
    else:
        f, bwd, _ = KINDS[name]
        fwd = lambda x, P: f(x, P, H, causal=causal)              # noqa: E731
        x, P = r.standard_normal((B, N, C)), make_params(16, QKV, True)
    x = x.astype(np.float32)
    P = {k: v.astype(np.float32) for k, v in P.items()}
    y_np, c_np = fwd(x, P)
    y_st, c_st = fwd(to_dev(x), {k: to_dev(v) for k, v in P.items()})
    assert y_np.dtype == np.float32 and y_st.dtype == xps.float32 and y_st.device == DEV
    np.testing.assert_allclose(to_np(y_st), y_np, rtol=1e-4, atol=1e-5)
    dy = r.standard_normal(y_np.shape).astype(np.float32)
    dx_np, g_np = bwd(dy, c_np)
    dx_st, g_st = bwd(to_dev(dy), c_st)
    assert dx_np.dtype == np.float32 and dx_st.dtype == xps.float32 and dx_st.device == DEV
    np.testing.assert_allclose(to_np(dx_st), dx_np, rtol=1e-4, atol=1e-5)
    assert set(g_st) == set(g_np) == set(P)
    for k in P:
        assert g_np[k].dtype == np.float32 and g_st[k].dtype == xps.float32
        np.testing.assert_allclose(to_np(g_st[k]), g_np[k], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fwd", [A.softmax_attention_forward, A.linear_attention_forward])
def test_bad_inputs_qkv(fwd):
    x = np.zeros((B, N, C))
    P = make_params(17, QKV, True)
    with pytest.raises(ValueError, match="num_heads"):
        fwd(x, P, 4)                                               # 4 does not divide 6
    with pytest.raises(ValueError, match="num_heads"):
        fwd(x, P, 0)
    with pytest.raises(ValueError, match=r"'W_o'.*\(6, 6\)"):
        fwd(x, {k: v for k, v in P.items() if k != "W_o"}, H)
    with pytest.raises(ValueError, match=r"W_qkv.*\(6, 18\)"):
        fwd(x, dict(P, W_qkv=np.zeros((6, 12))), H)
    with pytest.raises(ValueError, match=r"b_qkv.*\(18,\)"):
        fwd(x, dict(P, b_qkv=np.zeros(6)), H)
    with pytest.raises(ValueError, match=r"x.*\(B, N, C\)"):
        fwd(np.zeros((N, C)), P, H)
    with pytest.raises(TypeError, match="dtype"):
        fwd(x.astype(np.float32), P, H)
    with pytest.raises(TypeError, match="params"):
        fwd(x, [P["W_qkv"], P["W_o"]], H)


def test_bad_inputs_class():
    x = np.zeros((B, 1 + N, C))
    P = make_params(18, CLS, False)
    with pytest.raises(ValueError, match=r"'W_kv'.*\(6, 12\)"):
        CA.class_attention_forward(x, {k: v for k, v in P.items() if k != "W_kv"}, H)
    with pytest.raises(ValueError, match=r"W_q.*\(6, 6\)"):
        CA.class_attention_forward(x, dict(P, W_q=np.zeros((6, 12))), H)
    with pytest.raises(ValueError, match="num_heads"):
        CA.class_attention_forward(x, P, 5)
    with pytest.raises(ValueError, match="CLS"):
        CA.class_attention_forward(np.zeros((B, 0, C)), P, H)
