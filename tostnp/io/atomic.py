"""Atomic file writes: the one way tostnp writes a file that must never be seen half-written.

A file is written to a temporary file in the same directory, flushed and ``fsync``-ed, moved
into place with ``os.replace`` (atomic on POSIX and Windows), and the directory is ``fsync``-ed
so that the rename itself survives a power cut. If the writer raises (or the process is
interrupted with Ctrl-C), the temporary file is removed and the previous file, if any, is left
as it was. Checkpoints, metrics, figures and benchmark results all go through here.

* :func:`atomic_path`        -- a context manager yielding a temporary *path* (for writers that
  want a file name: ``np.savez``, ``fig.savefig``); the extension of ``path`` is kept.
* :func:`atomic_write_bytes` / :func:`atomic_write_text` -- a whole file at once.
* :func:`atomic_savefig`     -- a matplotlib figure.
* :func:`clean_stale_temporaries` -- remove the temporary files that writers which no longer
  run left behind (killed with SIGKILL, or by a power cut).

Temporaries live in a folder of their writer's own, ``.tostnp-tmp-<pid>-<random>/<name>``,
made by :func:`tempfile.mkdtemp` next to the target (same file system, so the rename stays
atomic) and removed right after the rename. Cleaning looks only inside such folders, only at
the names tostnp writes, and only where the writer's process is gone: a user's own file is never
removed, whatever it is called (``.notes.txt.tmp`` included), and another live process's
in-flight file is never touched (two writers on one run directory are kept apart by
:mod:`tostnp.io.runlock` as well).
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import stat
import tempfile

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_savefig", "writer_gone",
           "clean_stale_temporaries"]

_PREFIX = ".tostnp-tmp-"
# a writer's folder: the prefix, its pid, then mkdtemp's random part (8 of [a-z0-9_])
_TMPDIR = re.compile(r"^\.tostnp-tmp-(\d+)-[a-z0-9_]{8}$")
_active: set = set()              # this process's temporary folders now being written


def _fsync_path(path: str, directory: bool = False) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    except OSError:           # e.g. directories cannot be opened on Windows: nothing to sync
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; on success move it to ``path`` durably.

    The temporary file has ``path``'s own name (``np.savez`` and ``savefig`` look at the
    extension) inside a fresh folder of this writer's. Parent directories are created. On an
    exception the temporary file and its folder are removed.
    """
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    base = os.path.basename(path)
    folder = tempfile.mkdtemp(dir=d, prefix=f"{_PREFIX}{os.getpid()}-")
    tmp = os.path.join(folder, base)
    _active.add(folder)
    try:
        yield tmp
        _fsync_path(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)     # results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(folder)
        _active.discard(folder)
    _fsync_path(d, directory=True)


def writer_gone(pid: int) -> bool:
    """Whether the process that made a temporary folder no longer runs."""
    if pid == os.getpid():
        return True                      # ours, and not in _active: a failed earlier write
    if os.name != "posix":               # Windows: os.kill(pid, 0) would END that process;
        return False                     # another writer's temporary is kept, never removed
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):     # e.g. EPERM: another user's live process
        return False
    return False


def clean_stale_temporaries(directory, name: str = "*") -> list:
    """Remove the temporaries of ``name`` (a glob over the target's file name; default every
    name) that writers which no longer run left in ``directory``; then their folders, once
    empty. Only this module's own folders are looked into (see the module docstring); links
    and anything not a regular file are left alone. Returns the removed files."""
    removed = []
    directory = os.fspath(directory)
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        m = _TMPDIR.match(entry)
        folder = os.path.join(directory, entry)
        if m is None or folder in _active or not writer_gone(int(m.group(1))):
            continue
        try:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                continue                 # a link or a file with our folder's name: not ours
            inside = os.listdir(folder)
        except OSError:
            continue
        for f in inside:
            p = os.path.join(folder, f)
            with contextlib.suppress(OSError):
                if fnmatch.fnmatchcase(f, name) and stat.S_ISREG(os.lstat(p).st_mode):
                    os.unlink(p)
                    removed.append(p)
        with contextlib.suppress(OSError):
            os.rmdir(folder)             # only if empty
    return removed


def atomic_write_bytes(path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename, fsync directory)."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def atomic_write_text(path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode(encoding))


def atomic_savefig(fig, path, **kwargs) -> None:
    """``fig.savefig(path, **kwargs)`` atomically; the format comes from ``path``'s extension."""
    kwargs.setdefault("format", os.path.splitext(os.fspath(path))[1].lstrip(".") or "png")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **kwargs)
