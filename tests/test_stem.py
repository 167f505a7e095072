"""The layers of the published vision stem and MLP, each against an independent reference:

* 3x3 stride-2 convolution: autograd (float64) of a plain loop over output pixels;
* BatchNorm2d: autograd in training and evaluation modes; the running statistics against a loop
  that accumulates per-channel sums one value at a time;
* exact GELU: autograd.scipy's erf; the standard-only erf against scipy to float64 rounding;
* Fourier position features: the formula written out one token and one feature at a time;
* the whole stem (conv -> BN -> GELU ... -> conv -> BN) against autograd;
* every layer on array_api_strict's Device("device1") (the GPU stand-in) against NumPy.
"""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest
import array_api_strict as xps
from scipy.special import erf as scipy_erf

from tostnp import backend
from tostnp.nn import layers as L
from tostnp.nn.conv import conv3x3s2_forward, conv3x3s2_backward
from tostnp.nn.batchnorm import batch_norm2d_forward, batch_norm2d_backward
from tostnp.nn.params import is_state
from tostnp.nn.position import fourier_features
from tostnp.nn.stem import conv_stem_init, conv_stem_forward, conv_stem_backward, stem_channels
from references import rel_err, ref_gelu_erf

TOL = 1e-9
DEV = xps.Device("device1")


def rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
# plain references (autograd.numpy, loops)
# ---------------------------------------------------------------------------------------------
def ref_conv(x, W):
    """Loop over output pixels: y[b, r, c] = sum_{i,j} xpad[b, 2r+i, 2c+j] @ W[i, j]."""
    B, H, Wd, Cin = x.shape
    xpad = anp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="constant")
    rows = []
    for r in range((H + 1) // 2):
        cols = []
        for c in range((Wd + 1) // 2):
            acc = 0.0
            for i in range(3):
                for j in range(3):
                    acc = acc + anp.dot(xpad[:, 2 * r + i, 2 * c + j, :], W[i, j])
            cols.append(acc)                                        # (B, Cout)
        rows.append(anp.stack(cols, axis=1))
    return anp.stack(rows, axis=1)                                  # (B, Ho, Wo, Cout)


def ref_bn_train(x, gamma, beta, eps=1e-5):
    mu = anp.mean(x, axis=(0, 1, 2))
    var = anp.mean((x - mu) ** 2, axis=(0, 1, 2))
    return (x - mu) / anp.sqrt(var + eps) * gamma + beta


def ref_bn_eval(x, gamma, beta, rm, rv, eps=1e-5):
    return (x - rm) / anp.sqrt(rv + eps) * gamma + beta


def grad_check(ref, args, fwd, bwd, names, dx_index=0, tol=TOL):
    y_ref = ref(*args)
    y, cache = fwd(*args)
    assert rel_err(y, y_ref) < tol
    G = rng(9).standard_normal(np.shape(y_ref))
    dx, grads = bwd(G, cache)
    loss = lambda *a: anp.sum(ref(*a) * G)                          # noqa: E731
    if dx_index is not None:
        assert rel_err(dx, autograd.grad(loss, dx_index)(*args)) < tol
    assert set(grads) == set(names)
    for key, i in names.items():
        assert rel_err(grads[key], autograd.grad(loss, i)(*args)) < tol, key


# ---------------------------------------------------------------------------------------------
# convolution
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("H,W", [(8, 8), (5, 6), (1, 3)])
def test_conv_against_loop_and_autograd(H, W):
    r = rng(0)
    x, Wk = r.standard_normal((2, H, W, 3)), r.standard_normal((3, 3, 3, 4))
    y, _ = conv3x3s2_forward(x, Wk)
    assert y.shape == (2, (H + 1) // 2, (W + 1) // 2, 4)
    grad_check(ref_conv, [x, Wk], conv3x3s2_forward, conv3x3s2_backward, {"W": 1})


def test_conv_is_cross_correlation_with_torch_weight_layout():
    """A kernel with a single 1 at (i, j) copies xpad[2r+i, 2c+j]: no flip, padding 1."""
    x = np.arange(2 * 6 * 6 * 1, dtype=np.float64).reshape(2, 6, 6, 1)
    Wk = np.zeros((3, 3, 1, 1))
    Wk[0, 2, 0, 0] = 1.0                                            # top-right tap
    y, _ = conv3x3s2_forward(x, Wk)
    xpad = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    assert np.array_equal(y[..., 0], xpad[:, 0:6:2, 2:8:2, 0])


def test_conv_bad_inputs():
    x = np.zeros((1, 4, 4, 3))
    with pytest.raises(ValueError, match="W"):
        conv3x3s2_forward(x, np.zeros((3, 3, 2, 4)))
    with pytest.raises(ValueError, match="x"):
        conv3x3s2_forward(np.zeros((4, 4, 3)), np.zeros((3, 3, 3, 4)))


# ---------------------------------------------------------------------------------------------
# BatchNorm2d
# ---------------------------------------------------------------------------------------------
def _state(C, r):
    return {"running_mean": r.standard_normal(C), "running_var": r.uniform(0.5, 2.0, C),
            "num_batches_tracked": np.asarray(3.0)}


def test_batchnorm_train_grads():
    r = rng(1)
    x = 2.0 * r.standard_normal((3, 4, 5, 6)) + 0.7
    gamma, beta = r.standard_normal(6), r.standard_normal(6)
    st = _state(6, r)
    fwd = lambda x, g, b: batch_norm2d_forward(x, g, b, st, train=True)   # noqa: E731
    grad_check(ref_bn_train, [x, gamma, beta], fwd, batch_norm2d_backward, {"gamma": 1, "beta": 2})


def test_batchnorm_eval_grads_and_no_state_change():
    r = rng(2)
    x = r.standard_normal((2, 3, 3, 4))
    gamma, beta = r.standard_normal(4), r.standard_normal(4)
    st = _state(4, r)
    ref = lambda x, g, b: ref_bn_eval(x, g, b, st["running_mean"], st["running_var"])  # noqa
    fwd = lambda x, g, b: batch_norm2d_forward(x, g, b, st, train=False)  # noqa: E731
    grad_check(ref, [x, gamma, beta], fwd, batch_norm2d_backward, {"gamma": 1, "beta": 2})
    assert fwd(x, gamma, beta)[1]["state"] is None


def test_batchnorm_running_statistics_loop():
    """momentum 0.1 update of the mean and the *unbiased* variance, counted value by value."""
    r = rng(3)
    x = r.standard_normal((2, 3, 2, 3)) * 3.0 + 1.0
    st = _state(3, r)
    _, cache = batch_norm2d_forward(x, np.ones(3), np.zeros(3), st, train=True)
    new = cache["state"]
    for c in range(3):
        vals = [x[b, i, j, c] for b in range(2) for i in range(3) for j in range(2)]
        m = len(vals)
        mean = sum(vals) / m
        unbiased = sum((v - mean) ** 2 for v in vals) / (m - 1)
        assert abs(new["running_mean"][c] - (0.9 * st["running_mean"][c] + 0.1 * mean)) < 1e-12
        assert abs(new["running_var"][c] - (0.9 * st["running_var"][c] + 0.1 * unbiased)) < 1e-12
    assert float(new["num_batches_tracked"]) == 4.0
    assert float(st["num_batches_tracked"]) == 3.0                  # input state untouched


def test_batchnorm_refuses_single_value_in_training():
    with pytest.raises(ValueError, match="more than one value"):
        batch_norm2d_forward(np.ones((1, 1, 1, 2)), np.ones(2), np.zeros(2),
                             _state(2, rng(0)), train=True)


def test_is_state_names():
    assert is_state("stem.0.bn.running_mean") and is_state("stem.3.bn.num_batches_tracked")
    assert not is_state("stem.0.bn.gamma") and not is_state("running_mean_W")


# ---------------------------------------------------------------------------------------------
# exact GELU and the standard-only erf
# ---------------------------------------------------------------------------------------------
def test_gelu_erf_grads():
    x = np.linspace(-6, 6, 240).reshape(3, 80)
    grad_check(ref_gelu_erf, [x], L.gelu_erf_forward, L.gelu_erf_backward, {})


def test_gelu_forms_differ_by_the_known_amount():
    x = np.linspace(-8, 8, 16001)
    d = np.max(np.abs(L.gelu_forward(x)[0] - L.gelu_erf_forward(x)[0]))
    assert 1e-4 < d < 1e-3                                          # tanh vs erf GELU: about 5e-4


def test_erf_array_api_matches_scipy():
    x = np.concatenate([np.linspace(-9, 9, 36001), np.geomspace(1e-300, 9, 2000),
                        [0.0, 2.5, np.nextafter(2.5, 0.0)]])
    got = backend.to_host(backend.erf_array_api(xps.asarray(x, device=DEV)))
    want = scipy_erf(x)
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)) < 5e-15
    special = backend.to_host(backend.erf_array_api(xps.asarray([np.nan, np.inf, -np.inf])))
    assert np.isnan(special[0]) and special[1] == 1.0 and special[2] == -1.0


def test_mlp_gelu_choice():
    r = rng(4)
    x, W1, W2 = r.standard_normal((2, 3)), r.standard_normal((3, 5)), r.standard_normal((5, 3))
    p = {"W1": W1, "W2": W2}
    y, cache = L.mlp_forward(x, p, gelu="erf")
    assert rel_err(y, anp.dot(ref_gelu_erf(anp.dot(x, W1)), W2)) < TOL
    G = r.standard_normal(y.shape)
    dx, g = L.mlp_backward(G, cache)
    want = autograd.grad(lambda x: anp.sum(anp.dot(ref_gelu_erf(anp.dot(x, W1)), W2) * G))(x)
    assert rel_err(dx, want) < TOL
    with pytest.raises(ValueError, match="gelu"):
        L.mlp_forward(x, p, gelu="relu")


# ---------------------------------------------------------------------------------------------
# Fourier position features
# ---------------------------------------------------------------------------------------------
def test_fourier_features_formula():
    Hp, Wp, D = 3, 5, 32
    F = backend.to_host(fourier_features(backend.get_xp("cpu"), Hp, Wp, np.float64))
    assert F.shape == (Hp * Wp, 2 * D)
    for r_ in range(Hp):
        for c in range(Wp):
            n = r_ * Wp + c
            for half, v in ((0, 2 * math.pi * (r_ + 1) / (Hp + 1e-6)),
                            (1, 2 * math.pi * (c + 1) / (Wp + 1e-6))):
                for i in range(D):
                    t = 10000.0 ** (2 * (i // 2) / D)
                    want = math.sin(v / t) if i % 2 == 0 else math.cos(v / t)
                    assert abs(F[n, half * D + i] - want) < 1e-14


# ---------------------------------------------------------------------------------------------
# the whole stem
# ---------------------------------------------------------------------------------------------
def test_stem_channels():
    assert stem_channels(3, 192, 16) == [3, 24, 48, 96, 192]
    assert stem_channels(3, 384, 8) == [3, 96, 192, 384]
    with pytest.raises(ValueError, match="power of two"):
        stem_channels(3, 64, 6)


@pytest.mark.parametrize("train", [True, False])
def test_stem_against_autograd(train):
    r = rng(5)
    xp = backend.get_xp("cpu")
    params = conv_stem_init(backend.RNG(0), xp, 2, 8, 4, xp.float64)
    params = {k: np.asarray(v) + (0.3 * r.standard_normal(np.shape(v)) if "running" in k else 0)
              for k, v in params.items()}
    params["0.bn.running_var"] = np.abs(params["0.bn.running_var"]) + 0.5
    params["1.bn.running_var"] = np.abs(params["1.bn.running_var"]) + 0.5
    images = r.standard_normal((3, 8, 8, 2))
    keys = ["0.conv.W", "0.bn.gamma", "0.bn.beta", "1.conv.W", "1.bn.gamma", "1.bn.beta"]

    def ref(*ws):
        p = dict(zip(keys, ws))
        x = ref_conv(images, p["0.conv.W"])
        bn = (ref_bn_train if train else
              lambda x, g, b: ref_bn_eval(x, g, b, params["0.bn.running_mean"],
                                          params["0.bn.running_var"]))
        x = ref_gelu_erf(bn(x, p["0.bn.gamma"], p["0.bn.beta"]))
        x = ref_conv(x, p["1.conv.W"])
        bn = (ref_bn_train if train else
              lambda x, g, b: ref_bn_eval(x, g, b, params["1.bn.running_mean"],
                                          params["1.bn.running_var"]))
        x = bn(x, p["1.bn.gamma"], p["1.bn.beta"])
        return anp.reshape(x, (3, 4, 8))

    args = [params[k] for k in keys]
    tokens, cache = conv_stem_forward(images, params, 4, train=train, gelu="erf")
    assert cache["grid"] == (2, 2)
    assert rel_err(tokens, ref(*args)) < TOL
    assert set(cache["state"]) == ({k for k in params if is_state(k)} if train else set())
    G = r.standard_normal(tokens.shape)
    _, grads = conv_stem_backward(G, cache)
    assert set(grads) == set(keys)
    for i, k in enumerate(keys):
        want = autograd.grad(lambda *w: anp.sum(ref(*w) * G), i)(*args)
        assert rel_err(grads[k], want) < TOL, k


# ---------------------------------------------------------------------------------------------
# strict device (stand-in for CuPy): same results as NumPy, arrays stay on the device
# ---------------------------------------------------------------------------------------------
def _dev(a):
    return xps.asarray(np.asarray(a, dtype=np.float32), device=DEV)


def test_strict_device_stem_and_gelu():
    r = rng(6)
    xp_np = backend.get_xp("cpu")
    host = {k: np.asarray(v) for k, v in
            conv_stem_init(backend.RNG(1), xp_np, 3, 8, 4, xp_np.float32).items()}
    images = r.standard_normal((2, 8, 8, 3)).astype(np.float32)
    G = r.standard_normal((2, 4, 8)).astype(np.float32)
    for train in (True, False):
        y_np, c_np = conv_stem_forward(images, host, 4, train=train)
        y_st, c_st = conv_stem_forward(_dev(images), {k: _dev(v) for k, v in host.items()}, 4,
                                       train=train)
        assert y_st.device == DEV and y_st.dtype == xps.float32
        assert rel_err(backend.to_host(y_st), y_np) < 1e-5
        for k, v in c_st["state"].items():
            assert v.device == DEV and rel_err(backend.to_host(v), c_np["state"][k]) < 1e-5
        _, g_np = conv_stem_backward(G, c_np)
        _, g_st = conv_stem_backward(_dev(G), c_st)
        for k in g_np:
            assert g_st[k].device == DEV and rel_err(backend.to_host(g_st[k]), g_np[k]) < 1e-4, k
    x = r.standard_normal((5, 7)).astype(np.float32)
    y_st, c = L.gelu_erf_forward(_dev(x))
    assert y_st.device == DEV and y_st.dtype == xps.float32
    assert rel_err(backend.to_host(y_st), L.gelu_erf_forward(x)[0]) < 1e-6
    d_st, _ = L.gelu_erf_backward(_dev(x), c)
    assert rel_err(backend.to_host(d_st), L.gelu_erf_backward(x, L.gelu_erf_forward(x)[1])[0]) < 1e-6
    F = fourier_features(xps, 2, 3, xps.float32, device=DEV)
    assert F.device == DEV and F.dtype == xps.float32 and F.shape == (6, 64)


def test_state_is_never_optimised_or_decayed():
    """AdamW skips the BatchNorm state: no moments, no weight decay, values untouched."""
    from tostnp.train.optim import AdamW
    xp = backend.get_xp("cpu")
    params = {k: np.asarray(v) for k, v in
              conv_stem_init(backend.RNG(2), xp, 1, 4, 2, xp.float64).items()}
    params["0.bn.running_var"] = np.full(4, 3.0)
    W0 = params["0.conv.W"].copy()
    opt = AdamW(params, lr=0.1, weight_decay=0.5, no_decay=None)
    grads = {k: np.ones_like(v) for k, v in params.items() if not is_state(k)}
    opt.step(grads)
    assert np.array_equal(opt.params["0.bn.running_var"], np.full(4, 3.0))
    assert not any(is_state(k[2:]) for k in opt.state_dict()["arrays"])
    assert not np.array_equal(opt.params["0.conv.W"], W0)
    with pytest.raises(KeyError, match="unexpected"):
        opt.step({**grads, "0.bn.running_mean": np.ones(4)})
