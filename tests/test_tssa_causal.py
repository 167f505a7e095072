"""Causal TSSA: prefix-sum forward and its backward vs autograd, vs a naive per-prefix loop,
no dependence on the future (forward and backward), T = 1, strict device, bad inputs.

References: tests/references.py:ref_tssa (autograd.numpy with cumsum) and a plain loop here;
float64. The tests against them run on each of the layer's NumPy paths (``causal_path``): the
plain lines, the NumPy kernels (tostnp.backend.kernels_causal) and the compiled loops
(tostnp.backend.compiled, where Numba imports).
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import array_api_compat.numpy as xp_np

import tostnp.nn.tssa_causal as tssa_mod
from tostnp.nn.tssa import tssa_forward, tssa_backward
from tostnp.backend import tuning
from references import rel_err, ref_tssa, check_on_strict_device

RTOL = 1e-7




def naive_loop(x, P, h):
    """Row t recomputed from the prefix x[:, :t+1] alone, with explicit sums over s <= t."""
    B, T, C = x.shape
    p = C // h
    w = x @ P["W_u"] + P.get("b_u", 0.0)
    y = np.zeros_like(x)
    for b in range(B):
        for t in range(T):
            pre = w[b, :t + 1]                                                 # (t+1, C)
            Pis = []
            for s in range(t + 1):             # memberships of every prefix token s (causal)
                logit = np.zeros(h)
                for k in range(h):
                    for i in range(p):
                        c = k * p + i
                        S1 = max(sum(pre[u, c] ** 2 for u in range(s + 1)), 1e-12)
                        logit[k] += pre[s, c] ** 2 / S1 + P["denom_bias"][k, s, 0]
                logit = logit * P["temp"][:, 0]
                e = np.exp(logit - logit.max())
                Pis.append(e / e.sum())
            out = np.zeros(C)
            for k in range(h):
                S3 = sum(Pis[s][k] for s in range(t + 1))
                for i in range(p):
                    c = k * p + i
                    S2 = sum(Pis[s][k] * pre[s, c] ** 2 for s in range(t + 1))
                    out[c] = -pre[t, c] * Pis[t][k] / (1.0 + S2 / (S3 + 1e-8))
            y[b, t] = out @ P["W_o"] + P.get("b_o", 0.0)
    return y


@pytest.fixture(params=["whole", "cumsum", 3], ids=["whole-scan", "plain-scan", "blocked-scan"])
def scan_block(request, monkeypatch):
    """Run a test three ways: the default (a short sequence is one block, one (T, T) matmul);
    no whole-sequence block and the default block (T < 2 blocks: plain cumulative_sum); and
    blocks of 3 tokens, so that the blocked prefix/suffix sums (and their tails) are used."""
    if request.param != "whole":
        monkeypatch.setattr(tuning, "SCAN_WHOLE", 0)
    if isinstance(request.param, int):
        monkeypatch.setattr(tuning, "SCAN_BLOCK", request.param)
    return request.param


@pytest.fixture(params=["plain", "numpy-kernels", "compiled"])
def causal_path(request, monkeypatch):
    """Run a test on one path of the causal layer: the plain lines (the fast path off), the NumPy
    kernels (compiled loops off; sequences of one scan block), or the compiled loops (at any
    size: their threshold set to 0; skipped where Numba does not import)."""
    from tostnp import backend
    from tostnp.backend import compiled
    if request.param == "compiled" and not compiled.available():
        pytest.skip(f"compiled kernels unavailable: {compiled.describe()}")
    monkeypatch.setattr(backend.runtime, "_fast_on", request.param != "plain")
    monkeypatch.setattr(compiled, "_on", request.param == "compiled")
    monkeypatch.setattr(tuning, "CAUSAL_COMPILED_MIN", 0)
    return request.param


def make(seed, B=2, T=8, C=8, h=2, max_len=9, bias=True):
    rng = np.random.default_rng(seed)
    P = {"W_u": rng.normal(size=(C, C)) * 0.5, "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
         "W_o": rng.normal(size=(C, C)) * 0.5,
         "denom_bias": rng.normal(size=(h, max_len, 1)) * 0.3}
    if bias:
        P["b_u"] = rng.normal(size=C) * 0.3
        P["b_o"] = rng.normal(size=C) * 0.3
    return rng.normal(size=(B, T, C)), P, rng.normal(size=(B, T, C))


def test_forward_matches_reference_and_naive_loop(scan_block, causal_path):
    x, P, _ = make(0)
    y, cache = tssa_forward(x, P, 2, causal=True)
    assert rel_err(y, ref_tssa(x, P, 2, causal=True)) < RTOL
    assert rel_err(y, naive_loop(x, P, 2)) < RTOL
    Pi = np.asarray(cache["Pi"])
    assert Pi.shape == (2, 2, 8)
    np.testing.assert_allclose(Pi.sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
def test_backward_matches_autograd(bias, scan_block, causal_path):
    x, P, G = make(1, bias=bias, C=12, h=3)
    _, cache = tssa_forward(x, P, 3, causal=True)
    dx, grads = tssa_backward(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, 3, causal=True) * G), (0, 1))(x, P)
    assert set(grads) == set(P)
    assert rel_err(dx, gx) < RTOL
    for k in P:
        assert grads[k].shape == P[k].shape, k
        assert rel_err(grads[k], gP[k]) < RTOL, k
    # positions >= T of denom_bias are unused
    assert np.all(grads["denom_bias"][:, 8:] == 0)


def test_backward_with_a_zero_prefix_hits_the_clamp(scan_block, causal_path):
    # the first tokens map to w = 0 in one coordinate: S1 is clamped at 1e-12 there
    x, P, G = make(2, bias=False)
    x[:, :2] = 0.0
    _, cache = tssa_forward(x, P, 2, causal=True)
    dx, grads = tssa_backward(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, 2, causal=True) * G), (0, 1))(x, P)
    assert np.all(np.isfinite(dx))
    assert rel_err(dx, gx) < RTOL
    for k in P:
        assert rel_err(grads[k], gP[k]) < RTOL, k


def test_no_dependence_on_the_future(scan_block, causal_path):
    x, P, G = make(3, T=8)
    y, cache = tssa_forward(x, P, 2, causal=True)
    rng = np.random.default_rng(30)
    for t in [0, 3, 6]:
        x2 = x.copy()
        x2[:, t + 1:] = rng.normal(size=x2[:, t + 1:].shape) * 3.0
        y2, _ = tssa_forward(x2, P, 2, causal=True)
        np.testing.assert_allclose(y2[:, :t + 1], y[:, :t + 1], rtol=1e-13, atol=1e-13)
        assert not np.allclose(y2[:, t + 1:], y[:, t + 1:])
        # backward: a loss on outputs <= t sends no gradient to inputs > t
        Gt = G.copy()
        Gt[:, t + 1:] = 0.0
        dx, _ = tssa_backward(Gt, cache)
        assert np.all(dx[:, t + 1:] == 0.0)
        assert np.any(dx[:, :t + 1] != 0.0)


@pytest.mark.parametrize("L", [2, 3, 4, "whole"])
@pytest.mark.parametrize("T", [1, 2, 4, 7, 12])
def test_blocked_scan_equals_cumsum(monkeypatch, L, T):
    if L == "whole":                        # the default for short sequences: one (T, T) block
        assert T <= tuning.SCAN_WHOLE
    else:
        monkeypatch.setattr(tuning, "SCAN_WHOLE", 0)
        monkeypatch.setattr(tuning, "SCAN_BLOCK", L)
    a = np.random.default_rng(T).normal(size=(2, T, 3))
    np.testing.assert_allclose(tssa_mod._scan(a, xp_np), np.cumsum(a, axis=1), rtol=1e-12, atol=1e-12)
    suffix = np.cumsum(a[:, ::-1], axis=1)[:, ::-1]
    np.testing.assert_allclose(tssa_mod._scan(a, xp_np, reverse=True), suffix, rtol=1e-12, atol=1e-12)


def test_single_token():
    x, P, G = make(4, T=1)
    y, cache = tssa_forward(x, P, 2, causal=True)
    assert rel_err(y, ref_tssa(x, P, 2, causal=True)) < RTOL
    dx, grads = tssa_backward(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, 2, causal=True) * G), (0, 1))(x, P)
    assert rel_err(dx, gx) < RTOL
    for k in P:
        assert rel_err(grads[k], gP[k]) < RTOL, k


def test_decode_state_in_cache_is_the_prefix_statistics():
    x, P, _ = make(5)
    _, cache = tssa_forward(x, P, 2, causal=True)
    st = cache["decode_state"]
    w = x @ P["W_u"] + P["b_u"]
    Pi = np.transpose(np.asarray(cache["Pi"]), (0, 2, 1))                  # (B, T, h)
    np.testing.assert_allclose(st["S1"], (w ** 2).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(st["S3"], Pi.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(st["S2"], (np.repeat(Pi, 4, axis=-1) * w ** 2).sum(axis=1), rtol=1e-12)
    assert st["t"] == 8


def test_strict_device_forward_backward(scan_block, device):
    x, P, G = make(6)
    check_on_strict_device(lambda x_, P_: tssa_forward(x_, P_, 2, causal=True), tssa_backward,
                           x, P, G, device=device)


def test_bad_inputs():
    x, P, _ = make(7, T=6, max_len=5)
    with pytest.raises(ValueError, match=r"T=6 exceeds max_len=5"):
        tssa_forward(x, P, 2, causal=True)
    x, P, _ = make(7)
    with pytest.raises(ValueError, match=r"denom_bias'\] must have shape \(2, max_len, 1\)"):
        tssa_forward(x, {**P, "denom_bias": np.zeros((3, 9, 1))}, 2, causal=True)
    with pytest.raises(ValueError, match=r"missing key 'denom_bias'"):
        tssa_forward(x, {k: v for k, v in P.items() if k != "denom_bias"}, 2, causal=True)
    # non-causal use of causal params: denom_bias is unused and gets a zero gradient
    _, cache = tssa_forward(x, P, 2)
    _, grads = tssa_backward(x, cache)
    assert np.all(grads["denom_bias"] == 0) and grads["denom_bias"].shape == (2, 9, 1)
