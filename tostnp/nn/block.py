r"""The ToST block (tost-math.md §5): pre-LayerNorm, TSSA, LayerScale, residual; then the MLP.

    x1 = x  + gamma1 * TSSA(LN1(x))          x, x1, y: (B, N, C)
    y  = x1 + gamma2 * MLP(LN2(x1))          MLP = Linear(C, H) -> GELU -> Linear(H, C), H = 4C

Backward runs the same chain in reverse; each residual adds its two gradient paths
(dx1 = dy + LN2-branch, dx = dx1 + LN1-branch). Parameters are one flat dict with dotted keys:

    "ln1.gamma", "ln1.beta" (C,)        "tssa.W_u" (C, C), "tssa.b_u" (C,) opt, "tssa.temp" (h, 1),
    "tssa.W_o" (C, C), "tssa.b_o" (C,) opt, "tssa.denom_bias" (h, max_len, 1) [causal]
    "ls1.gamma" (C,)                    "ln2.gamma", "ln2.beta" (C,)
    "mlp.W1" (C, H), "mlp.b1" (H,) opt, "mlp.W2" (H, C), "mlp.b2" (C,) opt      "ls2.gamma" (C,)

The recurrent decoder (:func:`tost_block_decode_step`) reuses the per-token layers (LayerNorm,
LayerScale, MLP act on each token alone) and carries only the TSSA prefix statistics.
"""
from __future__ import annotations

from .._validate import check_array
from .layers import (layer_norm_forward, layer_norm_backward, mlp_forward, mlp_backward,
                     layer_scale_forward, layer_scale_backward)
from .tssa import tssa_forward, tssa_backward, tssa_init, tssa_decode_init, tssa_decode_step

__all__ = ["tost_block_forward", "tost_block_backward", "tost_block_init",
           "tost_block_decode_init", "tost_block_decode_step"]

_TSSA_KEYS = ("W_u", "b_u", "temp", "W_o", "b_o", "denom_bias")
_MLP_KEYS = ("W1", "b1", "W2", "b2")


def _split(params, C: int, num_heads: int, causal: bool, dtype):
    """Check the flat params and split them into sub-layer dicts."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    if C % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} must divide the width C={C}")
    W_u = params.get("tssa.W_u")
    if getattr(W_u, "ndim", 0) == 2 and W_u.shape[0] != C:
        raise ValueError(f"the input has width C={C} but params['tssa.W_u'] has shape "
                         f"{tuple(W_u.shape)}; expected ({C}, {C})")
    H = params["mlp.W1"].shape[-1] if getattr(params.get("mlp.W1"), "ndim", 0) == 2 else "H"
    required = {"ln1.gamma": (C,), "ln1.beta": (C,), "tssa.W_u": (C, C),
                "tssa.temp": (num_heads, 1), "tssa.W_o": (C, C), "ls1.gamma": (C,),
                "ln2.gamma": (C,), "ln2.beta": (C,), "mlp.W1": (C, H), "mlp.W2": (H, C),
                "ls2.gamma": (C,)}
    optional = {"tssa.b_u": (C,), "tssa.b_o": (C,), "mlp.b1": (H,), "mlp.b2": (C,),
                "tssa.denom_bias": (num_heads, "max_len", 1)}
    if causal:
        required["tssa.denom_bias"] = optional.pop("tssa.denom_bias")
    for key, shape in required.items():
        if key not in params:
            raise ValueError(f"params is missing key {key!r} of shape {shape}")
    known = {**required, **optional}
    for key, a in params.items():
        if key not in known:
            raise ValueError(f"params has unknown key {key!r}; expected keys {sorted(known)}")
        shape = known[key]
        check_array(a, f"params[{key!r}]", shape_desc=str(shape))
        ok = a.ndim == len(shape) and all(s == "max_len" or s == n for s, n in zip(shape, a.shape))
        if not ok:
            raise ValueError(f"params[{key!r}] must have shape {shape}, got {tuple(a.shape)}")
        if a.dtype != dtype:
            raise TypeError(f"params[{key!r}] has dtype {a.dtype} but x has {dtype}; "
                            "pass arrays of one dtype")
    tssa = {k: params["tssa." + k] for k in _TSSA_KEYS if "tssa." + k in params}
    mlp = {k: params["mlp." + k] for k in _MLP_KEYS if "mlp." + k in params}
    return tssa, mlp


def tost_block_forward(x, params, num_heads: int, causal: bool = False, ln_eps: float = 1e-6):
    """ToST block. x: (B, N, C) -> y: (B, N, C); returns (y, cache).

    cache["Pi"] is the TSSA membership (B, h, N); for ``causal=True`` cache["decode_state"]
    holds the prefix statistics after the last token (to continue with the decoder).
    """
    check_array(x, "x", ndim=3, shape_desc="(B, N, C)")
    C = x.shape[-1]
    tssa_p, mlp_p = _split(params, C, num_heads, causal, x.dtype)
    a, c_ln1 = layer_norm_forward(x, params["ln1.gamma"], params["ln1.beta"], eps=ln_eps)
    t, c_tssa = tssa_forward(a, tssa_p, num_heads, causal=causal)            # (B, N, C)
    t, c_ls1 = layer_scale_forward(t, params["ls1.gamma"])
    x1 = x + t                                                               # (B, N, C)
    b, c_ln2 = layer_norm_forward(x1, params["ln2.gamma"], params["ln2.beta"], eps=ln_eps)
    m, c_mlp = mlp_forward(b, mlp_p)                                         # (B, N, C)
    m, c_ls2 = layer_scale_forward(m, params["ls2.gamma"])
    y = x1 + m                                                               # (B, N, C)
    cache = {"ln1": c_ln1, "tssa": c_tssa, "ls1": c_ls1, "ln2": c_ln2, "mlp": c_mlp,
             "ls2": c_ls2, "shape": tuple(x.shape), "Pi": c_tssa["Pi"]}
    if causal:
        cache["decode_state"] = {"tssa": c_tssa["decode_state"]}
    return y, cache


def tost_block_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the same dotted keys as params."""
    check_array(dy, "dy", ndim=3, shape_desc=str(cache["shape"]))
    if tuple(dy.shape) != cache["shape"]:
        raise ValueError(f"dy must have shape {cache['shape']} (that of x), got {tuple(dy.shape)}")
    grads = {}
    dm, g = layer_scale_backward(dy, cache["ls2"])
    grads["ls2.gamma"] = g["gamma"]
    db, g = mlp_backward(dm, cache["mlp"])
    grads.update({"mlp." + k: v for k, v in g.items()})
    dx1, g = layer_norm_backward(db, cache["ln2"])
    grads["ln2.gamma"], grads["ln2.beta"] = g["gamma"], g["beta"]
    dx1 = dx1 + dy                                                           # residual 2
    dt, g = layer_scale_backward(dx1, cache["ls1"])
    grads["ls1.gamma"] = g["gamma"]
    da, g = tssa_backward(dt, cache["tssa"])
    grads.update({"tssa." + k: v for k, v in g.items()})
    dx, g = layer_norm_backward(da, cache["ln1"])
    grads["ln1.gamma"], grads["ln1.beta"] = g["gamma"], g["beta"]
    return dx + dx1, grads                                                   # residual 1


def tost_block_init(rng, xp, C: int, num_heads: int, *, causal: bool = False,
                    max_len: int | None = None, bias: bool = True, layer_scale_init: float = 1.0,
                    mlp_ratio: int = 4, dtype, device=None, std: float = 0.02):
    """Parameters of one block: LayerNorms (gamma 1, beta 0), TSSA (:func:`tssa_init`),
    MLP weights N(0, std^2) with H = mlp_ratio * C, biases 0 (if ``bias``), LayerScale
    gammas = ``layer_scale_init``."""
    tssa = tssa_init(rng, xp, C, num_heads, causal=causal, max_len=max_len, bias=bias,
                     dtype=dtype, device=device, std=std)
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, int) or mlp_ratio < 1:
        raise ValueError(f"mlp_ratio must be a positive int, got {mlp_ratio!r}")
    H = mlp_ratio * C
    ones = lambda n: xp.ones((n,), dtype=dtype, device=device)
    zeros = lambda n: xp.zeros((n,), dtype=dtype, device=device)
    params = {"ln1.gamma": ones(C), "ln1.beta": zeros(C)}
    params.update({"tssa." + k: v for k, v in tssa.items()})
    params["ls1.gamma"] = float(layer_scale_init) * ones(C)
    params.update({"ln2.gamma": ones(C), "ln2.beta": zeros(C)})
    params["mlp.W1"] = rng.normal(xp, (C, H), dtype, std=std, device=device)
    if bias:
        params["mlp.b1"] = zeros(H)
    params["mlp.W2"] = rng.normal(xp, (H, C), dtype, std=std, device=device)
    if bias:
        params["mlp.b2"] = zeros(C)
    params["ls2.gamma"] = float(layer_scale_init) * ones(C)
    return params


def tost_block_decode_init(batch: int, params, num_heads: int):
    """Empty decoder state for ``batch`` sequences: {"tssa": TSSA prefix statistics}."""
    tssa_p = {k: params["tssa." + k] for k in _TSSA_KEYS if "tssa." + k in params}
    return {"tssa": tssa_decode_init(batch, tssa_p, num_heads)}


def tost_block_decode_step(state, x_t, params, num_heads: int, t: int, ln_eps: float = 1e-6):
    """One token through a causal block. x_t: (B, C) at position t -> (y_t (B, C), new state).

    Equals row t of ``tost_block_forward(x, params, num_heads, causal=True, ln_eps=ln_eps)``.
    ``ln_eps`` must be the value used in the forward (same default, 1e-6; the LM passes 1e-5).
    """
    check_array(x_t, "x_t", ndim=2, shape_desc="(B, C)")
    C = x_t.shape[-1]
    tssa_p, mlp_p = _split(params, C, num_heads, True, x_t.dtype)
    a, _ = layer_norm_forward(x_t, params["ln1.gamma"], params["ln1.beta"], eps=ln_eps)
    u, st = tssa_decode_step(state["tssa"], a, tssa_p, num_heads, t)         # (B, C)
    x1 = x_t + u * params["ls1.gamma"]                                       # (B, C)
    b, _ = layer_norm_forward(x1, params["ln2.gamma"], params["ln2.beta"], eps=ln_eps)
    m, _ = mlp_forward(b, mlp_p)                                             # (B, C)
    return x1 + m * params["ls2.gamma"], {"tssa": st}
