"""Reference solution of exercises/03_tssa_forward.md (the cell tagged "student")."""
import numpy as np


def tssa_forward_mine(x, params, num_heads):
    """TSSA layer: x (B, N, C) -> (y (B, N, C), Pi (B, h, N))."""
    B, N, C = x.shape
    h = num_heads
    p = C // h
    w = x @ params["W_u"] + params["b_u"]                             # (B, N, C)
    norms = np.maximum(np.sqrt(np.sum(w**2, axis=1, keepdims=True)), 1e-12)   # (B, 1, C) along tokens
    q = ((w / norms) ** 2).reshape(B, N, h, p).sum(axis=-1)            # (B, N, h)
    logits = q * params["temp"][:, 0]                                  # (B, N, h)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    Pi = e / e.sum(axis=-1, keepdims=True)                             # (B, N, h) softmax over heads
    wh = w.reshape(B, N, h, p)                                         # (B, N, h, p)
    m = np.einsum("bnk,bnki->bki", Pi, wh**2) / (Pi.sum(axis=1)[..., None] + 1e-8)   # (B, h, p)
    out = -wh * Pi[..., None] / (1.0 + m[:, None])                     # (B, N, h, p)
    y = out.reshape(B, N, C) @ params["W_o"] + params["b_o"]           # (B, N, C)
    return y, np.transpose(Pi, (0, 2, 1))                              # Pi (B, h, N)
