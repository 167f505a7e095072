"""The NumPy fast path (tostnp.backend.kernels) against the plain array-API path on random shapes.

The plain path is itself checked against autograd in test_layers.py / test_optim.py; here every
fast kernel must reproduce it to rounding, in float64 (tight) and float32 (a few ulps of the
result), and the fast path must never be chosen for array_api_strict arrays. Last, the kernels'
threads: ``on_threads`` keeps order and waits for every thunk.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from tostnp import backend
from tostnp.nn import layers as L
from tostnp.train.optim import AdamW
from tostnp.backend import kernels, tuning
from references import rel_err as rel

TOL = {np.float64: 1e-12, np.float32: 2e-5}
SHAPES = [(7,), (3, 5), (2, 9, 16), (4, 3, 2, 33)]


@contextlib.contextmanager
def plain():
    old = backend.set_fast(False)
    try:
        yield
    finally:
        backend.set_fast(old)


def both(fwd, bwd, args, dy):
    """(y, grads) of the fast path and of the plain path."""
    out = []
    for ctx in (contextlib.nullcontext, plain):
        with ctx():
            y, cache = fwd(*args)
            dx, g = bwd(dy, cache)
        out.append((y, dx, g))
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_fast_matches_plain(dtype, shape):
    rng = np.random.default_rng(len(shape))
    x = (4.0 * rng.standard_normal(shape)).astype(dtype)
    x.flat[0] = -60.0                                 # exp(-2u) overflows: y must be -0, no NaN
    dy = rng.standard_normal(shape).astype(dtype)
    assert backend.fused(backend.namespace(x)) is not None
    (yf, dxf, _), (yp, dxp, _) = both(L.gelu_forward, L.gelu_backward, (x,), dy)
    assert yf.dtype == dxf.dtype == dtype
    assert np.all(np.isfinite(yf)) and np.all(np.isfinite(dxf))
    assert rel(yf, yp) < TOL[dtype] and rel(dxf, dxp) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES + [(3, 700, 200)])
def test_gelu_with_the_bias_before_it_matches_plain(dtype, shape, monkeypatch):
    """kernels.gelu_forward(h, b) adds b to h in place, piece by piece, then the GELU; its
    backward with bias_grad also returns the sum of dx over rows: the plain GELU of h + b and
    the plain sum (pieces forced small so that the sum runs over several of them)."""
    monkeypatch.setattr(tuning, "PIECES_MIN", 64)
    monkeypatch.setattr(tuning, "CHUNK", 256)
    rng = np.random.default_rng(3 + len(shape))
    h = (3.0 * rng.standard_normal(shape)).astype(dtype)
    b = rng.standard_normal(shape[-1]).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    with plain():
        want_y, c = L.gelu_forward(h + b)
        want_dx, _ = L.gelu_backward(dy, c)
    want_db = want_dx.astype(np.float64).reshape(-1, shape[-1]).sum(axis=0)
    hb = h.copy()
    y, s = kernels.gelu_forward(hb, b)
    assert rel(hb, h + b) == 0.0                      # the add happened in place
    dx, db = kernels.gelu_backward(dy, hb, s, bias_grad=True)
    assert y.dtype == dx.dtype == db.dtype == dtype and db.shape == (shape[-1],)
    assert rel(y, want_y) < TOL[dtype] and rel(dx, want_dx) < TOL[dtype]
    assert rel(db, want_db) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES + [(3, 700, 200)])
def test_gelu_slope_matches_plain(dtype, shape, monkeypatch):
    """kernels.gelu_forward_slope(h, b): y bit for bit that of kernels.gelu_forward, and
    dy * D (with the bias's gradient summed over pieces) the plain GELU's backward of h + b;
    far in both tails the slope is 0 and 1, finite (pieces forced small)."""
    monkeypatch.setattr(tuning, "PIECES_MIN", 64)
    monkeypatch.setattr(tuning, "CHUNK", 256)
    rng = np.random.default_rng(5 + len(shape))
    h = (3.0 * rng.standard_normal(shape)).astype(dtype)
    h.flat[0], h.flat[-1] = -60.0, 60.0
    b = rng.standard_normal(shape[-1]).astype(dtype)
    b[0] = b[-1] = 0.0
    dy = rng.standard_normal(shape).astype(dtype)
    with plain():
        want_y, c = L.gelu_forward(h + b)
        want_dx, _ = L.gelu_backward(dy, c)
    want_db = want_dx.astype(np.float64).reshape(-1, shape[-1]).sum(axis=0)
    hb, hb2 = h.copy(), h.copy()
    y, D = kernels.gelu_forward_slope(hb, b)
    y_gate, _ = kernels.gelu_forward(hb2, b)
    assert rel(hb, h + b) == 0.0 and np.array_equal(y, y_gate)
    dx, db = kernels.gelu_slope_backward(dy, D, bias_grad=True)
    assert np.array_equal(kernels.gelu_slope_backward(dy, D), dx)
    assert y.dtype == D.dtype == dx.dtype == db.dtype == dtype and db.shape == (shape[-1],)
    assert rel(y, want_y) < TOL[dtype] and rel(dx, want_dx) < TOL[dtype]
    assert rel(db, want_db) < TOL[dtype]
    assert D.flat[0] == 0.0 and D.flat[-1] == 1.0 and np.all(np.isfinite(D))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("step", [False, True], ids=["forward", "training-step"])
def test_mlp_fast_path_matches_plain(bias, step, monkeypatch):
    """The MLP on the fast path (b1 inside the GELU's pieces) and on the plain path: the same
    output and gradients, the same gradient keys; inside backend.backward_ahead() (a training
    step) the fast path keeps the GELU's slope, outside it the input and gate (spied)."""
    from tostnp.backend import kernels as K
    called = []
    for name in ("gelu_forward_slope", "gelu_forward"):
        real = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _r=real, _n=name, **k: called.append(_n)
                            or _r(*a, **k))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 9, 16))
    P = {"W1": 0.3 * rng.standard_normal((16, 64)), "W2": 0.3 * rng.standard_normal((64, 16))}
    if bias:
        P["b1"], P["b2"] = rng.standard_normal(64), rng.standard_normal(16)
    dy = rng.standard_normal(x.shape)
    with backend.backward_ahead() if step else contextlib.nullcontext():
        (yf, dxf, gf), (yp, dxp, gp) = both(lambda x_: L.mlp_forward(x_, P), L.mlp_backward,
                                            (x,), dy)
    assert called == ["gelu_forward_slope" if step else "gelu_forward"]
    assert list(gf) == list(gp) and rel(yf, yp) < 1e-12 and rel(dxf, dxp) < 1e-12
    for k in gp:
        assert rel(gf[k], gp[k]) < 1e-12, k


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_fast_matches_plain(dtype, shape):
    rng = np.random.default_rng(10 + len(shape))
    C = shape[-1]
    x = (3.0 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    gamma = rng.standard_normal(C).astype(dtype)
    beta = rng.standard_normal(C).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    (yf, dxf, gf), (yp, dxp, gp) = both(L.layer_norm_forward, L.layer_norm_backward,
                                        (x, gamma, beta, 1e-5), dy)
    assert yf.dtype == dxf.dtype == gf["gamma"].dtype == dtype
    assert rel(yf, yp) < TOL[dtype] and rel(dxf, dxp) < 10 * TOL[dtype]
    for k in ("gamma", "beta"):
        assert rel(gf[k], gp[k]) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layer_norm_without_shift_fast_matches_plain(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 12)).astype(dtype)
    gamma = rng.standard_normal(12).astype(dtype)
    dy = rng.standard_normal((3, 4, 12)).astype(dtype)
    (yf, dxf, gf), (yp, dxp, gp) = both(L.layer_norm_forward, L.layer_norm_backward,
                                        (x, gamma, None, 1e-6), dy)
    assert set(gf) == set(gp) == {"gamma"}
    assert rel(yf, yp) < TOL[dtype] and rel(dxf, dxp) < 10 * TOL[dtype]
    assert rel(gf["gamma"], gp["gamma"]) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_adamw_fast_matches_plain(dtype):
    rng = np.random.default_rng(3)
    shapes = {"W": (5, 7), "b": (7,), "blocks.0.ln1.gamma": (7,), "emb": (3, 2, 4)}
    params = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    runs = []
    for ctx in (contextlib.nullcontext, plain):
        with ctx():
            opt = AdamW({k: v.copy() for k, v in params.items()}, lr=1e-2, weight_decay=0.1)
            for step in range(4):
                g = {k: np.random.default_rng(step).standard_normal(s).astype(dtype)
                     for k, s in shapes.items()}
                opt.step(g, lr=1e-2 / (step + 1))
            runs.append(opt)
    fast, slow = runs
    for k in shapes:
        assert fast.params[k].dtype == dtype
        assert rel(fast.params[k], slow.params[k]) < TOL[dtype]
        assert rel(fast.m[k], slow.m[k]) < TOL[dtype] and rel(fast.v[k], slow.v[k]) < TOL[dtype]


def test_adamw_fast_leaves_old_params_alone():
    p = np.ones((3, 3))
    opt = AdamW({"W": p}, lr=0.1)
    opt.step({"W": np.ones((3, 3))})
    assert np.all(p == 1.0) and opt.params["W"] is not p


def test_fast_path_only_for_numpy():
    xps = pytest.importorskip("array_api_strict")
    assert backend.fused(xps) is None
    assert backend.fused(backend.get_xp("cpu")) is not None
    with plain():
        assert backend.fused(backend.get_xp("cpu")) is None


def test_namespace_shortcut_is_array_api_compat_lookup():
    """backend.namespace skips the general lookup for plain NumPy arrays: it must return the
    very namespace array-api-compat's lookup returns, and leave every other input to it."""
    import array_api_compat
    a, b = np.ones(3, np.float32), np.zeros((2, 2))
    for args in ((a,), (a, b), (b, a, b)):
        assert backend.namespace(*args) is array_api_compat.array_namespace(*args)
    xps = pytest.importorskip("array_api_strict")
    s = xps.ones(3)
    assert backend.namespace(s) is array_api_compat.array_namespace(s)
    with pytest.raises(TypeError):
        backend.namespace(a, s)                    # mixed libraries still refused
    with pytest.raises(TypeError):
        backend.namespace([1.0, 2.0])              # not an array


# ---------------------------------------------------------------------------------------------
# pieces and threads: tiny pieces so that every kernel runs many, on 1, 2 and 3 threads
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def small_pieces(monkeypatch):
    from tostnp.backend import kernels as fused
    monkeypatch.setattr(tuning, "CHUNK", 40)          # ~40 elements a piece: many pieces
    monkeypatch.setattr(tuning, "PIECES_MIN", 0)      # pieces (and threads) for tiny arrays
    old = fused.set_threads(1)
    yield fused
    fused.set_threads(old)


def _kernels(fused, dtype, shape):
    """Every fast kernel's outputs on one random input set (the fast path called directly)."""
    rng = np.random.default_rng(sum(shape))
    C = shape[-1]
    x = (2.0 * rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma, beta = rng.standard_normal(C).astype(dtype), rng.standard_normal(C).astype(dtype)
    y, s = fused.gelu_forward(x)
    dx = fused.gelu_backward(dy, x, s)
    ly, xhat, rstd = fused.layer_norm_forward(x, gamma, beta, 1e-5)
    ldx, dgamma, dbeta = fused.layer_norm_backward(dy, xhat, rstd, gamma, True)
    m, v = 0.1 * dy.copy(), np.abs(x)
    new = fused.adamw_update(x, dy, m, v, b1=0.9, b2=0.99, lr=1e-2, wd=0.1, eps=1e-8,
                             bc1=0.5, bc2=0.3)
    return [y, s, dx, ly, xhat, rstd, ldx, dgamma, dbeta, m, v, new]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(37, 5), (3, 29, 16), (2, 300)])
def test_thread_count_does_not_change_a_bit(small_pieces, dtype, shape):
    """The pieces and the order of their partial sums depend on the shapes only."""
    fused = small_pieces
    assert len(fused._pieces(int(np.prod(shape[:-1])), shape[-1])) > 1    # several pieces
    one = _kernels(fused, dtype, shape)
    for n in (2, 3):
        fused.set_threads(n)
        for a, b in zip(one, _kernels(fused, dtype, shape)):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(37, 5), (3, 29, 16)])
def test_pieces_on_threads_match_plain(small_pieces, dtype, shape):
    """Many pieces on 3 threads: GELU, LayerNorm and AdamW still equal the plain path."""
    small_pieces.set_threads(3)
    test_gelu_fast_matches_plain(dtype, shape)
    test_layer_norm_fast_matches_plain(dtype, shape)
    test_adamw_fast_matches_plain(dtype)


def test_threads_sets_blas_and_fast_path_together():
    from tostnp.backend import kernels as fused
    before = fused.get_threads()
    with backend.threads(2):
        assert fused.get_threads() == 2
    assert fused.get_threads() == before
    with pytest.raises(ValueError, match="threads"):
        fused.set_threads(0)



@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES + [(64, 17, 128)])
def test_sum_rows_matches_plain(dtype, shape):
    """Bias, LayerNorm and LayerScale gradients: sums over the leading axes as ones @ a."""
    from tostnp.backend import kernels as fused
    a = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    with plain():
        ref = L.sum_leading(backend.namespace(a), a)
    got = L.sum_leading(backend.namespace(a), a)
    assert got.dtype == dtype and got.shape == (shape[-1],)
    assert rel(got, ref) < TOL[dtype]
    assert rel(fused.sum_leading(a), a.reshape(-1, shape[-1]).astype(np.float64).sum(0)) < TOL[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(4, 6, 11), (70, 300)])
def test_softmax_cross_entropy_forward_fast_matches_plain(dtype, shape, monkeypatch):
    """The loss and its cached log-softmax from kernels.log_softmax, in pieces of rows (forced
    small), against the plain lines and against a float64 log-sum-exp written here; rows with
    a huge logit stay finite."""
    monkeypatch.setattr(tuning, "PIECES_MIN", 64)
    monkeypatch.setattr(tuning, "CHUNK", 256)
    rng = np.random.default_rng(9)
    logits = (3.0 * rng.standard_normal(shape)).astype(dtype)
    logits.flat[0] = 1e4 if dtype == np.float32 else 1e200
    targets = rng.integers(0, shape[-1], size=shape[:-1])
    out = []
    for ctx in (contextlib.nullcontext, plain):
        with ctx():
            loss, cache = L.softmax_cross_entropy_forward(logits, targets)
            out.append((loss, cache[0]))
    (loss_f, logp_f), (loss_p, logp_p) = out
    z = logits.astype(np.float64).reshape(-1, shape[-1])
    zmax = z.max(axis=-1, keepdims=True)
    ref = (z - zmax) - np.log(np.exp(z - zmax).sum(axis=-1, keepdims=True))
    assert logp_f.dtype == dtype and np.all(np.isfinite(logp_f))
    assert rel(logp_f, logp_p) < TOL[dtype] and rel(logp_f, ref) < TOL[dtype]
    assert abs(float(loss_f) - float(loss_p)) <= TOL[dtype] * abs(float(loss_p))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("ignore", [None, -1])
def test_softmax_cross_entropy_backward_fast_matches_plain(dtype, ignore):
    rng = np.random.default_rng(7)
    logits = (3.0 * rng.standard_normal((4, 6, 11))).astype(dtype)
    targets = rng.integers(0, 11, size=(4, 6))
    if ignore is not None:
        targets[0, :3] = ignore
    out = []
    for ctx in (contextlib.nullcontext, plain):
        with ctx():
            _, cache = L.softmax_cross_entropy_forward(logits, targets, ignore_index=ignore)
            out.append(L.softmax_cross_entropy_backward(np.asarray(1.7, dtype), cache)[0])
    fast, slow = out
    assert fast.dtype == dtype and fast.shape == logits.shape
    assert rel(fast, slow) < TOL[dtype]
    if ignore is not None:
        assert np.all(fast[0, :3] == 0.0)


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (2, 0, 5)])
def test_empty_arrays(shape):
    """Empty batches and zero-width rows pass through every kernel (as on the plain path)."""
    from tostnp.backend import kernels as fused
    x = np.zeros(shape, np.float32)
    y, s = fused.gelu_forward(x)
    assert y.shape == s.shape == shape
    assert fused.gelu_backward(x, x, s).shape == shape
    assert fused.sum_leading(x).shape == (shape[-1],)
    new = fused.adamw_update(x, x, x.copy(), x.copy(), b1=0.9, b2=0.99, lr=0.1, wd=0.1,
                             eps=1e-8, bc1=0.1, bc2=0.01)
    assert new.shape == shape


def test_adamw_groups_are_flat_and_bitwise_per_parameter():
    """The fast AdamW updates each (dtype, decay) group with one kernel call on flat buffers;
    element by element that is the same arithmetic as the per-parameter kernel, so the same
    bits; the moments are views into the groups' buffers; old parameters are left alone."""
    from tostnp.backend import kernels
    rng = np.random.default_rng(5)
    shapes = {"W": (5, 7), "b": (7,), "blocks.0.ln1.gamma": (7,), "emb": (3, 2, 4),
              "head.W": (4, 3), "x.W64": (2, 3)}
    dtypes = {k: (np.float64 if k == "x.W64" else np.float32) for k in shapes}
    params = {k: rng.standard_normal(s).astype(dtypes[k]) for k, s in shapes.items()}
    held = {k: v.copy() for k, v in params.items()}
    opt = AdamW(dict(params), lr=1e-2, weight_decay=0.1)
    assert opt._groups is not None and len(opt._groups) == 3   # f32 decay, f32 no decay, f64
    for names, wd, m, v in opt._groups:
        for n in names:
            assert np.shares_memory(opt.m[n], m) and np.shares_memory(opt.v[n], v)
    ref_p = {k: v.copy() for k, v in params.items()}
    ref_m = {k: np.zeros_like(v) for k, v in params.items()}
    ref_v = {k: np.zeros_like(v) for k, v in params.items()}
    for t in range(1, 5):
        g = {k: np.random.default_rng(t).standard_normal(s).astype(dtypes[k])
             for k, s in shapes.items()}
        lr = 1e-2 / t
        opt.step(g, lr=lr)
        for k in shapes:
            ref_p[k] = kernels.adamw_update(ref_p[k], g[k], ref_m[k], ref_v[k], b1=0.9,
                                            b2=0.95, lr=lr, wd=opt.decay[k], eps=1e-8,
                                            bc1=1 - 0.9 ** t, bc2=1 - 0.95 ** t)
    for k in shapes:
        assert opt.params[k].shape == shapes[k] and opt.params[k].dtype == dtypes[k]
        assert np.array_equal(opt.params[k], ref_p[k]), k
        assert np.array_equal(opt.m[k], ref_m[k]) and np.array_equal(opt.v[k], ref_v[k]), k
        assert np.array_equal(params[k], held[k])            # the caller's arrays untouched


def _small_run(seed, steps):
    """(shapes, initial float64 parameters, one gradient dict per step) of a two-parameter model."""
    rng = np.random.default_rng(seed)
    shapes = {"W": (6, 5), "b": (5,)}
    p0 = {k: rng.standard_normal(s) for k, s in shapes.items()}
    grads = [{k: np.random.default_rng(t).standard_normal(s) for k, s in shapes.items()}
             for t in range(steps)]
    return shapes, p0, grads


def test_adamw_groups_restore_and_switch_paths():
    """load_state_dict writes into the flat buffers (a resumed fast run repeats exactly), and a
    step on the plain path (fast path switched off) updates the same moments."""
    shapes, p0, grads = _small_run(6, steps=6)
    straight = AdamW({k: v.copy() for k, v in p0.items()}, lr=1e-2)
    for g in grads:
        straight.step(g)
    first = AdamW({k: v.copy() for k, v in p0.items()}, lr=1e-2)
    for g in grads[:3]:
        first.step(g)
    sd = first.state_dict()
    resumed = AdamW({k: v.copy() for k, v in first.params.items()}, lr=1e-2)
    resumed.load_state_dict(sd)
    for n in shapes:
        assert np.shares_memory(resumed.m[n], resumed._groups[0][2]) or \
            np.shares_memory(resumed.m[n], resumed._groups[1][2])
    for g in grads[3:]:
        resumed.step(g)
    for k in shapes:
        assert np.array_equal(resumed.params[k], straight.params[k])
    mixed = AdamW({k: v.copy() for k, v in p0.items()}, lr=1e-2)
    for i, g in enumerate(grads):
        with (plain() if i % 2 else contextlib.nullcontext()):
            mixed.step(g)
    for k in shapes:
        assert rel(mixed.params[k], straight.params[k]) < 1e-12
        assert rel(mixed.m[k], straight.m[k]) < 1e-12 and rel(mixed.v[k], straight.v[k]) < 1e-12


@pytest.mark.parametrize("shape", [(7,), (3, 5), (1088, 64), (45, 384), (2, 43, 384), (5, 0),
                                   (2, 3, 4, 33)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_add_rows_is_the_broadcast_add(shape, dtype, monkeypatch):
    """The tiled bias add gives the plain broadcast add's bits: whole tiles, rows left over
    (45 rows of 384 with tiles of 42 rows), one row, no rows, a strided (non-contiguous) view."""
    from tostnp.backend import kernels
    rng = np.random.default_rng(7)
    a = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape[-1]).astype(dtype)
    want = a + b
    got = a.copy()
    assert kernels.add_rows(got, b) is got
    assert np.array_equal(got, want)
    monkeypatch.setattr(tuning, "ADD_ROWS_TILE", 3 * shape[-1] + 1)     # tiles of 3 rows
    got = a.copy()
    kernels.add_rows(got, b)
    assert np.array_equal(got, want)
    if a.ndim >= 2 and shape[-1] > 1:
        big = np.zeros(shape[:-1] + (2 * shape[-1],), dtype)
        view = big[..., ::2]
        view[...] = a
        kernels.add_rows(view, b)
        assert np.array_equal(view, want) and np.all(big[..., 1::2] == 0)


def test_tssa_with_biases_matches_plain():
    """The TSSA layer's bias adds (tostnp.backend.kernels.add_rows) on the fast path against the
    plain path, in both forms of the output product."""
    rng = np.random.default_rng(8)
    from tostnp.nn import tssa
    for N in (3, 20):                     # N < C and N >= C forms of the output product
        x = rng.standard_normal((2, N, 12))
        dy = rng.standard_normal((2, N, 12))
        params = tssa.tssa_init(backend.RNG(1), np, 12, 3, bias=True, dtype=np.float64, std=0.5)
        params["b_u"] = rng.standard_normal(12)
        params["b_o"] = rng.standard_normal(12)
        (yf, dxf, gf), (yp, dxp, gp) = both(lambda *a: tssa.tssa_forward(*a), tssa.tssa_backward,
                                            (x, params, 3), dy)
        assert rel(yf, yp) < 1e-12 and rel(dxf, dxp) < 1e-12
        assert set(gf) == set(gp) and all(rel(gf[k], gp[k]) < 1e-12 for k in gp)


@pytest.mark.parametrize("B,N,C,h,chunk", [(2, 40, 12, 3, 60),    # token pieces of 5 (N >= C)
                                             (5, 4, 12, 3, 100),    # 2 batch rows per piece
                                             (3, 7, 16, 4, 16),     # one token per piece
                                             (1, 33, 8, 2, 1 << 20)])  # one piece
@pytest.mark.parametrize("bias", [True, False])
def test_tssa_statistics_in_pieces_match_plain(monkeypatch, tssa_kernels, B, N, C, h, chunk,
                                                bias):
    """The non-causal TSSA forward with its token statistics in pieces
    (kernels.tssa_statistics, and y's bias inside its product, kernels.output_weights_ones)
    against the plain path, forward and backward, in float64; and its quantities against the
    plain lines."""
    from tostnp.nn import tssa
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    monkeypatch.setattr(tuning, "TSSA_PIECE", chunk)
    rng = np.random.default_rng(B * N + C)
    x, dy = rng.standard_normal((B, N, C)), rng.standard_normal((B, N, C))
    params = tssa.tssa_init(backend.RNG(2), np, C, h, bias=bias, dtype=np.float64, std=0.5)
    params["temp"] = rng.uniform(0.5, 3.0, (h, 1))
    if bias:
        params["b_u"], params["b_o"] = rng.standard_normal(C), rng.standard_normal(C)
    (yf, dxf, gf), (yp, dxp, gp) = both(lambda *a: tssa.tssa_forward(*a), tssa.tssa_backward,
                                        (x, params, h), dy)
    assert rel(yf, yp) < 1e-12 and rel(dxf, dxp) < 1e-12
    assert set(gf) == set(gp) and all(rel(gf[k], gp[k]) < 1e-12 for k in gp)
    # the kernel's quantities, one by one, against the plain lines written out here
    b_u = params.get("b_u")
    w_out, a1, S1, inv_S1, q, Pi, n_Pi, S2 = kernels.tssa_statistics(
        x, params["W_u"], b_u, params["temp"], h, 1e-24, 1e-8, ones_column=True)
    w = x @ params["W_u"] + (b_u if bias else 0.0)
    sq = w * w
    p = C // h
    q_want = np.einsum("bnkp,bkp->bnk", sq.reshape(B, N, h, p), (1.0 / sq.sum(1)).reshape(B, h, p))
    e = np.exp(q_want * params["temp"][:, 0])
    Pi_want = e / e.sum(-1, keepdims=True)
    PiE = np.repeat(Pi_want, p, axis=-1)
    assert rel(S1, sq.sum(1)) < 1e-13 and rel(q, q_want) < 1e-13 and rel(Pi, Pi_want) < 1e-13
    assert rel(n_Pi, Pi_want.sum(1) + 1e-8) < 1e-13 and rel(S2, (PiE * sq).sum(1)) < 1e-13
    assert a1.shape == (B, N, C + 1) and np.all(a1[..., C] == 1.0)
    assert rel(a1[..., :C], w * PiE) < 1e-13
    # w: the NumPy passes keep it; the compiled loops write a over it (w None: the backward
    # above read it as a / Pi)
    if tssa_kernels == "numba":
        assert w_out is None
    else:
        assert rel(w_out, w) < 1e-13 and not np.shares_memory(w_out, a1)
    # without the ones column: a (B, N, C), the same numbers
    got = kernels.tssa_statistics(x, params["W_u"], b_u, params["temp"], h, 1e-24, 1e-8)
    assert got[1].shape == (B, N, C) and np.array_equal(got[1], a1[..., :C])
    assert all(np.array_equal(u, v) for u, v in zip(got[2:], (S1, inv_S1, q, Pi, n_Pi, S2)))


def test_w_recoverable_bounds():
    """w = a / Pi only where every Pi is at least sqrt(the smallest subnormal): 2^-74.5 in
    float32, 2^-537 in float64; a NaN says no; an empty Pi, yes."""
    for dt, e in ((np.float32, -74.5), (np.float64, -537.0)):
        tiny = dt(2.0 ** e)
        assert kernels.w_recoverable(np.array([[0.5, tiny * dt(1.01)]], dt))
        assert not kernels.w_recoverable(np.array([[0.5, tiny * dt(0.99)]], dt))
        assert not kernels.w_recoverable(np.array([[0.5, 0.0]], dt))
        assert not kernels.w_recoverable(np.array([[0.5, np.nan]], dt))
        assert kernels.w_recoverable(np.zeros((2, 0, 3), dt))
    # a / Pi at the bound: w back to within two roundings, in float32
    w = np.array([3.0, -1e-3, 7.5e4], np.float32)
    pi = np.float32(2.0 ** -74)
    back = (w * pi) * (np.float32(1) / pi)
    assert np.all(np.abs(back - w) <= 2 * np.finfo(np.float32).eps * np.abs(w))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tssa_in_pieces_with_pi_too_small_for_w_from_a(monkeypatch, tssa_kernels, dtype):
    """Heads so sharp that some Pi underflows (temp 5e4): the compiled loops' w cannot be had
    back from a = w Pi, so the forward computes it again (kernels.w_recoverable False), and
    the layer matches the plain path forward and backward. With ordinary heads the compiled
    loops keep no w, and a backward with the fast path or the compiled loops switched off
    since the forward reads it as a / Pi too (the plain lines, the NumPy passes)."""
    from tostnp.nn import tssa
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    monkeypatch.setattr(tuning, "TSSA_PIECE", 64)
    rng = np.random.default_rng(7)
    B, N, C, h = 2, 24, 12, 3
    x, dy = rng.standard_normal((B, N, C)).astype(dtype), rng.standard_normal((B, N, C)).astype(dtype)
    params = tssa.tssa_init(backend.RNG(3), np, C, h, dtype=dtype, std=0.5)
    params["b_u"] = rng.standard_normal(C).astype(dtype)
    params["temp"] = np.full((h, 1), 5e4, dtype)
    tol = 1e-12 if dtype == np.float64 else 2e-4
    _, cache = tssa.tssa_forward(x, params, h)
    assert cache["in_pieces"] and cache["w"] is not None
    assert np.min(cache["Pi"]) < 2.0 ** -74.5                       # (the case under test)
    want_w = x @ params["W_u"] + params["b_u"]
    assert rel(cache["w"], want_w) < (1e-15 if dtype == np.float64 else 1e-6)
    (yf, dxf, gf), (yp, dxp, gp) = both(lambda *a: tssa.tssa_forward(*a), tssa.tssa_backward,
                                        (x, params, h), dy)
    assert rel(yf, yp) < tol and rel(dxf, dxp) < tol
    assert all(rel(gf[k], gp[k]) < tol for k in gp)
    # ordinary heads
    params["temp"] = np.full((h, 1), 2.0, dtype)
    y, cache = tssa.tssa_forward(x, params, h)
    assert (cache["w"] is None) == (tssa_kernels == "numba")
    dx_fast, g_fast = tssa.tssa_backward(dy, cache)
    with plain():
        dx_p, g_p = tssa.tssa_backward(dy, cache)
    old = backend.set_jit(False)
    try:
        dx_n, g_n = tssa.tssa_backward(dy, cache)
    finally:
        backend.set_jit(old)
    for dx_off, g_off in ((dx_p, g_p), (dx_n, g_n)):
        assert rel(dx_off, dx_fast) < tol
        assert all(rel(g_off[k], g_fast[k]) < tol for k in g_fast)


def test_tssa_backward_in_pieces_with_a_clamped_coordinate(monkeypatch, tssa_kernels):
    """A coordinate of w that is 0 for every token (S1 = 0, clamped: no gradient through S1)
    takes the same way through the backward in pieces (kernels.tssa_statistics_backward) as
    through the plain lines; and the backward leaves its inputs as they were."""
    from tostnp.nn import tssa
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    monkeypatch.setattr(tuning, "TSSA_PIECE", 48)
    rng = np.random.default_rng(12)
    x, dy = rng.standard_normal((2, 30, 12)), rng.standard_normal((2, 30, 12))
    params = tssa.tssa_init(backend.RNG(4), np, 12, 3, bias=False, dtype=np.float64, std=0.5)
    params["W_u"][:, 5] = 0.0                                   # w[..., 5] = 0: S1_5 clamped
    params["temp"] = rng.uniform(0.5, 3.0, (3, 1))
    y, cache = tssa.tssa_forward(x, params, 3)
    assert cache["in_pieces"] and np.all(cache["S1"][:, 5] == 0.0)
    kept = {k: np.array(v, copy=True) for k, v in cache.items() if isinstance(v, np.ndarray)}
    dy_kept = dy.copy()
    dx, g = tssa.tssa_backward(dy, cache)
    assert all(np.array_equal(cache[k], v) for k, v in kept.items()) and np.array_equal(dy, dy_kept)
    with plain():
        y_p, c_p = tssa.tssa_forward(x, params, 3)
        dx_p, g_p = tssa.tssa_backward(dy, c_p)
    assert np.all(np.isfinite(dx)) and rel(y, y_p) < 1e-12 and rel(dx, dx_p) < 1e-12
    assert set(g) == set(g_p) and all(rel(g[k], g_p[k]) < 1e-12 for k in g_p)


def test_tssa_statistics_in_batch_slices_match_plain(monkeypatch, tssa_kernels):
    """The pieces inside the batch slices (one per thread; y written into the layer's y)."""
    from tostnp.nn import tssa
    monkeypatch.setattr(tuning, "PIECES_MIN", 1)
    monkeypatch.setattr(tuning, "TSSA_PIECE", 50)
    monkeypatch.setattr(tuning, "LAYER_SLICE_MIN_ELEMENTS", 1)
    monkeypatch.setattr(tssa, "spin_is_short", lambda: True)
    rng = np.random.default_rng(5)
    for N in (30, 6):                                    # N >= C: [a | 1]; N < C: the a r form
        x, dy = rng.standard_normal((5, N, 10)), rng.standard_normal((5, N, 10))
        params = tssa.tssa_init(backend.RNG(3), np, 10, 2, bias=True, dtype=np.float64, std=0.5)
        params["b_u"], params["b_o"] = rng.standard_normal(10), rng.standard_normal(10)
        with backend.threads(2):
            y, cache = tssa.tssa_forward(x, params, 2)
            dx, g = tssa.tssa_backward(dy, cache)
        assert len(cache["slices"]) == 2
        with plain():
            y_p, c_p = tssa.tssa_forward(x, params, 2)
            dx_p, g_p = tssa.tssa_backward(dy, c_p)
        assert rel(y, y_p) < 1e-12 and rel(dx, dx_p) < 1e-12
        assert all(rel(g[k], g_p[k]) < 1e-12 for k in g_p)


def test_adamw_groups_only_for_models_up_to_the_limit(monkeypatch):
    """Above tuning.ADAMW_FLAT_MAX_ELEMENTS the update runs one call per parameter (no flat
    copies of a large model), with the same bits."""
    shapes, p0, grads = _small_run(9, steps=3)
    flat = AdamW({k: v.copy() for k, v in p0.items()}, lr=1e-2)
    monkeypatch.setattr(tuning, "ADAMW_FLAT_MAX_ELEMENTS", 34)
    each = AdamW({k: v.copy() for k, v in p0.items()}, lr=1e-2)
    assert flat._groups is not None and each._groups is None
    for g in grads:
        flat.step(g)
        each.step(g)
    for k in shapes:
        assert np.array_equal(flat.params[k], each.params[k])


# ---------------------------------------------------------------------------------------------
# running thunks on the kernels' threads
# ---------------------------------------------------------------------------------------------
def test_on_threads_keeps_order_and_waits_for_every_thunk():
    import time
    done = []

    def slow():
        time.sleep(0.05)
        done.append("slow")
        return 2

    def fail():
        raise KeyError("first")
    assert kernels.on_threads([lambda: 1, slow, lambda: 3]) == [1, 2, 3]
    with pytest.raises(KeyError, match="first"):
        kernels.on_threads([fail, slow])
    assert done == ["slow", "slow"]                       # it waited for the other thunk


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(0, 3), (1, 4), (57,), (2048, 16), (300, 2, 5)])
def test_scatter_add_is_add_at(dtype, shape):
    """backend.scatter_add on NumPy (rows sorted by index, each index's rows summed by
    add.reduceat) gives np.add.at's sums to rounding, with repeated, unsorted and unused
    indices; the unused rows are exact zeros."""
    rng = np.random.default_rng(shape[0])
    values = rng.standard_normal(shape).astype(dtype)
    V = 37
    idx = rng.integers(0, V - 5, shape[0])            # the last 5 rows get nothing
    want = np.zeros((V,) + shape[1:], dtype)
    np.add.at(want, idx, values)
    got = backend.scatter_add(idx, values, V)
    assert got.dtype == dtype and got.shape == want.shape
    assert rel(got, want) < TOL[dtype] and np.all(got[V - 5:] == 0.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layer_norm_without_scale_or_shift(dtype):
    """gamma None (the folded block's LayerNorms): y is xhat, and dx that of gamma = 1, beta = 0,
    on the fast path and the plain path alike; no gradient for the absent gamma and beta."""
    rng = np.random.default_rng(11)
    x = (3.0 * rng.standard_normal((4, 7, 24)) + 1.0).astype(dtype)
    dy = rng.standard_normal((4, 7, 24)).astype(dtype)
    ones, zeros = np.ones(24, dtype), np.zeros(24, dtype)
    for ctx in (contextlib.nullcontext, plain):
        with ctx():
            y, cache = L._layer_norm_forward(x, None, None, 1e-5)
            dx, g = L.layer_norm_backward(dy, cache)
            y1, cache1 = L._layer_norm_forward(x, ones, zeros, 1e-5)
            dx1, _ = L.layer_norm_backward(dy, cache1)
        assert g == {} and y.dtype == dtype and dx.dtype == dtype
        assert rel(y, y1) < TOL[dtype] and rel(dx, dx1) < TOL[dtype]


def test_training_steps_keep_the_slope_and_forwards_alone_the_gate(monkeypatch):
    """The models' *_loss_and_grads run their forward inside backend.backward_ahead() (the
    MLP keeps the GELU's slope); lm_forward alone (evaluation) caches the gate; the logits are
    the same bits either way."""
    from tostnp.backend import kernels as K
    from tostnp.models import get_lm_config, lm_forward, lm_init, lm_loss_and_grads
    called = []
    for name in ("gelu_forward_slope", "gelu_forward"):
        real = getattr(K, name)
        monkeypatch.setattr(K, name, lambda *a, _r=real, _n=name, **k: called.append(_n)
                            or _r(*a, **k))
    cfg = get_lm_config("tiny-char", vocab_size=20, block_size=8, width=16, depth=2,
                        num_heads=2, mlp_ratio=2)
    params = lm_init(cfg, backend.RNG(0), np, np.float64)
    ids = np.random.default_rng(1).integers(0, 20, (3, 8))
    _, _, logits_step = lm_loss_and_grads(params, ids, ids, cfg)
    assert called == ["gelu_forward_slope"] * 2
    called.clear()
    logits, _ = lm_forward(ids, params, cfg)
    assert called == ["gelu_forward"] * 2
    assert np.array_equal(logits, logits_step)
