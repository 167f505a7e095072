"""Independent references for the checkers: written plainly (loops over groups, heads and
tokens, eigenvalues, autograd), in float64, separately from the ``tostnp`` code the exercises
ask students to rewrite. The differentiable ones use ``autograd.numpy`` so that gradients come
from autograd, not from a hand derivation.

Nothing here is imported by the rest of the package.
"""
from __future__ import annotations

import math

import autograd
import autograd.numpy as anp
import numpy as np


# ---------------------------------------------------------------------------------------------
# the coding rate (book chapter 2), by eigenvalues
# ---------------------------------------------------------------------------------------------
def coding_rate(Z, eps):
    """R(Z) = 1/2 sum_i log(1 + d/(n eps^2) lambda_i), lambda the eigenvalues of the smaller of
    Z^T Z and Z Z^T (the squared singular values of Z)."""
    n, d = Z.shape
    lam = np.clip(np.linalg.eigvalsh(Z @ Z.T if n < d else Z.T @ Z), 0.0, None)
    return 0.5 * float(np.sum(np.log1p(d / (n * eps**2) * lam)))


def compression(Z, Pi, eps):
    """R_c(Z, Pi) from the eigenvalues of each group's weighted Gram matrix, one group at a time."""
    n, d = Z.shape
    total = 0.0
    for k in range(Pi.shape[1]):
        n_k = float(np.sum(Pi[:, k]))
        if n_k <= 0:
            continue
        M = Z.T @ (Pi[:, k:k + 1] * Z)                                  # (d, d) sum_j Pi_jk z_j z_j^T
        lam = np.clip(np.linalg.eigvalsh(M), 0.0, None)
        total += 0.5 * n_k / n * float(np.sum(np.log1p(d / (n_k * eps**2) * lam)))
    return total


def coding_rate_ad(Z, eps):
    """R(Z) written for autograd (log det by slogdet), used only to differentiate."""
    n, d = Z.shape
    return 0.5 * anp.linalg.slogdet(anp.eye(d) + d / (n * eps**2) * anp.dot(Z.T, Z))[1]


def coding_rate_grad(Z, eps):
    return autograd.grad(coding_rate_ad)(Z, eps)


def max_coding_rate(n, d, eps, frob2):
    """The largest R(Z) over Z (n, d) with ||Z||_F^2 = frob2 (equal singular values, n >= d)."""
    return 0.5 * d * math.log1p(d / (n * eps**2) * frob2 / d)


# ---------------------------------------------------------------------------------------------
# the variational form (chapters 4-5), by loops
# ---------------------------------------------------------------------------------------------
def variational_compression_ad(Z, Pi, U, eps):
    """R^var_c(Z, Pi | U) with explicit loops over groups and directions (autograd-friendly)."""
    n, d = Z.shape
    total = 0.0
    for k in range(U.shape[0]):
        n_k = anp.sum(Pi[:, k])
        for i in range(U.shape[2]):
            proj = anp.dot(Z, U[k][:, i])                                 # (n,)
            s = anp.sum(Pi[:, k] * proj**2) / n_k
            total = total + 0.5 * n_k / n * anp.log(1.0 + d / eps**2 * s)
    return total


def variational_compression(Z, Pi, U, eps):
    return float(variational_compression_ad(Z, Pi, U, eps))


def variational_compression_grad(Z, Pi, U, eps):
    return autograd.grad(variational_compression_ad)(Z, Pi, U, eps)


def membership(Z, U, eta):
    """Pi_jk = exp(||U_k^T z_j||^2 / (2 eta)) / sum_l exp(...), token by token."""
    n, K = Z.shape[0], U.shape[0]
    Pi = np.zeros((n, K))
    for j in range(n):
        logits = np.array([np.sum((U[k].T @ Z[j]) ** 2) / (2 * eta) for k in range(K)])
        e = np.exp(logits - logits.max())
        Pi[j] = e / e.sum()
    return Pi


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
