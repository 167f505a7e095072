"""The causal TSSA layer's fast paths (tostnp.backend.kernels_causal: NumPy kernels in pieces of
batch rows; tostnp.backend.compiled: loops over tokens) against its plain lines, the
specification, which tests/test_tssa_causal.py checks against autograd and a naive loop.

Every output the layer hands on is compared: y, dx, every gradient, the cache the backward and
the decoder read (S1, q, Pi, n_Pi, r, the decode state). float64 to 1e-12; float32 against the
plain lines in float64. Also: the pieces, the long sequences (compiled loops only), the clamp
and the sequences above one scan block (both left to the plain lines), a backward from the
plain forward's cache, NaN. (That the default LM's layer imports no Numba: test_compiled.py.)
"""
from __future__ import annotations

import numpy as np
import pytest

from tostnp import backend
from tostnp.backend import compiled, kernels_causal, tuning
from tostnp.nn import tssa
from references import rel_err as rel

needs_numba = pytest.mark.skipif(not compiled.available(),
                                 reason=f"compiled kernels unavailable: {compiled.describe()}")
CACHED = ("S1", "q", "n_Pi", "r", "Pi")


def _layer(seed, B, T, C, h, dtype=np.float64, bias=True, max_len=None):
    rng = np.random.default_rng(seed)
    P = {"W_u": rng.normal(size=(C, C)) * 0.4, "W_o": rng.normal(size=(C, C)) * 0.4,
         "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
         "denom_bias": rng.normal(size=(h, max_len or T + 2, 1)) * 0.3}
    if bias:
        P["b_u"], P["b_o"] = rng.normal(size=C) * 0.3, rng.normal(size=C) * 0.3
    P = {k: v.astype(dtype) for k, v in P.items()}
    return P, rng.normal(size=(B, T, C)).astype(dtype), rng.normal(size=(B, T, C)).astype(dtype)


def _run(P, x, dy, h, path, monkeypatch=None):
    """(y, dx, grads, cache) on one path: "plain", "numpy" (kernels, compiled loops off) or
    "compiled" (loops on, at any size)."""
    old_fast = backend.set_fast(path != "plain")
    old_jit = backend.set_jit(path == "compiled")
    old_min = tuning.CAUSAL_COMPILED_MIN
    tuning.CAUSAL_COMPILED_MIN = 0
    try:
        y, cache = tssa.tssa_forward(x, P, h, causal=True)
        dx, grads = tssa.tssa_backward(dy, cache)
    finally:
        backend.set_fast(old_fast)
        backend.set_jit(old_jit)
        tuning.CAUSAL_COMPILED_MIN = old_min
    return y, dx, grads, cache


def _assert_same(a, b, tol):
    y, dx, g, c = a
    y0, dx0, g0, c0 = b
    assert rel(y, y0) < tol and rel(dx, dx0) < tol
    assert set(g) == set(g0)
    for k in g0:
        assert g[k].shape == g0[k].shape and g[k].dtype == g0[k].dtype, k
        assert rel(g[k], g0[k]) < tol, k
    for k in CACHED:
        assert c[k].shape == c0[k].shape, k
        assert rel(c[k], c0[k]) < tol, k
    assert c["clamped"] == c0["clamped"] and c["decode_state"]["t"] == c0["decode_state"]["t"]
    for k in ("S1", "S2", "S3"):
        assert rel(c["decode_state"][k], c0["decode_state"][k]) < tol, k


PATHS = ["numpy", pytest.param("compiled", marks=needs_numba)]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("piece", [1 << 15, 1, 24 * 6])
@pytest.mark.parametrize("B,T,C,h,bias", [(5, 6, 24, 4, True), (3, 16, 12, 3, False),
                                          (2, 2, 8, 2, True), (4, 64, 16, 2, False)])
def test_fast_paths_match_the_plain_lines(monkeypatch, path, piece, B, T, C, h, bias):
    """float64: the pieces of batch rows (one row each, a few, the whole batch) change nothing."""
    monkeypatch.setattr(tuning, "CAUSAL_PIECE", piece)
    P, x, dy = _layer(B * T + C, B, T, C, h, bias=bias)
    _assert_same(_run(P, x, dy, h, path), _run(P, x, dy, h, "plain"), 1e-12)


@needs_numba
@pytest.mark.parametrize("T", [65, 200])
def test_compiled_loops_take_long_sequences(T):
    """Above one scan block the NumPy kernels hand over to the plain lines' blocked scans; the
    compiled loops take any length."""
    P, x, dy = _layer(T, 2, T, 12, 3)
    assert not kernels_causal.causal_fast_length(T)
    _assert_same(_run(P, x, dy, 3, "compiled"), _run(P, x, dy, 3, "plain"), 1e-12)


@pytest.mark.parametrize("path", PATHS)
def test_float32_against_float64(path):
    """float32 on a fast path is as close to the float64 layer as the plain lines in float32."""
    P, x, dy = _layer(3, 4, 64, 32, 4)
    ref = _run(P, x, dy, 4, "plain")
    P32 = {k: v.astype(np.float32) for k, v in P.items()}
    x32, dy32 = x.astype(np.float32), dy.astype(np.float32)
    fast, plain32 = _run(P32, x32, dy32, 4, path), _run(P32, x32, dy32, 4, "plain")
    for i in (0, 1):
        assert fast[i].dtype == np.float32
        assert rel(fast[i], ref[i]) < max(3 * rel(plain32[i], ref[i]), 2e-6)
    for k in ref[2]:
        assert fast[2][k].dtype == np.float32
        assert rel(fast[2][k], ref[2][k]) < max(3 * rel(plain32[2][k], ref[2][k]), 2e-6), k


@pytest.mark.parametrize("path", PATHS)
def test_a_clamped_first_token_takes_the_plain_lines(monkeypatch, path):
    """w_0c = 0 in some coordinate: S1 is clamped there; the fast paths hand over (None), and the
    layer's numbers are the plain lines' own, bit for bit."""
    monkeypatch.setattr(tuning, "CAUSAL_COMPILED_MIN", 0)
    monkeypatch.setattr(compiled, "_on", path == "compiled")
    P, x, dy = _layer(4, 2, 8, 8, 2, bias=False)
    x[1, 0] = 0.0                                        # w = x W_u: row 0 of batch 1 is zero
    w = (x.reshape(-1, 8) @ P["W_u"]).reshape(x.shape)
    assert kernels_causal.causal_tssa_forward(x, w, P, 2, 1e-12, 1e-8) is None
    fast, plain = _run(P, x, dy, 2, path), _run(P, x, dy, 2, "plain")
    assert fast[3]["clamped"] and kernels_causal.causal_tssa_backward(dy, fast[3]) is None
    for a, b in zip(fast[:2], plain[:2]):
        np.testing.assert_array_equal(a, b)


def test_numpy_kernels_leave_long_sequences_to_the_plain_lines(monkeypatch):
    monkeypatch.setattr(compiled, "_on", False)
    P, x, dy = _layer(5, 2, 70, 8, 2)
    w = (x.reshape(-1, 8) @ P["W_u"]).reshape(x.shape)
    assert kernels_causal.causal_tssa_forward(x, w, P, 2, 1e-12, 1e-8) is None
    _, cache = _run(P, x, dy, 2, "plain")[2:]
    assert kernels_causal.causal_tssa_backward(dy, cache) is None


@pytest.mark.parametrize("path", PATHS)
def test_backward_from_the_plain_forwards_cache(path):
    """A cache made by the plain lines (fast path off at the forward) and a backward on a fast
    path: the plain backward's numbers."""
    P, x, dy = _layer(6, 3, 16, 12, 3)
    old = backend.set_fast(False)
    try:
        _, cache = tssa.tssa_forward(x, P, 3, causal=True)
    finally:
        backend.set_fast(old)
    old_jit, old_min = backend.set_jit(path == "compiled"), tuning.CAUSAL_COMPILED_MIN
    tuning.CAUSAL_COMPILED_MIN = 0
    try:
        dx, g = tssa.tssa_backward(dy, cache)
    finally:
        backend.set_jit(old_jit)
        tuning.CAUSAL_COMPILED_MIN = old_min
    _, dx0, g0, _ = _run(P, x, dy, 3, "plain")
    assert rel(dx, dx0) < 1e-12
    for k in g0:
        assert rel(g[k], g0[k]) < 1e-12, k


@pytest.mark.parametrize("path", PATHS)
def test_nan_reaches_what_it_reaches_on_the_plain_lines(monkeypatch, path):
    """A NaN in one input token: the same outputs and gradients are NaN as on the plain lines
    with the same kind of scan. A scan as a product with a triangle of ones (the NumPy kernels,
    the plain lines' default) also spreads it to the earlier tokens of its row (0 NaN is NaN);
    a running sum (the compiled loops; the plain lines' cumulative sum when SCAN_WHOLE is 0)
    leaves the outputs before it finite."""
    P, x, dy = _layer(7, 3, 12, 8, 2)
    x[1, 5, 3] = np.nan
    with np.errstate(invalid="ignore"):
        fast = _run(P, x, dy, 2, path)
        if path == "compiled":
            monkeypatch.setattr(tuning, "SCAN_WHOLE", 0)
        plain = _run(P, x, dy, 2, "plain")
    for a, b in zip(fast[:2], plain[:2]):
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        assert np.isnan(a[1]).any() and not np.isnan(a[0]).any() and not np.isnan(a[2]).any()
    assert np.isnan(fast[0][1, 5:]).all()
    assert np.isnan(fast[0][1, :5]).any() == (path != "compiled")
    for k in plain[2]:
        np.testing.assert_array_equal(np.isnan(fast[2][k]), np.isnan(plain[2][k]), err_msg=k)


@needs_numba
def test_compiled_loops_are_the_ones_that_run(monkeypatch):
    """From CAUSAL_COMPILED_MIN numbers on, with Numba on, the forward and the backward each run
    their compiled loop once; below it, or switched off, neither."""
    calls = []
    real = compiled.loops()

    class Spy(dict):
        def __getitem__(self, name):
            fn = real[name]

            def spied(*a):
                calls.append(name)
                return fn(*a)
            return spied
    monkeypatch.setattr(compiled, "loops", lambda: Spy(real) if compiled.active() else None)
    P, x, dy = _layer(8, 4, 16, 8, 2)                              # 512 numbers
    for size_min, on, expect in [(512, True, ["causal_forward", "causal_backward"]),
                                 (513, True, []), (0, False, [])]:
        calls.clear()
        monkeypatch.setattr(tuning, "CAUSAL_COMPILED_MIN", size_min)
        monkeypatch.setattr(compiled, "_on", on)
        y, cache = tssa.tssa_forward(x, P, 2, causal=True)
        tssa.tssa_backward(dy, cache)
        assert calls == expect, (size_min, on)
