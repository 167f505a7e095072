"""Reference solutions of exercises/07_backprop_tssa.md, one section per cell tagged ex-<name>."""
# %% ex-numerical_gradient
import numpy as np


def numerical_gradient_mine(f, x, delta=1e-5):
    """Centred differences (error O(delta^2)); x is restored entry by entry."""
    g = np.zeros_like(x, dtype=float)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + delta
        fp = f(x)
        x[i] = old - delta
        fm = f(x)
        x[i] = old
        g[i] = (fp - fm) / (2 * delta)
    return g


# %% ex-softmax_heads_backward
import numpy as np


def softmax_heads_backward_mine(dPi, Pi):
    """dl = Pi * (dPi - sum_k Pi dPi): the Jacobian diag(Pi) - Pi Pi^T applied to dPi."""
    return Pi * (dPi - np.sum(Pi * dPi, axis=-1, keepdims=True))


# %% ex-token_norm_backward
import numpy as np


def token_norm_backward_mine(dq, w, num_heads):
    """q_nk = sum_{c in k} w_nc^2 / S_c, S_c = sum_n w_nc^2.
    dw = 2 w (dq_{n,k(c)} / S_c - sum_n' dq_{n',k(c)} w_n'c^2 / S_c^2)."""
    B, N, C = w.shape
    h, p = num_heads, C // num_heads
    S = np.sum(w**2, axis=1, keepdims=True)                  # (B, 1, C)
    dqc = np.repeat(dq, p, axis=-1)                          # (B, N, C): dq of each coord's head
    dS = -np.sum(dqc * w**2, axis=1, keepdims=True) / S**2   # (B, 1, C)
    return 2 * w * (dqc / S + dS)


# %% ex-tssa_backward
import numpy as np


def tssa_backward_mine(dy, x, params, num_heads):
    """Backward of the non-causal TSSA layer through named intermediates."""
    B, N, C = x.shape
    h, p = num_heads, C // num_heads
    W_u, W_o, temp = params["W_u"], params["W_o"], params["temp"]
    # forward
    w = x @ W_u + params.get("b_u", 0.0)                                  # (B, N, C)
    S = np.maximum(np.sum(w**2, axis=1, keepdims=True), 1e-24)            # (B, 1, C)
    q = (w**2 / S).reshape(B, N, h, p).sum(-1)                            # (B, N, h)
    l = q * temp[:, 0]
    e = np.exp(l - l.max(-1, keepdims=True))
    Pi = e / e.sum(-1, keepdims=True)                                     # (B, N, h)
    wh = w.reshape(B, N, h, p)
    D = Pi.sum(1) + 1e-8                                                  # (B, h)
    S2 = np.einsum("bnk,bnki->bki", Pi, wh**2)                            # (B, h, p)
    m = S2 / D[..., None]                                                 # (B, h, p)
    r = 1.0 / (1.0 + m)                                                   # (B, h, p)
    out = -wh * Pi[..., None] * r[:, None]                                # (B, N, h, p)
    # backward
    grads = {}
    dy2 = dy.reshape(-1, C)
    if "b_o" in params:
        grads["b_o"] = dy2.sum(0)
    grads["W_o"] = out.reshape(-1, C).T @ dy2
    dout = (dy @ W_o.T).reshape(B, N, h, p)
    dr = np.sum(dout * (-wh * Pi[..., None]), axis=1)                     # (B, h, p)
    dm = -dr * r**2
    dS2 = dm / D[..., None]
    dD = -np.sum(dm * S2, axis=-1) / D**2                                 # (B, h)
    dwh = dout * (-Pi[..., None] * r[:, None]) + 2 * wh * Pi[..., None] * dS2[:, None]
    dPi = np.sum(dout * (-wh * r[:, None]), -1) + np.einsum("bnki,bki->bnk", wh**2, dS2) \
        + dD[:, None, :]                                                  # (B, N, h): 3 uses
    dl = softmax_heads_backward_mine(dPi, Pi)
    grads["temp"] = np.sum(dl * q, axis=(0, 1))[:, None]
    dw = dwh.reshape(B, N, C) + token_norm_backward_mine(dl * temp[:, 0], w, h)
    grads["W_u"] = x.reshape(-1, C).T @ dw.reshape(-1, C)
    if "b_u" in params:
        grads["b_u"] = dw.reshape(-1, C).sum(0)
    return dw @ W_u.T, grads
