"""tostnp.nn.layers: every hand-derived backward against autograd (float64), plus the
strict-device path (array_api_strict on Device("device1"), float32) and bad inputs.

References are written plainly with autograd.numpy here, independently of the code under test.
Tolerance: relative error max|a - b| / max|b| < 1e-7 in float64.
"""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
import array_api_strict as xps

from tostnp import backend
from tostnp.nn import layers as L
from references import (rel_err, check_backward, ref_layer_norm, ref_gelu, ref_mlp,
                        ref_cross_entropy)

TOL = 1e-7
DEV = xps.Device("device1")




def rng(seed=0):
    return np.random.default_rng(seed)


def check_grads(ref, args, ours_fwd, ours_bwd, names, dx_index=0, seed=1):
    """references.check_backward with this file's tolerance; ``names`` maps grads keys to
    positions in ``args``."""
    check_backward(ours_fwd, ours_bwd, ref, args, tol=TOL, names=names, dx_index=dx_index,
                   seed=seed)


# ---------------------------------------------------------------------------------------------
# plain references
# ---------------------------------------------------------------------------------------------
def ref_linear(x, W, b=None):
    y = anp.dot(x, W)
    return y if b is None else y + b


def ref_patch_embed(images, W, b, P):
    B, H, Wd, Cin = images.shape
    toks = []
    for i in range(H // P):                          # grid row-major
        for j in range(Wd // P):
            patch = images[:, i * P:(i + 1) * P, j * P:(j + 1) * P, :]     # (B, P, P, Cin)
            toks.append(anp.reshape(patch, (B, P * P * Cin)))              # (row, col, channel)
    X = anp.stack(toks, axis=1)                                            # (B, N, P*P*Cin)
    y = anp.dot(X, W)
    return y if b is None else y + b


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear_grads(bias):
    r = rng(0)
    x, W = r.standard_normal((2, 3, 4)), r.standard_normal((4, 5))
    b = r.standard_normal(5) if bias else None
    names = {"W": 1, "b": 2} if bias else {"W": 1}
    check_grads(ref_linear, [x, W, b], L.linear_forward, L.linear_backward, names)


def test_linear_1d_input():
    r = rng(1)
    x, W, b = r.standard_normal(4), r.standard_normal((4, 3)), r.standard_normal(3)
    check_grads(ref_linear, [x, W, b], L.linear_forward, L.linear_backward, {"W": 1, "b": 2})


def test_layer_norm_grads():
    r = rng(2)
    x = 3.0 * r.standard_normal((2, 3, 6)) + 1.5
    gamma, beta = r.standard_normal(6), r.standard_normal(6)
    check_grads(lambda x, g, b: ref_layer_norm(x, g, b, 1e-5), [x, gamma, beta],
                L.layer_norm_forward, L.layer_norm_backward,
                {"gamma": 1, "beta": 2})
    # a different eps really is used
    y, _ = L.layer_norm_forward(x, gamma, beta, eps=0.5)
    assert rel_err(y, ref_layer_norm(x, gamma, beta, eps=0.5)) < TOL


def test_gelu_grads():
    x = np.linspace(-6.0, 6.0, 25).reshape(5, 5)
    check_grads(lambda x: ref_gelu(x), [x], L.gelu_forward, L.gelu_backward, {})
    # tanh form is close to the exact erf form (a sanity check that can fail)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.ravel()]).reshape(5, 5)
    assert np.max(np.abs(L.gelu_forward(x)[0] - exact)) < 1e-3


@pytest.mark.parametrize("bias", [True, False])
def test_mlp_grads(bias):
    r = rng(3)
    C, H = 4, 7
    x = r.standard_normal((2, 3, C))
    W1, W2 = r.standard_normal((C, H)), r.standard_normal((H, C))
    b1 = r.standard_normal(H) if bias else None
    b2 = r.standard_normal(C) if bias else None

    def fwd(x, W1, b1, W2, b2):
        P = {"W1": W1, "W2": W2}
        if bias:
            P.update(b1=b1, b2=b2)
        return L.mlp_forward(x, P)

    names = {"W1": 1, "b1": 2, "W2": 3, "b2": 4} if bias else {"W1": 1, "W2": 3}
    def ref(x, W1, b1, W2, b2):
        return ref_mlp(x, {k: v for k, v in dict(W1=W1, b1=b1, W2=W2, b2=b2).items()
                           if v is not None})

    check_grads(ref, [x, W1, b1, W2, b2], fwd, L.mlp_backward, names)


def test_layer_scale_grads():
    r = rng(4)
    x, gamma = r.standard_normal((2, 3, 5)), r.standard_normal(5)
    check_grads(lambda x, g: x * g, [x, gamma], L.layer_scale_forward, L.layer_scale_backward,
                {"gamma": 1})


@pytest.mark.parametrize("bias", [True, False])
def test_patch_embed_grads(bias):
    r = rng(5)
    P, Cin, C = 2, 3, 5
    images = r.standard_normal((2, 4, 6, Cin))                     # grid 2 x 3 -> N = 6
    W = r.standard_normal((P * P * Cin, C))
    b = r.standard_normal(C) if bias else None
    names = {"W": 1, "b": 2} if bias else {"W": 1}
    y, _ = L.patch_embed_forward(images, W, b, P)
    assert y.shape == (2, 6, C)
    # token 4 is grid cell (row 1, col 1): pixels [2:4, 2:4], flattened (row, col, channel)
    manual = images[0, 2:4, 2:4, :].reshape(-1) @ W + (0 if b is None else b)
    assert rel_err(y[0, 4], manual) < TOL
    check_grads(lambda im, W, b: ref_patch_embed(im, W, b, P), [images, W, b],
                lambda im, W, b: L.patch_embed_forward(im, W, b, P), L.patch_embed_backward,
                names, dx_index=None)
    assert L.patch_embed_backward(np.ones_like(y), _)[0] is None


def test_embedding_repeated_ids():
    r = rng(6)
    V, C = 6, 4
    W = r.standard_normal((V, C))
    ids = np.array([[1, 1, 3, 1], [3, 0, 1, 5]])                  # 1 three+one times, 3 twice, 2/4 never
    out, cache = L.embedding_forward(ids, W)
    assert rel_err(out, W[ids]) < TOL
    G = r.standard_normal(out.shape)
    dids, grads = L.embedding_backward(G, cache)
    assert dids is None and set(grads) == {"W"}
    # independent reference: autograd through indexing, and an explicit accumulation loop
    dW_ag = autograd.grad(lambda W: anp.sum(W[ids] * G))(W)
    dW_loop = np.zeros_like(W)
    for bb in range(ids.shape[0]):
        for t in range(ids.shape[1]):
            dW_loop[ids[bb, t]] += G[bb, t]
    assert rel_err(grads["W"], dW_ag) < TOL
    assert rel_err(grads["W"], dW_loop) < TOL
    assert np.all(grads["W"][[2, 4]] == 0.0)
    assert rel_err(grads["W"][1], G[0, 0] + G[0, 1] + G[0, 3] + G[1, 2]) < TOL


@pytest.mark.parametrize("ignore", [None, -100, 2])
def test_cross_entropy_grads(ignore):
    r = rng(7)
    V = 5
    logits = r.standard_normal((2, 4, V)) * 3.0
    targets = r.integers(0, V, size=(2, 4))
    if ignore == -100:
        targets[0, 1] = targets[1, 3] = -100
    loss, cache = L.softmax_cross_entropy_forward(logits, targets, ignore_index=ignore)
    assert loss.shape == ()
    ref = ref_cross_entropy(logits, targets, ignore)
    assert rel_err(loss, ref) < TOL
    dloss = 1.7
    dlogits, grads = L.softmax_cross_entropy_backward(dloss, cache)
    assert grads == {}
    g = autograd.grad(lambda z: dloss * ref_cross_entropy(z, targets, ignore))(logits)
    assert rel_err(dlogits, g) < TOL
    if ignore is not None:                                         # ignored rows get no gradient
        ign = targets == ignore
        assert ign.any() and np.all(dlogits[ign] == 0.0)


def test_cross_entropy_stable_and_array_dloss():
    logits = np.array([[1000.0, 0.0], [0.0, -1000.0]])
    loss, cache = L.softmax_cross_entropy_forward(logits, np.array([1, 0]))
    assert np.isfinite(loss) and abs(float(loss) - 500.0) < 1e-9   # (1000 + ~0) / 2
    d, _ = L.softmax_cross_entropy_backward(np.asarray(2.0), cache)
    assert np.allclose(d, [[1.0, -1.0], [0.0, 0.0]], atol=1e-12)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int16", "uint8"])
def test_take_indices_in_the_indexing_dtype(dtype):
    # xp.take's indices go in the namespace's indexing dtype (NumPy: np.intp, 32-bit under
    # Pyodide, where take refuses int64 indices: .ci/pyodide.py runs that platform)
    i = np.array([3, 0, 2], dtype=dtype)
    got = backend.indices(i)
    assert got.dtype == np.intp and got.tolist() == [3, 0, 2]
    if i.dtype == np.intp:
        assert got is i
    s = xps.asarray(i)
    want = xps.__array_namespace_info__().default_dtypes()["indexing"]
    assert backend.indices(s).dtype == want
    r = rng(8)
    logits = r.standard_normal((2, 3, 5))
    targets = np.array([[4, 0, 2], [1, 1, 3]], dtype=dtype)
    loss, _ = L.softmax_cross_entropy_forward(logits, targets)
    assert rel_err(loss, ref_cross_entropy(logits, targets.astype(np.int64), None)) < TOL
    W = r.standard_normal((5, 2))
    assert np.array_equal(L.embedding_forward(targets, W)[0], W[targets.astype(np.int64)])


def test_cross_entropy_bad_targets():
    z = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match="ignored"):
        L.softmax_cross_entropy_forward(z, np.full((2, 3), -1), ignore_index=-1)
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        L.softmax_cross_entropy_forward(z, np.full((2, 3), 4))
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        t = np.zeros((2, 3), dtype=np.int64)
        t[1, 2] = -3
        L.softmax_cross_entropy_forward(z, t, ignore_index=-100)
    with pytest.raises(ValueError, match="targets"):
        L.softmax_cross_entropy_forward(z, np.zeros((2, 4), dtype=np.int64))
    with pytest.raises(TypeError, match="targets"):
        L.softmax_cross_entropy_forward(z, np.zeros((2, 3)))


# ---------------------------------------------------------------------------------------------
# dropout
# ---------------------------------------------------------------------------------------------
def test_dropout_identity_at_eval_and_p0():
    x = rng(8).standard_normal((3, 4))
    for p, train in [(0.5, False), (0.0, True)]:
        y, cache = L.dropout_forward(x, p, backend.RNG(0), train=train)
        assert np.array_equal(y, x)
        dy = rng(9).standard_normal(x.shape)
        dx, g = L.dropout_backward(dy, cache)
        assert np.array_equal(dx, dy) and dx is not dy and g == {}
    # at eval no rng is needed
    assert np.array_equal(L.dropout_forward(x, 0.3, None, train=False)[0], x)


def test_dropout_mask_statistics_and_backward():
    p = 0.3
    x = np.ones((200, 500), dtype=np.float32)
    y, cache = L.dropout_forward(x, p, backend.RNG(123))
    assert y.dtype == np.float32
    kept = y != 0
    assert abs(kept.mean() - (1 - p)) < 0.01                       # 100k draws: sd ~ 0.0015
    assert np.allclose(y[kept], 1.0 / (1.0 - p), rtol=1e-6)        # inverted scaling
    assert abs(y.mean() - 1.0) < 0.02                              # expectation preserved
    dy = rng(10).standard_normal(x.shape).astype(np.float32)
    dx, _ = L.dropout_backward(dy, cache)
    assert np.array_equal(dx, dy * y)                              # same mask, same scale
    y2, _ = L.dropout_forward(x, p, backend.RNG(123))
    assert np.array_equal(y, y2)                                   # seeded


def test_dropout_bad_inputs():
    x = np.ones((2, 2))
    for p in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="p must"):
            L.dropout_forward(x, p, backend.RNG(0))
    with pytest.raises(TypeError, match="rng"):
        L.dropout_forward(x, 0.5, None)


# ---------------------------------------------------------------------------------------------
# strict device (stand-in for CuPy): float32 forward + backward match NumPy
# ---------------------------------------------------------------------------------------------
def to_dev(a):
    return None if a is None else xps.asarray(a, device=DEV)


def to_np(a):
    return np.asarray(a.to_device(xps.Device("CPU_DEVICE")))


def _cases():
    r = rng(11)
    f = lambda *s: r.standard_normal(s).astype(np.float32)       # noqa: E731
    C, H = 4, 6
    mlp_p = {"W1": f(C, H), "b1": f(H), "W2": f(H, C), "b2": f(C)}
    pe_W, pe_b = f(2 * 2 * 3, 5), f(5)                            # P = 2, Cin = 3, C = 5
    return [
        ("linear", lambda x, d: L.linear_forward(x, d(mlp_p["W1"]), d(mlp_p["b1"])),
         L.linear_backward, f(2, 3, C)),
        ("layer_norm", lambda x, d: L.layer_norm_forward(x, d(mlp_p["b2"]), d(mlp_p["b2"] * 0.5)),
         L.layer_norm_backward, f(2, 3, C)),
        ("gelu", lambda x, d: L.gelu_forward(x), L.gelu_backward, f(2, 3, C)),
        ("mlp", lambda x, d: L.mlp_forward(x, {k: d(v) for k, v in mlp_p.items()}),
         L.mlp_backward, f(2, 3, C)),
        ("layer_scale", lambda x, d: L.layer_scale_forward(x, d(mlp_p["b2"])),
         L.layer_scale_backward, f(2, 3, C)),
        ("dropout", lambda x, d: L.dropout_forward(x, 0.25, backend.RNG(5)),
         L.dropout_backward, f(2, 3, C)),
        ("patch_embed", lambda x, d: L.patch_embed_forward(x, d(pe_W), d(pe_b), 2),
         L.patch_embed_backward, f(2, 4, 2, 3)),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_strict_device_matches_numpy(case):
    name, fwd, bwd, x = case
    ident = lambda a: a                                            # noqa: E731
    y_np, c_np = fwd(x, ident)
    y_st, c_st = fwd(to_dev(x), to_dev)
    assert y_st.device == DEV and y_st.dtype == xps.float32
    np.testing.assert_allclose(to_np(y_st), y_np, rtol=1e-5, atol=1e-5)
    dy = rng(12).standard_normal(y_np.shape).astype(np.float32)
    dx_np, g_np = bwd(dy, c_np)
    dx_st, g_st = bwd(to_dev(dy), c_st)
    if dx_np is None:
        assert dx_st is None
    else:
        assert dx_st.dtype == xps.float32 and dx_st.device == DEV
        np.testing.assert_allclose(to_np(dx_st), dx_np, rtol=1e-4, atol=1e-5)
    assert set(g_st) == set(g_np)
    for k in g_np:
        assert g_st[k].dtype == xps.float32 and g_st[k].device == DEV
        np.testing.assert_allclose(to_np(g_st[k]), g_np[k], rtol=1e-4, atol=1e-5)


def test_strict_device_embedding_and_cross_entropy():
    r = rng(13)
    V, C = 5, 3
    W = r.standard_normal((V, C)).astype(np.float32)
    ids = np.array([[0, 2, 2], [4, 2, 0]])
    out_np, c_np = L.embedding_forward(ids, W)
    out_st, c_st = L.embedding_forward(to_dev(ids), to_dev(W))
    assert out_st.dtype == xps.float32
    np.testing.assert_allclose(to_np(out_st), out_np)
    G = r.standard_normal(out_np.shape).astype(np.float32)
    _, g_np = L.embedding_backward(G, c_np)
    _, g_st = L.embedding_backward(to_dev(G), c_st)
    np.testing.assert_allclose(to_np(g_st["W"]), g_np["W"], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="ids"):
        L.embedding_forward(to_dev(ids + 3), to_dev(W))

    logits = r.standard_normal((2, 3, V)).astype(np.float32)
    tg = np.array([[1, -1, 4], [0, 0, -1]])
    l_np, cl_np = L.softmax_cross_entropy_forward(logits, tg, ignore_index=-1)
    l_st, cl_st = L.softmax_cross_entropy_forward(to_dev(logits), to_dev(tg), ignore_index=-1)
    assert l_st.dtype == xps.float32 and l_np.dtype == np.float32
    np.testing.assert_allclose(to_np(l_st), l_np, rtol=1e-5)
    d_np, _ = L.softmax_cross_entropy_backward(1.0, cl_np)
    d_st, _ = L.softmax_cross_entropy_backward(1.0, cl_st)
    assert d_st.dtype == xps.float32
    np.testing.assert_allclose(to_np(d_st), d_np, rtol=1e-5, atol=1e-7)


def test_float32_preserved_numpy():
    r = rng(14)
    x = r.standard_normal((2, 3, 4)).astype(np.float32)
    g = np.ones(4, dtype=np.float32)
    for y, c, bwd in [(*L.layer_norm_forward(x, g, g), L.layer_norm_backward),
                      (*L.gelu_forward(x), L.gelu_backward),
                      (*L.layer_scale_forward(x, g), L.layer_scale_backward)]:
        dx, grads = bwd(np.ones_like(y), c)
        assert y.dtype == dx.dtype == np.float32
        assert all(v.dtype == np.float32 for v in grads.values())


# ---------------------------------------------------------------------------------------------
# bad inputs
# ---------------------------------------------------------------------------------------------
def test_bad_inputs():
    r = rng(15)
    x = r.standard_normal((2, 3, 4))
    P = {"W1": r.standard_normal((4, 8)), "W2": r.standard_normal((8, 4))}
    with pytest.raises(ValueError, match=r"'W2'.*\(8, 4\)"):
        L.mlp_forward(x, {"W1": P["W1"]})
    with pytest.raises(ValueError, match=r"W2.*\(8, 4\)"):
        L.mlp_forward(x, {"W1": P["W1"], "W2": P["W2"].T})
    with pytest.raises(ValueError, match=r"b1.*\(8,\)"):
        L.mlp_forward(x, dict(P, b1=np.zeros(4)))
    with pytest.raises(ValueError, match=r"W1.*\(4, 8\)"):
        L.mlp_forward(x, {"W1": r.standard_normal((5, 8)), "W2": P["W2"]})
    with pytest.raises(TypeError, match="dtype"):
        L.mlp_forward(x, {k: v.astype(np.float32) for k, v in P.items()})
    with pytest.raises(ValueError, match="Cin"):
        L.linear_forward(x, r.standard_normal((5, 2)))
    with pytest.raises(ValueError, match=r"b.*\(2,\)"):
        L.linear_forward(x, r.standard_normal((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match=r"gamma.*\(4,\)"):
        L.layer_norm_forward(x, np.ones(3), np.zeros(4))
    with pytest.raises(ValueError, match=r"gamma.*\(4,\)"):
        L.layer_scale_forward(x, np.ones((1, 4)))
    with pytest.raises(TypeError, match="x"):
        L.gelu_forward([1.0, 2.0])
    with pytest.raises(TypeError, match="ids"):
        L.embedding_forward(np.zeros((2, 3)), np.ones((4, 2)))
    with pytest.raises(ValueError, match="ids"):
        L.embedding_forward(np.array([[0, 4]]), np.ones((4, 2)))
    with pytest.raises(ValueError, match="divisible"):
        L.patch_embed_forward(np.zeros((1, 5, 4, 3)), np.zeros((12, 2)), None, 2)
    with pytest.raises(ValueError, match="images"):
        L.patch_embed_forward(np.zeros((5, 4, 3)), np.zeros((12, 2)), None, 2)
    with pytest.raises(ValueError, match=r"W.*\(12, 2\)"):
        L.patch_embed_forward(np.zeros((1, 4, 4, 3)), np.zeros((10, 2)), None, 2)
