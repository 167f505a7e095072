"""Checkpoints: arrays and metadata in one ``.npz`` (the atomic unit), a readable ``.json`` beside it.

Path convention
---------------
A checkpoint is a *prefix* ``P``: ``save_checkpoint("runs/digits/ckpt", ...)`` writes

* ``runs/digits/ckpt.npz``  -- the checkpoint: model parameters under ``params/<name>``, extra
  arrays (e.g. AdamW moments ``m.<name>``) under ``extra/<name>``, and the metadata (model
  config, JSON-able training state: step, RNG state, tokenizer, ...) as UTF-8 JSON bytes in the
  member ``__meta__`` (``np.savez``, uncompressed);
* ``runs/digits/ckpt.json`` -- a readable copy of that metadata plus the SHA-256 of the ``.npz``
  bytes, for people and tools.

``P`` may also be given as ``P.npz`` or ``P.json`` (the suffix is dropped). Missing parent
directories are created.

Safety
------
* **One atomic unit.** Everything needed to resume lives in the ``.npz``, written by
  :func:`tostnp.io.atomic.atomic_path` (a temporary file in the same directory, flushed, ``fsync``-ed,
  moved into place with one ``os.replace``). A process killed at any instant leaves either the
  previous checkpoint or the new one, never a mix; the ``.json`` copy is refreshed afterwards,
  and a stale copy (killed between the two renames) is recognised by its ``save_id`` and ignored.
  Temporary files left by a killed save are removed by the next save (:func:`clean_temporaries`;
  only those of writers that no longer run).
* **Validated before anything is allocated.** :func:`load_checkpoint` reads the zip directory
  first (itself at most 16 MiB): only ``params/*``, ``extra/*`` and ``__meta__`` members, stored
  uncompressed (a compressed member could inflate without bound), each a ``.npy`` of a plain
  numeric dtype whose header shape times item size equals the member's size, all of them
  together at most ``max_bytes`` and within the memory available
  (:func:`tostnp.backend.budget.memory_budget`). Members are then streamed into their arrays (the
  file is never read whole); the metadata is JSON of bounded size and nesting depth
  (:func:`tostnp.io.limits.loads_json`). Zip CRCs detect corrupted bytes; ``allow_pickle`` is
  never used: a checkpoint is data, never code (an object array is refused).

Arrays come back as host NumPy arrays; move them to a device with
:func:`tostnp.backend.from_host`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import struct
import uuid
import zipfile

import numpy as np

from ..backend import to_host
from .atomic import atomic_path, atomic_write_text, clean_stale_temporaries
from ..backend.budget import check_memory
from .limits import loads_json

__all__ = ["save_checkpoint", "load_checkpoint", "checkpoint_paths", "resolve_checkpoint",
           "clean_temporaries", "MAX_CHECKPOINT_BYTES"]

_FORMAT = "tostnp-checkpoint"
_VERSION = 2            # 2: metadata inside the npz; version 1 (metadata only in the json) loads
_META = "__meta__"
# 4 GiB: ~1e9 float32 parameters with their AdamW moments -- far above every preset here
MAX_CHECKPOINT_BYTES = 4 << 30
_MAX_META_BYTES = 64 << 20      # config + state JSON (a BPE tokenizer's merges are ~100 kB)
_MAX_DIRECTORY_BYTES = 16 << 20  # the zip's central directory (~100 bytes per member)
_NAME = re.compile(r"^(params|extra)/[A-Za-z0-9_.\-]{1,200}$")
# plain numeric dtypes only (no objects, strings, structured or float16 arrays)
_DTYPES = {np.dtype(t) for t in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                 "uint32", "uint64", "float32", "float64")}


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
    prefix = npz_path[: -len(".npz")]
    if not os.path.isfile(npz_path):
        raise FileNotFoundError(f"no checkpoint at {prefix!r} (expected {npz_path}, or a run "
                                f"directory holding checkpoint.npz)")
    return prefix


def clean_temporaries(path) -> list:
    """Remove the temporary files a killed :func:`save_checkpoint` of prefix ``path`` left behind
    (:func:`tostnp.io.atomic.atomic_path` writes them in a folder of its writer's,
    ``.tostnp-tmp-<pid>-<random>/``); a temporary of another process that still runs is left
    alone, and nothing else is ever removed.

    Returns the removed paths. Called by every save; call it when a run (re)starts.
    """
    removed = []
    for final in checkpoint_paths(path):
        d = os.path.dirname(os.path.abspath(final))
        removed += clean_stale_temporaries(d, os.path.basename(final))
    return removed


def _host_arrays(arrays: dict, what: str) -> dict:
    out = {}
    for name, a in arrays.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]{1,200}", name):
            raise TypeError(f"{what} keys must be non-empty str of letters, digits and '._-', "
                            f"got {name!r}")
        h = to_host(a)
        if not isinstance(h, np.ndarray) or np.dtype(h.dtype) not in _DTYPES:
            raise TypeError(f"{what}[{name!r}] must be a numeric array (bool, int, uint, float32 "
                            f"or float64), got {type(a).__name__} of dtype "
                            f"{getattr(h, 'dtype', None)}")
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
    """Write ``P.npz`` (atomically, the whole checkpoint) and its readable copy ``P.json``.

    See the module docstring. Returns both paths.
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
    meta = {"format": _FORMAT, "version": _VERSION, "config": config, "state": state,
            "save_id": uuid.uuid4().hex}
    meta_bytes = json.dumps(meta, default=_json_default, sort_keys=True).encode("utf-8")
    arrays[_META] = np.frombuffer(meta_bytes, dtype=np.uint8)

    os.makedirs(os.path.dirname(os.path.abspath(npz_path)), exist_ok=True)
    clean_temporaries(path)
    with atomic_path(npz_path) as tmp:                  # the commit point: one rename
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        h = hashlib.sha256()
        with open(tmp, "rb") as r:  # hash what is on disk (read back from the page cache)
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
    meta.update(npz=os.path.basename(npz_path), npz_sha256=h.hexdigest())
    atomic_write_text(json_path, json.dumps(meta, default=_json_default, indent=1, sort_keys=True))
    return npz_path, json_path


def _read_sidecar(json_path):
    """The parsed ``.json`` copy, or None if there is none."""
    if not os.path.isfile(json_path):
        return None
    with _open_regular(json_path, "checkpoint copy") as f:
        raw = f.read(_MAX_META_BYTES + 1)
    try:
        meta = loads_json(raw, f"checkpoint {json_path!r}", max_bytes=_MAX_META_BYTES)
    except ValueError as e:
        raise ValueError(f"{e} (corrupted or truncated)") from None
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"{json_path!r} is not a tostnp checkpoint")
    return meta


def _read_member(zf, info, npz_path):
    """One ``.npy`` member, its header checked against its size before the array is allocated;
    the bytes are read straight into the array (no second copy)."""
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except ValueError as e:
            raise ValueError(f"checkpoint {npz_path!r} member {info.filename!r} is not a plain "
                             f".npy array: {e}") from None
        if dtype.hasobject:
            raise ValueError(f"checkpoint {npz_path!r} refused: member {info.filename!r} is an "
                             f"object (pickled) array; checkpoints hold plain numeric arrays "
                             f"only and object/pickled arrays are never loaded")
        if dtype not in _DTYPES:
            raise ValueError(f"checkpoint {npz_path!r} member {info.filename!r} has dtype "
                             f"{dtype}; allowed: bool, int8-64, uint8-64, float32, float64")
        if len(shape) > 32 or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise ValueError(f"checkpoint {npz_path!r} member {info.filename!r} declares shape "
                             f"{str(shape)[:80]}; a shape is at most 32 sizes >= 0")
        count = 1
        for s in shape:
            count *= int(s)
        header = f.tell()
        if count * dtype.itemsize != info.file_size - header:
            raise ValueError(f"checkpoint {npz_path!r} member {info.filename!r} declares shape "
                             f"{shape} ({count * dtype.itemsize} bytes) but holds "
                             f"{info.file_size - header} bytes")
        a = np.empty(count, dtype=dtype)
        buf = memoryview(a).cast("B")
        pos = 0
        while pos < len(buf):
            chunk = f.read(min(len(buf) - pos, 16 << 20))
            if not chunk:
                raise EOFError(f"member {info.filename!r} ends early")
            buf[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        f.read(1)            # reaching the end checks the member's CRC-32
    return a.reshape(shape, order="F" if fortran else "C")


def _check_directory_size(f, npz_path) -> None:
    """Refuse a zip whose central directory (read whole by :mod:`zipfile`) is crafted huge."""
    try:
        end = zipfile._EndRecData(f)
    except (OSError, zipfile.BadZipFile, struct.error):
        return                                  # zipfile itself will say what is wrong
    if end and end[zipfile._ECD_SIZE] > _MAX_DIRECTORY_BYTES:
        raise ValueError(f"checkpoint {npz_path!r} refused: its zip directory declares "
                         f"{end[zipfile._ECD_SIZE]:,} bytes, more than the "
                         f"{_MAX_DIRECTORY_BYTES:,} allowed")


def _sha256_file(f) -> str:
    """SHA-256 of an open file, from its start."""
    h = hashlib.sha256()
    f.seek(0)
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
    return h.hexdigest()


def _open_regular(path, what: str):
    """Open ``path`` for reading; refuse a FIFO, device or directory (opening a FIFO does not
    wait: O_NONBLOCK)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{what} {path!r} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_checkpoint(path, *, max_bytes: int = MAX_CHECKPOINT_BYTES):
    """Read a checkpoint written by :func:`save_checkpoint` (or by version 1 of it).

    Returns ``(params, config, extra_arrays, state)``: host NumPy arrays in the two dicts,
    config and state as saved (JSON round trip: tuples come back as lists).
    Raises FileNotFoundError if the ``.npz`` (or, for version 1, the ``.json``) is missing and
    ValueError if anything does not check out: corrupted or truncated bytes, members other than
    plain numeric arrays, compressed members, more than ``max_bytes`` of arrays or more than the
    memory available (:func:`tostnp.backend.budget.memory_budget`), metadata that is not a tostnp
    checkpoint or JSON nested too deep. Sizes are checked from the zip directory and the
    ``.npy`` headers before anything is read; the file is never read whole into memory.
    """
    npz_path, json_path = checkpoint_paths(path)
    if not os.path.isfile(npz_path):
        raise FileNotFoundError(f"checkpoint file {npz_path!r} does not exist (a checkpoint is "
                                f"{os.path.basename(npz_path)}, with the readable copy "
                                f"{os.path.basename(json_path)} beside it)")
    corrupt = (f"checkpoint {npz_path!r} is corrupted or truncated")
    # Everything is read from one open file: a writer that replaces the checkpoint meanwhile
    # (os.replace) leaves this reader on the whole old file, never on a mix of two saves.
    with _open_regular(npz_path, "checkpoint") as fobj:
        meta, arrays = _read_npz(fobj, npz_path, corrupt, max_bytes)
        side = _read_sidecar(json_path)
        if meta is not None and side is not None and side.get("save_id") == meta.get("save_id"):
            if side.get("npz_sha256") != _sha256_file(fobj):
                raise ValueError(f"{corrupt}: its SHA-256 does not match the one recorded in "
                                 f"{json_path!r}")
            # a json copy with another save_id is stale or newer (a writer between its two
            # renames, or done since this file was opened): ignored
        if meta is None:                                       # version 1: metadata in the json
            if side is None:
                raise FileNotFoundError(f"checkpoint file {json_path!r} does not exist (a "
                                        f"version-1 checkpoint is the pair "
                                        f"{os.path.basename(npz_path)} + "
                                        f"{os.path.basename(json_path)})")
            if side.get("npz_sha256") != _sha256_file(fobj):
                raise ValueError(f"{corrupt}: its SHA-256 does not match the one recorded in "
                                 f"{json_path!r}")
            meta = side
            _check_meta(meta, npz_path)
    params = {k[7:]: a for k, a in arrays.items() if k.startswith("params/")}
    extra = {k[6:]: a for k, a in arrays.items() if k.startswith("extra/")}
    return params, meta["config"], extra, meta["state"]


def _read_npz(fobj, npz_path, corrupt, max_bytes):
    """``(meta or None, {member: array})`` of an open ``.npz``, every size checked first."""
    _check_directory_size(fobj, npz_path)
    try:
        zf = zipfile.ZipFile(fobj)
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise ValueError(f"{corrupt} ({e})") from None
    with zf:
        names = [i.filename for i in infos]
        if len(set(names)) != len(names):
            raise ValueError(f"checkpoint {npz_path!r} refused: duplicate members")
        total = 0
        for i in infos:
            key = i.filename[:-4] if i.filename.endswith(".npy") else None
            if key is None or not (key == _META or _NAME.match(key)):
                raise ValueError(f"checkpoint {npz_path!r} refused: unknown member "
                                 f"{i.filename!r} (a checkpoint holds params/<name>, "
                                 f"extra/<name> and {_META})")
            if i.compress_type != zipfile.ZIP_STORED:
                raise ValueError(f"checkpoint {npz_path!r} refused: member {i.filename!r} is "
                                 f"compressed (tostnp checkpoints are stored uncompressed; a "
                                 f"compressed member could inflate without bound)")
            if key == _META and i.file_size > _MAX_META_BYTES + 128:
                raise ValueError(f"checkpoint {npz_path!r} refused: member {i.filename!r} "
                                 f"declares {i.file_size:,} bytes of metadata, more than the "
                                 f"{_MAX_META_BYTES:,} allowed")
            total += i.file_size
        if total > max_bytes:
            raise ValueError(f"checkpoint {npz_path!r} refused: its arrays declare {total:,} "
                             f"bytes, more than the limit max_bytes={max_bytes:,}")
        check_memory(total, f"checkpoint {npz_path!r} (its arrays, from the zip directory)")
        try:
            metas = [i for i in infos if i.filename == _META + ".npy"]
            meta_arr = _read_member(zf, metas[0], npz_path) if metas else None
            meta = None
            if meta_arr is not None:                           # version 2: metadata inside
                if meta_arr.dtype != np.uint8 or meta_arr.ndim != 1:
                    raise ValueError(f"checkpoint {npz_path!r} refused: {_META} must be UTF-8 "
                                     f"bytes")
                meta = loads_json(meta_arr.tobytes(), f"checkpoint {npz_path!r} field {_META}",
                                  max_bytes=_MAX_META_BYTES)
                _check_meta(meta, npz_path)
            arrays = {i.filename[:-4]: _read_member(zf, i, npz_path) for i in infos
                      if i.filename != _META + ".npy"}
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise ValueError(f"{corrupt} ({e})") from None
    return meta, arrays


def _check_meta(meta, npz_path) -> None:
    if not isinstance(meta, dict) or meta.get("format") != _FORMAT:
        raise ValueError(f"{npz_path!r} is not a tostnp checkpoint")
    if meta.get("version") not in (1, _VERSION):
        raise ValueError(f"{npz_path!r} has checkpoint version {meta.get('version')!r}; this "
                         f"tostnp reads versions 1 and {_VERSION}")
    for key in ("config", "state"):
        if not isinstance(meta.get(key), dict):
            raise ValueError(f"checkpoint {npz_path!r}: metadata field {key!r} must be a JSON "
                             f"object, got {type(meta.get(key)).__name__}")
