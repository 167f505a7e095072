"""Reference solutions of exercises/10_causal_language.md, one section per cell tagged ex-<name>."""
# %% ex-prefix_statistics
import numpy as np


def prefix_statistics_mine(w, Pi, num_heads):
    """Running sums along the token axis (axis 1)."""
    p = w.shape[-1] // num_heads
    sq = w**2
    return (np.cumsum(sq, axis=1), np.cumsum(np.repeat(Pi, p, axis=-1) * sq, axis=1),
            np.cumsum(Pi, axis=1))


# %% ex-causal_tssa_forward
import numpy as np


def causal_tssa_forward_mine(x, params, num_heads):
    """Prefix sums for every statistic; denom_bias inside the head's sum of p terms."""
    B, T, C = x.shape
    h, p = num_heads, C // num_heads
    w = x @ params["W_u"] + params.get("b_u", 0.0)                          # (B, T, C)
    S1 = np.maximum(np.cumsum(w**2, axis=1), 1e-12)
    q = (w**2 / S1).reshape(B, T, h, p).sum(-1) + p * params["denom_bias"][:, :T, 0].T
    l = q * params["temp"][:, 0]
    e = np.exp(l - l.max(-1, keepdims=True))
    Pi = e / e.sum(-1, keepdims=True)                                       # (B, T, h)
    _, S2, S3 = prefix_statistics_mine(w, Pi, h)
    m = S2 / (np.repeat(S3, p, axis=-1) + 1e-8)                             # (B, T, C)
    out = -w * np.repeat(Pi, p, axis=-1) / (1 + m)
    return out @ params["W_o"] + params.get("b_o", 0.0)


# %% ex-decode_step
import numpy as np


def decode_step_mine(state, x_t, params, num_heads, t):
    """Add token t to the statistics first (it sees itself), then compute its output."""
    B, C = x_t.shape
    h, p = num_heads, C // num_heads
    w = x_t @ params["W_u"] + params.get("b_u", 0.0)                        # (B, C)
    S1 = state["S1"] + w**2
    q = (w**2 / np.maximum(S1, 1e-12)).reshape(B, h, p).sum(-1) + p * params["denom_bias"][:, t, 0]
    l = q * params["temp"][:, 0]
    e = np.exp(l - l.max(-1, keepdims=True))
    Pi = e / e.sum(-1, keepdims=True)                                       # (B, h)
    Pic = np.repeat(Pi, p, axis=-1)                                         # (B, C)
    S2 = state["S2"] + Pic * w**2
    S3 = state["S3"] + Pi
    m = S2 / (np.repeat(S3, p, axis=-1) + 1e-8)
    y = (-w * Pic / (1 + m)) @ params["W_o"] + params.get("b_o", 0.0)
    return y, {"S1": S1, "S2": S2, "S3": S3, "t": t + 1}
