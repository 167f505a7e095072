"""Parameter dicts: the layout of every layer and block, and the key-prefix helpers.

Parameters are flat dicts of arrays with dotted names ("blocks.0.tssa.W_u"). Each layer's
layout is a *spec* ``{key: (shape, required)}`` (the ``xxx_spec`` functions below), so that a
layer's own door (its public ``xxx_forward``) and a model's door check a parameter dict against
the same description, with the one checker :func:`tostnp.backend.validate.check_params`
(re-exported here). A shape entry is an int or a name ("H", "max_len", "Cin") that matches any
length; a shape of None accepts any value (a counter). Keys are relative to the layer; a block
holds its layers' keys under their prefixes ("ln1.gamma", "tssa.W_u", "mlp.W1", ...), a model
its blocks' under "blocks.{i}".
"""
from __future__ import annotations

import math

from ..backend.validate import check_params, check_param, shape_str  # noqa: F401  (re-exported)

__all__ = ["check_params", "check_param", "shape_str", "sub", "prefixed", "num_params",
           "is_state", "STATE_LEAVES", "MIXERS", "check_mixer", "mixer_prefix", "mlp_spec",
           "tssa_spec", "qkv_spec", "class_attention_spec", "mixer_spec", "tost_block_spec",
           "class_attention_block_spec", "stem_channels", "conv_stem_spec"]


def sub(params: dict, prefix: str) -> dict:
    """The entries of ``params`` under ``prefix + "."``, with the prefix removed (no copies)."""
    p = prefix + "."
    return {k[len(p):]: v for k, v in params.items() if k.startswith(p)}


def prefixed(grads: dict, prefix: str) -> dict:
    """``grads`` with every key renamed to ``prefix + "." + key``."""
    return {f"{prefix}.{k}": v for k, v in grads.items()}


# Leaf names of model *state* (BatchNorm running statistics, tostnp.nn.batchnorm): kept in the
# parameter dict so that checkpoints and exports carry them, but never trained, never
# weight-decayed, and not counted as parameters.
STATE_LEAVES = ("running_mean", "running_var", "num_batches_tracked")


def is_state(name: str) -> bool:
    """True for a flat name that holds model state ("stem.0.bn.running_var")."""
    return name.rsplit(".", 1)[-1] in STATE_LEAVES


def num_params(params: dict) -> int:
    """Number of trainable scalars in a parameter dict (model state excluded)."""
    n = 0
    for k, v in params.items():
        if is_state(k):
            continue
        size = 1
        for s in v.shape:
            size *= int(s)
        n += size
    return n


# ------------------------------------------------------------------------------------------
# the layout of each layer and block
# ------------------------------------------------------------------------------------------
# the token mixers a block can hold (tostnp.nn.mixers): TSSA and the baselines
MIXERS = ("tssa", "tssa-uniform", "softmax", "flash", "linear")


def check_mixer(name) -> str:
    if name not in MIXERS:
        raise ValueError(f"mixer must be one of {', '.join(MIXERS)}; got {name!r}")
    return name


def mixer_prefix(name: str) -> str:
    """The key prefix of the mixer's parameters inside a block: "tssa" or "attn"."""
    return "tssa" if check_mixer(name).startswith("tssa") else "attn"


def mlp_spec(C: int, H) -> dict:
    """Linear(C, H) -> GELU -> Linear(H, C), biases optional."""
    return {"W1": ((C, H), True), "b1": ((H,), False), "W2": ((H, C), True), "b2": ((C,), False)}


def tssa_spec(C: int, h: int, causal: bool, max_len="max_len") -> dict:
    """TSSA of width C with h heads; the causal layer's "denom_bias" has ``max_len`` rows."""
    return {"W_u": ((C, C), True), "b_u": ((C,), False), "temp": ((h, 1), True),
            "W_o": ((C, C), True), "b_o": ((C,), False),
            "denom_bias": ((h, max_len, 1), causal)}


def qkv_spec(C: int) -> dict:
    """The attention baselines (softmax, flash, linear): one (C, 3C) input projection."""
    return {"W_qkv": ((C, 3 * C), True), "b_qkv": ((3 * C,), False),
            "W_o": ((C, C), True), "b_o": ((C,), False)}


def class_attention_spec(C: int) -> dict:
    """Class attention: the CLS query W_q, keys and values W_kv = [W_k | W_v], W_o."""
    return {"W_q": ((C, C), True), "b_q": ((C,), False), "W_kv": ((C, 2 * C), True),
            "b_kv": ((2 * C,), False), "W_o": ((C, C), True), "b_o": ((C,), False)}


def mixer_spec(name: str, C: int, num_heads: int, causal: bool, max_len="max_len") -> dict:
    """The parameters of mixer ``name`` (keys without the prefix).

    ``max_len``: the rows of the causal TSSA's denominator bias; the name "max_len" matches any
    length (the layer then checks T <= max_len).
    """
    check_mixer(name)
    if name == "tssa":
        return tssa_spec(C, num_heads, causal, max_len)
    if name == "tssa-uniform":             # Pi fixed to 1/h: no temperature, no denominator bias
        return {"W_u": ((C, C), True), "b_u": ((C,), False), "W_o": ((C, C), True),
                "b_o": ((C,), False)}
    return qkv_spec(C)


def tost_block_spec(C: int, num_heads: int, causal: bool, mixer: str = "tssa", H="H",
                    max_len="max_len") -> dict:
    """One ToST block (tostnp.nn.block): LayerNorm shifts and linear biases optional."""
    spec = {"ln1.gamma": ((C,), True), "ln1.beta": ((C,), False)}
    spec.update(prefixed(mixer_spec(mixer, C, num_heads, causal, max_len), mixer_prefix(mixer)))
    spec.update({"ls1.gamma": ((C,), True), "ln2.gamma": ((C,), True), "ln2.beta": ((C,), False)})
    spec.update(prefixed(mlp_spec(C, H), "mlp"))
    spec["ls2.gamma"] = ((C,), True)
    return spec


def class_attention_block_spec(C: int, H) -> dict:
    """One class-attention block (tostnp.nn.class_attention), MLP hidden width H."""
    spec = {"norm1.gamma": ((C,), True), "norm1.beta": ((C,), True)}
    spec.update(prefixed(class_attention_spec(C), "attn"))
    spec.update({"ls1.gamma": ((C,), True), "norm2.gamma": ((C,), True),
                 "norm2.beta": ((C,), True)})
    spec.update(prefixed(mlp_spec(C, H), "mlp"))
    spec["ls2.gamma"] = ((C,), True)
    return spec


def stem_channels(in_chans: int, width: int, patch_size: int) -> list:
    """The convolutional stem's channels [Cin, C/2^(k-1), ..., C/2, C] for patch_size = 2^k
    (k >= 1); ValueError otherwise."""
    P = patch_size
    if isinstance(P, bool) or not isinstance(P, int) or P < 2 or P & (P - 1):
        raise ValueError(f"the convolutional stem needs a patch size that is a power of two "
                         f">= 2 (8 and 16 as published), got {P!r}")
    k = int(round(math.log2(P)))
    if width % 2 ** (k - 1):
        raise ValueError(f"the convolutional stem with patch size {P} needs a width divisible "
                         f"by {2 ** (k - 1)}, got {width}")
    return [in_chans] + [width // 2 ** (k - 1 - s) for s in range(k)]


def conv_stem_spec(in_chans: int, width: int, patch_size: int) -> dict:
    """The convolutional stem (tostnp.nn.stem): per stage s a kernel and a BatchNorm with its
    state (the counter num_batches_tracked is not checked)."""
    ch = stem_channels(in_chans, width, patch_size)
    spec = {}
    for s, (ci, co) in enumerate(zip(ch[:-1], ch[1:])):
        spec[f"{s}.conv.W"] = ((3, 3, ci, co), True)
        for leaf in ("gamma", "beta", "running_mean", "running_var"):
            spec[f"{s}.bn.{leaf}"] = ((co,), True)
        spec[f"{s}.bn.num_batches_tracked"] = (None, False)
    return spec
