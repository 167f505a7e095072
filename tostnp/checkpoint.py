"""Checkpoints: arrays in an ``.npz``, everything else in a ``.json``, both written atomically.

Path convention
---------------
A checkpoint is a *prefix* ``P``: ``save_checkpoint("runs/digits/ckpt", ...)`` writes

* ``runs/digits/ckpt.npz``  -- the arrays only (``np.savez``, uncompressed): model parameters
  under ``params/<name>`` and extra arrays (e.g. AdamW moments ``m.<name>``) under
  ``extra/<name>``;
* ``runs/digits/ckpt.json`` -- the model config, the JSON-able training state (step, RNG
  state, metrics, tokenizer, ...), and the SHA-256 of the ``.npz`` bytes.

``P`` may also be given as ``P.npz`` or ``P.json`` (the suffix is dropped). Missing parent
directories are created.

Safety
------
* Each file is written by :mod:`tostnp.io` (a temporary file in the same directory, flushed,
  ``fsync``-ed, moved into place with ``os.replace``): a crash or error never
  leaves a half-written file under the final name. The ``.npz`` goes first, then the ``.json``
  that vouches for it, so an interruption between the two is caught by the checksum on load.
* :func:`load_checkpoint` checks the SHA-256 before parsing, and loads with
  ``allow_pickle=False``: a checkpoint is data, never code (an object array is refused).

Arrays come back as host NumPy arrays; move them to a device with
:func:`tostnp.backend.from_host`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os

import numpy as np

from .backend import to_host
from .io import atomic_path, atomic_write_text

__all__ = ["save_checkpoint", "load_checkpoint", "checkpoint_paths", "resolve_checkpoint"]

_FORMAT = "tostnp-checkpoint"
_VERSION = 1


def checkpoint_paths(path) -> tuple[str, str]:
    """``(P.npz, P.json)`` for a prefix ``P`` (a trailing ``.npz``/``.json`` is dropped)."""
    path = os.fspath(path)
    for suffix in (".npz", ".json"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    if not path or path.endswith(os.sep):
        raise ValueError(f"checkpoint path must be a file prefix like 'runs/ckpt', got {path!r}")
    return path + ".npz", path + ".json"


def resolve_checkpoint(path) -> str:
    """A run directory (holding checkpoint.npz/.json) or a checkpoint prefix/file -> the prefix
    of an existing checkpoint; FileNotFoundError naming what was looked for otherwise."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, "checkpoint")
    npz_path, json_path = checkpoint_paths(path)
    prefix = json_path[: -len(".json")]
    if not os.path.isfile(json_path):
        raise FileNotFoundError(f"no checkpoint at {prefix!r} (expected {prefix}.json and "
                                f"{npz_path}, or a run directory holding checkpoint.*)")
    return prefix


def _host_arrays(arrays: dict, what: str) -> dict:
    out = {}
    for name, a in arrays.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"{what} keys must be non-empty str, got {name!r}")
        h = to_host(a)
        if not isinstance(h, np.ndarray) or h.dtype.hasobject:
            raise TypeError(f"{what}[{name!r}] must be a numeric array, got "
                            f"{type(a).__name__} of dtype {getattr(h, 'dtype', None)}")
        out[name] = h
    return out


def _json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray) and o.ndim == 0:
        return o.item()
    raise TypeError(f"checkpoint config/state values must be JSON-able, got {type(o).__name__} "
                    f"(put arrays in params or extra_arrays)")


def save_checkpoint(path, params: dict, config, extra_arrays: dict | None = None,
                    state: dict | None = None) -> tuple[str, str]:
    """Write ``P.npz`` + ``P.json`` atomically (see the module docstring). Returns both paths.

    params / extra_arrays: flat ``{name: array}`` dicts (any backend; copied to the host).
    config: a dict or a dataclass instance (stored as a dict). state: JSON-able dict
    (NumPy scalars are converted).
    """
    npz_path, json_path = checkpoint_paths(path)
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays, got {type(params).__name__}")
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        config = dataclasses.asdict(config)
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict or a dataclass instance, got "
                        f"{type(config).__name__}")
    extra_arrays = {} if extra_arrays is None else extra_arrays
    if not isinstance(extra_arrays, dict):
        raise TypeError(f"extra_arrays must be a dict of arrays or None, got "
                        f"{type(extra_arrays).__name__}")
    state = {} if state is None else state
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict or None, got {type(state).__name__}")

    arrays = {f"params/{k}": v for k, v in _host_arrays(params, "params").items()}
    arrays.update({f"extra/{k}": v for k, v in _host_arrays(extra_arrays, "extra_arrays").items()})
    # Serialise the JSON part first, so a non-JSON-able value fails before anything is written.
    meta = {"format": _FORMAT, "version": _VERSION, "config": config, "state": state}
    json.dumps(meta, default=_json_default)

    with atomic_path(npz_path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        h = hashlib.sha256()
        with open(tmp, "rb") as r:  # hash what is on disk (read back from the page cache)
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
    meta.update(npz=os.path.basename(npz_path), npz_sha256=h.hexdigest())
    atomic_write_text(json_path, json.dumps(meta, default=_json_default, indent=1, sort_keys=True))
    return npz_path, json_path


def load_checkpoint(path):
    """Read a checkpoint written by :func:`save_checkpoint`.

    Returns ``(params, config, extra_arrays, state)``: host NumPy arrays in the two dicts,
    config and state as saved (JSON round trip: tuples come back as lists).
    Raises FileNotFoundError if either file is missing and ValueError if the ``.npz`` does not
    match its recorded SHA-256 ("corrupted or truncated") or holds object (pickled) arrays.
    """
    npz_path, json_path = checkpoint_paths(path)
    for p in (json_path, npz_path):
        if not os.path.isfile(p):
            raise FileNotFoundError(f"checkpoint file {p!r} does not exist (a checkpoint is the "
                                    f"pair {os.path.basename(npz_path)} + "
                                    f"{os.path.basename(json_path)})")
    with open(json_path, "rb") as f:
        try:
            meta = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"checkpoint {json_path!r} is corrupted or truncated "
                             f"(not valid JSON: {e})") from e
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"{json_path!r} is not a tostnp checkpoint")
    if meta.get("version") != _VERSION:
        raise ValueError(f"{json_path!r} has checkpoint version {meta.get('version')!r}; this "
                         f"tostnp reads version {_VERSION}")
    with open(npz_path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != meta.get("npz_sha256"):
        raise ValueError(f"checkpoint {npz_path!r} is corrupted or truncated: its SHA-256 does "
                         f"not match the one recorded in {json_path!r}")
    params, extra = {}, {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            for key in z.files:
                a = z[key]  # raises ValueError for object arrays: never unpickled
                group, _, name = key.partition("/")
                if group == "params":
                    params[name] = a
                elif group == "extra":
                    extra[name] = a
                else:
                    raise ValueError(f"unexpected array {key!r}")
    except ValueError as e:
        raise ValueError(f"checkpoint {npz_path!r} refused: {e} (checkpoints hold plain numeric "
                         f"arrays only; object/pickled arrays are never loaded)") from e
    return params, meta["config"], extra, meta["state"]
