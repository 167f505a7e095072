"""The readable float64 references ("oracles") that tostnp is checked against, and the one
relative-error measure.

Each reference is the book's formula written plainly -- loops over groups, directions, heads and
tokens, explicit eigenvalues (``numpy.linalg.eigvalsh``), and ``autograd.numpy`` where autograd
must differentiate it -- in float64, on one sample (no batch axis unless said). None of it
imports tostnp: a reference shares no code with what it checks. Used by
:mod:`tostnp.analysis.verify` (``python3 run.py verify``) and by the tests (``tests/references.py``
adds the gradient harness around these).

    error measure            rel_err
    the objective (ch. 2-5)  coding_rate, compression, coding_rate_ad, variational_compression,
                             variational_compression_ad, membership
    layers (ch. 6-9)         layer_norm, gelu, gelu_erf, mlp, softmax, cross_entropy,
                             softmax_attention, linear_attention, class_attention, tssa,
                             tssa_parts (the output and the memberships Pi)
"""
from __future__ import annotations

import math

import autograd.numpy as anp
import numpy as np

__all__ = ["rel_err", "coding_rate", "compression", "coding_rate_ad", "variational_compression",
           "variational_compression_ad", "membership", "layer_norm", "gelu", "gelu_erf", "mlp",
           "softmax", "cross_entropy", "softmax_attention", "linear_attention",
           "class_attention", "tssa", "tssa_parts"]


# ---------------------------------------------------------------------------------------------
# the error measure
# ---------------------------------------------------------------------------------------------
def rel_err(a, ref) -> float:
    """max |a - ref| / max |ref| in float64: the error relative to the reference's largest
    magnitude (0 for empty arrays; shapes must match)."""
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert a.shape == ref.shape, (a.shape, ref.shape)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - ref)) / max(float(np.max(np.abs(ref))), 1e-300))


# ---------------------------------------------------------------------------------------------
# the objective: Z (n, d), Pi (n, K), U (K, d, p), one sample
# ---------------------------------------------------------------------------------------------
def coding_rate(Z, eps):
    """R(Z) = 1/2 sum_i log(1 + d/(n eps^2) lambda_i), lambda the eigenvalues of Z^T Z (eq-R)."""
    n, d = Z.shape
    lam = np.linalg.eigvalsh(Z.T @ Z)                                       # (d,)
    return 0.5 * sum(np.log(1.0 + d / (n * eps**2) * max(l, 0.0)) for l in lam)


def _groups(Pi):
    """(k, n_k) for every group k of weight n_k = sum_j Pi_jk > 0 (empty groups add nothing)."""
    for k in range(Pi.shape[1]):
        n_k = sum(Pi[j, k] for j in range(Pi.shape[0]))
        if n_k != 0:
            yield k, n_k


def compression(Z, Pi, eps):
    """R_c(Z, Pi): the coding rate of each group's weighted covariance, one group at a time."""
    n, d = Z.shape
    total = 0.0
    for k, n_k in _groups(Pi):
        cov = sum(Pi[j, k] * np.outer(Z[j], Z[j]) for j in range(n))       # (d, d)
        lam = np.linalg.eigvalsh(cov)
        total += (n_k / n) * sum(np.log(1.0 + d / (n_k * eps**2) * max(l, 0.0)) for l in lam)
    return 0.5 * total


def coding_rate_ad(Z, eps):
    """R(Z) by a log-determinant, in autograd.numpy (to be differentiated by autograd)."""
    n, d = Z.shape
    return 0.5 * anp.linalg.slogdet(anp.eye(d) + d / (n * eps**2) * anp.dot(Z.T, Z))[1]


def variational_compression(Z, Pi, U, eps):
    """R^var_c(Z, Pi | U) with loops over groups, directions and tokens (empty groups add 0)."""
    n, d = Z.shape
    total = 0.0
    for k, n_k in _groups(Pi):
        for i in range(U.shape[2]):
            stat = sum(Pi[j, k] * (Z[j] @ U[k, :, i]) ** 2 for j in range(n)) / n_k
            total += (n_k / n) * np.log(1.0 + d / eps**2 * stat)
    return 0.5 * total


def variational_compression_ad(Z, Pi, U, eps):
    """The same R^var_c in autograd.numpy, a loop over groups (to be differentiated)."""
    n, d = Z.shape
    total = 0.0
    for k in range(U.shape[0]):
        n_k = anp.sum(Pi[:, k])
        stat = anp.sum(Pi[:, k:k + 1] * anp.dot(Z, U[k]) ** 2, axis=0) / n_k   # (p,)
        total = total + (n_k / n) * anp.sum(anp.log(1.0 + d / eps**2 * stat))
    return 0.5 * total


def membership(Z, U, eta):
    """Pi_jk = softmax_k ||U_k^T z_j||^2 / (2 eta), token by token."""
    n, K = Z.shape[0], U.shape[0]
    Pi = np.zeros((n, K))
    for j in range(n):
        logits = [np.sum((U[k].T @ Z[j]) ** 2) / (2 * eta) for k in range(K)]
        e = [np.exp(v - max(logits)) for v in logits]
        Pi[j] = np.array(e) / sum(e)
    return Pi


# ---------------------------------------------------------------------------------------------
# layers, in autograd.numpy (tokens are rows: x (B, N, C))
# ---------------------------------------------------------------------------------------------
def layer_norm(x, gamma, beta, eps):
    mu = anp.mean(x, axis=-1, keepdims=True)
    var = anp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / anp.sqrt(var + eps) * gamma + beta


def gelu(x):
    """GELU, tanh form."""
    return 0.5 * x * (1.0 + anp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    """GELU, exact form x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)) (autograd's erf, from SciPy)."""
    import autograd.scipy.special as asp
    return 0.5 * x * (1.0 + asp.erf(x / np.sqrt(2.0)))


def mlp(x, P, pre=""):
    """Linear -> GELU (tanh) -> Linear with P[pre + "W1"], "b1" (opt), "W2", "b2" (opt)."""
    h = anp.dot(x, P[pre + "W1"])
    if pre + "b1" in P:
        h = h + P[pre + "b1"]
    y = anp.dot(gelu(h), P[pre + "W2"])
    return y + P[pre + "b2"] if pre + "b2" in P else y


def softmax(z, axis):
    z = z - anp.max(z, axis=axis, keepdims=True)
    e = anp.exp(z)
    return e / anp.sum(e, axis=axis, keepdims=True)


def cross_entropy(logits, targets, ignore_index=None):
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


def _lin(x, P, name):
    y = anp.dot(x, P["W_" + name])
    return y + P["b_" + name] if "b_" + name in P else y


def softmax_attention(x, P, h, causal):
    """Multi-head softmax attention, one head at a time; P "W_qkv", "b_qkv", "W_o", "b_o"."""
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


def linear_attention(x, P, h, causal):
    """Linear attention with phi = elu + 1; causal: a naive loop over prefixes."""
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
        else:
            rows = []
            for t in range(x.shape[1]):
                S = anp.einsum("bjp,bjq->bpq", K[:, :t + 1], v[:, :t + 1])
                z = anp.sum(K[:, :t + 1], axis=1)
                num = anp.einsum("bp,bpq->bq", Q[:, t], S)
                rows.append(num / anp.sum(Q[:, t] * z, axis=-1, keepdims=True))
            heads.append(anp.stack(rows, axis=1))
    return _lin(anp.concatenate(heads, axis=-1), P, "o")


def class_attention(x, P, h, pre=""):
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
        a = softmax(anp.einsum("bp,bjp->bj", qi, k) / math.sqrt(p), axis=-1)
        heads.append(anp.einsum("bj,bjp->bp", a, v)[:, None, :])
    return _lin(anp.concatenate(heads, axis=-1), P, "o")


def tssa(x, P, h, causal=False, pre=""):
    """The TSSA layer's output y (B, N, C): :func:`tssa_parts`' first part."""
    return tssa_parts(x, P, h, causal, pre)[0]


def tssa_parts(x, P, h, causal=False, pre=""):
    """The TSSA layer in the (B, h, N, p) layout (eq-layer-w .. eq-layer-out; causal:
    eq-causal-pi, eq-causal-out), keys P[pre + "W_u"], "b_u" (opt), "temp", "W_o", "b_o" (opt),
    "denom_bias" (causal). Non-causal: explicit L2 normalisation along the token axis.
    Returns (y (B, N, C), Pi (B, h, N): each token's memberships over the heads)."""
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
    Pi = softmax(logits * P[pre + "temp"], axis=1)                         # (B, h, T) over heads
    if causal:
        m = anp.cumsum(Pi[..., None] * w ** 2, axis=2) / (anp.cumsum(Pi, axis=2)[..., None] + 1e-8)
    else:
        dots = Pi / (anp.sum(Pi, axis=-1, keepdims=True) + 1e-8)
        m = anp.einsum("bhn,bhnp->bhp", dots, w ** 2)[:, :, None, :]       # raw w
    out = -w * Pi[..., None] / (1.0 + m)
    out = anp.reshape(anp.transpose(out, (0, 2, 1, 3)), (B, T, C))
    y = anp.dot(out, P[pre + "W_o"])
    return (y + P[pre + "b_o"] if pre + "b_o" in P else y), Pi
