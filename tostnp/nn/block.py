r"""The ToST block (book: eq-tiny-tost): pre-LayerNorm, TSSA, LayerScale, residual; then the MLP.

    x1 = x  + gamma1 * TSSA(LN1(x))          x, x1, y: (B, N, C)
    y  = x1 + gamma2 * MLP(LN2(x1))          MLP = Linear(C, H) -> GELU -> Linear(H, C), H = 4C

Backward runs the same chain in reverse; each residual adds its two gradient paths
(dx1 = dy + LN2-branch, dx = dx1 + LN1-branch). On the NumPy fast path the block runs the same
maps with each LayerNorm's gamma and beta and each LayerScale folded into the weights of the
products next to them (:mod:`tostnp.nn.block_fold`: fewer passes over the activations, fewer
arrays kept); the code here is the specification it is tested against. Parameters are one flat dict with dotted keys:

    "ln1.gamma", "ln1.beta" (C,) opt    "tssa.W_u" (C, C), "tssa.b_u" (C,) opt, "tssa.temp" (h, 1),
    "tssa.W_o" (C, C), "tssa.b_o" (C,) opt, "tssa.denom_bias" (h, max_len, 1) [causal]
    "ls1.gamma" (C,)                    "ln2.gamma", "ln2.beta" (C,) opt
    "mlp.W1" (C, H), "mlp.b1" (H,) opt, "mlp.W2" (H, C), "mlp.b2" (C,) opt      "ls2.gamma" (C,)

``mixer`` (default "tssa") swaps TSSA for another token mixer of :mod:`tostnp.nn.mixers`
(uniform-Pi TSSA, softmax, flash or linear attention; the attention mixers' parameters sit under
"attn." -- "attn.W_qkv" (C, 3C), "attn.b_qkv", "attn.W_o", "attn.b_o"), with everything else in
the block unchanged: the experiments' comparisons differ only there.

The recurrent decoder (:func:`tost_block_decode_step`) reuses the per-token layers (LayerNorm,
LayerScale, MLP act on each token alone) and carries only the TSSA prefix statistics.
"""
from __future__ import annotations

from ..backend.validate import check_array, check_params, check_positive
from .params import sub, prefixed, mixer_prefix, tost_block_spec
from .layers import (LN_EPS, _layer_norm_forward, layer_norm_backward, _mlp_forward,
                     mlp_backward, _layer_scale_forward, layer_scale_backward,
                     check_gelu)
from .mixers import mixer_init, _mixer_forward, mixer_backward, check_mixer_input
from .tssa_causal import _tssa_decode_init, _tssa_decode_step, check_decode_position
from .block_fold import folded_forward, folded_backward
from ..backend import namespace, fused

__all__ = ["tost_block_forward", "tost_block_backward", "tost_block_init",
           "tost_block_decode_init", "tost_block_decode_step"]


def _check_params(params, C: int, num_heads: int, causal: bool, dtype, mixer: str = "tssa"):
    """Check the flat params of one block (the width and num_heads first, then the spec)."""
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads < 1:
        raise ValueError(f"num_heads must be a positive int, got {num_heads!r}")
    if C % num_heads != 0:
        raise ValueError(f"num_heads={num_heads} must divide the width C={C}")
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
    pre = mixer_prefix(mixer)
    w_in, out = ("tssa.W_u", C) if pre == "tssa" else ("attn.W_qkv", 3 * C)
    W_in = params.get(w_in)
    if getattr(W_in, "ndim", 0) == 2 and W_in.shape[0] != C:
        raise ValueError(f"the input has width C={C} but params[{w_in!r}] has shape "
                         f"{tuple(W_in.shape)}; expected ({C}, {out})")
    H = params["mlp.W1"].shape[-1] if getattr(params.get("mlp.W1"), "ndim", 0) == 2 else "H"
    check_params(params, tost_block_spec(C, num_heads, causal, mixer, H), dtype)


def tost_block_forward(x, params, num_heads: int, causal: bool = False,
                       ln_eps: float = LN_EPS, gelu: str = "tanh", mixer: str = "tssa"):
    """ToST block. x: (B, N, C) -> y: (B, N, C); returns (y, cache). ``gelu``: the MLP's GELU,
    "tanh" or "erf" (exact, as in the published models).

    ``mixer`` picks the token mixer (:mod:`tostnp.nn.mixers`; "tssa" is the ToST block, the
    others the same block around a baseline). cache["Pi"] is the TSSA membership (B, h, N)
    (None for the attention mixers); for causal TSSA cache["decode_state"] holds the prefix
    statistics after the last token (to continue with the decoder).
    """
    check_array(x, "x", ndim=3, shape_desc="(B, N, C)")
    ln_eps = check_positive(ln_eps, "ln_eps")
    check_gelu(gelu)
    _check_params(params, x.shape[-1], num_heads, causal, x.dtype, mixer)
    check_mixer_input(mixer, x, sub(params, mixer_prefix(mixer)), causal)
    return _tost_block_forward(x, params, num_heads, causal, ln_eps, gelu, mixer)


def _tost_block_forward(x, params, num_heads: int, causal: bool, ln_eps: float, gelu: str,
                        mixer: str):
    """:func:`tost_block_forward` without the checks (the caller checked its arguments)."""
    pre = mixer_prefix(mixer)
    if fused(namespace(x)) is not None:   # NumPy: LN and LayerScale folded into the products
        return folded_forward(x, params, num_heads, causal, ln_eps, gelu, mixer, pre)
    a, c_ln1 = _layer_norm_forward(x, params["ln1.gamma"], params.get("ln1.beta"), ln_eps)
    t, c_mix = _mixer_forward(mixer, a, sub(params, pre), num_heads, causal)  # (B, N, C)
    t, c_ls1 = _layer_scale_forward(t, params["ls1.gamma"])
    x1 = x + t                                                               # (B, N, C)
    b, c_ln2 = _layer_norm_forward(x1, params["ln2.gamma"], params.get("ln2.beta"), ln_eps)
    m, c_mlp = _mlp_forward(b, sub(params, "mlp"), gelu)                     # (B, N, C)
    m, c_ls2 = _layer_scale_forward(m, params["ls2.gamma"])
    y = x1 + m                                                               # (B, N, C)
    cache = {"ln1": c_ln1, "mixer": c_mix, "ls1": c_ls1, "ln2": c_ln2, "mlp": c_mlp,
             "ls2": c_ls2, "shape": tuple(x.shape), "Pi": c_mix["Pi"],
             "prefix": pre}
    if causal and c_mix["decode_state"] is not None:
        cache["decode_state"] = {"tssa": c_mix["decode_state"]}
    return y, cache


def tost_block_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads with the same dotted keys as params."""
    check_array(dy, "dy", ndim=3, shape_desc=str(cache["shape"]))
    if tuple(dy.shape) != cache["shape"]:
        raise ValueError(f"dy must have shape {cache['shape']} (that of x), got {tuple(dy.shape)}")
    return _tost_block_backward(dy, cache)


def _tost_block_backward(dy, cache):
    """:func:`tost_block_backward` without the checks."""
    if cache.get("folded"):
        return folded_backward(dy, cache)
    grads = {}
    dm, g = layer_scale_backward(dy, cache["ls2"])
    grads["ls2.gamma"] = g["gamma"]
    db, g = mlp_backward(dm, cache["mlp"])
    grads.update(prefixed(g, "mlp"))
    dx1, g = layer_norm_backward(db, cache["ln2"])
    grads.update(prefixed(g, "ln2"))
    dx1 = dx1 + dy                                                           # residual 2
    dt, g = layer_scale_backward(dx1, cache["ls1"])
    grads["ls1.gamma"] = g["gamma"]
    da, g = mixer_backward(dt, cache["mixer"])
    grads.update(prefixed(g, cache["prefix"]))
    dx, g = layer_norm_backward(da, cache["ln1"])
    grads.update(prefixed(g, "ln1"))
    return dx + dx1, grads                                                   # residual 1


def tost_block_init(rng, xp, C: int, num_heads: int, *, causal: bool = False,
                    max_len: int | None = None, bias: bool = True, layer_scale_init: float = 1.0,
                    mlp_ratio: int = 4, dtype, device=None, std: float = 0.02,
                    std_out: float | None = None, ln_bias: bool = True, mixer: str = "tssa"):
    """Parameters of one block: LayerNorms (gamma 1, beta 0 if ``ln_bias``), the mixer (TSSA
    by default, :func:`tssa_init`; :func:`tostnp.nn.mixers.mixer_init`), MLP weights N(0, std^2)
    with H = mlp_ratio * C, biases 0 (if ``bias``), LayerScale gammas = ``layer_scale_init``.
    The two output projections (the mixer's W_o, MLP W2) are drawn with ``std_out`` (default
    ``std``)."""
    std_out = std if std_out is None else std_out
    mix = mixer_init(rng, xp, mixer, C, num_heads, causal=causal, max_len=max_len, bias=bias,
                     dtype=dtype, device=device, std=std, std_out=std_out)
    if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, int) or mlp_ratio < 1:
        raise ValueError(f"mlp_ratio must be a positive int, got {mlp_ratio!r}")
    H = mlp_ratio * C
    ones = lambda n: xp.ones((n,), dtype=dtype, device=device)
    zeros = lambda n: xp.zeros((n,), dtype=dtype, device=device)
    params = {"ln1.gamma": ones(C)}
    if ln_bias:
        params["ln1.beta"] = zeros(C)
    params.update(prefixed(mix, mixer_prefix(mixer)))
    params["ls1.gamma"] = float(layer_scale_init) * ones(C)
    params["ln2.gamma"] = ones(C)
    if ln_bias:
        params["ln2.beta"] = zeros(C)
    params["mlp.W1"] = rng.normal(xp, (C, H), dtype, std=std, device=device)
    if bias:
        params["mlp.b1"] = zeros(H)
    params["mlp.W2"] = rng.normal(xp, (H, C), dtype, std=std_out, device=device)
    if bias:
        params["mlp.b2"] = zeros(C)
    params["ls2.gamma"] = float(layer_scale_init) * ones(C)
    return params


def tost_block_decode_init(batch: int, params, num_heads: int):
    """Empty decoder state for ``batch`` sequences: {"tssa": TSSA prefix statistics}."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive int, got {batch!r}")
    W_u = params.get("tssa.W_u") if isinstance(params, dict) else None
    if getattr(W_u, "ndim", 0) != 2:
        raise ValueError("params is missing key 'tssa.W_u' of shape (C, C)")
    _check_params(params, W_u.shape[0], num_heads, True, W_u.dtype)
    return _tost_block_decode_init(batch, params, num_heads)


def _tost_block_decode_init(batch: int, params, num_heads: int):
    return {"tssa": _tssa_decode_init(batch, sub(params, "tssa"), num_heads)}


def tost_block_decode_step(state, x_t, params, num_heads: int, t: int,
                           ln_eps: float = LN_EPS, gelu: str = "tanh"):
    """One token through a causal block. x_t: (B, C) at position t -> (y_t (B, C), new state).

    Equals row t of ``tost_block_forward(x, params, num_heads, causal=True, ln_eps=ln_eps)``.
    ``ln_eps`` must be the value used in the forward (same default, ``LN_EPS``; the models pass
    their config's ``ln_eps``).
    """
    check_array(x_t, "x_t", ndim=2, shape_desc="(B, C)")
    ln_eps = check_positive(ln_eps, "ln_eps")
    check_gelu(gelu)
    _check_params(params, x_t.shape[-1], num_heads, True, x_t.dtype)
    check_decode_position(state["tssa"], x_t, sub(params, "tssa"), t)
    return _tost_block_decode_step(state, x_t, params, num_heads, t, ln_eps, gelu)


def _tost_block_decode_step(state, x_t, params, num_heads: int, t: int, ln_eps: float,
                            gelu: str):
    """:func:`tost_block_decode_step` without the checks."""
    a, _ = _layer_norm_forward(x_t, params["ln1.gamma"], params.get("ln1.beta"), ln_eps)
    u, st = _tssa_decode_step(state["tssa"], a, sub(params, "tssa"), num_heads, t)  # (B, C)
    x1 = x_t + u * params["ls1.gamma"]                                       # (B, C)
    b, _ = _layer_norm_forward(x1, params["ln2.gamma"], params.get("ln2.beta"), ln_eps)
    m, _ = _mlp_forward(b, sub(params, "mlp"), gelu)                         # (B, C)
    return x1 + m * params["ls2.gamma"], {"tssa": st}
