"""tostnp's flat parameter dict <-> the published ``state_dict`` arrays, for
:mod:`tostnp.io.interchange` (the mapping kinds are listed in :mod:`tostnp.io.interchange.layout`)."""
from __future__ import annotations

import math

import numpy as np

from .layout import (InterchangeError, _entries, describe_config, infer_config, published_layout,
                     strip_wrappers)

__all__ = ["to_published", "from_published", "check_layout"]


# ---------------------------------------------------------------------------------------------
# tostnp <-> published
# ---------------------------------------------------------------------------------------------
def _to_pub(kind, arrays, dtype):
    if kind == "id":
        return arrays[0].astype(dtype, copy=False)
    if kind == "T":
        return arrays[0].T.astype(dtype, copy=False)
    if kind == "conv":
        return arrays[0].transpose(3, 2, 0, 1).astype(dtype, copy=False)
    if kind == "1x1":
        return arrays[0].T[:, :, None, None].astype(dtype, copy=False)
    if kind == "count":
        v = float(arrays[0])
        if not (v >= 0 and v == math.floor(v)):
            raise InterchangeError(f"a BatchNorm batch count must be a whole number >= 0, got {v}")
        return np.asarray(int(v), dtype=np.int64)
    if kind == "qkv":
        return np.concatenate(arrays, axis=1).T.astype(dtype, copy=False)
    if kind == "qkv_b":
        return np.concatenate(arrays, axis=0).astype(dtype, copy=False)
    raise AssertionError(kind)


def _from_pub(kind, a, C):
    if kind == "id":
        return [a]
    if kind == "T":
        return [a.T]
    if kind == "conv":
        return [a.transpose(2, 3, 1, 0)]
    if kind == "1x1":
        return [a[:, :, 0, 0].T]
    if kind == "count":
        return [a.astype(np.float64)]
    if kind == "qkv":
        w = a.T                                                     # (C, 3C) = [W_q | W_kv]
        return [w[:, :C], w[:, C:]]
    if kind == "qkv_b":
        return [a[:C], a[C:]]
    raise AssertionError(kind)


def to_published(kind: str, cfg, params: dict, dtype=np.float32) -> dict:
    """tostnp parameters (host arrays) -> {published name: array}, in the published order.

    Float tensors are written in ``dtype`` (float32 as published), the BatchNorm counts as int64.
    """
    from ...backend import to_host
    if kind == "vision":
        need = {"stem": "conv", "pos": "fourier", "pool": "cls", "cab": "published"}
        bad = [f"{k}={getattr(cfg, k)!r} (needs {v!r})" for k, v in need.items()
               if getattr(cfg, k) != v]
        if bad:
            raise InterchangeError("only models of the published form can be exported: "
                                   + ", ".join(bad))
    elif cfg.ln_shift != cfg.bias:
        raise InterchangeError(f"the published LM has LayerNorm shifts and linear biases both "
                               f"(bias=True) or neither (bias=False); this model has "
                               f"bias={cfg.bias}, LayerNorm shifts={cfg.ln_shift}")
    out = {}
    used = set()
    for name, shape, dt, keys, how in _entries(kind, cfg):
        missing = [k for k in keys if k not in params]
        if missing:
            raise InterchangeError(f"the model has no parameter {missing[0]!r} (for {name!r})")
        a = _to_pub(how, [to_host(params[k]) for k in keys], dtype)
        if tuple(a.shape) != shape:
            raise InterchangeError(f"parameter for {name!r} has shape {tuple(a.shape)} after "
                                   f"mapping, expected {shape}")
        out[name] = a
        used.update(keys)
    extra = sorted(set(params) - used)
    if extra:
        raise InterchangeError(f"the model has parameters the published layout does not hold: "
                               f"{', '.join(extra[:5])}")
    return out


def from_published(tensors: dict, *, image_size: int = 224, cfg=None):
    """{name: host array} in the published layout -> (kind, cfg, tostnp params as host arrays).

    Names may be wrapped (``_orig_mod.``, ``module.``). Every check of the module docstring runs
    before any conversion; the arrays come back in float64 or float32 as stored (the caller
    casts). ``cfg``: the architecture if already known (else inferred).
    """
    names = strip_wrappers(tensors)
    shapes = {n: tuple(tensors[f].shape) for n, f in names.items()}
    dtypes = {n: np.dtype(tensors[f].dtype) for n, f in names.items()}
    kind, cfg = (infer_config(shapes, image_size=image_size) if cfg is None
                 else (("vision" if hasattr(cfg, "patch_size") else "lm"), cfg))
    check_layout(kind, cfg, shapes, dtypes)
    if kind == "lm":
        a, b = names.get("transformer.wte.weight"), names.get("lm_head.weight")
        if a is not None and b is not None and not np.array_equal(tensors[a], tensors[b]):
            raise InterchangeError("'lm_head.weight' differs from 'transformer.wte.weight'; "
                                   "tostnp's head is tied to the token embedding")
    for n, f in names.items():
        if dtypes[n].kind == "f" and not np.all(np.isfinite(tensors[f])):
            raise InterchangeError(f"tensor {n!r} contains NaN or Inf")
    params = {}
    for name, shape, dt, keys, how in _entries(kind, cfg):
        if name not in names:                                       # the other tied LM name
            continue
        for k, a in zip(keys, _from_pub(how, tensors[names[name]], cfg.width)):
            params[k] = a            # a view: callers make it row-major (see convert)
    return kind, cfg, params


def check_layout(kind: str, cfg, shapes: dict, dtypes: dict) -> None:
    """Names, shapes and dtypes against :func:`published_layout` (InterchangeError naming the
    first difference). The LM may hold one of its two tied names."""
    layout = published_layout(kind, cfg)
    want = {n: (s, d) for n, s, d in layout}
    unexpected = [n for n in shapes if n not in want]
    if unexpected:
        raise InterchangeError(f"unexpected tensor {unexpected[0]!r} (not in the published "
                               f"{kind} layout for {describe_config(kind, cfg)})")
    tied = {"transformer.wte.weight", "lm_head.weight"}
    for n, (s, d) in want.items():
        if n not in shapes:
            if kind == "lm" and n in tied and (tied - {n}) & set(shapes):
                continue
            raise InterchangeError(f"missing tensor {n!r} (expected shape {s})")
        if tuple(shapes[n]) != tuple(s):
            raise InterchangeError(f"tensor {n!r} has shape {tuple(shapes[n])}, expected {s}")
        got = dtypes[n]
        ok = got == np.int64 if d == "int64" else got in (np.float32, np.float64)
        if not ok:
            raise InterchangeError(f"tensor {n!r} has dtype {got}, expected {d}"
                                   + ("" if d == "int64" else " (or float64)"))
