"""Reference solutions of exercises/08_tost_block.md, one section per cell tagged ex-<name>."""
# %% ex-layer_norm
import numpy as np


def layer_norm_mine(x, gamma, beta, eps):
    """x (..., C) -> (..., C)."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)          # biased
    return (x - mu) / np.sqrt(var + eps) * gamma + beta


# %% ex-layer_norm_backward
import numpy as np


def layer_norm_backward_mine(dy, x, gamma, beta, eps):
    """With xhat = (x - mu) rstd and g = dy gamma: dx = rstd (g - mean(g) - xhat mean(g xhat))."""
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    g = dy * gamma
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    C = x.shape[-1]
    return dx, (dy * xhat).reshape(-1, C).sum(0), dy.reshape(-1, C).sum(0)


# %% ex-tost_block
import numpy as np
import tostnp.nn as nn


def tost_block_mine(x, params, num_heads):
    """Pre-norm, TSSA, LayerScale, residual; pre-norm, MLP (tanh GELU), LayerScale, residual."""
    P = params
    tssa = {k[5:]: v for k, v in P.items() if k.startswith("tssa.")}
    a = layer_norm_mine(x, P["ln1.gamma"], P["ln1.beta"], 1e-6)
    x1 = x + P["ls1.gamma"] * nn.tssa_forward(a, tssa, num_heads)[0]
    b = layer_norm_mine(x1, P["ln2.gamma"], P["ln2.beta"], 1e-6)
    u = b @ P["mlp.W1"] + P["mlp.b1"]
    act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))
    return x1 + P["ls2.gamma"] * (act @ P["mlp.W2"] + P["mlp.b2"])
