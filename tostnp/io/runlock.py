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
The lock file is opened without following a link and must be a regular file: a link
(dangling or not) or a special file in its place is refused, so nothing outside the run
directory is ever truncated or created through it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import time

__all__ = ["run_lock", "held_by", "RunDirectoryInUse", "UnsafeLockFile", "LOCK_NAME"]

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


class UnsafeLockFile(OSError):
    """The lock file's place holds a link or something other than a regular file."""


def _open_lock_file(path: str) -> int:
    """Open (creating if needed) the lock file itself: never through a link, never a FIFO or
    device (O_NONBLOCK: opening a FIFO does not wait for a writer)."""
    flags = (os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    why = (f"{path} is not a regular file (a link or a special file); tostnp writes its lock "
           f"only into a file of its own: remove it and run again")
    if os.path.islink(path):                  # also where O_NOFOLLOW does not exist
        raise UnsafeLockFile(why)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO, errno.EISDIR):
            raise UnsafeLockFile(why) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeLockFile(why)
    return fd


def _note(fd) -> str:
    """The holder's note written in the lock file ("" if none can be read)."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return os.read(fd, 4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def held_by(directory) -> str | None:
    """Who holds ``directory``'s lock now (its note), or None: for a reader that writes beside
    a run and must keep out of one being written, without creating a lock file of its own."""
    take = _locker()
    path = os.path.join(directory, LOCK_NAME)
    if take is None or not os.path.lexists(path):
        return None
    fd = _open_lock_file(path)
    try:
        take(fd)
    except (BlockingIOError, PermissionError):        # msvcrt: PermissionError (EACCES)
        return _note(fd) or "another process"
    finally:
        os.close(fd)                              # releases the probe's own lock, if taken
    return None


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
    fd = _open_lock_file(path)
    try:
        take(fd)
    except (BlockingIOError, PermissionError):        # msvcrt: PermissionError (EACCES)
        holder = _note(fd) or "another tostnp process"
        os.close(fd)
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
