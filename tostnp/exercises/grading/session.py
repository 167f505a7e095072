"""One child process for one submission (:class:`Session`) and the remote functions the checkers
call in it (:class:`Remote`).

Every read and write with the child has a deadline (the grader's end of each pipe is polled, its
write end non-blocking); a reply is bounded before it is read and its arrays before they are
allocated (:func:`.wire.check_arrays`). The child's folder holds, read-only, what the grader
wrote for it (the stand-in package, the child program, its configuration: written afresh at
every start, so a child that rewrote them and ended itself changes nothing); its output goes to
an unnamed file (nothing of it is left on disk when a run is killed)."""
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
from . import isolation as iso
from .plan import Step
from .sandbox import BLOCKED_MODULES, PRELOAD, build_sandbox, real_package_dirs, site_dirs
from .wire import MAX_MESSAGE, Lost, _decode, _encode, _writeback, check_arrays

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
                 deadline: float | None = None, package: str | None = "notebook",
                 isolation: str | None = None):
        """``package``: which tostnp the child gets: "notebook" (``SANDBOX_PACKAGE[stem]``, or
        none), or None (none at all). ``isolation``: "bwrap" or "none" (default: what this
        machine has, :func:`.isolation.available`)."""
        self.stem, self.cell_timeout, self.memory_mb = stem, cell_timeout, memory_mb
        self.isolation = isolation or iso.available()
        self.protected = sorted({str(Path(p).resolve()) for p in protected}
                                | {str(d) for d in real_package_dirs()}
                                | {f"/proc/{os.getpid()}"})      # the grader's memory
        self.deadline = deadline
        self.package = stem if package == "notebook" else ""
        self.dir = Path(tempfile.mkdtemp(prefix="tostnp-grade-"))
        (self.dir / "owner").write_text(json.dumps(   # for a later run's clean-up, if killed
            {"pid": os.getpid(), "started": iso.process_started(os.getpid())}))
        if self.isolation == iso.NONE:
            (self.dir / "work").mkdir()
            (self.dir / "tmp").mkdir()
        try:
            self.out = os.memfd_create("tostnp-grade-output", os.MFD_CLOEXEC)
        except (AttributeError, OSError):
            self.out = os.dup(tempfile.TemporaryFile().fileno())
        self.proc, self._ro = None, None
        prog = iso.seccomp_program() if self.isolation == iso.BWRAP else None
        self.seccomp = iso.program_fd(prog) if prog else None
        self.meter: iso.Meter | None = None
        self.replay: list[Step] = []
        self.restarts = 0
        self.starts = 0

    # -- process ------------------------------------------------------------------------------
    def _write_ro(self) -> Path:
        """The read-only part of the child's folder, written afresh: stand-in package, child
        program, configuration."""
        if self._ro is not None:
            shutil.rmtree(self._ro, ignore_errors=True)
        ro = self._ro = Path(tempfile.mkdtemp(prefix="ro", dir=self.dir))   # a name not guessed
        build_sandbox(self.package, ro)
        shutil.copyfile(CHILD, ro / "_child.py")
        boxed = self.isolation == iso.BWRAP
        root = f"{iso.INSIDE}/ro" if boxed else str(ro)
        work = f"{iso.INSIDE}/work" if boxed else str(self.dir / "work")
        tmp = "/tmp" if boxed else str(self.dir / "tmp")
        cpu = int(self.deadline - time.monotonic()) + 60 if self.deadline is not None else 0
        cfg = {"memory_bytes": self.memory_mb * 2**20 if self.memory_mb else 0,
               "cpu_seconds": cpu, "file_bytes": 64 * 2**20,
               "blocked_modules": list(BLOCKED_MODULES), "protected": self.protected,
               "allowed_read": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix}),
               "site_packages": site_dirs(), "preload": PRELOAD.get(self.stem, []),
               "pkgs": f"{root}/pkgs", "work": work, "writable": [work, tmp],
               "sandboxed": boxed, "tmp": tmp}
        (ro / "config.json").write_text(json.dumps(cfg))
        return ro

    def _command(self, ro: Path, c_r: int, c_w: int) -> list[str]:
        exe = os.path.realpath(sys.executable)
        if self.isolation != iso.BWRAP:
            return [exe, "-S", "-E", str(ro / "_child.py"), str(ro / "config.json"),
                    str(c_r), str(c_w), str(self.out)]
        inside = f"{iso.INSIDE}/ro"
        argv = [exe, "-S", "-E", f"{inside}/_child.py", f"{inside}/config.json",
                str(c_r), str(c_w), str(self.out)]
        roots = iso._python_dirs() + site_dirs()
        blocked = {m.split(".")[0] for m in BLOCKED_MODULES if "." not in m}

        def under(p):
            return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)
        hidden = [os.path.join(sp, m) for sp in site_dirs() for m in sorted(blocked)
                  if os.path.isdir(os.path.join(sp, m))]
        hidden += [p for p in self.protected if os.path.isdir(p) and under(p)
                   and not p.startswith("/proc/")]
        if self.seccomp is not None:
            os.lseek(self.seccomp, 0, os.SEEK_SET)
        return iso.bwrap_command(argv, read_only=roots, hidden=hidden, sandbox=str(ro),
                                 seccomp_fd=self.seccomp)

    def _start(self):
        ro = self._write_ro()
        self.starts += 1
        c_r, p_w = os.pipe()          # grader -> child
        p_r, c_w = os.pipe()          # child -> grader
        tmp = "/tmp" if self.isolation == iso.BWRAP else str(self.dir / "tmp")
        home = f"{iso.INSIDE}/work" if self.isolation == iso.BWRAP else str(self.dir / "work")
        env = {"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "MPLBACKEND": "Agg",
               "MPLCONFIGDIR": tmp, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        cpu = int(self.deadline - time.monotonic()) + 60 if self.deadline is not None else 0
        mem = self.memory_mb * 2**20 if self.memory_mb else 0
        if self.isolation != iso.BWRAP:
            _subreaper()
        self._before = set(iso.children(os.getpid()))
        try:
            self.proc = subprocess.Popen(
                self._command(ro, c_r, c_w), env=env,
                pass_fds=tuple(fd for fd in (c_r, c_w, self.out, self.seccomp) if fd is not None),
                cwd=self.dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=iso.limits(mem, cpu, 64 * 2**20))
        finally:
            os.close(c_r)
            os.close(c_w)
        self.rfd, self.wfd = p_r, p_w
        os.set_blocking(self.wfd, False)
        try:
            ready, _ = self._recv(time.monotonic() + max(30.0, self.cell_timeout))
        except TimeoutError:
            self.kill()
            raise Lost("did not start (the sandbox or the interpreter failed)") from None
        except Lost:
            self.kill()
            raise
        if ready.get("op") != "ready":
            self.kill()
            raise Lost("did not start (the sandbox or the interpreter failed)")
        child = iso.leaf_python(self.proc.pid) if sys.platform.startswith("linux") else None
        self.meter = iso.Meter(self.proc.pid, child) if child else None

    def kill(self):
        if self.proc is None:
            return
        pids = iso.tree(self.proc.pid) if sys.platform.startswith("linux") else []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            if hasattr(os, "killpg"):
                os.killpg(self.proc.pid, signal.SIGKILL)    # its session: the child and all
            else:
                self.proc.kill()                            # Windows: TerminateProcess
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.isolation != iso.BWRAP:          # orphans of the child, re-parented to us
            _kill_new_children(self._before)
        for fd in (self.rfd, self.wfd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc, self.meter = None, None

    def close(self):
        self.kill()
        for fd in (self.out, self.seccomp):
            try:
                os.close(fd)
            except (OSError, TypeError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def output_tail(self, n: int = 2000) -> str:
        try:
            size = os.fstat(self.out).st_size
            data = os.pread(self.out, n, max(0, size - n))
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    # -- messages -----------------------------------------------------------------------------
    def _send(self, head, arrays=None, until=None):
        msg = wire.frame(head, arrays)
        view = memoryview(struct.pack(">Q", len(msg)) + msg)
        until = time.monotonic() + self.cell_timeout if until is None else until
        poll = select.poll()
        poll.register(self.wfd, select.POLLOUT)
        while view:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not poll.poll(min(left, 1.0) * 1000):
                continue
            try:
                view = view[os.write(self.wfd, view[:1 << 16]):]
            except BlockingIOError:
                continue
            except OSError:
                raise Lost(self._death()) from None

    def _read(self, n, until):
        buf = bytearray()
        poll = select.poll()
        poll.register(self.rfd, select.POLLIN)
        while len(buf) < n:
            left = until - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not poll.poll(min(left, 1.0) * 1000):
                continue
            chunk = os.read(self.rfd, min(n - len(buf), 1 << 20))
            if not chunk:
                raise Lost(self._death())
            buf += chunk
        return bytes(buf)

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=10) if self.proc else None
        except subprocess.TimeoutExpired:
            code = None
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
            check_arrays(data)
            head, arrays = wire.unframe(data)
        except Lost:
            raise
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
        try:
            self._send(head, arrays, until)
            while True:
                reply, arr = self._recv(until)
                if reply.get("op") != "callback":
                    return reply, arr
                try:                                          # the grader's own function
                    fn = callbacks[int(reply["id"])]
                    out = fn(*_decode(reply.get("args", []), arr))
                    a2: dict = {}
                    self._send({"ok": True, "result": _encode(out, a2, [])}, a2, until)
                except (Lost, TimeoutError):
                    raise
                except Exception as e:                        # noqa: BLE001
                    self._send({"ok": False, "message": f"{type(e).__name__}: {e}"}, None, until)
        except TimeoutError:
            self.kill()
            raise Lost(f"ran past its time budget ({t:.0f} s): an infinite loop, far too "
                       "slow, or it stopped reading") from None
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
        """Call ``name`` in the child ``repeats`` times; the reply of the last call, with the
        best CPU seconds (``seconds``), the best wall-clock seconds (``wall``) and, with
        ``trace_memory``, the largest rise of resident memory (``peak``), all measured here."""
        arrays: dict = {}
        callbacks: list = []
        enc = _encode(list(args), arrays, callbacks)
        head = {"op": "call", "name": name, "args": enc, "writeback": writeback,
                "measure_inside": self.meter is None}
        best, wall, peak = float("inf"), float("inf"), 0
        for _ in range(max(1, repeats)):
            try:
                if self.proc is None:
                    self.restart()
                base = self.meter.reset_peak() if trace_memory and self.meter else 0
                c0, w0 = self.meter.cpu() if self.meter else 0.0, time.perf_counter()
                reply, arr = self.request(head, arrays, callbacks=callbacks)
                w1 = time.perf_counter()
                c1 = self.meter.cpu() if self.meter else 0.0
                if self.meter is not None:
                    p = self.meter.peak() - base if trace_memory else 0
                else:                                   # no /proc: what the child says
                    c0, c1, w0, w1 = 0.0, float(reply.get("seconds", 0)), 0.0, \
                        float(reply.get("wall", 0))
                    p = int(reply.get("peak", 0))
            except Lost as e:
                raise _core.Aborted(f"{what} {e}") from None
            except OSError as e:                        # the child's /proc went away: it died
                self.kill()
                raise _core.Aborted(f"{what} ended its process ({e.strerror})") from None
            if not reply.get("ok"):
                raise _core.student_error(what, str(reply.get("etype")),
                                          str(reply.get("message")), args)
            best, wall, peak = min(best, c1 - c0), min(wall, w1 - w0), max(peak, p)
        out = dict(reply)
        out["result"] = _decode(reply.get("result"), arr)
        out.update(seconds=max(best, 1e-9), wall=max(wall, 1e-9), peak=peak)
        if writeback and "args" in reply:
            after = _decode(reply["args"], arr)
            for o, n in zip(args, after if isinstance(after, list) else []):
                _writeback(o, n)
        return out


# --------------------------------------------------------------------------------------------
# orphans of a child outside a sandbox: the grading process adopts them (a subreaper) and
# ends those that are new when the child ends
# --------------------------------------------------------------------------------------------
def _subreaper() -> None:
    if sys.platform.startswith("linux") and not getattr(_subreaper, "done", False):
        try:
            import ctypes
            ctypes.CDLL(None).prctl(36, 1)                 # PR_SET_CHILD_SUBREAPER
        except Exception:                                  # noqa: BLE001
            pass
        _subreaper.done = True


def _kill_new_children(before: set) -> None:
    for pid in iso.children(os.getpid()):
        if pid in before:
            continue
        for p in iso.tree(pid):
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
