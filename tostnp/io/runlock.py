"""One writer per run directory: an advisory lock on ``<dir>/.tostnp.lock``.

:func:`run_lock` takes an exclusive ``fcntl.flock`` on the lock file (created if needed) for
the ``with`` block; a second process that tries the same directory gets
:class:`RunDirectoryInUse` at once, naming the holder (its pid and command, written into the
lock file). The operating system releases a flock when its process exits in any way (SIGKILL
and crashes included), so a lock left by a dead process is never stale: the next run simply
takes it. The lock is re-entrant within a process (the CLI holds it around a whole command and
:func:`tostnp.train.loop.train` takes it again). Where ``fcntl`` does not exist (Windows) the
lock is ``msvcrt.locking`` on one byte far past the holder's note (a Windows lock is mandatory:
the note stays readable), which Windows also releases when its process ends; where neither
exists the lock is a no-op. A directory the lock created is removed again when nothing else was
written into it.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["run_lock", "RunDirectoryInUse", "LOCK_NAME"]

LOCK_NAME = ".tostnp.lock"
_MSVCRT_BYTE = 1 << 30          # the byte Windows locks: far past the note, which stays readable
_held: dict = {}                 # real path of a directory -> [fd, depth] held by this process


class RunDirectoryInUse(OSError):
    """Another process is writing this run directory."""


def _locker():
    """A function that locks an open descriptor at once or raises BlockingIOError /
    PermissionError; None where this system has no lock tostnp knows."""
    try:
        import fcntl
        return lambda fd: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        pass
    try:
        import msvcrt
    except ImportError:
        return None

    def take(fd):
        os.lseek(fd, _MSVCRT_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    return take


@contextlib.contextmanager
def run_lock(directory, what: str = "tostnp"):
    """Hold the run directory ``directory`` (created if needed) for the ``with`` block."""
    take = _locker()
    if take is None:                          # neither flock nor msvcrt here: no lock
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
        take(fd)
    except (BlockingIOError, PermissionError):        # msvcrt: PermissionError (EACCES)
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
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
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, info.encode("utf-8", "replace"))
    except OSError:
        pass                                   # the lock holds without its note (disk full)
    _held[key] = [fd, 1]
    try:
        yield
    finally:
        del _held[key]
        empty = created and os.listdir(directory) == [LOCK_NAME]    # nothing written: no trace
        if os.name != "posix":
            os.close(fd)                       # Windows deletes no open file: close, then remove
        if empty:
            with contextlib.suppress(OSError):
                os.unlink(path)
                os.rmdir(directory)
        if os.name == "posix":
            os.close(fd)                       # after the unlink: nobody locks a removed file
