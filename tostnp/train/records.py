"""What a training run writes as it goes, besides its checkpoints: ``metrics.jsonl`` (whole lines,
read back with a torn last line dropped) and, when the output is not a terminal, a progress line
every few seconds."""
from __future__ import annotations

import json
import os
import stat
import time
import warnings

from ..backend.budget import check_memory
from ..io.limits import loads_json

__all__ = ["read_metrics", "MetricsFile", "ProgressLines"]


def read_metrics(path: str) -> list:
    """The records of a metrics.jsonl file (a list of dicts).

    A torn last line (a run killed, or a disk that filled up, in the middle of a write) is
    dropped with a warning; a bad line anywhere else (not JSON, nested too deep, over 1 MB)
    raises ValueError naming the line.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):      # a FIFO would block, /dev/zero never end
        raise ValueError(f"{path} is not a regular file")
    check_memory(2 * os.path.getsize(path), f"reading {path}")
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    records = []
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            rec = loads_json(ln, "the line", max_bytes=1 << 20)
            if not isinstance(rec, dict) or not isinstance(rec.get("step"), int):
                raise ValueError("not a record with an integer 'step'")
        except (UnicodeDecodeError, ValueError) as e:
            if i == last:
                warnings.warn(f"{path}: dropped a torn last line ({len(ln)} bytes): {e}",
                              RuntimeWarning, stacklevel=2)
                break
            raise ValueError(f"{path}, line {i + 1}: not a metrics record ({e})") from None
        records.append(rec)
    return records


class MetricsFile:
    """Append-only metrics.jsonl: each record is ONE ``os.write`` of a whole line (O_APPEND)."""

    def __init__(self, path):
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0)
                 | getattr(os, "O_NOFOLLOW", 0))            # never through a link, never wait
        if os.path.islink(path):
            raise ValueError(f"{path} is a link; tostnp appends only to a file of its own")
        self.fd = os.open(path, flags, 0o644)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            raise ValueError(f"{path} is not a regular file")
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(self.fd, True)

    def write(self, rec: dict) -> None:
        data = (json.dumps(rec) + "\n").encode("utf-8")
        n = os.write(self.fd, data)
        if n != len(data):  # a short write (disk full): the line is torn, say so
            raise OSError(28, f"short write to metrics.jsonl ({n} of {len(data)} bytes)")

    def close(self):
        os.close(self.fd)


class ProgressLines:
    """The progress of a run whose output is not a terminal: one line every ``seconds`` (the
    first after ``seconds``) -- step, loss, time elapsed and left (at this run's pace so far)."""

    def __init__(self, start: int, stop: int, seconds: float):
        self.start, self.stop, self.seconds = start, stop, float(seconds)
        self.t0 = self.last = time.perf_counter()

    def tick(self, n: int, loss: float) -> None:
        now = time.perf_counter()
        if now - self.last < self.seconds or n == self.stop:
            return
        self.last = now
        elapsed = now - self.t0
        left = elapsed / (n - self.start) * (self.stop - n)
        print(f"step {n}/{self.stop} ({100 * n / self.stop:.0f}%): loss {loss:.4f}, "
              f"{_duration(elapsed)} elapsed, about {_duration(left)} left", flush=True)


def _duration(seconds: float) -> str:
    """12 s, 3 min 05 s, 1 h 02 min."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"
