"""The shards of a training step on forked worker processes (Linux; NumPy's fast path).

Why processes: the shards of :mod:`tostnp.train.shards` on threads share one GIL, and every
NumPy call holds it for its dispatch and for any array too small for NumPy to let it go. A
step of the default models makes thousands of such calls, so two shards on two threads wait
for each other: on 2 Intel Xeon cores the default LM step took 82 ms on threads against 135 ms
whole on one core, and the digits step gained nothing (``docs/peer-torch.md``). A forked worker
has its own interpreter and its own GIL.

How (:class:`Workers`): the first sharded step of a shape runs on threads and tells the shapes
of each shard's loss, gradients and output. Then one worker per shard after the first is
forked, and one block of shared memory (an anonymous ``MAP_SHARED`` mmap, which the fork
inherits) holds the parameters, each worker's slice of the batch, and each worker's loss,
gradients and output. Every step the parent copies the parameters and the slices in, writes a
byte to each worker's command pipe, runs the first shard itself, and reads each worker's
one-byte reply. A worker runs the very function the thread would, on the same slice, with BLAS
on one thread: the step's numbers are those of the threads, bit for bit
(``tests/test_shard_workers.py``).

Memory: the fork shares the parent's pages until either writes them; the shards' activations
add up to the whole batch's, as on threads; the shared block adds one copy of the parameters
and of each worker's gradients (the threads kept those gradients too).

Lifetime and failures:

* a worker leaves only by ``os._exit``, never through the parent's code; it exits when its
  command pipe closes: :func:`close_workers` (at the end of :func:`tostnp.train.loop.train`, at
  the interpreter's exit), or the parent's death (the kernel closes its pipes);
* it ignores SIGINT and SIGTERM: Ctrl-C and ``kill`` are the parent's to handle, which finishes
  the step and saves a checkpoint (:mod:`tostnp.train.loop`);
* a worker that fails (an exception in the model, or its death by a signal) replies so or
  closes its pipe; the parent then closes the workers, warns, forks no more in this process,
  and runs that step again on threads, where the same exception, if any, is raised as itself.

Where it applies (:func:`available`): Linux with ``os.fork`` (macOS's system libraries are not
safe to use after a fork without exec; Windows and Pyodide have no fork), and
``tuning.SHARD_PROCESSES`` on. Elsewhere the shards run on threads, with the same numbers.
"""
from __future__ import annotations

import atexit
import gc
import mmap
import os
import signal
import sys
import time
import tracemalloc
import warnings

import numpy as np

from ..backend import tuning
from ..backend.runtime import serial

__all__ = ["available", "Workers", "close_workers", "worker_pids", "tracing", "traced_peaks"]

_ALIGN = 64                  # each array in the shared block starts on a cache line
_pools: dict = {}            # key (see _key) -> Workers, the most recently used last
_MAX_POOLS = 3               # sets of workers kept at once (bench --train interleaves models)
_broken = False              # a worker failed: threads for the rest of this process
_trace = False               # the workers measure their steps' NumPy peaks (tracemalloc)
_peaks: list = []            # those peaks, bytes, of the last step, one per worker


def available() -> bool:
    """Can a step's shards run on forked workers here (see the module)?"""
    return (tuning.SHARD_PROCESSES and not _broken and sys.platform.startswith("linux")
            and hasattr(os, "fork"))


def _key(fn, params: dict, arrays: tuple, bounds) -> tuple:
    """What a set of workers is made for: the function, the parameters' and arrays' shapes and
    dtypes, and the shards."""
    return (fn,
            tuple((k, v.shape, v.dtype.str) for k, v in params.items()),
            tuple((a.shape, a.dtype.str) for a in arrays),
            tuple(bounds))


class _Layout:
    """Offsets of named arrays in one block of bytes."""

    def __init__(self):
        self.size, self.items = 0, []

    def add(self, shape, dtype) -> int:
        dtype = np.dtype(dtype)
        off = -(-self.size // _ALIGN) * _ALIGN
        self.items.append((off, tuple(shape), dtype))
        self.size = off + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        return len(self.items) - 1

    def views(self, buf) -> list:
        return [np.ndarray(shape, dtype, buffer=buf, offset=off)
                for off, shape, dtype in self.items]


class _Worker:
    __slots__ = ("pid", "cmd", "reply", "lo", "hi", "inputs", "loss", "grads", "out", "peak")


class Workers:
    """Forked workers for the shards after the first of ``bounds``; ``parts``: the
    ``(loss, grads, out)`` of each shard from a run on threads (their shapes and dtypes)."""

    def __init__(self, fn, params: dict, arrays: tuple, bounds, parts):
        self.fn, self.bounds = fn, list(bounds)
        lay = _Layout()
        p_idx = {k: lay.add(v.shape, v.dtype) for k, v in params.items()}
        plans = []
        for (lo, hi), (loss, grads, out) in zip(self.bounds[1:], parts[1:]):
            loss = np.asarray(loss)
            plans.append((lo, hi,
                          [lay.add((hi - lo,) + a.shape[1:], a.dtype) for a in arrays],
                          lay.add(loss.shape, loss.dtype),
                          {k: lay.add(g.shape, g.dtype) for k, g in grads.items()},
                          None if out is None else lay.add(out.shape, out.dtype),
                          lay.add((), np.int64)))
        self._block = mmap.mmap(-1, max(lay.size, 1))     # MAP_SHARED | MAP_ANONYMOUS
        v = lay.views(self._block)
        self.params = {k: v[i] for k, i in p_idx.items()}
        self.workers = []
        try:
            for lo, hi, ins, loss, grads, out, peak in plans:
                w = _Worker()
                w.peak = v[peak]
                w.lo, w.hi, w.inputs, w.loss = lo, hi, [v[i] for i in ins], v[loss]
                w.grads = {k: v[i] for k, i in grads.items()}
                w.out = None if out is None else v[out]
                self._fork(w)
                self.workers.append(w)
        except BaseException:
            self.close()
            raise

    def _fork(self, w: _Worker) -> None:
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        ours = [fd for pool in [*_pools.values(), self] for x in pool.workers  # other workers'
                for fd in (x.cmd, x.reply)]                                   # pipe ends
        with warnings.catch_warnings():
            # Python 3.12+ warns that a fork beside running threads may deadlock the child on a
            # lock one of them held. The threads here are idle pool threads (the fast path's and
            # BLAS's, holding no lock between tasks); the worker runs its shard on one thread and
            # never uses them.
            warnings.simplefilter("ignore", DeprecationWarning)
            # Ctrl-C or a SIGTERM before the worker has set its own handlers would run the
            # parent's: block both across the fork (the worker ignores them, see _serve)
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            try:
                pid = os.fork()
            except OSError:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                for fd in (cmd_r, cmd_w, rep_r, rep_w):
                    os.close(fd)
                raise
        if pid == 0:                                      # the worker: never returns
            code = 1
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                for fd in ours + [cmd_w, rep_r]:
                    os.close(fd)
                code = self._serve(w, cmd_r, rep_w)
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(cmd_r)
        os.close(rep_w)
        w.pid, w.cmd, w.reply = pid, cmd_w, rep_r

    def _serve(self, w: _Worker, cmd: int, reply: int) -> int:
        """The worker's loop: one step per command byte; 0 when the command pipe closes."""
        if tracemalloc.is_tracing():                      # forked inside a measurement
            tracemalloc.stop()
        # the objects inherited from the parent out of the garbage collector's reach: its
        # passes would write to each one's header and so copy every page of them
        gc.freeze()
        with serial():
            while True:
                command = os.read(cmd, 1)
                if not command:
                    return 0
                try:
                    if command == b"t":                   # this step's NumPy peak, measured
                        tracemalloc.start()
                        base = tracemalloc.get_traced_memory()[0]
                    loss, grads, out = self.fn(self.params, *w.inputs)
                    w.loss[...] = loss
                    for k, g in w.grads.items():
                        np.copyto(g, grads[k])
                    if w.out is not None:
                        np.copyto(w.out, out)
                    del loss, grads, out
                    if command == b"t":
                        w.peak[...] = tracemalloc.get_traced_memory()[1] - base
                    answer = b"k"
                except Exception:
                    answer = b"e"
                finally:
                    if tracemalloc.is_tracing():
                        tracemalloc.stop()
                try:
                    os.write(reply, answer)
                except OSError:                           # the parent is gone
                    return 0

    def run(self, params: dict, arrays: tuple):
        """The shards' ``(loss, grads, out)``, the first from this thread, the others from the
        workers; None when a worker failed (the workers are then closed: run the step on
        threads)."""
        for k, v in self.params.items():
            np.copyto(v, params[k])
        for w in self.workers:
            for view, a in zip(w.inputs, arrays):
                np.copyto(view, a[w.lo:w.hi])
        started, ok = [], True
        try:
            for w in self.workers:
                try:
                    os.write(w.cmd, b"t" if _trace else b"g")
                except OSError:                           # a worker is gone
                    ok = False
                    break
                started.append(w)
            if ok:
                lo, hi = self.bounds[0]
                with serial():
                    first = self.fn(params, *(a[lo:hi] for a in arrays))
        finally:
            try:
                for w in started:                         # no worker is left mid-step
                    ok &= os.read(w.reply, 1) == b"k"
            except BaseException:                         # Ctrl-C while waiting
                ok = False
                raise
            finally:
                if not ok:
                    self.close()
        if not ok:
            return None
        if _trace:
            _peaks[:] = [int(w.peak) for w in self.workers]
        return [first] + [(w.loss[()], w.grads, w.out) for w in self.workers]

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def close(self, wait_s: float = 30.0) -> None:
        """Close the command pipes (each worker then exits, after the step it may be in) and
        reap the workers; one still running after ``wait_s`` seconds is killed (it is ours, and
        holds nothing but its shard's arrays)."""
        for w in self.workers:
            for fd in (w.cmd, w.reply):
                try:
                    os.close(fd)
                except OSError:
                    pass
        deadline = time.monotonic() + wait_s
        for w in self.workers:
            try:
                while os.waitpid(w.pid, os.WNOHANG)[0] == 0:
                    if time.monotonic() > deadline:
                        os.kill(w.pid, signal.SIGKILL)
                        os.waitpid(w.pid, 0)
                        break
                    time.sleep(0.001)
            except ChildProcessError:
                pass
        self.workers = []


def run_sharded(fn, params: dict, arrays: tuple, bounds, threaded):
    """The shards' results, ``[(loss, grads, out), ...]``: from the workers made for this
    call's function and shapes, or, the first time, from the shards one after the other on this
    thread (and the workers are forked after it); ``threaded()`` runs the shards on threads and
    returns their results (the way back when a worker fails)."""
    global _broken
    key = _key(fn, params, arrays, bounds)
    try:
        pool = _pools.pop(key, None)
    except TypeError:                                     # a function that cannot be a key
        return threaded()
    if pool is not None and not pool.workers:             # closed by an error in a step
        pool = None
    if pool is None:
        # the first step of these shapes: its shards one after the other, on this thread, so
        # that this process never holds more than one shard's activations (the workers hold
        # the others' from the next step on)
        with serial():
            parts = [fn(params, *(a[lo:hi] for a in arrays)) for lo, hi in bounds]
        while len(_pools) >= _MAX_POOLS:                  # the least recently used goes
            _pools.pop(next(iter(_pools))).close()
        try:
            _pools[key] = Workers(fn, params, arrays, bounds, parts)
        except OSError as e:                              # no fork here (a sandbox, a limit)
            _broken = True
            warnings.warn(f"cannot start a training shard's worker process ({e}); the shards "
                          f"run on threads", RuntimeWarning, stacklevel=3)
        return parts
    _pools[key] = pool                                    # now the most recently used
    parts = pool.run(params, arrays)
    if parts is None:
        _broken = True
        close_workers()
        warnings.warn("a training shard's worker process failed; this step and the next ones "
                      "run their shards on threads", RuntimeWarning, stacklevel=3)
        return threaded()
    return parts


def tracing(on: bool) -> None:
    """While on, each worker measures the NumPy peak of its steps (tracemalloc, in the worker):
    :func:`traced_peaks` gives those of the last step. For :mod:`tostnp.bench.peaks`."""
    global _trace
    _trace = bool(on)
    _peaks.clear()


def traced_peaks() -> list[int]:
    """The NumPy peak (bytes) of each worker's last step measured under :func:`tracing`; empty
    when no worker ran one."""
    return list(_peaks)


def worker_pids() -> list[int]:
    """The process ids of the live shard workers (for memory measurements)."""
    return [pid for pool in _pools.values() for pid in pool.pids()]


def close_workers() -> None:
    """Stop the shard workers, if any (the next sharded step forks new ones)."""
    while _pools:
        _pools.popitem()[1].close()


atexit.register(close_workers)
