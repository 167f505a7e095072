"""The token mixer of a block, by name: TSSA or one of the baselines, behind one interface.

    mixer          what mixes the tokens                         cost in N   parameters (C = width)
    tssa           Token Statistics Self-Attention (the ToST)     O(N)        W_u, b_u, temp, W_o, b_o
    tssa-uniform   TSSA with Pi fixed to 1/h (no routing)         O(N)        W_u, b_u, W_o, b_o
    softmax        softmax attention, N x N weights kept          O(N^2)      W_qkv, b_qkv, W_o, b_o
    flash          the same softmax attention in O(N) memory      O(N^2) time W_qkv, b_qkv, W_o, b_o
    linear         linear attention, phi = elu + 1                O(N)        W_qkv, b_qkv, W_o, b_o

A block stores its mixer's parameters under one prefix (:func:`mixer_prefix`): "tssa." for the
two TSSA variants (so a ToST checkpoint keeps the published names), "attn." for the others.
Softmax-type mixers have 4C^2 weights, TSSA 2C^2: models built with different mixers at equal
width do not have equal parameter counts (the experiments report both).

``tssa-uniform`` answers "what if Pi is uniform": it is TSSA with every temperature fixed at 0,
so Pi = softmax_heads(0) = 1/h exactly and no gradient flows through the routing. The
temperature is a constant here, not a parameter. (Causal: the denominator bias sits inside the
temperature-scaled logits, so it has no effect either and is not a parameter.)
"""
from __future__ import annotations

from .. import backend
from . import attention as _attn
from . import flash as _flash
from . import tssa as _tssa

__all__ = ["MIXERS", "check_mixer", "mixer_prefix", "mixer_spec", "mixer_init",
           "mixer_forward", "mixer_backward"]

MIXERS = ("tssa", "tssa-uniform", "softmax", "flash", "linear")
_LAYERS = {
    "softmax": (_attn.softmax_attention_forward, _attn.softmax_attention_backward),
    "flash": (_flash.flash_attention_forward, _flash.flash_attention_backward),
    "linear": (_attn.linear_attention_forward, _attn.linear_attention_backward),
}


def check_mixer(name) -> str:
    if name not in MIXERS:
        raise ValueError(f"mixer must be one of {', '.join(MIXERS)}; got {name!r}")
    return name


def mixer_prefix(name: str) -> str:
    """The key prefix of the mixer's parameters inside a block: "tssa" or "attn"."""
    return "tssa" if check_mixer(name).startswith("tssa") else "attn"


def mixer_spec(name: str, C: int, num_heads: int, causal: bool) -> dict:
    """{key: (shape, required)} of the mixer's parameters (keys without the prefix).

    A shape may contain "max_len" (the causal TSSA's denominator bias, any length >= T).
    """
    check_mixer(name)
    if name == "tssa":
        return {"W_u": ((C, C), True), "b_u": ((C,), False), "temp": ((num_heads, 1), True),
                "W_o": ((C, C), True), "b_o": ((C,), False),
                "denom_bias": ((num_heads, "max_len", 1), causal)}
    if name == "tssa-uniform":
        return {"W_u": ((C, C), True), "b_u": ((C,), False), "W_o": ((C, C), True),
                "b_o": ((C,), False)}
    return _attn._qkv_spec(C)


def mixer_init(rng, xp, name: str, C: int, num_heads: int, *, causal: bool = False,
               max_len: int | None = None, bias: bool = True, dtype, device=None,
               std: float = 0.02, std_out: float | None = None) -> dict:
    """Fresh parameters of mixer ``name`` (keys without the prefix); the input projection
    N(0, std^2), the output projection W_o N(0, std_out^2) (default std), biases 0."""
    check_mixer(name)
    std_out = std if std_out is None else std_out
    if name.startswith("tssa"):
        p = _tssa.tssa_init(rng, xp, C, num_heads, causal=causal, max_len=max_len, bias=bias,
                            dtype=dtype, device=device, std=std, std_out=std_out)
        if name == "tssa-uniform":
            p = {k: v for k, v in p.items() if k not in ("temp", "denom_bias")}
        return p
    p = {"W_qkv": rng.normal(xp, (C, 3 * C), dtype, std=std, device=device),
         "W_o": rng.normal(xp, (C, C), dtype, std=std_out, device=device)}
    if bias:
        p["b_qkv"] = xp.zeros((3 * C,), dtype=dtype, device=device)
        p["b_o"] = xp.zeros((C,), dtype=dtype, device=device)
    return p


def _uniform_params(x, params, num_heads, causal):
    """The TSSA parameters with temp = 0 (and a zero denominator bias when causal)."""
    xp = backend.namespace(x)
    dev = backend.device_of(x)
    full = dict(params)
    full["temp"] = xp.zeros((num_heads, 1), dtype=x.dtype, device=dev)
    if causal:
        full["denom_bias"] = xp.zeros((num_heads, x.shape[1], 1), dtype=x.dtype, device=dev)
    return full


def mixer_forward(name: str, x, params: dict, num_heads: int, causal: bool = False):
    """y, cache = mixer(x). x: (B, N, C) -> y: (B, N, C).

    cache["Pi"] is the TSSA membership (B, h, N) for the TSSA mixers (1/h for tssa-uniform),
    None for the attention mixers; a causal TSSA's cache["decode_state"] is kept as well.
    """
    check_mixer(name)
    if name == "tssa":
        y, c = _tssa.tssa_forward(x, params, num_heads, causal=causal)
        return y, {"name": name, "layer": c, "Pi": c["Pi"], "decode_state": c.get("decode_state")}
    if name == "tssa-uniform":
        for key in ("temp", "denom_bias"):
            if key in params:
                raise ValueError(f"mixer 'tssa-uniform' has no parameter {key!r} (Pi is fixed "
                                 "to 1/h); remove it or use mixer 'tssa'")
        y, c = _tssa.tssa_forward(x, _uniform_params(x, params, num_heads, causal), num_heads,
                                  causal=causal)
        return y, {"name": name, "layer": c, "Pi": c["Pi"], "decode_state": None}
    fwd, _ = _LAYERS[name]
    y, c = fwd(x, params, num_heads, causal=causal)
    return y, {"name": name, "layer": c, "Pi": None, "decode_state": None}


def mixer_backward(dy, cache):
    """dy: (B, N, C) -> dx (B, N, C), grads keyed like the mixer's parameters."""
    name = cache["name"]
    if name.startswith("tssa"):
        dx, grads = _tssa.tssa_backward(dy, cache["layer"])
        if name == "tssa-uniform":            # constants, not parameters
            grads.pop("temp", None)
            grads.pop("denom_bias", None)
        return dx, grads
    return _LAYERS[name][1](dy, cache["layer"])
