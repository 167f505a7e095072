"""The readable TSSA (tostnp/nn/tssa_reference.py) against autograd, and the fast TSSA
(tostnp/nn/tssa.py, tssa_causal.py) against the readable one: float64, random shapes, causal
and not, with and without biases, forward and every gradient."""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from tostnp.nn.tssa import tssa_forward, tssa_backward
from tostnp.nn.tssa_reference import tssa_forward_reference, tssa_backward_reference
from references import rel_err, ref_tssa

TIGHT = 1e-12     # fast vs readable: the same float64 arithmetic, regrouped


def make(seed, causal, bias):
    """Random shape (B, N, h, p), params and upstream gradient; N up to 70 > two scan blocks."""
    rng = np.random.default_rng(seed)
    B, N, h, p = (int(v) for v in (rng.integers(1, 4), rng.integers(1, 71), rng.integers(1, 5),
                                   rng.integers(1, 6)))
    C = h * p
    P = {"W_u": rng.normal(size=(C, C)) * 0.5, "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
         "W_o": rng.normal(size=(C, C)) * 0.5}
    if bias:
        P["b_u"] = rng.normal(size=C) * 0.3
        P["b_o"] = rng.normal(size=C) * 0.3
    if causal:
        P["denom_bias"] = rng.normal(size=(h, N + int(rng.integers(0, 3)), 1)) * 0.3
    return rng.normal(size=(B, N, C)), P, h, rng.normal(size=(B, N, C))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_reference_matches_autograd(causal, bias):
    x, P, h, G = make(10 + causal + 2 * bias, causal, bias)
    x, G = x[:, :9], G[:, :9]                                   # autograd is slow: N <= 9
    y, cache = tssa_forward_reference(x, P, h, causal)
    assert rel_err(y, ref_tssa(x, P, h, causal)) < 1e-10
    dx, grads = tssa_backward_reference(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, h, causal) * G), (0, 1))(x, P)
    assert rel_err(dx, gx) < 1e-9
    assert set(grads) == set(P)
    for k in P:
        assert rel_err(grads[k], gP[k]) < 1e-9, k


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("causal", [False, True])
def test_fast_matches_reference(seed, causal):
    x, P, h, G = make(seed, causal, bias=seed % 2 == 0)
    y, cache = tssa_forward(x, P, h, causal=causal)
    y_ref, cache_ref = tssa_forward_reference(x, P, h, causal)
    assert rel_err(y, y_ref) < TIGHT
    assert rel_err(cache["Pi"], cache_ref["Pi"]) < TIGHT
    dx, grads = tssa_backward(G, cache)
    dx_ref, grads_ref = tssa_backward_reference(G, cache_ref)
    assert rel_err(dx, dx_ref) < TIGHT
    assert set(grads) == set(grads_ref) == set(P)
    for k in P:
        assert rel_err(grads[k], grads_ref[k]) < TIGHT, k


@pytest.mark.parametrize("N, h, p", [(3, 2, 4), (8, 2, 4), (9, 2, 4), (20, 3, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_fast_output_stage_both_sides_of_n_equals_c(N, h, p, bias):
    """The non-causal layer computes its output stage one way for N < C and another for
    N >= C (C = 8 or 9 here): both must match the readable layer."""
    rng = np.random.default_rng(100 + N + bias)
    C, B = h * p, 2
    P = {"W_u": rng.normal(size=(C, C)) * 0.5, "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
         "W_o": rng.normal(size=(C, C)) * 0.5}
    if bias:
        P["b_u"], P["b_o"] = rng.normal(size=C) * 0.3, rng.normal(size=C) * 0.3
    x, G = rng.normal(size=(B, N, C)), rng.normal(size=(B, N, C))
    y, cache = tssa_forward(x, P, h)
    y_ref, cache_ref = tssa_forward_reference(x, P, h, False)
    assert rel_err(y, y_ref) < TIGHT
    dx, grads = tssa_backward(G, cache)
    dx_ref, grads_ref = tssa_backward_reference(G, cache_ref)
    assert rel_err(dx, dx_ref) < TIGHT
    for k in P:
        assert rel_err(grads[k], grads_ref[k]) < TIGHT, k
