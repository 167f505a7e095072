"""ToST block: forward and hand-derived backward vs autograd (causal and not), a stack of three
blocks, init, strict device, bad inputs.

The reference block is written here from the autograd references of tests/references.py
(LayerNorm, tanh-GELU MLP, TSSA per the book's eq-layer-w .. eq-layer-out), float64.
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import array_api_compat.numpy as xp_np
from tostnp.backend import RNG
from tostnp.nn.block import (tost_block_forward, tost_block_backward, tost_block_init,
                             tost_block_decode_init, tost_block_decode_step)
from references import rel_err, ref_tssa, ref_layer_norm, ref_mlp, check_on_strict_device

RTOL = 1e-7




# ---- reference ---------------------------------------------------------------------------------
def ref_block(x, P, h, causal, eps):
    a = ref_layer_norm(x, P["ln1.gamma"], P["ln1.beta"], eps)
    x1 = x + P["ls1.gamma"] * ref_tssa(a, P, h, causal, pre="tssa.")
    mlp = ref_mlp(ref_layer_norm(x1, P["ln2.gamma"], P["ln2.beta"], eps), P, pre="mlp.")
    return x1 + P["ls2.gamma"] * mlp


def make_params(seed, C=8, h=2, causal=False, max_len=9, bias=True):
    """Float64 params with every entry random (init values would hide bugs: beta = 0 etc.)."""
    P = tost_block_init(RNG(seed), xp_np, C, h, causal=causal, max_len=max_len, bias=bias,
                        dtype=xp_np.float64, std=0.4)
    rng = np.random.default_rng(seed + 100)
    for k in P:
        if not k.endswith(("W_u", "W_o", "W1", "W2")):
            base = 1.0 if k.endswith(("gamma", "temp")) else 0.0
            P[k] = base + 0.3 * rng.normal(size=P[k].shape)
    return P


@pytest.mark.parametrize("causal,bias", [(False, True), (False, False), (True, True), (True, False)])
def test_block_backward_matches_autograd(causal, bias):
    rng = np.random.default_rng(1)
    x, G = rng.normal(size=(2, 6, 8)), rng.normal(size=(2, 6, 8))
    P = make_params(2, causal=causal, bias=bias)
    eps = 1e-5
    y, cache = tost_block_forward(x, P, 2, causal=causal, ln_eps=eps)
    assert rel_err(y, ref_block(x, P, 2, causal, eps)) < RTOL
    assert np.asarray(cache["Pi"]).shape == (2, 2, 6)
    dx, grads = tost_block_backward(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_block(x_, P_, 2, causal, eps) * G),
                           (0, 1))(x, P)
    assert set(grads) == set(P)
    assert rel_err(dx, gx) < RTOL
    for k in P:
        assert grads[k].shape == P[k].shape, k
        assert rel_err(grads[k], gP[k]) < RTOL, k


@pytest.mark.parametrize("causal", [False, True])
def test_stack_of_three_blocks(causal):
    rng = np.random.default_rng(3)
    x, G = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))
    Ps = [make_params(10 + i, causal=causal) for i in range(3)]
    eps = 1e-6
    h, caches = x, []
    for P in Ps:
        h, c = tost_block_forward(h, P, 2, causal=causal, ln_eps=eps)
        caches.append(c)
    d, grads = G, [None] * 3
    for i in reversed(range(3)):
        d, grads[i] = tost_block_backward(d, caches[i])

    def loss(x_, Ps_):
        z = x_
        for P_ in Ps_:
            z = ref_block(z, P_, 2, causal, eps)
        return anp.sum(z * G)
    assert rel_err(h, _stack_ref(x, Ps, causal, eps)) < RTOL
    gx, gPs = autograd.grad(loss, (0, 1))(x, Ps)
    assert rel_err(d, gx) < RTOL
    for i in range(3):
        for k in Ps[i]:
            assert rel_err(grads[i][k], gPs[i][k]) < RTOL, (i, k)


def _stack_ref(x, Ps, causal, eps):
    for P in Ps:
        x = ref_block(x, P, 2, causal, eps)
    return x


def test_init():
    P = tost_block_init(RNG(0), xp_np, 12, 3, causal=True, max_len=7, bias=False,
                        layer_scale_init=1e-5, dtype=xp_np.float32)
    assert set(P) == {"ln1.gamma", "ln1.beta", "tssa.W_u", "tssa.temp", "tssa.W_o",
                      "tssa.denom_bias", "ls1.gamma", "ln2.gamma", "ln2.beta", "mlp.W1",
                      "mlp.W2", "ls2.gamma"}
    assert P["mlp.W1"].shape == (12, 48) and P["mlp.W2"].shape == (48, 12)
    assert all(v.dtype == np.float32 for v in P.values())
    np.testing.assert_allclose(P["ls1.gamma"], 1e-5)
    np.testing.assert_allclose(P["ls2.gamma"], 1e-5)
    assert np.all(P["ln1.gamma"] == 1) and np.all(P["ln2.beta"] == 0)
    assert np.all(P["tssa.temp"] == 1) and np.all(P["tssa.denom_bias"] == 0)
    Pb = tost_block_init(RNG(0), xp_np, 12, 3, dtype=xp_np.float64, mlp_ratio=2)
    assert {"tssa.b_u", "tssa.b_o", "mlp.b1", "mlp.b2"} <= set(Pb) and "tssa.denom_bias" not in Pb
    assert Pb["mlp.b1"].shape == (24,) and np.all(Pb["mlp.b1"] == 0)
    assert np.all(Pb["ls1.gamma"] == 1.0)


@pytest.mark.parametrize("causal", [False, True])
def test_strict_device(causal, device):
    rng = np.random.default_rng(4)
    x, G = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))
    P = make_params(5, causal=causal)
    check_on_strict_device(lambda x_, P_: tost_block_forward(x_, P_, 2, causal=causal),
                           tost_block_backward, x, P, G, device=device)


def test_bad_inputs():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 5, 8))
    P = make_params(7, causal=True, max_len=4)
    with pytest.raises(ValueError, match=r"T=5 exceeds max_len=4"):
        tost_block_forward(x, P, 2, causal=True)
    P = make_params(7)
    with pytest.raises(ValueError, match=r"missing key 'ls2.gamma' of shape \(8,\)"):
        tost_block_forward(x, {k: v for k, v in P.items() if k != "ls2.gamma"}, 2)
    with pytest.raises(ValueError, match=r"missing key 'tssa.denom_bias'"):
        tost_block_forward(x, P, 2, causal=True)
    with pytest.raises(ValueError, match=r"params\['mlp.W2'\] must have shape \(32, 8\)"):
        tost_block_forward(x, {**P, "mlp.W2": np.zeros((32, 7))}, 2)
    with pytest.raises(ValueError, match=r"unknown key 'ln3.gamma'"):
        tost_block_forward(x, {**P, "ln3.gamma": np.ones(8)}, 2)
    with pytest.raises(ValueError, match=r"num_heads=3 must divide"):
        tost_block_forward(x, P, 3)
    with pytest.raises(ValueError, match=r"x must have 3 dimensions"):
        tost_block_forward(x[0], P, 2)
    with pytest.raises(ValueError, match=r"input has width C=6 but params\['tssa.W_u'\]"):
        tost_block_forward(x[..., :6], P, 2)
    with pytest.raises(ValueError, match=r"input has width C=6 but params\['tssa.W_u'\]"):
        tost_block_decode_step(tost_block_decode_init(2, make_params(7, causal=True, max_len=4), 2),
                               x[:, 0, :6], make_params(7, causal=True, max_len=4), 2, 0)
    _, cache = tost_block_forward(x, P, 2)
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 5, 8\)"):
        tost_block_backward(x[:, :4], cache)


@pytest.mark.parametrize("mixer", ["tssa", "tssa-uniform", "softmax", "flash", "linear"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias,ln_bias", [(True, True), (False, True), (False, False)])
def test_folded_block_matches_the_plain_block(mixer, causal, bias, ln_bias):
    """The fast path's block (LayerNorm gamma/beta and LayerScale folded into the products,
    tostnp/nn/block_fold.py) against the plain block, forward and backward, float64."""
    from tostnp import backend
    rng = np.random.default_rng(7)
    x, G = rng.normal(size=(3, 9, 8)), rng.normal(size=(3, 9, 8))
    P = tost_block_init(RNG(4), xp_np, 8, 2, causal=causal, max_len=9, bias=bias,
                        ln_bias=ln_bias, mixer=mixer, dtype=xp_np.float64, std=0.4)
    for k in P:                               # every entry random, the gammas away from 1
        if not k.endswith(("W_u", "W_o", "W1", "W2", "W_qkv")):
            P[k] = (1.0 if k.endswith(("gamma", "temp")) else 0.0) + 0.3 * rng.normal(size=P[k].shape)
    out = []
    for fast in (True, False):
        old = backend.set_fast(fast)
        try:
            y, cache = tost_block_forward(x, P, 2, causal=causal, mixer=mixer)
            dx, grads = tost_block_backward(G, cache)
        finally:
            backend.set_fast(old)
        assert bool(cache.get("folded")) == fast
        out.append((y, dx, grads))
    (y, dx, g), (y_p, dx_p, g_p) = out
    assert rel_err(y, y_p) < 1e-12 and rel_err(dx, dx_p) < 1e-12
    assert set(g) == set(g_p) == set(P) - ({"tssa.temp", "tssa.denom_bias"}
                                           if mixer == "tssa-uniform" else set())
    for k in g_p:
        assert g[k].shape == P[k].shape and rel_err(g[k], g_p[k]) < 1e-12, k
