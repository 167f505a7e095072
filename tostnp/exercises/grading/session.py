"""One child process for one submission (:class:`Session`) and the remote functions the checkers
call in it (:class:`Remote`)."""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import _child as wire
from .. import _core
from .plan import Step
from .sandbox import (BLOCKED_MODULES, PRELOAD, _unshare_works, build_sandbox,
                      real_package_dirs, site_dirs)
from .wire import MAX_MESSAGE, Lost, _decode, _encode, _writeback

CHILD = Path(__file__).resolve().parents[1] / "_child.py"


class Remote:
    """A name in the child's namespace that the checkers call like a function."""

    def __init__(self, session: "Session", name: str):
        self.session, self.name = session, name

    def remote_call(self, args, *, what="your function", writeback=False, repeats=1,
                    trace_memory=False):
        return self.session.call(self.name, args, what=what, writeback=writeback,
                                 repeats=repeats, trace_memory=trace_memory)

    def __call__(self, *args):
        return self.remote_call(args)["result"]


class Session:
    """One child process for one submission; started again (and the cells that ran, run again)
    after a cell or a call ran out of time or killed it."""

    def __init__(self, stem: str, *, cell_timeout: float, memory_mb: int, protected=(),
                 deadline: float | None = None, package: str | None = "notebook"):
        """``package``: which tostnp the child gets: "notebook" (``SANDBOX_PACKAGE[stem]``, or
        none), or None (none at all)."""
        self.stem, self.cell_timeout, self.memory_mb = stem, cell_timeout, memory_mb
        self.protected = sorted({str(Path(p).resolve()) for p in protected}
                                | {str(d) for d in real_package_dirs()}
                                | {f"/proc/{os.getpid()}"})      # the grader's memory
        self.deadline = deadline
        self.dir = Path(tempfile.mkdtemp(prefix="tostnp-grade-"))
        (self.dir / "work").mkdir()
        (self.dir / "tmp").mkdir()
        build_sandbox(stem if package == "notebook" else "", self.dir)
        shutil.copyfile(CHILD, self.dir / "_child.py")
        allowed = {sys.prefix, sys.base_prefix, sys.exec_prefix}
        cpu = int(deadline - time.monotonic()) + 60 if deadline is not None else 0
        cfg = {"memory_bytes": memory_mb * 2**20 if memory_mb else 0, "cpu_seconds": cpu,
               "file_bytes": 64 * 2**20, "blocked_modules": list(BLOCKED_MODULES),
               "protected": self.protected, "allowed_read": sorted(allowed),
               "site_packages": site_dirs(),
               "preload": PRELOAD.get(stem, [])}
        (self.dir / "config.json").write_text(json.dumps(cfg))
        self.proc = None
        self.replay: list[Step] = []
        self.restarts = 0

    # -- process ------------------------------------------------------------------------------
    def _start(self):
        c_r, p_w = os.pipe()          # grader -> child
        p_r, c_w = os.pipe()          # child -> grader
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir / "work"),
               "TMPDIR": str(self.dir / "tmp"), "MPLBACKEND": "Agg",
               "MPLCONFIGDIR": str(self.dir / "tmp"), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        cmd = [sys.executable, "-S", "-E", str(self.dir / "_child.py"), str(self.dir),
               str(c_r), str(c_w), str(self.dir / "config.json")]
        hide = [p for p in self.protected if Path(p).is_dir() and not p.startswith("/proc/")
                and not str(self.dir).startswith(p.rstrip("/") + "/")
                and not any(x.startswith(p.rstrip("/") + "/") or x == p
                            for x in (sys.prefix, sys.base_prefix))]
        if hide and _unshare_works():
            script = "".join(f'mount -t tmpfs -o size=4k tmpfs "{p}" && ' for p in hide)
            cmd = ["unshare", "-Urm", "sh", "-c", script + 'exec "$@"', "sh"] + cmd
        self.proc = subprocess.Popen(cmd, pass_fds=(c_r, c_w), env=env, cwd=self.dir,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(c_r)
        os.close(c_w)
        self.rfd, self.wfd = p_r, p_w

    def kill(self):
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc = None

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def output_tail(self, n: int = 2000) -> str:
        try:
            return (self.dir / "output.txt").read_text(encoding="utf-8", errors="replace")[-n:]
        except OSError:
            return ""

    # -- messages -----------------------------------------------------------------------------
    def _send(self, head, arrays=None):
        msg = wire.frame(head, arrays)
        try:
            wire.write_all(self.wfd, msg)
        except OSError:
            raise Lost(self._death()) from None

    def _read(self, n, until):
        buf = bytearray()
        while len(buf) < n:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError
            r, _, _ = select.select([self.rfd], [], [], min(left, 1.0))
            if not r:
                continue
            chunk = os.read(self.rfd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise Lost(self._death())
            buf += chunk
        return bytes(buf)

    def _death(self) -> str:
        code = self.proc.wait(timeout=10) if self.proc else None
        if code is not None and code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ \
                else str(-code)
            return f"killed its process (signal {name})"
        return f"ended its process (exit code {code}: os._exit, sys.exit in a thread, a crash?)"

    def _recv(self, until):
        (n,) = struct.unpack(">Q", self._read(8, until))
        if n > MAX_MESSAGE or n < 4:
            raise Lost(f"sent a reply of {n} bytes (the limit is {MAX_MESSAGE})")
        data = self._read(n, until)
        try:
            head, arrays = wire.unframe(data)
        except Exception as e:                               # noqa: BLE001  untrusted bytes
            raise Lost(f"sent an unreadable reply ({type(e).__name__})") from None
        if not isinstance(head, dict):
            raise Lost("sent an unreadable reply")
        return head, arrays

    def _budget(self, timeout):
        t = self.cell_timeout if timeout is None else timeout
        if self.deadline is not None:
            t = min(t, self.deadline - time.monotonic())
        if t <= 0:
            raise Lost("ran out of the notebook's time budget")
        return t

    def request(self, head, arrays=None, *, timeout=None, callbacks=()):
        if self.proc is None:
            self.restart()
        t = self._budget(timeout)
        until = time.monotonic() + t
        self._send(head, arrays)
        try:
            while True:
                reply, arr = self._recv(until)
                if reply.get("op") != "callback":
                    return reply, arr
                try:                                          # the grader's own function
                    fn = callbacks[int(reply["id"])]
                    out = fn(*_decode(reply.get("args", []), arr))
                    a2: dict = {}
                    self._send({"ok": True, "result": _encode(out, a2, [])}, a2)
                except Lost:
                    raise
                except Exception as e:                        # noqa: BLE001
                    self._send({"ok": False, "message": f"{type(e).__name__}: {e}"})
        except TimeoutError:
            self.kill()
            raise Lost(f"ran past its time budget ({t:.0f} s): an infinite loop, or far too "
                       "slow") from None
        except Lost:
            self.kill()
            raise

    def restart(self):
        """A fresh child that has run the cells that ran before (not the one that failed)."""
        self.kill()
        self.restarts += 1
        self._start()
        for step in list(self.replay):
            try:
                reply, _ = self.request({"op": "exec", "source": step.source, "cell": step.index + 1})
            except Lost:
                self.replay.remove(step)
                self.kill()
                self._start()

    def start(self):
        self._start()

    # -- operations ---------------------------------------------------------------------------
    def exec(self, step: Step) -> dict:
        reply, _ = self.request({"op": "exec", "source": step.source, "cell": step.index + 1})
        if reply.get("ok"):
            self.replay.append(step)
        return reply

    def kind(self, name: str) -> str:
        reply, _ = self.request({"op": "kind", "name": name})
        return str(reply.get("kind", "missing"))

    def value(self, name: str):
        reply, arr = self.request({"op": "value", "name": name})
        if not reply.get("ok"):
            raise _core.Fail(f"{name} could not be read: {reply.get('message')}")
        return _decode(reply.get("result"), arr)

    def call(self, name, args, *, what, writeback=False, repeats=1, trace_memory=False):
        arrays: dict = {}
        callbacks: list = []
        enc = _encode(list(args), arrays, callbacks)
        try:
            reply, arr = self.request({"op": "call", "name": name, "args": enc,
                                       "writeback": writeback, "repeats": repeats,
                                       "trace_memory": trace_memory}, arrays, callbacks=callbacks)
        except Lost as e:
            raise _core.Aborted(f"{what} {e}") from None
        if not reply.get("ok"):
            raise _core.student_error(what, str(reply.get("etype")), str(reply.get("message")),
                                      args)
        out = dict(reply)
        out["result"] = _decode(reply.get("result"), arr)
        if writeback and "args" in reply:
            after = _decode(reply["args"], arr)
            for o, n in zip(args, after if isinstance(after, list) else []):
                _writeback(o, n)
        return out
