"""The compiled kernels (tostnp.backend.compiled, Numba): that they are the ones that run when on,
that they agree with the NumPy kernels in float32, that NaN takes the plain lines' way through
them, and that without Numba (not installed, Pyodide, switched off) the NumPy kernels run.
Their float64 agreement with the plain lines is tested in test_kernels.py (``tssa_kernels``).
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tostnp import backend
from tostnp.backend import compiled, tuning
from references import rel_err as rel

needs_numba = pytest.mark.skipif(not compiled.available(),
                                 reason=f"compiled kernels unavailable: {compiled.describe()}")


def _layer(rng, B, N, C, h, dtype):
    from tostnp.nn import tssa
    params = tssa.tssa_init(backend.RNG(7), np, C, h, bias=True, dtype=dtype, std=0.5)
    params["temp"] = rng.uniform(0.5, 3.0, (h, 1)).astype(dtype)
    params["b_u"] = rng.standard_normal(C).astype(dtype)
    params["b_o"] = rng.standard_normal(C).astype(dtype)
    x = rng.standard_normal((B, N, C)).astype(dtype)
    dy = rng.standard_normal((B, N, C)).astype(dtype)
    return params, x, dy


def _run(params, x, dy, h, jit: bool, fast: bool = True):
    """(y, dx, grads) of the layer with the compiled kernels on or off (``jit``), or on the
    plain lines (``fast`` False)."""
    from tostnp.nn import tssa
    old_jit, old_fast = backend.set_jit(jit), backend.set_fast(fast)
    try:
        y, cache = tssa.tssa_forward(x, params, h)
        dx, g = tssa.tssa_backward(dy, cache)
    finally:
        backend.set_jit(old_jit)
        backend.set_fast(old_fast)
    assert cache["in_pieces"] == fast
    return y, dx, g


def _plain(params, x, dy, h):
    """The plain lines' (y, dx, grads): the fast path off."""
    return _run(params, x, dy, h, jit=False, fast=False)


@needs_numba
def test_compiled_kernels_are_the_ones_that_run(monkeypatch):
    """On: kernels.tssa_statistics(_backward) run the compiled loops, each once per batch row,
    in the order of the lines; off: none of them."""
    calls = []
    real_loops = compiled.loops

    def spied_loops():
        found = real_loops()
        if found is None:
            return None

        def spy(name):
            def f(*a, **k):
                calls.append(name)
                return found[name](*a, **k)
            return f
        return {name: spy(name) for name in found}
    monkeypatch.setattr(compiled, "loops", spied_loops)
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    rng = np.random.default_rng(0)
    params, x, dy = _layer(rng, 2, 20, 12, 3, np.float64)
    _run(params, x, dy, 3, jit=False)
    assert calls == []
    _run(params, x, dy, 3, jit=True)
    assert calls == [name for name in ("forward_sums", "forward_rest", "backward_sums",
                                       "backward_rest") for _ in range(2)]


@needs_numba
@pytest.mark.parametrize("B,N,C,h", [(2, 70, 24, 4), (3, 5, 12, 6), (1, 300, 64, 1)])
def test_compiled_kernels_match_numpy_kernels_in_float32(monkeypatch, B, N, C, h):
    """float32, the layer's dtype for training: the whole layer on each kind of kernel, within
    the few ulps that a different order of the sums gives (TOL of test_kernels.py)."""
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    monkeypatch.setattr(tuning, "TSSA_PIECE", 200)
    rng = np.random.default_rng(B + N + C)
    params, x, dy = _layer(rng, B, N, C, h, np.float32)
    yj, dxj, gj = _run(params, x, dy, h, jit=True)
    yn, dxn, gn = _run(params, x, dy, h, jit=False)
    assert yj.dtype == dxj.dtype == np.float32
    assert rel(yj, yn) < 2e-5 and rel(dxj, dxn) < 2e-5
    assert set(gj) == set(gn) and all(rel(gj[k], gn[k]) < 2e-5 for k in gn), \
        {k: rel(gj[k], gn[k]) for k in gn}
    assert all(gj[k].dtype == np.float32 for k in gj)


@needs_numba
def test_nan_takes_the_plain_lines_way_through_the_compiled_kernels(monkeypatch):
    """A NaN in one batch row: y, dx and the gradients are NaN exactly where the plain lines'
    are (that row, and the weights' gradients); the other row is untouched."""
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    rng = np.random.default_rng(3)
    params, x, dy = _layer(rng, 2, 30, 12, 3, np.float64)
    x[1, 4, 7] = np.nan
    yj, dxj, gj = _run(params, x, dy, 3, jit=True)
    yp, dxp, gp = _plain(params, x, dy, 3)
    assert np.array_equal(np.isnan(yj), np.isnan(yp))
    assert np.array_equal(np.isnan(dxj), np.isnan(dxp))
    assert np.isnan(yj[1]).all() and not np.isnan(yj[0]).any()
    assert rel(yj[0], yp[0]) < 1e-12 and rel(dxj[0], dxp[0]) < 1e-12
    for k in gp:
        assert np.array_equal(np.isnan(gj[k]), np.isnan(gp[k])), k


def test_without_numba_the_numpy_kernels_run(monkeypatch):
    """Pyodide, a Numba that does not import, and the switch: no compiled kernels, a line that
    says why, and the layer still runs (the NumPy kernels), equal to the plain lines."""
    monkeypatch.setattr(compiled, "_on", True)              # (whatever TOSTNP_JIT says)
    monkeypatch.setattr(compiled, "_state", {})
    monkeypatch.setattr(sys, "platform", "emscripten")
    assert not compiled.available() and compiled.describe() == "not in Pyodide"
    assert not compiled.active()
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(compiled, "_state", {})
    monkeypatch.setitem(sys.modules, "numba", None)          # import numba raises ImportError
    assert not compiled.available() and compiled.describe().startswith("numba does not import")
    assert not compiled.active()
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    rng = np.random.default_rng(4)
    params, x, dy = _layer(rng, 2, 16, 8, 2, np.float64)
    y, dx, g = _run(params, x, dy, 2, jit=True)
    yp, dxp, gp = _plain(params, x, dy, 2)
    assert rel(y, yp) < 1e-12 and rel(dx, dxp) < 1e-12
    assert all(rel(g[k], gp[k]) < 1e-12 for k in gp)
    old = backend.set_jit(False)
    try:
        assert not compiled.active() and compiled.describe().startswith("off")
    finally:
        backend.set_jit(old)


def test_tostnp_imports_numba_only_for_a_long_sequence():
    """Importing tostnp, a non-causal layer too small for the kernels in pieces, and a causal
    layer of the default LM's size (below tuning.CAUSAL_COMPILED_MIN) import no Numba (its
    import and compile cost only what needs them: about 130 MB of resident memory)."""
    code = ("import sys, numpy as np, tostnp\n"
            "from tostnp import backend\n"
            "from tostnp.backend import tuning\n"
            "from tostnp.nn import tssa\n"
            "p = tssa.tssa_init(backend.RNG(0), np, 16, 2, dtype=np.float64)\n"
            "y, c = tssa.tssa_forward(np.ones((2, 8, 16)), p, 2)\n"
            "tssa.tssa_backward(np.ones((2, 8, 16)), c)\n"
            "assert not c['in_pieces']\n"
            "B, T, C, h = 32, 64, 128, 4\n"
            "assert B * T * C < tuning.CAUSAL_COMPILED_MIN\n"
            "p = tssa.tssa_init(backend.RNG(0), np, C, h, causal=True, max_len=T, "
            "dtype=np.float32)\n"
            "x = np.random.default_rng(0).standard_normal((B, T, C)).astype(np.float32)\n"
            "y, c = tssa.tssa_forward(x, p, h, causal=True)\n"
            "tssa.tssa_backward(x, c)\n"
            "print('numba' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
