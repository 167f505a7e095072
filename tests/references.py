"""Independent references shared by the tests: autograd oracles, error measures, one gradient
harness. Imported as ``from references import ...`` (tests/ is on sys.path under pytest).

Everything here is written from the book's equations (book chapter "The TSSA layer",
eq-layer-w to eq-layer-out and eq-causal-pi, eq-causal-out), plainly and in float64, with
``autograd.numpy`` so that autograd can differentiate it. None of it imports the code under test.
"""
import math

import autograd
import autograd.numpy as anp
import numpy as np

__all__ = ["rel_err", "rel_to", "check_backward", "check_on_strict_device", "ref_tssa",
           "ref_layer_norm", "ref_gelu",
           "ref_mlp", "ref_softmax", "ref_softmax_attention", "ref_linear_attention",
           "ref_class_attention", "ref_cross_entropy"]


# ---------------------------------------------------------------------------------------------
# error measures
# ---------------------------------------------------------------------------------------------
def rel_err(a, b) -> float:
    """Largest absolute difference over the largest magnitude, in float64; shapes must match.

    max |a - b| / max(1e-12, max(|a| + |b|)): symmetric in a and b.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(a) + np.abs(b)))))


def rel_to(a, ref) -> float:
    """max |a - ref| / max |ref|: the error relative to the reference's largest magnitude."""
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    return float(np.max(np.abs(a - ref)) / np.max(np.abs(ref)))


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


def check_on_strict_device(fwd, bwd, x, P, G, *, tol_y=1e-5, tol_grad=1e-4):
    """Run a layer in float64 NumPy and in float32 on array_api_strict's non-default device
    ("device1", which raises on host conversion, mixed devices and non-standard calls, where
    CuPy code breaks); check devices, dtypes and values. Returns the device run's
    (y, dx, grads, cache) for further checks. Skips when array_api_strict is missing."""
    import pytest
    from tostnp.backend import to_host            # the explicit transfer from device1
    xps = pytest.importorskip("array_api_strict")
    dev = xps.Device("device1")
    y_ref, c_ref = fwd(x, P)
    dx_ref, g_ref = bwd(G, c_ref)
    to = lambda a: xps.asarray(np.asarray(a, dtype=np.float32), device=dev)  # noqa: E731
    y, cache = fwd(to(x), {k: to(v) for k, v in P.items()})
    dx, grads = bwd(to(G), cache)
    assert y.device == dev and dx.device == dev
    assert all(g.device == dev for g in grads.values())
    assert y.dtype == xps.float32 and all(g.dtype == xps.float32 for g in grads.values())
    assert rel_err(to_host(y), y_ref) < tol_y
    assert rel_err(to_host(dx), dx_ref) < tol_grad
    for k in P:
        assert rel_err(to_host(grads[k]), g_ref[k]) < tol_grad, k
    return y, dx, grads, cache


# ---------------------------------------------------------------------------------------------
# layers
# ---------------------------------------------------------------------------------------------
def ref_layer_norm(x, gamma, beta, eps):
    mu = anp.mean(x, axis=-1, keepdims=True)
    var = anp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / anp.sqrt(var + eps) * gamma + beta


def ref_gelu(x):
    """GELU, tanh form."""
    return 0.5 * x * (1.0 + anp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def ref_mlp(x, P, pre=""):
    """Linear -> GELU -> Linear with P[pre + "W1"], "b1" (opt), "W2", "b2" (opt)."""
    h = anp.dot(x, P[pre + "W1"])
    if pre + "b1" in P:
        h = h + P[pre + "b1"]
    y = anp.dot(ref_gelu(h), P[pre + "W2"])
    return y + P[pre + "b2"] if pre + "b2" in P else y


def ref_softmax(z, axis):
    z = z - anp.max(z, axis=axis, keepdims=True)
    e = anp.exp(z)
    return e / anp.sum(e, axis=axis, keepdims=True)


def ref_cross_entropy(logits, targets, ignore_index=None):
    """Mean -log softmax(logits)[target], one token at a time, plainly."""
    V = logits.shape[-1]
    z = anp.reshape(logits, (-1, V))
    t = np.reshape(targets, (-1,))
    total, count = 0.0, 0
    for i in range(z.shape[0]):
        if ignore_index is not None and t[i] == ignore_index:
            continue
        row = z[i]
        m = anp.max(row)
        total = total + (m + anp.log(anp.sum(anp.exp(row - m))) - row[t[i]])
        count += 1
    return total / count


# ---------------------------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------------------------
def _lin(x, P, name):
    y = anp.dot(x, P["W_" + name])
    return y + P["b_" + name] if "b_" + name in P else y


def ref_softmax_attention(x, P, h, causal):
    Cx = x.shape[-1]
    p = Cx // h
    qkv = _lin(x, P, "qkv")
    n = x.shape[1]
    heads = []
    for i in range(h):
        q = qkv[:, :, i * p:(i + 1) * p]
        k = qkv[:, :, Cx + i * p:Cx + (i + 1) * p]
        v = qkv[:, :, 2 * Cx + i * p:2 * Cx + (i + 1) * p]
        s = anp.einsum("bip,bjp->bij", q, k) / math.sqrt(p)
        if causal:
            s = s - 1e300 * np.triu(np.ones((n, n)), 1)         # future keys -> -huge
        e = anp.exp(s - anp.max(s, axis=-1, keepdims=True))
        heads.append(anp.einsum("bij,bjp->bip", e / anp.sum(e, axis=-1, keepdims=True), v))
    return _lin(anp.concatenate(heads, axis=-1), P, "o")


def _phi(a):
    return anp.where(a > 0, a + 1.0, anp.exp(anp.minimum(a, 0.0)))


def ref_linear_attention(x, P, h, causal):
    Cx = x.shape[-1]
    p = Cx // h
    qkv = _lin(x, P, "qkv")
    heads = []
    for i in range(h):
        Q = _phi(qkv[:, :, i * p:(i + 1) * p])
        K = _phi(qkv[:, :, Cx + i * p:Cx + (i + 1) * p])
        v = qkv[:, :, 2 * Cx + i * p:2 * Cx + (i + 1) * p]
        if not causal:
            S = anp.einsum("bjp,bjq->bpq", K, v)
            z = anp.sum(K, axis=1)                                 # (B, p)
            num = anp.einsum("bip,bpq->biq", Q, S)
            den = anp.einsum("bip,bp->bi", Q, z)[:, :, None]
            heads.append(num / den)
        else:                                                      # naive loop over prefixes
            rows = []
            for t in range(x.shape[1]):
                S = anp.einsum("bjp,bjq->bpq", K[:, :t + 1], v[:, :t + 1])
                z = anp.sum(K[:, :t + 1], axis=1)
                num = anp.einsum("bp,bpq->bq", Q[:, t], S)
                rows.append(num / anp.sum(Q[:, t] * z, axis=-1, keepdims=True))
            heads.append(anp.stack(rows, axis=1))
    return _lin(anp.concatenate(heads, axis=-1), P, "o")


def ref_class_attention(x, P, h, pre=""):
    """CLS (row 0) is the only query; keys and values over all 1+N rows; one head at a time.
    P[pre + "W_q"], "b_q", "W_kv" ([k | v]), "b_kv", "W_o", "b_o" (biases optional)."""
    P = {k[len(pre):]: v for k, v in P.items() if k.startswith(pre)} if pre else P
    Cx = x.shape[-1]
    p = Cx // h
    q = _lin(x[:, 0:1], P, "q")                                    # (B, 1, C)
    kv = _lin(x, P, "kv")                                          # (B, M, 2C)
    heads = []
    for i in range(h):
        qi = q[:, 0, i * p:(i + 1) * p]                            # (B, p)
        k = kv[:, :, i * p:(i + 1) * p]
        v = kv[:, :, Cx + i * p:Cx + (i + 1) * p]
        a = ref_softmax(anp.einsum("bp,bjp->bj", qi, k) / math.sqrt(p), axis=-1)
        heads.append(anp.einsum("bj,bjp->bp", a, v)[:, None, :])
    return _lin(anp.concatenate(heads, axis=-1), P, "o")


# ---------------------------------------------------------------------------------------------
# TSSA
# ---------------------------------------------------------------------------------------------
def ref_tssa(x, P, h, causal=False, pre=""):
    """The TSSA layer in the (B, h, N, p) layout (eq-layer-w .. eq-layer-out; causal:
    eq-causal-pi, eq-causal-out), keys P[pre + "W_u"], "b_u" (opt), "temp", "W_o", "b_o" (opt),
    "denom_bias" (causal). Non-causal: explicit L2 normalisation along the token axis."""
    B, T, C = x.shape
    p = C // h
    w = anp.dot(x, P[pre + "W_u"])
    if pre + "b_u" in P:
        w = w + P[pre + "b_u"]
    w = anp.transpose(anp.reshape(w, (B, T, h, p)), (0, 2, 1, 3))            # (B, h, T, p)
    if causal:
        S1 = anp.maximum(anp.cumsum(w ** 2, axis=2), 1e-12)
        logits = anp.sum(w ** 2 / S1 + P[pre + "denom_bias"][None, :, :T, :], axis=-1)
    else:
        wn = w / anp.maximum(anp.sqrt(anp.sum(w ** 2, axis=2, keepdims=True)), 1e-12)
        logits = anp.sum(wn ** 2, axis=-1)
    Pi = ref_softmax(logits * P[pre + "temp"], axis=1)                     # (B, h, T) over heads
    if causal:
        m = anp.cumsum(Pi[..., None] * w ** 2, axis=2) / (anp.cumsum(Pi, axis=2)[..., None] + 1e-8)
    else:
        dots = Pi / (anp.sum(Pi, axis=-1, keepdims=True) + 1e-8)
        m = anp.einsum("bhn,bhnp->bhp", dots, w ** 2)[:, :, None, :]       # raw w
    out = -w * Pi[..., None] / (1.0 + m)
    out = anp.reshape(anp.transpose(out, (0, 2, 1, 3)), (B, T, C))
    y = anp.dot(out, P[pre + "W_o"])
    return y + P[pre + "b_o"] if pre + "b_o" in P else y
