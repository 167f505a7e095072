"""Reference solutions of exercises/06_tssa_layer.md, one section per cell tagged ex-<name>."""
# %% ex-tssa_memberships
import numpy as np


def tssa_memberships_mine(w, temp, num_heads):
    """w (B, N, C), temp (h, 1) -> Pi (B, h, N)."""
    B, N, C = w.shape
    h, p = num_heads, C // num_heads
    norms = np.maximum(np.sqrt(np.sum(w**2, axis=1, keepdims=True)), 1e-12)   # (B, 1, C) tokens
    q = ((w / norms) ** 2).reshape(B, N, h, p).sum(axis=-1) * temp[:, 0]      # (B, N, h)
    e = np.exp(q - q.max(axis=-1, keepdims=True))
    Pi = e / e.sum(axis=-1, keepdims=True)                                    # softmax over heads
    return np.transpose(Pi, (0, 2, 1))                                        # (B, h, N)


# %% ex-tssa_forward
import numpy as np


def tssa_forward_mine(x, params, num_heads):
    """The TSSA layer, non-causal: x (B, N, C) -> y (B, N, C)."""
    B, N, C = x.shape
    h, p = num_heads, C // num_heads
    w = x @ params["W_u"] + params.get("b_u", 0.0)                            # (B, N, C)
    Pi = np.transpose(tssa_memberships_mine(w, params["temp"], h), (0, 2, 1))  # (B, N, h)
    wh = w.reshape(B, N, h, p)
    m = np.einsum("bnk,bnki->bki", Pi, wh**2) / (Pi.sum(axis=1)[..., None] + 1e-8)   # (B, h, p)
    out = -wh * Pi[..., None] / (1.0 + m[:, None])                            # (B, N, h, p)
    return out.reshape(B, N, C) @ params["W_o"] + params.get("b_o", 0.0)
