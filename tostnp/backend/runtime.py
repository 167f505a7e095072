"""The CPU runtime: the fast-path switch, thread counts and the allocator setting.

The one place where the fast path is chosen: layers ask ``fast = backend.fused(xp)``.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import threading


_NUMPY_NAMES = ("numpy", "array_api_compat.numpy")
_fast_on = os.environ.get("TOSTNP_FAST", "1") != "0"


def fused(xp):
    """The NumPy fast kernels (module :mod:`tostnp.backend.kernels`) for namespace ``xp``, or None.

    Layers ask ``fast = backend.fused(xp)`` and run ``fast.<op>`` when it is not None, the
    plain array-API code otherwise. None for CuPy, ``array_api_strict`` and any other
    namespace, and for NumPy too after ``set_fast(False)`` (or with ``TOSTNP_FAST=0`` in the
    environment), which is how tests compare the two paths.
    """
    if _fast_on and getattr(xp, "__name__", None) in _NUMPY_NAMES:
        from . import kernels as _fused
        return _fused
    return None


def add_bias(xp, y, b):
    """y += b in place for y (..., C), a fresh array of the caller's, and b (C,); returns y.
    The bias add of every linear map; on the fast path with fewer loop calls
    (:func:`tostnp.backend.kernels.add_rows`)."""
    fast = fused(xp)
    if fast is not None:
        return fast.add_rows(y, b)
    y += b
    return y


_ahead = threading.local()   # .depth: training steps this thread is inside (backward_ahead)


@contextlib.contextmanager
def backward_ahead():
    """Inside the ``with`` block every forward this thread runs is followed by its backward (a
    training step: the models' ``*_loss_and_grads``, ``bench --train``): a layer on the fast
    path may then cache what only the backward needs, in the form cheapest to keep. The MLP
    keeps its GELU's slope instead of the GELU's input and gate
    (:func:`tostnp.backend.kernels.gelu_forward_slope`): one array less, and work that a forward
    alone (evaluation, prediction) does not need. Outside it the forward caches the usual way,
    and a backward from such a cache works all the same; either way the outputs are the same,
    bit for bit. Per thread: the shards of a step on threads each set their own."""
    _ahead.depth = getattr(_ahead, "depth", 0) + 1
    try:
        yield
    finally:
        _ahead.depth -= 1


def is_backward_ahead() -> bool:
    """Is a forward on this thread part of a training step (:func:`backward_ahead`)?"""
    return getattr(_ahead, "depth", 0) > 0


def set_fast(on: bool) -> bool:
    """Switch the NumPy fast path on or off for the whole process; returns the old setting."""
    global _fast_on
    old, _fast_on = _fast_on, bool(on)
    return old


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity set where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextlib.contextmanager
def threads(n: int | None):
    """CPU threads inside the ``with`` block: BLAS's (OpenBLAS/MKL, via threadpoolctl) and the
    fast path's (:func:`tostnp.backend.kernels.set_threads`: its kernels split their arrays into pieces
    and run them on this many threads; NumPy's own elementwise operations use one).

    ``n`` None or 0 leaves the defaults alone (the library's for BLAS, one thread for the fast
    path).
    """
    if not n:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"threads must be a positive int (or 0 for the default), got {n!r}")
    from threadpoolctl import threadpool_limits
    from . import kernels as _fused
    old = _fused.set_threads(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        _fused.set_threads(old)


_blas_controller = None     # threadpoolctl's view of the loaded BLAS, built once (a library scan)


@contextlib.contextmanager
def serial():
    """BLAS and the fast path's kernels on one thread each inside the ``with`` block, whatever
    :func:`threads` set; the old counts come back on leaving it.

    For work that is spread over the threads one level up -- :mod:`tostnp.train.shards` runs one
    shard of a training batch on each thread -- so that the threads do not compete with BLAS's
    own (OpenBLAS's idle threads spin for a while after each product and take a core).
    """
    global _blas_controller
    from threadpoolctl import ThreadpoolController
    from . import kernels as _fused
    if _blas_controller is None:
        _blas_controller = ThreadpoolController()
    old = _fused.set_threads(1)
    try:
        with _blas_controller.limit(limits=1, user_api="blas"):
            yield
    finally:
        _fused.set_threads(old)


def on_shards(fn, bounds) -> list:
    """``fn(lo, hi)`` for every range of ``bounds`` (from
    :func:`tostnp.backend.kernels.shard_bounds`), each on its own thread, inside :func:`serial`:
    the slices' arithmetic runs side by side (NumPy releases the GIL in its loops and products)
    and no BLAS thread spins waiting for work. Returns the results in order."""
    from . import kernels as _fused
    with serial():
        return _fused.on_threads([lambda lo=lo, hi=hi: fn(lo, hi) for lo, hi in bounds])


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep freed memory in the process (Linux/glibc only).

    By default glibc serves every allocation above a threshold (128 KiB, growing to at most
    32 MiB) with a fresh ``mmap`` and unmaps it on free, so each training step faults in its
    activations page by page again (the kernel zeroes every page). Raising the mmap threshold to
    its maximum and disabling the trimming of the heap's top keeps freed arrays for reuse.
    Arrays above 32 MiB are still mapped fresh. Returns True when the settings were applied.
    Process-wide and idempotent; :func:`tostnp.train.loop.train` and ``bench --train`` call it.
    """
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    ok &= mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1)
    return bool(ok)


# --------------------------------------------------------------------------------------------
# how this process was started (for every command line tostnp prints as advice)
# --------------------------------------------------------------------------------------------
LAUNCHER_ENV = "TOSTNP_LAUNCHER"   # set by run.py to the way it was started ("python3 run.py")


def how_to_run(*args: str) -> str:
    """The command line that runs tostnp ``args`` the way this process was started.

    ``python3 run.py ...`` under the quick-start launcher (it sets ``TOSTNP_LAUNCHER``);
    ``tostnp ...`` from the console script of an installed wheel; otherwise this Python
    ``-m tostnp`` -- by its name when the shell finds this very interpreter under that name
    (``python3``), else by its path (``.venv/bin/python``), so that the line works as printed.
    Every command the CLI prints as advice is built here.
    """
    prefix = os.environ.get(LAUNCHER_ENV, "").strip()
    if not prefix:
        argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        if os.path.splitext(argv0)[0] in ("tostnp", "tostnp-script"):
            prefix = "tostnp"
        else:
            prefix = f"{_python_name()} -m tostnp"
    return " ".join([prefix, *(shlex.quote(str(a)) for a in args if str(a))])


def _python_name() -> str:
    exe = sys.executable or "python3"
    real = os.path.realpath(exe)
    for name in ("python3", "python", os.path.basename(exe)):
        found = shutil.which(name)
        if found and os.path.realpath(found) == real and os.path.abspath(found) == os.path.abspath(exe):
            return name
    try:
        rel = os.path.relpath(exe)
    except ValueError:                      # another drive (Windows)
        return shlex.quote(exe)
    return shlex.quote(rel if not rel.startswith("..") else exe)
