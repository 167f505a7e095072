"""The tests' gradient harness around the shared float64 references.

The references themselves (plain formulas from the book's equations, in float64, loops and
``autograd.numpy``; none imports the code under test) and the one relative-error measure live in
:mod:`tostnp.analysis.oracle`, shared with ``tostnp verify``; they are re-exported here under the
names the tests use. Imported as ``from references import ...`` (tests/ is on sys.path under
pytest).
"""
import autograd
import autograd.numpy as anp
import numpy as np

from tostnp.analysis.oracle import (  # noqa: F401  (re-exported)
    rel_err, coding_rate as ref_coding_rate, compression as ref_compression,
    variational_compression as ref_variational, variational_compression_ad as ag_variational,
    membership as ref_membership, layer_norm as ref_layer_norm, gelu as ref_gelu,
    gelu_erf as ref_gelu_erf, mlp as ref_mlp, softmax as ref_softmax,
    cross_entropy as ref_cross_entropy, softmax_attention as ref_softmax_attention,
    linear_attention as ref_linear_attention, class_attention as ref_class_attention,
    tssa as ref_tssa)

__all__ = ["rel_err", "check_backward", "check_on_strict_device", "ref_tssa", "ref_layer_norm",
           "ref_gelu", "ref_gelu_erf", "ref_mlp", "ref_softmax", "ref_softmax_attention",
           "ref_linear_attention", "ref_class_attention", "ref_cross_entropy", "ref_coding_rate",
           "ref_compression", "ref_variational", "ag_variational", "ref_membership"]


# ---------------------------------------------------------------------------------------------
# the gradient harness
# ---------------------------------------------------------------------------------------------
def check_backward(fwd, bwd, ref, args, *, tol, names=None, params_index=None, dx_index=0,
                   seed=1):
    """Check a layer's forward against ``ref`` and its backward against autograd of
    L = sum(ref(*args) * G), G ~ N(0, 1) seeded; and that nothing is mutated.

    ``fwd(*args) -> (y, cache)``, ``bwd(G, cache) -> (dx, grads)``. The expected grads come from
    ``names`` ({grads key: position in args}) or, with ``params_index``, from the dict args[i].
    dx is checked against args[dx_index] unless dx_index is None.
    """
    def copy(a):
        if isinstance(a, dict):
            return {k: np.array(v, copy=True) for k, v in a.items()}
        return None if a is None else np.array(a, copy=True)

    def same(a, b):
        if isinstance(a, dict):
            return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
        return a is None or np.array_equal(a, b)

    y_ref = ref(*args)
    y, cache = fwd(*args)
    assert rel_err(y, y_ref) < tol
    G = np.random.default_rng(seed).standard_normal(np.shape(y_ref))
    args_copy, G_copy = [copy(a) for a in args], G.copy()
    dx, grads = bwd(G, cache)
    assert np.array_equal(G, G_copy), "backward mutated dout"
    assert all(same(a, c) for a, c in zip(args, args_copy)), "forward/backward mutated an input"

    def loss(*a):
        return anp.sum(ref(*a) * G)

    if dx_index is not None:
        assert rel_err(dx, autograd.grad(loss, dx_index)(*args)) < tol
    if params_index is not None:
        want = autograd.grad(loss, params_index)(*args)
        assert set(grads) == set(want)
        for k in want:
            assert grads[k].shape == np.shape(want[k]), k
            assert rel_err(grads[k], want[k]) < tol, k
    if names is not None:
        assert set(grads) == set(names)
        for key, i in names.items():
            assert grads[key].shape == np.shape(args[i])
            assert rel_err(grads[key], autograd.grad(loss, i)(*args)) < tol, key


def check_on_strict_device(fwd, bwd, x, P, G, *, tol_y=1e-5, tol_grad=1e-4, device=None):
    """Run a layer in float64 NumPy and in float32 on ``device`` (tests/devices.py; default
    array_api_strict's non-default "device1", which raises on host conversion, mixed devices
    and non-standard calls, where CuPy code breaks); check devices, dtypes and values. Returns
    the device run's (y, dx, grads, cache) for further checks. Skips when the device is
    missing."""
    from tostnp.backend import to_host            # the explicit transfer from the device
    from devices import Device
    device = device or Device("strict")
    y_ref, c_ref = fwd(x, P)
    dx_ref, g_ref = bwd(G, c_ref)
    y, cache = fwd(device.put(x), {k: device.put(v) for k, v in P.items()})
    dx, grads = bwd(device.put(G), cache)
    assert device.holds(y) and device.holds(dx)
    assert all(device.holds(g) for g in grads.values())
    f32 = device.dtype("float32")
    assert y.dtype == f32 and all(g.dtype == f32 for g in grads.values())
    assert rel_err(to_host(y), y_ref) < tol_y
    assert rel_err(to_host(dx), dx_ref) < tol_grad
    for k in P:
        assert rel_err(to_host(grads[k]), g_ref[k]) < tol_grad, k
    return y, dx, grads, cache
