"""Independent references for the checkers: written plainly (loops over groups, heads and
tokens, eigenvalues, autograd), in float64, separately from the ``tostnp`` code the exercises
ask students to rewrite. The differentiable ones use ``autograd.numpy`` so that gradients come
from autograd, not from a hand derivation.

The objective's and the TSSA layer's references are those of :mod:`tostnp.analysis.oracle`
(one home for each; it imports nothing of tostnp); nothing here is imported by the rest of the
package.
"""
from __future__ import annotations

import math

import autograd
import autograd.numpy as anp
import numpy as np

# the plain float64 references shared with `verify` and the tests (one home for each)
from ..analysis.oracle import (coding_rate, compression, coding_rate_ad, membership,  # noqa: F401
                               variational_compression, variational_compression_ad, tssa_parts)


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
# the TSSA layer (chapter 6): the oracle's, written for autograd (tssa_parts: y and Pi)
# ---------------------------------------------------------------------------------------------
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
