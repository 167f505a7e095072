"""One writer per run directory: an advisory lock on ``<dir>/.tostnp.lock``.

:func:`run_lock` takes an exclusive ``fcntl.flock`` on the lock file (created if needed) for
the ``with`` block; a second process that tries the same directory gets
:class:`RunDirectoryInUse` at once, naming the holder (its pid and command, written into the
lock file). The operating system releases a flock when its process exits in any way (SIGKILL
and crashes included), so a lock left by a dead process is never stale: the next run simply
takes it. The lock is re-entrant within a process (the CLI holds it around a whole command and
:func:`tostnp.train.loop.train` takes it again). Where ``fcntl`` does not exist (Windows) the
lock is a no-op. A directory the lock created is removed again when nothing else was written
into it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["run_lock", "RunDirectoryInUse", "LOCK_NAME"]

LOCK_NAME = ".tostnp.lock"
_held: dict = {}                 # real path of a directory -> [fd, depth] held by this process


class RunDirectoryInUse(OSError):
    """Another process is writing this run directory."""


@contextlib.contextmanager
def run_lock(directory, what: str = "tostnp"):
    """Hold the run directory ``directory`` (created if needed) for the ``with`` block."""
    try:
        import fcntl
    except ImportError:                       # no flock here: no lock
        yield
        return
    created = not os.path.isdir(directory)
    os.makedirs(directory, exist_ok=True)
    key = os.path.realpath(directory)
    if key in _held:
        _held[key][1] += 1
        try:
            yield
        finally:
            _held[key][1] -= 1
        return
    path = os.path.join(directory, LOCK_NAME)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        holder = holder or "another tostnp process"
        raise RunDirectoryInUse(f"{directory} is in use by {holder}; wait for it to finish or "
                                f"choose another directory") from None
    except BaseException:
        os.close(fd)
        raise
    try:
        info = (f"pid {os.getpid()}, {what}, since "
                f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)[:300]}")
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode("utf-8", "replace"), 0)
    except OSError:
        pass                                   # the lock holds without its note (disk full)
    _held[key] = [fd, 1]
    try:
        yield
    finally:
        del _held[key]
        if created and os.listdir(directory) == [LOCK_NAME]:    # nothing written: no trace
            with contextlib.suppress(OSError):
                os.unlink(path)
                os.rmdir(directory)
        os.close(fd)                           # closing the descriptor releases the flock
