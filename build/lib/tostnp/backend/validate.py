"""Input checks shared by every public function: clear errors that name the argument.

Every message says which argument is wrong, what was expected (shape/type) and what came.
"""
from __future__ import annotations

import contextlib
import threading

import array_api_compat

from . import namespace

_state = threading.local()      # depth > 0: inside a model call whose inputs were checked


def checks_off() -> bool:
    """True inside :func:`checked_once`'s trusted block (the inner layers skip their checks)."""
    return getattr(_state, "depth", 0) > 0


@contextlib.contextmanager
def trusted():
    """Skip the structural checks (check_array, tostnp.nn.params) of the calls inside."""
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


_SEEN: dict = {}                # signatures of calls that passed every check (insertion order)
_SEEN_MAX = 64


def _signature(key, params, x):
    """What the checks of a model call depend on: the model config, the input's array type,
    shape and dtype, and every parameter's name, array type, shape and dtype (None if not
    computable)."""
    try:
        return (key, type(x), tuple(x.shape), x.dtype,
                tuple((k, type(a), tuple(a.shape), a.dtype) for k, a in params.items()))
    except (AttributeError, TypeError):
        return None


@contextlib.contextmanager
def checked_once(key, params, x):
    """Validation at the public boundary of a model call, once per kind of call.

    The first call with a given signature (``key``, typically the model config; the input's
    type, shape and dtype; every parameter's name, type, shape and dtype) runs every layer's
    checks, so every error keeps its message. Later calls with the same signature run the layers
    in :func:`trusted` mode: their structural checks would pass again, so they are skipped.
    Checks of values (token ids in range) are not structural and run on every call.
    Yields True when the block runs trusted.
    """
    sig = _signature(key, params, x)
    if sig is not None and sig in _SEEN:
        with trusted():
            yield True
        return
    yield False
    if sig is not None:         # only reached when the checked call raised nothing
        if len(_SEEN) >= _SEEN_MAX:
            _SEEN.pop(next(iter(_SEEN)))
        _SEEN[sig] = True


def check_array(x, name: str, *, min_ndim: int = 0, ndim: int | None = None,
                shape_desc: str = "", floating: bool = True):
    """Check that ``x`` is an array (of real floating dtype unless ``floating=False``).

    Returns the namespace. ``shape_desc`` is a human form of the expected shape, e.g. "(..., n, d)".
    Inside a trusted model call (:func:`checked_once`) only the namespace is looked up.
    """
    if getattr(_state, "depth", 0):
        return namespace(x)
    if not array_api_compat.is_array_api_obj(x) or isinstance(x, (int, float, complex)):
        raise TypeError(f"{name} must be an array of shape {shape_desc or '(...)'}, "
                        f"got {type(x).__name__}")
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
