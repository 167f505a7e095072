"""Independent references for the checkers: written plainly (loops over groups, heads and
tokens, eigenvalues, autograd), in float64, separately from the ``tostnp`` code the exercises
ask students to rewrite. The differentiable ones use ``autograd.numpy`` so that gradients come
from autograd, not from a hand derivation.

The objective's references are those of :mod:`tostnp.analysis.oracle` (one home for each);
nothing here is imported by the rest of the package.
"""
from __future__ import annotations

import math

import autograd
import autograd.numpy as anp
import numpy as np

# the plain float64 references shared with `verify` and the tests (one home for each)
from ..analysis.oracle import (coding_rate, compression, coding_rate_ad, membership,  # noqa: F401
                               variational_compression, variational_compression_ad)


# ---------------------------------------------------------------------------------------------
# the coding rate (book chapter 2): its gradient by autograd, its largest value
# ---------------------------------------------------------------------------------------------
def coding_rate_grad(Z, eps):
    return autograd.grad(coding_rate_ad)(Z, eps)


def max_coding_rate(n, d, eps, frob2):
    """The largest R(Z) over Z (n, d) with ||Z||_F^2 = frob2 (equal singular values, n >= d)."""
    return 0.5 * d * math.log1p(d / (n * eps**2) * frob2 / d)


# ---------------------------------------------------------------------------------------------
# the variational form (chapters 4-5): its gradient by autograd
# ---------------------------------------------------------------------------------------------
def variational_compression_grad(Z, Pi, U, eps):
    return autograd.grad(variational_compression_ad)(Z, Pi, U, eps)


# ---------------------------------------------------------------------------------------------
# the TSSA layer (chapter 6), head by head, written for autograd
# ---------------------------------------------------------------------------------------------
def _softmax_rows(l):
    e = anp.exp(l - anp.max(l, axis=-1, keepdims=True))
    return e / anp.sum(e, axis=-1, keepdims=True)


def tssa_parts(x, params, h, causal=False):
    """TSSA forward for one layer, looping over the batch and the heads (and, when ``causal``,
    over the tokens: token t sees tokens 0..t only). Returns (y (B, N, C), Pi (B, h, N)).

    Non-causal: m = sum_n Pi w^2 / (sum_n Pi + 1e-8), the logits normalise each coordinate by
    max(||w_.c||, 1e-12). Causal: prefix sums, the S1 clamp at 1e-12 and denom_bias.
    """
    B, N, C = x.shape
    p = C // h
    ys, Pis = [], []
    for b in range(B):
        w = anp.dot(x[b], params["W_u"]) + params.get("b_u", 0.0)             # (N, C)
        if not causal:
            norm = anp.sqrt(anp.sum(w**2, axis=0))                             # (C,)
            norm = anp.where(norm > 1e-12, norm, 1e-12)
            logit = anp.stack([anp.sum((w[:, k * p:(k + 1) * p] / norm[k * p:(k + 1) * p]) ** 2,
                                       axis=1) for k in range(h)], axis=1)    # (N, h)
            Pi = _softmax_rows(logit * params["temp"][:, 0])                   # (N, h)
            outs = []
            for k in range(h):
                wk = w[:, k * p:(k + 1) * p]                                   # (N, p)
                m = anp.dot(Pi[:, k], wk**2) / (anp.sum(Pi[:, k]) + 1e-8)      # (p,)
                outs.append(-wk * Pi[:, k:k + 1] / (1.0 + m))
            out = anp.concatenate(outs, axis=1)                                # (N, C)
        else:
            rows, Pi_rows = [], []
            for t in range(N):
                wt = w[:t + 1]                                                 # (t+1, C)
                S1 = anp.sum(wt**2, axis=0)
                S1 = anp.where(S1 > 1e-12, S1, 1e-12)
                q = anp.stack([anp.sum(w[t, k * p:(k + 1) * p] ** 2 / S1[k * p:(k + 1) * p])
                               + p * params["denom_bias"][k, t, 0] for k in range(h)])
                Pi_rows.append(_softmax_rows(q * params["temp"][:, 0]))
                Pit = anp.stack(Pi_rows)                                       # (t+1, h)
                row = []
                for k in range(h):
                    wk = wt[:, k * p:(k + 1) * p]
                    m = anp.dot(Pit[:, k], wk**2) / (anp.sum(Pit[:, k]) + 1e-8)
                    row.append(-w[t, k * p:(k + 1) * p] * Pit[t, k] / (1.0 + m))
                rows.append(anp.concatenate(row))
            out = anp.stack(rows)
            Pi = anp.stack(Pi_rows)
        ys.append(anp.dot(out, params["W_o"]) + params.get("b_o", 0.0))
        Pis.append(Pi.T)
    return anp.stack(ys), anp.stack(Pis)


def tssa_forward(x, params, h, causal=False):
    y, Pi = tssa_parts(x, params, h, causal)
    return np.asarray(y), np.asarray(Pi)


def tssa_backward(dy, x, params, h, causal=False):
    """(dx, grads) of sum(dy * y) by autograd through :func:`tssa_parts`."""
    keys = sorted(params)

    def loss(x, *vals):
        return anp.sum(dy * tssa_parts(x, dict(zip(keys, vals)), h, causal)[0])

    g = autograd.grad(loss, tuple(range(len(keys) + 1)))(x, *[params[k] for k in keys])
    return g[0], dict(zip(keys, g[1:]))


def tssa_params(rng, C, h, *, std=0.4, causal=False, max_len=None, bias=True):
    """Random float64 TSSA parameters in the layout of tostnp.nn.tssa_forward, away from the
    symmetric init (temperatures and biases not 1 and 0)."""
    params = {"W_u": std * rng.standard_normal((C, C)),
              "temp": rng.uniform(0.5, 2.0, size=(h, 1)),
              "W_o": std * rng.standard_normal((C, C))}
    if bias:
        params["b_u"] = 0.1 * rng.standard_normal(C)
        params["b_o"] = 0.1 * rng.standard_normal(C)
    if causal:
        params["denom_bias"] = 0.1 * rng.standard_normal((h, max_len, 1))
    return params


# ---------------------------------------------------------------------------------------------
# finite differences (chapter 7)
# ---------------------------------------------------------------------------------------------
def numerical_gradient(f, x, delta=1e-5):
    """Centred differences of the scalar f at x, entry by entry (x is perturbed and restored)."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + delta
        fp = f(x)
        x[i] = old - delta
        fm = f(x)
        x[i] = old
        g[i] = (fp - fm) / (2 * delta)
    return g


def softmax_attention(Q, K, V):
    """softmax(Q K^T / sqrt(d)) V, row by row."""
    N, d = Q.shape
    out = np.zeros((N, V.shape[1]))
    for i in range(N):
        s = np.array([Q[i] @ K[j] for j in range(K.shape[0])]) / math.sqrt(d)
        a = np.exp(s - s.max())
        out[i] = (a / a.sum()) @ V
    return out
