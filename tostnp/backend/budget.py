"""The memory budget: what a file or an option may make tostnp allocate, checked first.

* :func:`memory_budget` -- the bytes this process may plan to use: the memory the system reports
  available (``MemAvailable`` on Linux), lowered to the address-space limit when one is set
  (``ulimit -v``); :func:`memory_limit` raises or lowers it for a ``with`` block (the CLI's
  ``--max-memory-gb``).
* :func:`check_memory` -- ValueError naming what would not fit, *before* it is allocated.
"""
from __future__ import annotations

import contextlib
import os

__all__ = ["memory_budget", "memory_limit", "check_memory", "format_bytes"]

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
