"""Recurrent decoder: one token at a time with (S1, S2, S3) per head equals the causal forward,
for the TSSA layer and for the block; prefill from a forward cache; constant-size state;
strict device; errors (t >= max_len, out-of-order t, wrong batch).
"""
import numpy as np
import pytest

import array_api_compat.numpy as xp_np
from tostnp.backend import RNG
from tostnp.nn.tssa import tssa_forward, tssa_init, tssa_decode_init, tssa_decode_step
from tostnp.nn.block import (tost_block_forward, tost_block_init, tost_block_decode_init,
                             tost_block_decode_step)
from tostnp.backend import to_host
from tostnp.backend import tuning

from references import rel_err




def tssa_params(seed, C=12, h=3, max_len=10, bias=True):
    P = tssa_init(RNG(seed), xp_np, C, h, causal=True, max_len=max_len, bias=bias,
                  dtype=xp_np.float64, std=0.4)
    rng = np.random.default_rng(seed)
    P["temp"] = rng.uniform(0.5, 2.0, size=(h, 1))
    P["denom_bias"] = 0.3 * rng.normal(size=(h, max_len, 1))
    if bias:
        P["b_u"], P["b_o"] = 0.3 * rng.normal(size=C), 0.3 * rng.normal(size=C)
    return P


@pytest.mark.parametrize("bias,L", [(True, 32), (False, 3)])
def test_tssa_decoder_equals_causal_forward_at_every_step(bias, L, monkeypatch):
    monkeypatch.setattr(tuning, "SCAN_BLOCK", L)    # L = 3: the blocked prefix sums
    if L == 3:
        monkeypatch.setattr(tuning, "SCAN_WHOLE", 0)  # (not one whole-sequence block)
    P = tssa_params(0, bias=bias)
    x = np.random.default_rng(1).normal(size=(2, 10, 12))
    y, _ = tssa_forward(x, P, 3, causal=True)
    state = tssa_decode_init(2, P, 3)
    shapes = {k: v.shape for k, v in state.items() if k != "t"}
    for t in range(10):
        y_t, state = tssa_decode_step(state, x[:, t], P, 3, t)
        assert y_t.shape == (2, 12)
        assert rel_err(y_t, y[:, t]) < 1e-12, t
        # the state does not grow with the context: O(1) work and memory per token
        assert {k: v.shape for k, v in state.items() if k != "t"} == shapes
    assert state["t"] == 10


def test_decoder_does_not_mutate_state_and_single_token():
    P = tssa_params(2)
    x = np.random.default_rng(3).normal(size=(1, 1, 12))
    s0 = tssa_decode_init(1, P, 3)
    copies = {k: np.array(v) for k, v in s0.items()}
    y_t, s1 = tssa_decode_step(s0, x[:, 0], P, 3, 0)
    for k in copies:
        np.testing.assert_array_equal(s0[k], copies[k])
    y, _ = tssa_forward(x, P, 3, causal=True)                      # T = 1
    assert rel_err(y_t, y[:, 0]) < 1e-12


def test_prefill_from_forward_cache_then_decode():
    P = tssa_params(4)
    x = np.random.default_rng(5).normal(size=(2, 9, 12))
    y, _ = tssa_forward(x, P, 3, causal=True)
    _, cache = tssa_forward(x[:, :5], P, 3, causal=True)
    state = cache["decode_state"]
    for t in range(5, 9):
        y_t, state = tssa_decode_step(state, x[:, t], P, 3, t)
        assert rel_err(y_t, y[:, t]) < 1e-12


def test_decoder_errors():
    P = tssa_params(6, max_len=3)
    x = np.random.default_rng(7).normal(size=(2, 12))
    state = tssa_decode_init(2, P, 3)
    for t in range(3):
        _, state = tssa_decode_step(state, x, P, 3, t)
    with pytest.raises(ValueError, match=r"t=3 is out of range.*max_len=3"):
        tssa_decode_step(state, x, P, 3, 3)
    with pytest.raises(ValueError, match=r"t=1 but the state has consumed 0 tokens"):
        tssa_decode_step(tssa_decode_init(2, P, 3), x, P, 3, 1)
    with pytest.raises(ValueError, match=r"state\['S1'\] has shape \(3, 12\)"):
        tssa_decode_step(tssa_decode_init(3, P, 3), x, P, 3, 0)
    with pytest.raises(ValueError, match=r"x_t must have 2 dimensions"):
        tssa_decode_step(tssa_decode_init(2, P, 3), x[None], P, 3, 0)
    with pytest.raises(ValueError, match=r"denom_bias"):
        tssa_decode_init(2, {k: v for k, v in P.items() if k != "denom_bias"}, 3)


@pytest.mark.parametrize("bias", [True, False])
def test_block_decoder_equals_causal_block_forward(bias):
    P = tost_block_init(RNG(8), xp_np, 8, 2, causal=True, max_len=7, bias=bias,
                        layer_scale_init=0.5, dtype=xp_np.float64, std=0.4)
    rng = np.random.default_rng(9)
    P["tssa.denom_bias"] = 0.3 * rng.normal(size=P["tssa.denom_bias"].shape)
    P["ln1.beta"] = 0.3 * rng.normal(size=8)
    x = rng.normal(size=(3, 7, 8))
    y, cache = tost_block_forward(x, P, 2, causal=True, ln_eps=1e-5)
    state = tost_block_decode_init(3, P, 2)
    for t in range(7):
        y_t, state = tost_block_decode_step(state, x[:, t], P, 2, t, ln_eps=1e-5)
        assert rel_err(y_t, y[:, t]) < 1e-12, t
    with pytest.raises(ValueError, match=r"t=7 is out of range"):
        tost_block_decode_step(state, x[:, 0], P, 2, 7)
    # prefill through the block cache
    _, c4 = tost_block_forward(x[:, :4], P, 2, causal=True, ln_eps=1e-5)
    state = c4["decode_state"]
    for t in range(4, 7):
        y_t, state = tost_block_decode_step(state, x[:, t], P, 2, t, ln_eps=1e-5)
        assert rel_err(y_t, y[:, t]) < 1e-12, t


def test_strict_device_decoder():
    xps = pytest.importorskip("array_api_strict")
    dev = xps.Device("device1")
    P = tost_block_init(RNG(10), xps, 8, 2, causal=True, max_len=4, dtype=xps.float32,
                        device=dev, std=0.4)
    x = RNG(11).normal(xps, (2, 4, 8), xps.float32, device=dev)
    y, _ = tost_block_forward(x, P, 2, causal=True, ln_eps=1e-5)
    state = tost_block_decode_init(2, P, 2)
    back = to_host   # explicit transfer from device1
    for t in range(4):
        y_t, state = tost_block_decode_step(state, x[:, t, :], P, 2, t)
        assert y_t.device == dev and y_t.dtype == xps.float32
        assert state["tssa"]["S1"].device == dev
        assert rel_err(back(y_t), back(y)[:, t]) < 1e-5
