"""Non-causal TSSA layer: forward semantics, hand-derived backward vs autograd, the layer as a
gradient step on R^var_c, strict-device run, bad inputs.

The autograd reference is tests/references.py:ref_tssa (the book's eq-layer-w .. eq-layer-out
written in the (B, h, N, p) layout with explicit L2 normalisation), float64.
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

import array_api_compat.numpy as xp_np
from tostnp.math import variational as core   # R^var_c, its closed-form gradient, tssa_step
from tostnp import backend
from tostnp.backend import RNG, kernels, tuning
from tostnp.nn.tssa import tssa_forward, tssa_backward, tssa_init
from references import rel_err, ref_tssa, check_on_strict_device

RTOL = 1e-7




def make(seed, B=2, N=7, C=12, h=3, bias=True, dtype=np.float64, scale=0.5):
    rng = np.random.default_rng(seed)
    P = {"W_u": rng.normal(size=(C, C)) * scale, "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
         "W_o": rng.normal(size=(C, C)) * scale}
    if bias:
        P["b_u"] = rng.normal(size=C) * 0.3
        P["b_o"] = rng.normal(size=C) * 0.3
    x = rng.normal(size=(B, N, C))
    G = rng.normal(size=(B, N, C))
    P = {k: v.astype(dtype) for k, v in P.items()}
    return x.astype(dtype), P, G.astype(dtype)


# ---- forward ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_reference(bias):
    x, P, _ = make(0, bias=bias)
    y, cache = tssa_forward(x, P, 3)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y, ref_tssa(x, P, 3)) < RTOL
    Pi = np.asarray(cache["Pi"])
    assert Pi.shape == (2, 3, 7)
    np.testing.assert_allclose(Pi.sum(axis=1), 1.0, rtol=1e-12)        # softmax over heads


def test_forward_zero_coordinate_uses_norm_clamp():
    # a coordinate that is 0 for every token: normalised by max(0, 1e-12) -> contributes 0
    x, P, _ = make(1, bias=False)
    P["W_u"][:, 4] = 0.0
    y, _ = tssa_forward(x, P, 3)
    assert np.all(np.isfinite(y))
    assert rel_err(y, ref_tssa(x, P, 3)) < RTOL


# ---- backward vs autograd --------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_backward_matches_autograd(bias):
    x, P, G = make(2, bias=bias)
    y, cache = tssa_forward(x, P, 3)
    dx, grads = tssa_backward(G, cache)
    gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, 3) * G), (0, 1))(x, P)
    assert set(grads) == set(P)
    assert rel_err(dx, gx) < RTOL
    for k in P:
        assert grads[k].shape == P[k].shape, k
        assert rel_err(grads[k], gP[k]) < RTOL, k


def test_backward_large_temp_and_one_head():
    # sharp softmax (large temp) and h = 1 (Pi == 1: the membership path carries no gradient)
    for h, tscale in [(4, 8.0), (1, 1.0)]:
        x, P, G = make(3, C=8, h=h, N=5)
        P["temp"] = P["temp"] * tscale
        _, cache = tssa_forward(x, P, h)
        dx, grads = tssa_backward(G, cache)
        gx, gP = autograd.grad(lambda x_, P_: anp.sum(ref_tssa(x_, P_, h) * G), (0, 1))(x, P)
        assert rel_err(dx, gx) < RTOL
        for k in P:
            assert rel_err(grads[k], gP[k]) < RTOL, (h, k)


def test_backward_does_not_mutate_inputs():
    x, P, G = make(4)
    copies = (x.copy(), {k: v.copy() for k, v in P.items()}, G.copy())
    _, cache = tssa_forward(x, P, 3)
    tssa_backward(G, cache)
    tssa_backward(G, cache)                       # twice: the cache is not consumed either
    np.testing.assert_array_equal(x, copies[0])
    np.testing.assert_array_equal(G, copies[2])
    for k in P:
        np.testing.assert_array_equal(P[k], copies[1][k])


def test_backward_finite_differences_second_opinion():
    x, P, G = make(5, B=1, N=4, C=6, h=2)
    _, cache = tssa_forward(x, P, 2)
    _, grads = tssa_backward(G, cache)
    eps = 1e-5
    for (i, j) in [(0, 0), (3, 5), (2, 1)]:
        Wp = {**P, "W_u": P["W_u"].copy()}
        Wm = {**P, "W_u": P["W_u"].copy()}
        Wp["W_u"][i, j] += eps
        Wm["W_u"][i, j] -= eps
        fd = (np.sum(tssa_forward(x, Wp, 2)[0] * G) - np.sum(tssa_forward(x, Wm, 2)[0] * G)) / (2 * eps)
        a = grads["W_u"][i, j]
        assert abs(a - fd) / max(1e-8, abs(a) + abs(fd)) < 1e-6


# ---- THE LAYER IS THE GRADIENT STEP ---------------------------------------------------------
def rvar_rows(Z, Pi, h):
    """R^var_c(Z, Pi | U) with f(x) = log(1 + x), U_k = identity on head k's coordinates.
    Z (n, d) rows, Pi (n, h)."""
    n, d = Z.shape
    p = d // h
    total = 0.0
    for k in range(h):
        Zk = Z[:, k * p:(k + 1) * p]                                     # Z U_k   (n, p)
        nk = anp.sum(Pi[:, k])
        stat = anp.dot(Pi[:, k], Zk ** 2) / nk                           # (p,)
        total = total + 0.5 * (nk / n) * anp.sum(anp.log(1.0 + stat))
    return total


def test_layer_is_minus_n_times_gradient_of_rvar():
    B, N, C, h = 2, 9, 12, 3
    x, P, _ = make(6, B=B, N=N, C=C, h=h)
    P["W_o"] = np.eye(C)                   # read the layer before its output projection
    P["b_o"] = np.zeros(C)
    out, cache = tssa_forward(x, P, h)
    w = x @ P["W_u"] + P["b_u"]                                          # (B, N, C)
    Pi = np.transpose(np.asarray(cache["Pi"]), (0, 2, 1))                # (B, N, h), held fixed
    U = np.zeros((h, C, C // h))
    for k in range(h):
        U[k, k * (C // h):(k + 1) * (C // h), :] = np.eye(C // h)
    # d/eps^2 = 1 in f(x) = log(1 + (d/eps^2) x): eps = sqrt(d), d = C
    eps = float(np.sqrt(C))
    # the 1e-8 in (sum Pi + 1e-8) perturbs m by ~1e-8/n_k relative
    tol = 1e-7
    for b in range(B):
        g_auto = autograd.grad(rvar_rows)(w[b], Pi[b], h)
        assert rel_err(out[b], -N * g_auto) < tol
        # the core package's closed form and value (tostnp.math.variational)
        g_core = core.variational_compression_grad(w[b], Pi[b], U, eps)
        assert rel_err(out[b], -N * np.asarray(g_core)) < tol
        R_core = float(core.variational_compression(w[b], Pi[b], U, eps))
        assert abs(R_core - float(rvar_rows(w[b], Pi[b], h))) < 1e-12 * max(1.0, abs(R_core))
        # and as one step of tssa_step with tau = n: Z+ - Z = out
        Zp = core.tssa_step(w[b], Pi[b], U, eps, float(N))
        assert rel_err(Zp - w[b], out[b]) < tol


# ---- float32, strict device ------------------------------------------------------------------
def test_float32_preserved_and_close_to_float64():
    x, P, G = make(7)
    y64, c64 = tssa_forward(x, P, 3)
    dx64, g64 = tssa_backward(G, c64)
    x32, P32, G32 = x.astype(np.float32), {k: v.astype(np.float32) for k, v in P.items()}, G.astype(np.float32)
    y32, c32 = tssa_forward(x32, P32, 3)
    dx32, g32 = tssa_backward(G32, c32)
    assert y32.dtype == np.float32 and dx32.dtype == np.float32
    assert all(g.dtype == np.float32 for g in g32.values())
    assert rel_err(y32, y64) < 1e-5 and rel_err(dx32, dx64) < 1e-4


def test_strict_device_forward_backward(device):
    x, P, G = make(8)
    y, dx, grads, cache = check_on_strict_device(lambda x_, P_: tssa_forward(x_, P_, 3),
                                                 tssa_backward, x, P, G, device=device)
    assert device.holds(cache["Pi"])


# ---- init ------------------------------------------------------------------------------------
def test_init():
    P = tssa_init(RNG(0), xp_np, 12, 3, dtype=xp_np.float32)
    assert set(P) == {"W_u", "b_u", "temp", "W_o", "b_o"}
    assert P["W_u"].shape == (12, 12) and P["W_u"].dtype == np.float32
    assert np.all(P["temp"] == 1) and P["temp"].shape == (3, 1)
    assert np.all(P["b_u"] == 0) and np.all(P["b_o"] == 0)
    assert 0.01 < np.std(P["W_u"]) < 0.03
    Pc = tssa_init(RNG(0), xp_np, 12, 3, causal=True, max_len=5, bias=False, dtype=xp_np.float64)
    assert set(Pc) == {"W_u", "temp", "W_o", "denom_bias"}
    assert Pc["denom_bias"].shape == (3, 5, 1) and np.all(Pc["denom_bias"] == 0)
    np.testing.assert_allclose(Pc["W_u"], P["W_u"], rtol=1e-6)       # same seed, same draws
    with pytest.raises(ValueError, match="max_len"):
        tssa_init(RNG(0), xp_np, 12, 3, causal=True, dtype=xp_np.float32)
    with pytest.raises(ValueError, match="divide"):
        tssa_init(RNG(0), xp_np, 10, 3, dtype=xp_np.float32)


# ---- bad inputs ------------------------------------------------------------------------------
def test_bad_inputs():
    x, P, G = make(9)
    with pytest.raises(ValueError, match=r"x must have 3 dimensions"):
        tssa_forward(x[0], P, 3)
    with pytest.raises(ValueError, match=r"W_u"):
        tssa_forward(x[..., :9], P, 3)
    with pytest.raises(ValueError, match=r"num_heads=5 must divide"):
        tssa_forward(x, P, 5)
    with pytest.raises(ValueError, match=r"missing key 'temp' of shape \(3, 1\)"):
        tssa_forward(x, {k: v for k, v in P.items() if k != "temp"}, 3)
    with pytest.raises(ValueError, match=r"params\['temp'\] must have shape \(3, 1\)"):
        tssa_forward(x, {**P, "temp": np.ones(3)}, 3)
    with pytest.raises(ValueError, match=r"params\['b_o'\] must have shape \(12,\)"):
        tssa_forward(x, {**P, "b_o": np.ones(11)}, 3)
    with pytest.raises(ValueError, match=r"unknown key 'b_U'"):
        tssa_forward(x, {**P, "b_U": np.ones(12)}, 3)
    with pytest.raises(ValueError, match=r"denom_bias"):
        tssa_forward(x, P, 3, causal=True)
    with pytest.raises(TypeError, match=r"dtype"):
        tssa_forward(x.astype(np.float32), P, 3)
    with pytest.raises(TypeError, match=r"x must be an array"):
        tssa_forward([[1.0]], P, 3)
    _, cache = tssa_forward(x, P, 3)
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 7, 12\)"):
        tssa_backward(G[:, :3], cache)


# ---------------------------------------------------------------------------------------------
# the non-causal TSSA layer on slices of its batch, one per thread (tostnp.nn.tssa)
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("threads, B", [(2, 4), (3, 7)])
def test_tssa_batch_slices_match_the_staged_reference(monkeypatch, threads, B):
    """Sliced forward and backward (uneven slices for B = 7 on 3 threads) against the staged
    float64 form of the book (tostnp/nn/tssa_reference.py), with every slice on its own thread
    with one BLAS thread."""
    import threading
    from threadpoolctl import threadpool_info
    from tostnp.nn import tssa
    from tostnp.nn.tssa_reference import tssa_forward_reference, tssa_backward_reference
    monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(tssa, "spin_is_short", lambda: True)
    g = np.random.default_rng(3)
    N, C, h = 5, 12, 3
    x, dy = g.standard_normal((B, N, C)), g.standard_normal((B, N, C))
    params = tssa.tssa_init(backend.RNG(1), np, C, h, bias=True, dtype=np.float64, std=0.5)
    params["temp"] = np.asarray(g.uniform(0.5, 2.0, (h, 1)))
    seen = []
    real = tssa.full_forward

    def spy(xs, *a, **kw):
        seen.append((threading.get_ident(), xs.shape[0], kernels.get_threads(),
                     [i["num_threads"] for i in threadpool_info()
                      if i["user_api"] == "blas" and "numpy" in i["filepath"]]))
        return real(xs, *a, **kw)
    monkeypatch.setattr(tssa, "full_forward", spy)
    with backend.threads(threads):
        y, cache = tssa.tssa_forward(x, params, h)
        dx, grads = tssa.tssa_backward(dy, cache)
    assert sorted(s[1] for s in seen) == {4: [2, 2], 7: [2, 2, 3]}[B]
    # the first slice on the calling thread, the others on the pool's threads (a pool thread
    # that finished its slice early may take the next one: at least 2 threads, at most `threads`)
    idents = {s[0] for s in seen}
    assert threading.get_ident() in idents and 2 <= len(idents) <= threads
    assert all(s[2] == 1 and s[3] == [1] for s in seen)
    y_ref, c_ref = tssa_forward_reference(x, params, h)
    dx_ref, g_ref = tssa_backward_reference(dy, c_ref)
    assert np.abs(y - y_ref).max() <= 1e-12 * np.abs(y_ref).max()
    assert cache["Pi"].shape == (B, h, N) and np.allclose(cache["Pi"], c_ref["Pi"], atol=1e-14)
    assert np.abs(dx - dx_ref).max() <= 1e-11 * np.abs(dx_ref).max()
    assert set(grads) == set(g_ref)
    for k in g_ref:
        assert np.abs(grads[k] - g_ref[k]).max() <= 1e-11 * np.abs(g_ref[k]).max(), k


def test_tssa_batch_slices_only_where_allowed(monkeypatch):
    """Whole on one thread, on the plain path, on array_api_strict, for the causal layer and
    under the size limit."""
    import array_api_strict as xps
    from tostnp.nn import tssa
    x = np.zeros((4, 8, 16))
    monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 8 * 16)
    monkeypatch.setattr(tssa, "spin_is_short", lambda: True)
    assert tssa.batch_slices(x, np) == [(0, 4)]
    with backend.threads(2):
        assert tssa.batch_slices(x, np) == [(0, 2), (2, 4)]
        monkeypatch.setattr(tssa, "spin_is_short", lambda: False)    # OpenBLAS spins long
        assert tssa.batch_slices(x, np) == [(0, 4)]
        monkeypatch.setattr(tssa, "spin_is_short", lambda: True)
        assert tssa.batch_slices(xps.asarray(x), xps) == [(0, 4)]
        old = backend.set_fast(False)
        try:
            assert tssa.batch_slices(x, np) == [(0, 4)]
        finally:
            backend.set_fast(old)
        monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 3 * 8 * 16)
        assert tssa.batch_slices(x, np) == [(0, 4)]              # 2 rows each: under the limit
        monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 1)
        params = tssa.tssa_init(backend.RNG(0), np, 16, 2, causal=True, max_len=8,
                                dtype=np.float64)
        _, cache = tssa.tssa_forward(np.ones((4, 8, 16)), params, 2, causal=True)
        assert "slices" not in cache
        params = tssa.tssa_init(backend.RNG(0), np, 16, 2, dtype=np.float64)
        _, cache = tssa.tssa_forward(np.ones((4, 8, 16)), params, 2)
        assert [b for b, _ in cache["slices"]] == [(0, 2), (2, 4)]


def test_tssa_batch_slice_error_reaches_the_caller(monkeypatch):
    from tostnp.nn import tssa
    monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(tssa, "spin_is_short", lambda: True)

    def boom(xs, *a, **kw):
        raise FloatingPointError(f"slice of {xs.shape[0]}")
    monkeypatch.setattr(tssa, "full_forward", boom)
    params = tssa.tssa_init(backend.RNG(0), np, 16, 2, dtype=np.float64)
    with backend.threads(2), pytest.raises(FloatingPointError, match="slice of 2"):
        tssa.tssa_forward(np.ones((4, 8, 16)), params, 2)
    with backend.threads(2):
        assert kernels.get_threads() == 2
