"""Peak memory of a call, two ways: what NumPy allocated (tracemalloc) and what the process held
(resident set size, RSS, from Linux's /proc/self/status).

* :func:`traced_peak_bytes` -- the high-water mark of the bytes allocated through Python's and
  NumPy's allocators during ``fn()``, above what was allocated before (NumPy reports its
  buffers to tracemalloc). Deterministic; blind to memory that other libraries (PyTorch, BLAS
  work buffers) allocate themselves.
* :func:`peak_rss_bytes` -- the process's RSS high-water mark (VmHWM): every page the process
  held, whoever allocated it, including freed memory the allocator kept. With
  :func:`reset_peak_rss` first (Linux >= 4.0: "5" to /proc/self/clear_refs) it is the peak
  since that moment. None where /proc is not there.
* :func:`workers_private_bytes` -- the memory the shard worker processes hold that this process
  does not share with them (their private pages: after a warm-up, with freed memory kept, their
  peak). Add it to this process's RSS for the memory of a step that runs in shard workers.
"""
from __future__ import annotations

import tracemalloc

__all__ = ["traced_peak_bytes", "rss_bytes", "peak_rss_bytes", "reset_peak_rss",
           "workers_private_bytes"]


def traced_peak_bytes(fn) -> int:
    """Bytes allocated at the high-water mark of ``fn()`` (its results count until it
    returns; its inputs, allocated before, do not), plus the peaks of the shard workers' steps
    in it (the last step's: they run beside this process's shard)."""
    from ..train import shard_workers
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    shard_workers.tracing(True)
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        del out
        peak += sum(shard_workers.traced_peaks())
    finally:
        shard_workers.tracing(False)
        if not was_tracing:
            tracemalloc.stop()
    return int(peak)


def _status_kb(field: str):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes():
    """The process's resident set size now (bytes), or None."""
    kb = _status_kb("VmRSS")
    return None if kb is None else kb * 1024


def peak_rss_bytes():
    """The process's RSS high-water mark (bytes) since it started or since the last
    :func:`reset_peak_rss`, or None."""
    kb = _status_kb("VmHWM")
    return None if kb is None else kb * 1024


def reset_peak_rss() -> bool:
    """Reset the RSS high-water mark to the current RSS; True when the kernel accepted it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def workers_private_bytes() -> int:
    """Private memory (bytes) of the live shard worker processes: the pages each holds that
    this process does not share (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup);
    0 when there are none or /proc cannot tell."""
    from ..train import shard_workers
    total = 0
    for pid in shard_workers.worker_pids():
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(("Private_Clean:", "Private_Dirty:")):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total
