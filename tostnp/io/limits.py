"""Bounds on what a file or an option can make tostnp allocate: the memory budget and JSON depth.

* :func:`memory_budget` -- the bytes this process may plan to use: the memory the system reports
  available (``MemAvailable`` on Linux), lowered to the address-space limit when one is set
  (``ulimit -v``); :func:`memory_limit` raises or lowers it for a ``with`` block (the CLI's
  ``--max-memory-gb``).
* :func:`check_memory` -- ValueError naming what would not fit, *before* it is allocated.
* :func:`loads_json` -- ``json.loads`` with a size and a nesting-depth limit, checked before
  parsing (Python's parser recurses: a crafted ``[[[[...]]]]`` would otherwise end in a
  RecursionError). Checkpoint metadata, their ``.json`` copies and safetensors headers all go
  through it.
"""
from __future__ import annotations

import contextlib
import json
import os
import re

import numpy as np

__all__ = ["memory_budget", "memory_limit", "check_memory", "format_bytes", "loads_json",
           "MAX_JSON_DEPTH"]

MAX_JSON_DEPTH = 64              # tostnp writes at most 4 levels; published metadata is flat
_override: list = []             # the stack of memory_limit() blocks (bytes)


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _address_space_left() -> int | None:
    """The room left under ``RLIMIT_AS`` (None: unlimited or unknown)."""
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY:
        return None
    used = 0
    try:
        with open("/proc/self/statm", "rb") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        pass
    return max(soft - used, 0)


def memory_budget() -> int:
    """Bytes this process may plan to allocate (see the module docstring)."""
    if _override:
        return _override[-1]
    avail = _mem_available()
    room = _address_space_left()
    cands = [v for v in (avail, room) if v is not None]
    return min(cands) if cands else 1 << 62


@contextlib.contextmanager
def memory_limit(gigabytes: float | None):
    """Inside the block, :func:`memory_budget` is ``gigabytes`` GB (None: unchanged)."""
    if gigabytes is None:
        yield
        return
    _override.append(int(gigabytes * 1e9))
    try:
        yield
    finally:
        _override.pop()


def format_bytes(n: float) -> str:
    return f"{n / 1e9:.3g} GB" if n >= 1e8 else f"{n / 1e6:.3g} MB"


def check_memory(nbytes: float, what: str) -> None:
    """ValueError when ``nbytes`` (an estimate) exceeds :func:`memory_budget`."""
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(f"{what} needs about {format_bytes(nbytes)}, more than the "
                         f"{format_bytes(budget)} of memory available (--max-memory-gb raises "
                         f"the limit)")


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
