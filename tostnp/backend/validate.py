"""Input checks for the public entry points ("the doors"): clear errors that name the argument.

Every message says which argument is wrong, what was expected (shape/type) and what came.
The doors -- the top-level math functions, the model forward/loss/backward/predict/generate
functions and the public layer functions of :mod:`tostnp.nn` -- check their arguments here,
once, and then call unchecked cores (``_xxx_forward`` in :mod:`tostnp.nn`) that trust their
callers. Nothing here keeps state between calls.

Parameters are flat dicts of arrays with dotted names ("blocks.0.tssa.W_u"). A layer or model
describes what it expects as a *spec*, ``{key: (shape, required)}``; a shape entry is an int
or a name (``"max_len"``, ``"H"``) that matches any length. :func:`check_params` rejects a
missing required key, an unknown key, a wrong shape and a dtype other than the input's, each
with one line naming the key and the expected shape.
"""
from __future__ import annotations

import array_api_compat
import array_api_compat.numpy
import numpy as np

# The general namespace lookup. A NumPy array, the common case, skips it (a training step
# checks its parameters and gradients at three doors, a few dozen arrays each).
namespace = array_api_compat.array_namespace
_NUMPY_XP = array_api_compat.numpy          # what namespace() gives for a NumPy array


def check_array(x, name: str, *, min_ndim: int = 0, ndim: int | None = None,
                shape_desc: str = "", floating: bool = True):
    """Check that ``x`` is an array (of real floating dtype unless ``floating=False``).

    Returns the namespace. ``shape_desc`` is a human form of the expected shape, e.g. "(..., n, d)".
    """
    if type(x) is np.ndarray:
        xp = _NUMPY_XP
    elif not array_api_compat.is_array_api_obj(x) or isinstance(x, (int, float, complex)):
        raise TypeError(f"{name} must be an array of shape {shape_desc or '(...)'}, "
                        f"got {type(x).__name__}")
    else:
        xp = namespace(x)
    want = f" of shape {shape_desc}" if shape_desc else ""
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions{want}, got shape {tuple(x.shape)}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions{want}, "
                         f"got shape {tuple(x.shape)}")
    # float16 is refused, not computed: its 11-bit mantissa and 65504 range give NaN or
    # meaningless results in the log-determinants, softmaxes and scans of this package
    if floating and x.dtype not in (xp.float32, xp.float64):
        raise TypeError(f"{name} must have a real floating dtype, float32 or float64, got {x.dtype}")
    return xp


def check_ids_range(ids, V: int, why: str = "", name: str = "ids") -> None:
    """Token ids must lie in [0, V) (a value check: it runs on every call)."""
    xp = namespace(ids)
    flat = xp.reshape(ids, (-1,))                                  # (B*T,)
    if flat.shape[0] > 0 and bool(xp.any((flat < 0) | (flat >= V))):
        raise ValueError(f"{name} must lie in [0, V) = [0, {V})" + (f" {why}" if why else "")
                         + f", got values in [{int(xp.min(flat))}, {int(xp.max(flat))}]")


def check_token_ids(ids, name: str, V: int, T_max: int | None = None, why: str = ""):
    """``ids`` (B, T) integer with T <= ``T_max`` and values in [0, V); returns the namespace."""
    if not array_api_compat.is_array_api_obj(ids) or isinstance(ids, (int, float, complex)):
        raise TypeError(f"{name} must be an integer array of shape (B, T), got "
                        f"{type(ids).__name__}")
    xp = namespace(ids)
    if ids.ndim != 2 or not xp.isdtype(ids.dtype, "integral"):
        raise ValueError(f"{name} must be an integer array of shape (B, T), got "
                         f"{ids.dtype} {tuple(ids.shape)}")
    if T_max is not None and ids.shape[1] > T_max:
        raise ValueError(f"{name} has T = {ids.shape[1]} tokens, more than block_size = {T_max}")
    check_ids_range(ids, V, why, name)
    return xp


def check_finite(x, name: str) -> None:
    xp = namespace(x)
    if not bool(xp.all(xp.isfinite(x))):
        raise ValueError(f"{name} contains NaN or Inf")


def check_same_dtype(**arrays) -> None:
    """All arrays must share one dtype (no silent up- or down-casts)."""
    items = list(arrays.items())
    first_name, first = items[0]
    for name, a in items[1:]:
        if a.dtype != first.dtype:
            raise TypeError(f"{name} has dtype {a.dtype} but {first_name} has {first.dtype}; "
                            f"pass arrays of one dtype")


def check_positive(value, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a positive number, got {type(value).__name__}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def shape_str(shape) -> str:
    """(8,) -> "(8,)", (3, "max_len", 1) -> "(3, max_len, 1)"."""
    return "(" + ", ".join(str(s) for s in shape) + (",)" if len(shape) == 1 else ")")


def check_param(a, name: str, shape, dtype, where: str = "") -> None:
    """One parameter array ``a`` called ``name``: present, of ``shape`` (names in ``shape``
    match any length) and of ``dtype``. Messages as for :func:`check_params`."""
    if (type(a) is np.ndarray and a.dtype == dtype and a.dtype in (np.float32, np.float64)
            and a.ndim == len(shape)
            and all(isinstance(s, str) or s == n for s, n in zip(shape, a.shape))):
        return          # passes every check below (the messages are built only for a failure)
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
    A shape of None accepts any value (a counter such as BatchNorm's num_batches_tracked).
    """
    at = f"{where}: " if where else ""
    if not isinstance(params, dict):
        raise TypeError(f"{at}params must be a dict of arrays, got {type(params).__name__}")
    for key, (shape, required) in spec.items():
        if required and params.get(key) is None:
            raise ValueError(f"{at}params is missing key {key!r} of shape {shape_str(shape)}")
    for key, a in params.items():
        if key not in spec:
            raise ValueError(f"{at}params has unknown key {key!r}; expected keys {sorted(spec)}")
        if a is not None and spec[key][0] is not None:
            check_param(a, f"params[{key!r}]", spec[key][0], dtype, where)
