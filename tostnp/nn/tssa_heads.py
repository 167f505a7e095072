"""Head helpers shared by the TSSA modules: the parameter check, the head views and reductions,
and the pieces every TSSA form shares (input projection, softmax over heads) with their adjoints.

Heads are contiguous slices of the width: coordinate c = k*p + i belongs to head k, so "split
heads" is a free reshape (..., C) -> (..., h, p). Head-wise reductions "sum over c in head k"
are dot products over each head's p coordinates (``vecdot`` on the (..., h, p) view) or small
matmuls with the (C, h) head indicator E (E_ck = 1 if c is in head k).
"""
from __future__ import annotations

from ..backend import add_bias, device_of, fused
from ..backend.validate import check_params
from .params import tssa_spec
from .layers import sum_leading

__all__ = ["check_tssa_params", "check_width", "head_indicator", "head_reduce", "head_sums",
           "softmax_heads",
           "head_token_sums", "per_coord", "split_heads", "merge_heads", "project_in",
           "project_in_backward", "softmax_heads_backward", "NORM_EPS2", "S1_EPS", "PI_EPS"]

NORM_EPS2 = 1e-24   # max(||w||, 1e-12)^2: the token-axis normalisation clamp, squared (eq-layer-pi)
S1_EPS = 1e-12      # causal: clamp of the prefix sum of squares (eq-causal-pi)
PI_EPS = 1e-8       # in m = sum_j Pi w^2 / (sum_j Pi + 1e-8) (eq-layer-out, eq-causal-out)


def check_tssa_params(params, C: int, num_heads: int, causal: bool, dtype,
                      T: int | None = None):
    """Validate ``params`` against width C and ``num_heads``; returns (h, p).

    Keys: "W_u" (C, C), "b_u" (C,) opt, "temp" (h, 1), "W_o" (C, C), "b_o" (C,) opt,
    "denom_bias" (h, max_len, 1) (required when ``causal``; the sequence length T <= max_len).
    """
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    h = num_heads
    if C % h != 0:
        raise ValueError(f"num_heads={h} must divide the width C={C}")
    if causal and "denom_bias" not in params:
        raise ValueError(f"params is missing key 'denom_bias' of shape ({h}, max_len, 1), "
                         "needed for causal=True")
    check_params(params, tssa_spec(C, h, causal=False), dtype)
    db = params.get("denom_bias")
    if causal and T is not None and T > db.shape[1]:
        raise ValueError(f"sequence length T={T} exceeds max_len={db.shape[1]} of "
                         f"params['denom_bias'] (shape {tuple(db.shape)})")
    return h, C // h


def check_width(x, name: str, params) -> None:
    """x (..., C) must match params["W_u"] (C, C): one clear line before the other checks."""
    C = x.shape[-1]
    if isinstance(params, dict) and getattr(params.get("W_u"), "ndim", 0) == 2 \
            and params["W_u"].shape[0] != C:
        raise ValueError(f"{name} has width C={C} but params['W_u'] has shape "
                         f"{tuple(params['W_u'].shape)}; expected ({C}, {C})")


# --------------------------------------------------------------------------------------------
# head views and reductions
# --------------------------------------------------------------------------------------------
def head_indicator(xp, C: int, h: int, dtype, device):
    """E (C, h): E[c, k] = 1 if coordinate c belongs to head k (c // p == k). On the NumPy
    fast path a read-only array built once per shape and dtype (kernels.head_indicator)."""
    fast = fused(xp)
    if fast is not None:
        return fast.head_indicator(C, h, dtype)
    p = C // h
    c = xp.arange(C, device=device)
    k = xp.arange(h, device=device)
    return xp.astype(xp.reshape(c // p, (C, 1)) == xp.reshape(k, (1, h)), dtype)  # (C, h)


def head_reduce(op, a, xp):
    """op-reduction over the short last (head) axis of a (..., h) -> (..., 1), by h - 1
    elementwise ops on slices (NumPy reduces a short last axis element by element)."""
    out = a[..., 0:1]
    for k in range(1, a.shape[-1]):
        out = op(out, a[..., k:k + 1])
    return out


def head_sums(a, h: int, p: int, xp):
    """(..., C) -> (..., h): the sum over each head's p coordinates, as a dot product with ones
    (NumPy sums a short last axis element by element, several times slower than ``vecdot``)."""
    ones = xp.ones((p,), dtype=a.dtype, device=device_of(a))
    return xp.vecdot(split_heads(a, h, p, xp), ones)


def head_token_sums(Pi, X, h: int, p: int, xp):
    """S (B, C) with S_c = sum_n Pi_{n,k(c)} X_nc (k(c) = the head of c); Pi (B, N, h), X (B, N, C).

    One matrix-vector product per head, (B, 1, N) @ (B, N, p), on strided views: it reads X
    once and writes no (B, N, C) temporary (the product Pi X, then a sum over tokens, would
    write and read one more 25 MB array at B=4, N=4096, C=384).
    """
    B, N, C = X.shape
    PiT = xp.permute_dims(Pi, (0, 2, 1))                                         # (B, h, N)
    parts = [PiT[:, k:k + 1, :] @ X[:, :, k * p:(k + 1) * p] for k in range(h)]  # (B, 1, p) each
    return xp.reshape(xp.concat(parts, axis=-1), (B, C))                         # (B, C)


def per_coord(s, xp):
    """Broadcast a per-head array s (..., h) to per-coordinate shape (..., h, 1) for (..., h, p)."""
    return xp.reshape(s, tuple(s.shape) + (1,))


def split_heads(a, h: int, p: int, xp):
    """(..., C) -> (..., h, p): split heads (a view for contiguous arrays)."""
    return xp.reshape(a, tuple(a.shape[:-1]) + (h, p))


def merge_heads(a, xp):
    """(..., h, p) -> (..., h*p)."""
    return xp.reshape(a, tuple(a.shape[:-2]) + (a.shape[-2] * a.shape[-1],))


# --------------------------------------------------------------------------------------------
# shared pieces, forward beside backward
# --------------------------------------------------------------------------------------------
def project_in(x, params, xp, bias: bool = True):
    """w = x @ W_u + b_u (eq-layer-w). x: (B, N, C) -> w: (B, N, C). ``bias=False`` leaves
    b_u out, for a caller that adds it itself."""
    B, N, C = x.shape
    w = xp.reshape(xp.reshape(x, (B * N, C)) @ params["W_u"], (B, N, C))         # (B, N, C)
    if bias and "b_u" in params:
        add_bias(xp, w, params["b_u"])
    return w


def project_in_backward(g_w, grads, cache, xp, g_b=None, out=None):
    """Through w = x @ W_u + b_u: returns dx; sets grads["W_u"], grads["b_u"] (``g_b``, when
    the caller summed g_w over its rows already). ``out``: a C-contiguous (B, N, C) NumPy
    array that receives dx (NumPy only)."""
    x, params = cache["x"], cache["params"]
    B, N, C = x.shape
    gw2 = xp.reshape(g_w, (B * N, C))
    grads["W_u"] = xp.matrix_transpose(xp.reshape(x, (B * N, C))) @ gw2          # (C, C)
    if "b_u" in params:
        grads["b_u"] = sum_leading(xp, gw2) if g_b is None else g_b              # (C,)
    if out is not None:
        dx2 = xp.reshape(out, (B * N, C))                                        # a view of out
        fused(xp).matmul_into(gw2, xp.matrix_transpose(params["W_u"]), dx2)
        return out
    return xp.reshape(gw2 @ xp.matrix_transpose(params["W_u"]), (B, N, C))       # (B, N, C)


def softmax_heads(l, xp):
    """Softmax over the last (head) axis. l: (..., h)."""
    e = xp.exp(l - head_reduce(xp.maximum, l, xp))
    e /= head_reduce(xp.add, e, xp)
    return e


def softmax_heads_backward(g_Pi, cache, grads, xp):
    """Through Pi = softmax_k(temp_k q_nk): returns g_q (B, N, h); sets grads["temp"]."""
    q, h = cache["q"], cache["h"]
    Pi = xp.permute_dims(cache["Pi"], (0, 2, 1))                                 # (B, N, h)
    g_l = Pi * (g_Pi - head_reduce(xp.add, Pi * g_Pi, xp))                       # (B, N, h)
    grads["temp"] = xp.reshape(sum_leading(xp, g_l * q), (h, 1))
    return g_l * xp.reshape(cache["params"]["temp"], (1, 1, h))                  # (B, N, h)
