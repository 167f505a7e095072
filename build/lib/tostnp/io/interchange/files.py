"""``.safetensors`` files for :mod:`tostnp.io.interchange`: the header checked before anything is
read, reading into tostnp parameters, atomic writing (:mod:`tostnp.io.atomic`)."""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from .layout import InterchangeError, infer_config, strip_wrappers
from .mapping import check_layout, from_published

__all__ = ["read_header", "read_safetensors", "write_safetensors", "TORCH_TO_SAFETENSORS",
           "MAX_HEADER_BYTES"]

# A real header is a few kB (about 100 bytes per tensor); anything this large is refused unread.
MAX_HEADER_BYTES = 8 << 20
_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}

TORCH_TO_SAFETENSORS = """\
  import torch, safetensors.torch
  sd = torch.load("{src}", map_location="cpu", weights_only=True)
  sd = sd.get("model", sd)            # training checkpoints keep the weights under "model"
  safetensors.torch.save_file({{k: v.detach().clone().contiguous() for k, v in sd.items()}},
                              "{dst}")"""


# ---------------------------------------------------------------------------------------------
# safetensors files
# ---------------------------------------------------------------------------------------------
def read_header(path: str) -> dict:
    """The safetensors JSON header of ``path`` (checked: size, JSON, entries), nothing else read."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InterchangeError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise InterchangeError(f"{path}: not a safetensors file (its header length {n} "
                                       f"runs past the end of the {size}-byte file)")
            if n > MAX_HEADER_BYTES:
                raise InterchangeError(f"{path}: safetensors header of {n} bytes is larger than "
                                       f"the {MAX_HEADER_BYTES} allowed; refused unread")
            raw = f.read(n)
    except OSError as e:
        raise InterchangeError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InterchangeError(f"{path}: not a safetensors file (the header is not JSON)") from None
    if not isinstance(header, dict):
        raise InterchangeError(f"{path}: not a safetensors file (the header is not a JSON object)")
    data_len = size - 8 - n
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(e, dict) and isinstance(e.get("shape"), list)
                and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
                and isinstance(e.get("dtype"), str)):
            raise InterchangeError(f"{path}: not a safetensors file (bad entry for {name!r})")
        if e["dtype"] not in _ST_DTYPES:
            raise InterchangeError(f"tensor {name!r} has dtype {e['dtype']}, expected F32 "
                                   f"(float32), F64 or I64 (BatchNorm counts)")
        a, b = e["data_offsets"]
        count = math.prod(int(s) for s in e["shape"])
        if not (0 <= a <= b <= data_len
                and b - a == count * np.dtype(_ST_DTYPES[e["dtype"]]).itemsize):
            raise InterchangeError(f"{path}: not a safetensors file (tensor {name!r} does not fit "
                                   f"its data range)")
    return header


def read_safetensors(path: str, *, image_size: int = 224):
    """-> (kind, cfg, params (host arrays), metadata dict) for a published-layout file.

    Names, shapes and dtypes are checked from the header before any tensor is read.
    """
    header = read_header(path)
    meta = header.get("__metadata__") or {}
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    names = strip_wrappers(entries)
    shapes = {n: tuple(int(s) for s in entries[f]["shape"]) for n, f in names.items()}
    dtypes = {n: np.dtype(_ST_DTYPES[entries[f]["dtype"]]) for n, f in names.items()}
    kind, cfg = infer_config(shapes, image_size=image_size)
    check_layout(kind, cfg, shapes, dtypes)
    from safetensors import safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            tensors = {k: f.get_tensor(k) for k in entries}
    except Exception as e:  # the library's own format errors
        raise InterchangeError(f"{path}: not a readable safetensors file ({e})") from None
    kind, cfg, params = from_published(tensors, cfg=cfg)
    return kind, cfg, params, dict(meta)


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``tensors`` (name -> host array) atomically (temporary file, fsync, rename)."""
    from safetensors.numpy import save
    from ..atomic import atomic_write_bytes
    data = save({k: np.asarray(v, order="C") for k, v in tensors.items()},
                metadata={str(k): str(v) for k, v in (metadata or {}).items()})
    atomic_write_bytes(path, data)
