"""The NumPy fast path: the hot elementwise chains of training, with fewer passes over memory.

The plain array-API code in :mod:`tostnp.nn` and :mod:`tostnp.optim` is the specification; every
function here computes the same quantity for NumPy arrays and is chosen by
:func:`tostnp.backend.fused` only (CuPy and ``array_api_strict`` run the plain code). The plain
forms write one fresh temporary per operator (``0.5 * x * (1.0 + t)`` is three passes and three
new arrays); here each chain runs in place in one or two buffers the function owns, with
``out=`` arguments, and reductions that would need a temporary become matrix-vector products.
``tests/test_fused.py`` checks each against the plain path on random shapes in float32 and
float64.

Why plain NumPy and not a fused-expression library: numexpr (2.14, the usual choice) was
measured against these in-place forms on the LM's MLP shape and lost (its tanh and exp are
scalar libm calls, NumPy's exp is vectorised, and its per-block interpreter costs more than an
in-place NumPy pass over arrays that sit in cache).

Shapes: ``(..., C)`` arrays with the statistics over the last axis, as in :mod:`tostnp.nn.layers`.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["gelu_tanh_forward", "gelu_tanh_backward", "layer_norm_forward",
           "layer_norm_backward", "adamw_update"]

_GELU_A = math.sqrt(2.0 / math.pi)
_GELU_B = 0.044715


# ---------------------------------------------------------------------------------------------
# GELU, tanh form, through the sigmoid: 0.5 (1 + tanh(u)) = 1 / (1 + exp(-2u))
# ---------------------------------------------------------------------------------------------
def gelu_tanh_forward(x):
    """y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as y = x s with
    s = sigmoid(2u) = 1 / (1 + exp(-2u)) (NumPy's exp is vectorised, its tanh is not).

    x: (...) -> (y (...), s (...)); s is what the backward needs. exp overflows to inf for
    very negative x, where s = 1 / inf = 0 is the correct limit (no NaN).
    """
    s = np.multiply(x, x)                                          # x^2
    s *= _GELU_B
    s += 1.0
    s *= x                                                         # x + b x^3
    s *= -2.0 * _GELU_A                                            # -2u
    with np.errstate(over="ignore"):
        np.exp(s, out=s)
    s += 1.0
    np.reciprocal(s, out=s)                                        # s = sigmoid(2u)
    return np.multiply(x, s), s


def gelu_tanh_backward(dy, x, s):
    """dx = dy * dy/dx with dy/dx = s (1 + 2 sqrt(2/pi) x (1 - s) (1 + 3 * 0.044715 x^2)).

    (The tanh form's 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3b x^2) with t = 2s - 1.)
    """
    g = np.multiply(x, x)
    g *= 3.0 * _GELU_B
    g += 1.0
    g *= x
    g *= 2.0 * _GELU_A                                             # 2a x (1 + 3b x^2)
    one_minus_s = np.subtract(1.0, s, dtype=s.dtype)
    g *= one_minus_s
    g += 1.0
    g *= s
    g *= dy
    return g


# ---------------------------------------------------------------------------------------------
# LayerNorm over the last axis
# ---------------------------------------------------------------------------------------------
def layer_norm_forward(x, gamma, beta, eps: float):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta (beta None: no shift) -> (y, xhat, rstd).

    x: (..., C); the variance is a row-wise dot product (no squared temporary).
    """
    C = x.shape[-1]
    mu = np.mean(x, axis=-1, keepdims=True)                        # (..., 1)
    xhat = np.subtract(x, mu)                                      # (..., C) x - mu
    var = np.vecdot(xhat, xhat)[..., None]                         # (..., 1) C * var
    var *= 1.0 / C
    var += eps
    rstd = np.sqrt(var, out=var)
    np.reciprocal(rstd, out=rstd)                                  # (..., 1)
    xhat *= rstd
    y = np.multiply(xhat, gamma)
    if beta is not None:
        y += beta
    return y, xhat, rstd


def layer_norm_backward(dy, xhat, rstd, gamma, has_beta: bool = True):
    """dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma -> (dx, dgamma, dbeta);
    dbeta is None when ``has_beta`` is False.

    The two row means are matrix-vector products with gamma (mean(g) = dy @ gamma / C and
    mean(g xhat) = (dy xhat) @ gamma / C), so only dy * xhat and dx are written.
    """
    C = dy.shape[-1]
    dy2 = dy.reshape(-1, C)                                        # (M, C)
    p = np.multiply(dy2, xhat.reshape(-1, C))                      # (M, C) dy xhat
    dgamma = np.sum(p, axis=0)                                     # (C,)
    dbeta = np.sum(dy2, axis=0) if has_beta else None              # (C,)
    a = (dy2 @ gamma)[:, None]                                     # (M, 1) C mean(g)
    b = (p @ gamma)[:, None]                                       # (M, 1) C mean(g xhat)
    a *= 1.0 / C
    b *= 1.0 / C
    p2 = p.reshape(-1, C)
    np.multiply(xhat.reshape(-1, C), b, out=p2)                    # xhat mean(g xhat)
    dx = np.multiply(dy2, gamma)                                   # g
    dx -= a
    dx -= p2
    dx *= rstd.reshape(-1, 1)
    return dx.reshape(dy.shape), dgamma, dbeta


# ---------------------------------------------------------------------------------------------
# AdamW (tostnp.optim.AdamW.step), one parameter
# ---------------------------------------------------------------------------------------------
def adamw_update(p, g, m, v, *, b1: float, b2: float, lr: float, wd: float, eps: float,
                 bc1: float, bc2: float, out=None):
    """m, v updated in place (they belong to the optimizer); returns the new parameter.

    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
    new = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps), written into ``out``
    (a buffer the optimizer owns, or a fresh array when None); ``p`` is not modified.
    """
    m *= b1
    tmp = np.multiply(g, 1.0 - b1, dtype=g.dtype)
    m += tmp
    np.multiply(g, g, out=tmp)
    tmp *= 1.0 - b2
    v *= b2
    v += tmp
    np.sqrt(v, out=tmp)
    tmp *= 1.0 / math.sqrt(bc2)
    tmp += eps
    np.divide(m, tmp, out=tmp)                                     # mhat-ish / (sqrt(vhat) + eps)
    tmp *= lr / bc1
    new = np.multiply(p, 1.0 - lr * wd, out=out, dtype=p.dtype)
    new -= tmp
    return new
