"""Bounds on what a file can make tostnp parse (the memory budget is :mod:`tostnp.backend.budget`).

* :func:`loads_json` -- ``json.loads`` with a size and a nesting-depth limit, checked before
  parsing (Python's parser recurses: a crafted ``[[[[...]]]]`` would otherwise end in a
  RecursionError). Checkpoint metadata, their ``.json`` copies and safetensors headers all go
  through it.
"""
from __future__ import annotations

import json
import re

import numpy as np

__all__ = ["loads_json", "json_depth", "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 64              # tostnp writes at most 4 levels; published metadata is flat


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_OPEN, _CLOSE = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays/objects in the JSON text ``raw`` (strings skipped)."""
    b = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    step = np.isin(b, _OPEN).astype(np.int32) - np.isin(b, _CLOSE).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def loads_json(raw: bytes, what: str, *, max_bytes: int = 64 << 20,
               max_depth: int = MAX_JSON_DEPTH):
    """Parse the UTF-8 JSON ``raw`` -> a Python value; ValueError naming ``what`` when it is
    larger than ``max_bytes``, nested deeper than ``max_depth``, or not valid JSON."""
    if len(raw) > max_bytes:
        raise ValueError(f"{what}: {len(raw):,} bytes of JSON, more than the {max_bytes:,} "
                         f"allowed")
    depth = json_depth(raw)
    if depth > max_depth:
        raise ValueError(f"{what}: JSON nested {depth} levels deep, more than the {max_depth} "
                         f"allowed")
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what} is not valid JSON ({e})") from None
