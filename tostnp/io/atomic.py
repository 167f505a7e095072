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

A temporary file carries its writer's identity: ``.<name>.<pid>-<random>.tmp<ext>``. A writer
removes only its own temporaries and those whose process is gone, never another live
process's in-flight file (two writers on one run directory are kept apart by
:mod:`tostnp.io.runlock` as well).
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import tempfile

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_savefig",
           "clean_stale_temporaries"]

_TMP = re.compile(r"^\..+\.(?:(\d+)-)?[A-Za-z0-9_]+\.tmp(?:\.[A-Za-z0-9]*)?$")
_active: set = set()              # this process's temporaries now being written


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

    The temporary name ends with ``path``'s extension (``np.savez`` and ``savefig`` look at it).
    Parent directories are created. On an exception the temporary file is removed.
    """
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    base = os.path.basename(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{base}.{os.getpid()}-",
                               suffix=".tmp" + os.path.splitext(base)[1])
    os.close(fd)
    _active.add(tmp)
    try:
        yield tmp
        _fsync_path(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)     # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        _active.discard(tmp)
    _fsync_path(d, directory=True)


def _writer_gone(pid: int | None) -> bool:
    """Whether the process that wrote a temporary no longer runs (None: a name from before
    temporaries carried their writer: gone)."""
    if pid is None:
        return True
    if pid == os.getpid():
        return True                      # ours, and not in _active: a failed earlier write
    if os.name != "posix":               # Windows: os.kill(pid, 0) would END that process;
        return False                     # another writer's temporary is kept, never removed
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:                      # e.g. EPERM: another user's live process
        return False
    return False


def clean_stale_temporaries(directory, name: str = "*") -> list:
    """Remove the temporaries of ``name`` (a glob; default every file) in ``directory`` whose
    writer is this process (and not writing now) or a process that is gone. Returns them."""
    removed = []
    pattern = os.path.join(glob.escape(os.fspath(directory)),
                           ("." + glob.escape(name) if name != "*" else ".*") + ".*tmp*")
    for tmp in glob.glob(pattern):
        m = _TMP.match(os.path.basename(tmp))
        if m is None or tmp in _active or not _writer_gone(
                int(m.group(1)) if m.group(1) else None):
            continue
        try:
            os.unlink(tmp)
            removed.append(tmp)
        except FileNotFoundError:
            pass
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
