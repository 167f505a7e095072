"""Parameter dicts: the one checker and the one key-prefix helper used by tostnp.nn and models.

Parameters are flat dicts of arrays with dotted names ("blocks.0.tssa.W_u"). A layer
describes what it expects as a *spec*, ``{key: (shape, required)}``; a shape entry is an int
or a name (``"max_len"``, ``"H"``) that matches any length. :func:`check_params` rejects a
missing required key, an unknown key, a wrong shape and a dtype other than the input's, each
with one line naming the key and the expected shape.
"""
from __future__ import annotations

from ..backend.validate import check_array, checks_off

__all__ = ["check_params", "check_param", "shape_str", "sub", "prefixed", "num_params",
           "is_state", "STATE_LEAVES"]


def shape_str(shape) -> str:
    """(8,) -> "(8,)", (3, "max_len", 1) -> "(3, max_len, 1)"."""
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def check_param(a, name: str, shape, dtype, where: str = "") -> None:
    """One parameter array ``a`` called ``name``: present, of ``shape`` (names in ``shape``
    match any length) and of ``dtype``. Messages as for :func:`check_params`."""
    if checks_off():
        return
    at = f"{where}: " if where else ""
    want = shape_str(shape)
    if a is None:
        raise ValueError(f"{at}missing parameter {name}: expected an array of shape {want}")
    check_array(a, name, shape_desc=want)
    ok = a.ndim == len(shape) and all(isinstance(s, str) or s == n for s, n in zip(shape, a.shape))
    if not ok:
        raise ValueError(f"{at}{name} must have shape {want}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise TypeError(f"{at}{name} has dtype {a.dtype} but the input has {dtype}; "
                        "pass arrays of one dtype")


def check_params(params, spec: dict, dtype, where: str = "") -> None:
    """Check ``params`` against ``spec`` = {key: (shape, required)}; the dtype must be ``dtype``.

    Raises TypeError (not a dict, not an array, wrong dtype) or ValueError (missing or unknown
    key, wrong shape); every message starts with ``where`` (the layer's name) when given.
    """
    if checks_off():
        return
    at = f"{where}: " if where else ""
    if not isinstance(params, dict):
        raise TypeError(f"{at}params must be a dict of arrays, got {type(params).__name__}")
    for key, (shape, required) in spec.items():
        if required and params.get(key) is None:
            raise ValueError(f"{at}params is missing key {key!r} of shape {shape_str(shape)}")
    for key, a in params.items():
        if key not in spec:
            raise ValueError(f"{at}params has unknown key {key!r}; expected keys {sorted(spec)}")
        if a is not None:
            check_param(a, f"params[{key!r}]", spec[key][0], dtype, where)


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
