"""Grading submissions so that a course can trust the scores.

One set of rules (:func:`plan`) decides what runs, for ``exercises check`` and ``exercises grade``
alike: the submission's code cells in its own order (the exercise cells, the helper cells a
student adds, the setup cells), except that every check cell must be the official one: a check
cell that is missing or edited scores 0 for its exercises, with a message saying so.

The code cells run in a separate process (:class:`Session`, the *child*, ``_child.py``), one per
submission, started fresh:

* it sees a ``tostnp`` built for the notebook (:func:`build_sandbox`): no references, no
  solutions, no checkers, and the package functions the exercises are about removed; autograd
  and friends cannot be imported; files of the repository, of the submissions and of the grades
  cannot be opened (an audit hook, and a private mount namespace where the OS allows it);
* it has a memory cap (RLIMIT_AS), a wall-clock budget per cell and per notebook; a cell that
  runs out of time, memory or kills its process costs its exercise only: the child is started
  again, the cells that had run are run again, and grading goes on;
* it only *evaluates*: the checkers run here, in the grading process; they draw their inputs at
  grading time (a salt mixed into every seed), send them to the child, get plain arrays back
  (JSON + .npz, never a pickle) and compare, diagnose and record here.

:func:`grade_class` grades a folder of submissions on ``jobs`` processes, writes each
submission's result as soon as it is graded (re-running skips what is already graded), and
writes the grades CSV, a feedback page per student, the written answers per question for manual
marking (merged back once marked), and gradebook files for Canvas and Moodle.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import json
import os
import queue
import re
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import _child as wire
from . import _core
from . import notebook as nbk
from ..io.atomic import atomic_write_text

PACKAGE = Path(__file__).resolve().parents[1]            # tostnp/
CHILD = Path(__file__).with_name("_child.py")
MAX_MESSAGE = 64 * 2**20            # the largest reply read from a child (checked before reading)
# how the child's two pipes reach it: "fds" passes them as extra descriptors and waits on them
# with select() (POSIX); "stdio" makes them its stdin and stdout and reads them on a thread
# (Windows: no pass_fds, and select() takes sockets only)
PIPES = "fds" if os.name == "posix" else "stdio"

# modules no grading child may import (derivations are by hand; references are the grader's)
BLOCKED_MODULES = ("autograd", "jax", "torch", "tensorflow", "sympy", "tostnp.exercises._reference",
                   "tostnp.math.objective", "tostnp.math.variational")

# notebooks whose exercises use package code: which parts of tostnp the child gets, which are
# left out, and which functions are emptied (they raise when called) because an exercise of the
# notebook asks the student to write them. Every other notebook gets no package code at all.
SANDBOX_PACKAGE = {
    "08_tost_block": {
        "keep": ["tostnp.backend", "tostnp.nn"],
        "drop": ["tostnp.nn.block", "tostnp.nn.class_attention"],
        "empty": {"tostnp.backend.kernels": ["layer_norm_forward", "layer_norm_backward"],
                  "tostnp.nn.layers": ["layer_norm_forward", "layer_norm_backward"]},
        "init": {"tostnp.nn": ["layers", "attention", "flash", "tssa"]},
    },
    "09_images": {
        "keep": ["tostnp.backend", "tostnp.nn", "tostnp.models", "tostnp.data"],
        "drop": [],
        "empty": {"tostnp.backend.kernels": ["adamw_update"]},
        "init": {},
    },
}
# notebooks graded in more than one child: each phase checks some exercises, with its own
# package. Notebook 09's training exercise needs the model code, and the model code holds a patch
# extraction and LayerNorm, so 9.1, 9.2 and 9.4 are checked in a child without any package code.
PHASES = {"09_images": [(("patchify", "adam_step", "membership_maps"), None),
                        (("digits_training",), "notebook")]}
PRELOAD = {"09_images": ["matplotlib.pyplot", "threadpoolctl"], "01_attention_cost": ["threadpoolctl"],
           "11_gpu": ["array_api_strict", "array_api_compat"]}


# --------------------------------------------------------------------------------------------
# one set of rules: what runs
# --------------------------------------------------------------------------------------------
def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _norm(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


def _check_calls(src: str) -> list[tuple[str, list[str]]]:
    """[(exercise, [argument names])] of a check cell's ``check_<name>(a, b)`` calls."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id.startswith("check_"):
            out.append((node.func.id[len("check_"):], [a.id for a in node.args
                                                        if isinstance(a, ast.Name)]))
    return out


@dataclass
class Step:
    kind: str                     # "exec" or "check"
    source: str
    index: int                    # cell index in the submission
    exercise: str | None = None   # the exercise of a student cell / checked by a check cell
    calls: list = field(default_factory=list)


@dataclass
class Plan:
    stem: str
    steps: list[Step]
    exercises: list[str]                          # every exercise of the notebook, in order
    problems: dict[str, str]                      # exercise -> why it scores 0 before running
    answers: list[str]                            # written answers, in order
    questions: list[str]


def notebook_stem(path: Path) -> str | None:
    stem = re.sub(r"^.*?(\d\d_[A-Za-z0-9_]+)$", r"\1", Path(path).stem)
    return stem if (nbk.EXERCISES / f"{stem}.md").is_file() else None


def plan(sub, stem: str) -> Plan:
    """The steps of a submission (an nbformat node) of notebook ``stem``, by the one set of rules."""
    official = nbk.read(nbk.EXERCISES / f"{stem}.md")
    checks = {}                                   # exercise -> official check source
    for c in nbk.check_cells(official):
        for name in nbk.checks_in(c.source):
            checks[name] = c.source
    exercises = list(checks)
    steps, seen, problems = [], set(), {}
    for i, c in enumerate(sub.cells):
        if c.cell_type != "code":
            continue
        tags = _tags(c)
        if "hidden-check" in tags:
            continue
        if "check" in tags or any(n in checks for n in nbk.checks_in(c.source)):
            names = [n for n in nbk.checks_in(c.source) if n in checks]
            for n in names:
                if _norm(c.source) == _norm(checks[n]) and n not in seen:
                    seen.add(n)
                    steps.append(Step("check", checks[n], i, n, _check_calls(checks[n])))
                elif n not in seen:
                    problems[n] = (f"the check cell of {n} was edited, so the exercise "
                                   f"scores 0: restore it as `{_norm(checks[n])}`")
            continue
        ex = next((t[3:] for t in tags if t.startswith("ex-")), None)
        steps.append(Step("exec", c.source, i, ex))
    for n in exercises:
        if n not in seen and n not in problems:
            problems[n] = (f"the check cell of {n} is missing, so the exercise scores 0: put "
                           f"`{_norm(checks[n])}` back under your code")
    blank = {s.strip() for s in nbk.written_answers(official)}
    answers = [a if a.strip() not in blank else "" for a in nbk.written_answers(sub)]
    questions = written_questions(official)
    answers = (answers + [""] * len(questions))[:len(questions)]   # a deleted answer cell: blank
    return Plan(stem, steps, exercises, problems, answers, questions)


def written_questions(nb) -> list[str]:
    """The text of each written question: the markdown cell before each ``written`` cell."""
    out, prev = [], ""
    for c in nb.cells:
        if c.cell_type == "markdown" and "written" in _tags(c):
            out.append(prev.strip())
        if c.cell_type == "markdown":
            prev = c.source
    return out


# --------------------------------------------------------------------------------------------
# the sandbox a child sees
# --------------------------------------------------------------------------------------------
def _empty_functions(src: str, names, where: str) -> str:
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in names:
            msg = (f"tostnp.{where}.{node.name} is not available while grading: the exercise "
                   "asks you to write it")
            node.body = [ast.Raise(exc=ast.Call(func=ast.Name("RuntimeError", ast.Load()),
                                                args=[ast.Constant(msg)], keywords=[]), cause=None)]
            node.decorator_list = []
    return ast.unparse(ast.fix_missing_locations(tree))


def _stub_exercises() -> str:
    from . import __all__ as names
    checks = [n for n in names if n.startswith("check_")]
    lines = ['"""Stand-ins while grading: the checks run in the grading process, not here."""',
             "", "", "def _not_here(*args, **kwargs):", "    return None", ""]
    lines += [f"{n} = _not_here" for n in checks]
    lines += ["", "", "def digits_config():",
              "    from tostnp.models import get_vision_config",
              "    return get_vision_config('tiny-digits', width=32, depth=1, num_heads=4, "
              "pool='mean')", ""]
    return "\n".join(lines)


def build_sandbox(stem: str, dest: Path) -> None:
    """Write ``dest/pkgs/tostnp``: the package a child of notebook ``stem`` may import."""
    pkg = dest / "pkgs" / "tostnp"
    (pkg / "exercises").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""tostnp, as a grading child sees it."""\n')
    (pkg / "exercises" / "__init__.py").write_text(_stub_exercises())
    spec = SANDBOX_PACKAGE.get(stem)
    if not spec:
        return
    for name in spec["keep"]:
        src = _source(name)
        dst = pkg / src.relative_to(PACKAGE)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(src, dst)
    for name in spec["drop"]:
        (pkg / _source(name).relative_to(PACKAGE)).unlink(missing_ok=True)
    for name, funcs in spec["empty"].items():
        f = pkg / _source(name).relative_to(PACKAGE)
        f.write_text(_empty_functions(f.read_text(encoding="utf-8"), set(funcs), name[7:]))
    for name, subs in spec["init"].items():
        (pkg / _source(name).relative_to(PACKAGE) / "__init__.py").write_text(
            "".join(f"from .{m} import *  # noqa\n" for m in subs))


def _source(module: str) -> Path:
    """The file (or, for a package, the folder) of a tostnp module, found without importing it."""
    import importlib.util
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"SANDBOX_PACKAGE names {module}, which does not exist")
    origin = Path(spec.origin).resolve()
    return origin.parent if spec.submodule_search_locations else origin


# --------------------------------------------------------------------------------------------
# the wire (framing: _child.frame, unframe and write_all, shared with the child)
# --------------------------------------------------------------------------------------------
class Lost(Exception):
    """The child ran past its budget, died, or sent something unreadable."""


def _encode(value, arrays: dict, callbacks: list):
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if np.isfinite(v) else {"__float__": repr(v)}
    if isinstance(value, _core.OnDevice):
        k = f"p{len(arrays)}"
        arrays[k] = value.array
        return {"__dev__": k}
    if isinstance(value, np.ndarray):
        k = f"p{len(arrays)}"
        arrays[k] = np.array(value, order="C")
        return {"__nd__": k}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, arrays, callbacks) for v in value]}
    if isinstance(value, list):
        return [_encode(v, arrays, callbacks) for v in value]
    if isinstance(value, dict):
        return {"__dict__": {str(k): _encode(v, arrays, callbacks) for k, v in value.items()}}
    if callable(value):
        callbacks.append(value)
        return {"__cb__": len(callbacks) - 1}
    raise TypeError(f"cannot send a {type(value).__name__} to the grading child")


def _decode(v, arrays: dict, depth: int = 0):
    if depth > 30:
        return _core.Opaque("a structure nested too deeply")
    if isinstance(v, list):
        return [_decode(x, arrays, depth + 1) for x in v]
    if not isinstance(v, dict):
        return v
    if "__nd__" in v:
        a = arrays.get(v["__nd__"])
        if a is None:
            raise Lost("a reply names an array it does not hold")
        return a
    if "__float__" in v:
        return float(v["__float__"])
    if "__tuple__" in v:
        return tuple(_decode(x, arrays, depth + 1) for x in v["__tuple__"])
    if "__dict__" in v:
        return {str(k): _decode(x, arrays, depth + 1) for k, x in v["__dict__"].items()}
    if "__xp__" in v:
        return _core.XpResult(_decode(v["__xp__"]["a"], arrays, depth + 1),
                              str(v["__xp__"]["device"]))
    if "__figure__" in v:
        return _core.FigureData([(_decode(im["a"], arrays, depth + 1),
                                  tuple(float(x) for x in im["clim"])) for im in v["__figure__"]])
    if "__opaque__" in v:
        return _core.Opaque(str(v["__opaque__"]))
    return _core.Opaque("a dict")


def _writeback(orig, new):
    """Make the grader's arguments look as the student's function left them."""
    if isinstance(orig, np.ndarray) and isinstance(new, np.ndarray):
        if orig.shape == new.shape and orig.flags.writeable:
            try:
                np.copyto(orig, new, casting="unsafe")
            except (TypeError, ValueError):
                pass
    elif isinstance(orig, dict) and isinstance(new, dict):
        orig.clear()
        orig.update(new)
    elif isinstance(orig, list) and isinstance(new, list) and len(orig) == len(new):
        orig[:] = new


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


def site_dirs() -> list[str]:
    """The site-packages folders of this interpreter: the child starts without ``site`` (-S, so
    no .pth file runs: an editable install's import hook would reach the real tostnp) and puts
    these on its path itself."""
    import site
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def limits_note() -> str | None:
    """One line for the user where the child's memory and CPU caps cannot be set (no
    ``resource`` module: Windows); None where they can."""
    try:
        import resource  # noqa: F401
    except ImportError:
        return ("note: this system has no `resource` module (Windows): the notebook runs "
                "without a memory cap; the time limits still hold")
    return None


def real_package_dirs() -> set[Path]:
    """Every folder a real ``tostnp`` could be imported from: this one, a copy installed in
    site-packages, the target of an editable install. A child may read none of them."""
    import glob
    out = {PACKAGE}
    for sp in site_dirs():
        if os.path.isdir(os.path.join(sp, "tostnp")):
            out.add(Path(sp, "tostnp").resolve())
        for f in glob.glob(os.path.join(sp, "__editable___tostnp*finder.py")):
            try:
                tree = ast.parse(Path(f).read_text(encoding="utf-8"))
            except (OSError, SyntaxError):
                continue
            for node in tree.body:
                targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                           if isinstance(node, ast.AnnAssign) and node.value is not None else [])
                if any(getattr(t, "id", "") == "MAPPING" for t in targets):
                    try:
                        mapping = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    out |= {Path(v).resolve() for v in mapping.values()}
    return out


def _unshare_works() -> bool:
    if not hasattr(_unshare_works, "ok"):
        exe = shutil.which("unshare")
        ok = False
        if exe and sys.platform.startswith("linux"):
            try:
                ok = subprocess.run([exe, "-Urm", "true"], capture_output=True,
                                    timeout=10).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _unshare_works.ok = ok
    return _unshare_works.ok


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
        self._chunks = None                # the reader thread's queue (PIPES == "stdio")
        self.replay: list[Step] = []
        self.restarts = 0

    # -- process ------------------------------------------------------------------------------
    def _start(self):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.dir / "work"),
               "TMPDIR": str(self.dir / "tmp"), "MPLBACKEND": "Agg",
               "MPLCONFIGDIR": str(self.dir / "tmp"), "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        if os.name != "posix":            # Windows' Python needs these to start (random numbers)
            env.update({k: os.environ[k] for k in ("SYSTEMROOT", "WINDIR") if k in os.environ})
        if PIPES == "stdio":
            self._start_stdio(env)
            return
        c_r, p_w = os.pipe()          # grader -> child
        p_r, c_w = os.pipe()          # child -> grader
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
        self._chunks = None

    def _start_stdio(self, env):
        """The child's stdin and stdout are the pipes (it moves them off 0 and 1 at once); a
        thread reads its replies into a queue, which :meth:`_read` waits on with a timeout."""
        cmd = [sys.executable, "-S", "-E", str(self.dir / "_child.py"), str(self.dir),
               "stdio", "stdio", str(self.dir / "config.json")]
        self.proc = subprocess.Popen(cmd, env=env, cwd=self.dir, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=os.name == "posix")
        self.rfd, self.wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
        self._chunks, self._rest = queue.Queue(), b""

        def pump(fd, chunks):         # ends at the child's end (EOF); kill() waits for it
            while True:
                try:
                    chunk = os.read(fd, 1 << 20)
                except OSError:
                    chunk = b""
                chunks.put(chunk)
                if not chunk:
                    return
        self._pump = threading.Thread(target=pump, args=(self.rfd, self._chunks), daemon=True)
        self._pump.start()

    def kill(self):
        if self.proc is None:
            return
        try:
            if hasattr(os, "killpg"):
                os.killpg(self.proc.pid, signal.SIGKILL)     # its session: the child and all
            else:
                self.proc.kill()                             # Windows: TerminateProcess
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self._chunks is not None:       # stdio: the pipes belong to the Popen object
            self._pump.join(timeout=10)    # done reading before its descriptor is closed
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass
        else:
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
        if self._chunks is not None:
            return self._read_queued(n, until)
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

    def _read_queued(self, n, until):
        """:meth:`_read` from the reader thread's queue (stdio pipes)."""
        buf = bytearray(self._rest)
        while len(buf) < n:
            left = until - time.monotonic()
            if left <= 0:
                self._rest = bytes(buf)
                raise TimeoutError
            try:
                chunk = self._chunks.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if not chunk:
                self._chunks.put(b"")          # every later read sees the end too
                raise Lost(self._death())
            buf += chunk
        self._rest = bytes(buf[n:])
        return bytes(buf[:n])

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


# --------------------------------------------------------------------------------------------
# grading one submission
# --------------------------------------------------------------------------------------------
def _first_line(text: str, n: int = 300) -> str:
    text = (text or "").strip()
    return (text.splitlines()[0] if text else "")[:n]


def _run_phase(p: Plan, session: "Session", only, hidden, results, notes, cell_errors,
               deadline, notebook_timeout, sink, all_notes: bool) -> None:
    """Run the plan's steps in ``session``; check the exercises in ``only`` (None: all). Notes on
    failed cells: every cell's when ``all_notes``, else only those of the exercises checked."""

    def note(step, text):
        if all_notes or (step.exercise is not None and step.exercise in only):
            notes.append(text)
    from tostnp import exercises as checkers

    def zero(name, reason):
        results[name] = {"score": 0.0, "points": nbk.points_of(name), "passed": 0, "cases": 0,
                         "hint": reason}
    session.start()
    for step in p.steps:
        if time.monotonic() >= deadline:
            notes.append(f"the notebook's time budget ({notebook_timeout:.0f} s) ran out "
                         f"before cell {step.index + 1}")
            break
        if step.kind == "exec":
            where = (f"your {step.exercise} cell (cell {step.index + 1})" if step.exercise
                     else f"cell {step.index + 1}")
            try:
                reply = session.exec(step)
            except Lost as e:
                reason = f"{where} {e}"
                note(step, reason)
                if step.exercise:
                    cell_errors[step.exercise] = reason
                continue
            if not reply.get("ok"):
                reason = (f"{where} raised {reply.get('etype')}: "
                          f"{_first_line(reply.get('message', ''))}")
                note(step, reason)
                if step.exercise and (only is None or step.exercise in only
                                      or step.exercise not in cell_errors):
                    cell_errors[step.exercise] = reason
            continue
        name = step.exercise
        if name in p.problems:
            continue
        for ex, argnames in step.calls:
            checker = getattr(checkers, f"check_{ex}", None)
            if checker is None or (only is not None and ex not in only):
                continue
            objs, missing = [], None
            try:
                for a in argnames:
                    k = session.kind(a)
                    if k == "missing":
                        missing = a
                        break
                    objs.append(Remote(session, a) if k == "callable" else session.value(a))
            except (Lost, _core.Fail) as e:
                zero(ex, f"{ex}: could not read your answer ({e})")
                continue
            if missing:
                why = cell_errors.get(ex) or cell_errors.get(name)
                zero(ex, f"{missing} is not defined" + (f": {why}" if why else
                                                         " (run its cell; is it named so?)"))
                continue
            sink.clear()
            try:
                checker(*objs, hidden=hidden)
            except AssertionError:
                pass
            except Exception as e:                              # noqa: BLE001  never the run
                sink.clear()
                zero(ex, f"the check could not run on your answer ({type(e).__name__}: "
                         f"{_first_line(str(e))})")
            for r in sink:
                results[r["exercise"]] = {k: r[k] for k in
                                          ("score", "points", "passed", "cases", "hint")}
            if ex not in results:
                zero(ex, "the check did not finish")
            if session.proc is None:                            # aborted: start again
                try:
                    session.restart()
                except Lost as e:
                    notes.append(f"the process could not be started again: {e}")


def run_submission(sub, stem: str, *, hidden: bool, cell_timeout: float = 60.0,
                   notebook_timeout: float = 600.0, memory_mb: int = 2048, salt=None,
                   protected=()) -> dict:
    """Grade one submission (an nbformat node of notebook ``stem``); returns its result:
    {"exercises": {name: {score, points, passed, cases, hint}}, "notes": [...], "answers",
    "questions", "salt", "seconds"}."""
    t0 = time.monotonic()
    p = plan(sub, stem)
    results: dict[str, dict] = {}
    notes: list[str] = []
    cell_errors: dict[str, str] = {}
    deadline = t0 + notebook_timeout
    restarts, tails = 0, []
    phases = PHASES.get(stem, [(None, "notebook")])
    old = (_core.GRADING.salt, _core.GRADING.sink)
    try:
        for k, (only, package) in enumerate(phases):
            session = Session(stem, cell_timeout=cell_timeout, memory_mb=memory_mb,
                              protected=protected, deadline=deadline, package=package)
            sink: list[dict] = []
            _core.GRADING.salt, _core.GRADING.sink = salt, sink.append
            try:
                _run_phase(p, session, only, hidden, results, notes, cell_errors, deadline,
                           notebook_timeout, sink, all_notes=k == len(phases) - 1)
            finally:
                restarts += session.restarts
                tails.append(session.output_tail())
                session.close()
    finally:
        _core.GRADING.salt, _core.GRADING.sink = old
    tail = tails[-1] if tails else ""

    def zero(name, reason):
        results[name] = {"score": 0.0, "points": nbk.points_of(name), "passed": 0, "cases": 0,
                         "hint": reason}
    for name in p.exercises:
        if name in p.problems:
            zero(name, p.problems[name])
        elif name not in results:
            zero(name, cell_errors.get(name) or "the check did not run (time budget?)")
    ordered = {n: results[n] for n in p.exercises}
    notes = list(dict.fromkeys(notes))                  # a cell that failed in two phases
    return {"notebook": stem, "exercises": ordered, "notes": notes, "answers": p.answers,
            "questions": p.questions, "salt": salt, "restarts": restarts,
            "seconds": round(time.monotonic() - t0, 2), "output_tail": tail[-1000:]}


# --------------------------------------------------------------------------------------------
# a class
# --------------------------------------------------------------------------------------------
def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, file) pairs: SUBMISSIONS/<student>/NN_name.(md|ipynb), or files directly in
    SUBMISSIONS (student = the file name). An .md wins over its paired .ipynb."""
    found: dict[tuple[str, str], Path] = {}
    for p in sorted(Path(folder).rglob("*")):
        if p.suffix not in (".md", ".ipynb") or ".ipynb_checkpoints" in p.parts:
            continue
        stem = notebook_stem(p)
        if stem is None:
            continue
        rel = p.parent.relative_to(folder)
        student = str(rel) if str(rel) != "." else p.stem
        key = (student, stem)
        if key not in found or p.suffix == ".md":
            found[key] = p
    return [(s, found[(s, stem)]) for s, stem in sorted(found)]


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "_"


def _result_path(out: Path, student: str, stem: str) -> Path:
    return out / "results" / _safe(student) / f"{stem}.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _grade_job(job) -> tuple[str, str, dict]:
    import contextlib
    student, path, stem, opts, out_json = job
    try:
        sub = nbk.read(path)
        with contextlib.redirect_stdout(io.StringIO()):     # the checkers' PASS lines
            res = run_submission(sub, stem, **opts)
    except Exception as e:                                       # noqa: BLE001  never the run
        res = {"notebook": stem, "exercises": {}, "notes": [
            f"the submission could not be read as a notebook: {type(e).__name__}: {e}"],
            "answers": [], "questions": [], "seconds": 0.0}
        official = nbk.read(nbk.EXERCISES / f"{stem}.md")
        for n in nbk.exercises_of(official):
            res["exercises"][n] = {"score": 0.0, "points": nbk.points_of(n), "passed": 0,
                                   "cases": 0, "hint": "the notebook could not be read"}
        res["questions"] = written_questions(official)
        res["answers"] = [""] * len(res["questions"])
    res["student"], res["file"], res["sha256"] = student, str(path), _digest(path)
    atomic_write_text(out_json, json.dumps(res, indent=1))
    return student, stem, res


def read_roster(path: Path) -> list[dict]:
    """Rows of a roster CSV: a ``student`` column (the submission folder's name) and any of
    name, id, sis_id, login, section, email, id_number (for the gradebook exports)."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    if not rows or "student" not in rows[0]:
        raise ValueError(f"{path}: a roster needs a 'student' column (the folder name of each "
                         "student's submissions)")
    return [{k: (v or "").strip() for k, v in r.items() if k} for r in rows if r.get("student")]


def grade_class(folder: Path, out: Path, *, hidden: bool = True, jobs: int = 2,
                cell_timeout: float = 60.0, notebook_timeout: float = 600.0,
                memory_mb: int = 2048, roster: Path | None = None, regrade: bool = False,
                csv_path: Path | None = None, log=print) -> dict:
    """Grade every submission under ``folder`` into ``out`` (see the module docstring)."""
    folder, out = Path(folder).resolve(), Path(out).resolve()
    subs = find_submissions(folder)
    roster_rows = read_roster(roster) if roster else []
    salt_file = out / "salt.txt"
    out.mkdir(parents=True, exist_ok=True)
    if salt_file.exists() and not regrade:
        salt = int(salt_file.read_text().strip())
    else:
        salt = secrets.randbits(63)
        atomic_write_text(salt_file, f"{salt}\n")
    protected = [nbk.ROOT / "exercises", nbk.ROOT / "tostnp", nbk.ROOT / ".git", folder, out]
    opts = {"hidden": hidden, "cell_timeout": cell_timeout, "notebook_timeout": notebook_timeout,
            "memory_mb": memory_mb, "salt": salt, "protected": [str(p) for p in protected]}
    done, todo = {}, []
    for student, path in subs:
        stem = notebook_stem(path)
        rp = _result_path(out, student, stem)
        if rp.exists() and not regrade:
            try:
                r = json.loads(rp.read_text())
                if r.get("sha256") == _digest(path):
                    done[(student, stem)] = r
                    continue
            except (OSError, ValueError):
                pass
        todo.append((student, path, stem, opts, rp))
    log(f"{len(subs)} submission(s): {len(done)} already graded, {len(todo)} to grade "
        f"on {jobs} process(es)")
    if todo:
        if jobs > 1 and len(todo) > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor, as_completed
            with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as ex:
                futs = [ex.submit(_grade_job, j) for j in todo]
                for f in as_completed(futs):
                    student, stem, r = f.result()
                    done[(student, stem)] = r
                    log(_summary_line(r))
        else:
            for j in todo:
                student, stem, r = _grade_job(j)
                done[(student, stem)] = r
                log(_summary_line(r))
    return write_reports(out, done, roster_rows, csv_path=csv_path)


def _summary_line(r: dict) -> str:
    tot = sum(e["score"] for e in r["exercises"].values())
    mx = sum(e["points"] for e in r["exercises"].values())
    return f"  graded {r['student']:<20} {r['notebook']:<22} {tot:6.2f} / {mx:g}  ({r['seconds']:.1f} s)"


# --------------------------------------------------------------------------------------------
# reports: grades CSV, feedback pages, written answers, gradebook exports
# --------------------------------------------------------------------------------------------
RUBRIC = [("full", 1.0, "correct and complete"), ("partial", 0.5, "partly right, or right "
                                                                    "with a gap in the reasoning"),
          ("none", 0.0, "missing, or wrong")]
WRITTEN_FIELDS = ["student", "notebook", "question", "answer", "max_points", "level", "score",
                  "comment"]


def _written_marks(out: Path, stem: str) -> dict:
    """{(student, question): {"level", "score", "comment", "answer"}} already entered by hand."""
    f = out / "written" / f"{stem}.csv"
    if not f.exists():
        return {}
    with open(f, newline="", encoding="utf-8") as fh:
        return {(r["student"], int(r["question"])): r for r in csv.DictReader(fh)}


def written_score(row: dict, max_points: float = 1.0) -> float | None:
    """The points of a marked answer: a number in ``score``, else the rubric ``level``."""
    s = (row.get("score") or "").strip()
    if s:
        try:
            v = float(s)
        except ValueError:
            raise ValueError(f"written mark for {row.get('student')} question {row.get('question')}: "
                             f"score {s!r} is not a number") from None
        if not 0 <= v <= max_points:
            raise ValueError(f"written mark for {row.get('student')} question "
                             f"{row.get('question')}: score {v:g} outside 0..{max_points:g}")
        return v
    lvl = (row.get("level") or "").strip().lower()
    for name, frac, _ in RUBRIC:
        if lvl == name:
            return frac * max_points
    if lvl:
        raise ValueError(f"written mark for {row.get('student')} question {row.get('question')}: "
                         f"level {lvl!r} is not one of {[r[0] for r in RUBRIC]}")
    return None


def _write_csv(path: Path, fields, rows):
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def write_reports(out: Path, done: dict, roster_rows: list[dict], csv_path=None) -> dict:
    out = Path(out)
    stems = sorted({stem for (_, stem) in done})
    students = sorted({s for (s, _) in done} | {r["student"] for r in roster_rows})
    info = {r["student"]: r for r in roster_rows}
    # written answers: export per notebook, keeping the marks already entered
    marks = {}
    for stem in stems:
        old = _written_marks(out, stem)
        rows = []
        for (student, st), r in sorted(done.items()):
            if st != stem:
                continue
            for q, ans in enumerate(r.get("answers", []), start=1):
                prev = old.get((student, q), {})
                keep = prev if prev.get("answer", "").strip() == ans.strip() else {}
                rows.append({"student": student, "notebook": stem, "question": q,
                             "answer": ans.strip(), "max_points": 1,
                             "level": keep.get("level", "") if ans.strip() else "none",
                             "score": keep.get("score", "") if ans.strip() else "0",
                             "comment": keep.get("comment", "") if ans.strip() else
                             "no answer"})
                marks[(student, stem, q)] = written_score(rows[-1])
        (out / "written").mkdir(parents=True, exist_ok=True)
        _write_csv(out / "written" / f"{stem}.csv", WRITTEN_FIELDS, rows)
        qs = next((r.get("questions", []) for (s, st), r in done.items() if st == stem), [])
        rub = [f"# Written questions of {stem}: rubric", "",
               "Mark each row of `" + f"{stem}.csv" + "`: put a rubric level in `level` (or a "
               "number of points in `score`, which wins) and a comment; run the same `grade` "
               "command again to merge the marks into the grades and the feedback pages.", "",
               "| level | points | meaning |", "|---|---|---|"]
        rub += [f"| {n} | {f:g} x max_points | {m} |" for n, f, m in RUBRIC]
        for i, q in enumerate(qs, start=1):
            rub += ["", f"## Question {i}", "", q]
        atomic_write_text(out / "written" / f"{stem}-rubric.md", "\n".join(rub) + "\n")
    # grades: a row per student and notebook, submitted or not
    all_ex = {stem: next(list(r["exercises"]) for (s, st), r in done.items() if st == stem)
              for stem in stems}
    rows = []
    for student in students:
        for stem in stems:
            r = done.get((student, stem))
            row = {"student": student, "notebook": stem,
                   "status": "graded" if r else "missing"}
            auto = mx = 0.0
            for name in all_ex[stem]:
                e = r["exercises"].get(name) if r else None
                row[name] = round(e["score"], 4) if e else 0.0
                auto += e["score"] if e else 0.0
                mx += e["points"] if e else nbk.points_of(name)
            nq = len(r.get("questions", [])) if r else len(
                next(rr.get("questions", []) for (s, st), rr in done.items() if st == stem))
            got = [marks.get((student, stem, q)) for q in range(1, nq + 1)] if r else [0.0] * nq
            row["exercises_total"] = round(auto, 4)
            row["written_marked"] = f"{sum(g is not None for g in got)}/{nq}"
            written = sum(g for g in got if g is not None)
            row["written_total"] = round(written, 4)
            row["total"] = round(auto + written, 4)
            row["max_score"] = mx + nq
            row["percent"] = round(100 * (auto + written) / (mx + nq), 1) if mx + nq else 0.0
            rows.append(row)
    fields = ["student", "notebook", "status"]
    for stem in stems:
        fields += [n for n in all_ex[stem] if n not in fields]
    fields += ["exercises_total", "written_marked", "written_total", "total", "max_score",
               "percent"]
    csv_path = Path(csv_path) if csv_path else out / "grades.csv"
    _write_csv(csv_path, fields, rows)
    _write_feedback(out, done, rows, students, stems, marks, info)
    _write_exports(out, rows, students, stems, info)
    return {"rows": rows, "csv": csv_path, "students": students, "notebooks": stems}


def _md_cell(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _write_feedback(out, done, rows, students, stems, marks, info):
    fb = out / "feedback"
    fb.mkdir(parents=True, exist_ok=True)
    by = {(r["student"], r["notebook"]): r for r in rows}
    for student in students:
        name = info.get(student, {}).get("name") or student
        lines = [f"# Feedback: {name}", ""]
        for stem in stems:
            row = by[(student, stem)]
            r = done.get((student, stem))
            lines += [f"## {stem}: {row['total']:g} / {row['max_score']:g} ({row['percent']:g} %)", ""]
            if r is None:
                lines += ["No submission was received for this notebook: every exercise scores 0.",
                          ""]
                continue
            lines += ["| exercise | score | feedback |", "|---|---|---|"]
            for ex, e in r["exercises"].items():
                if e["score"] == e["points"]:
                    msg = "PASS"
                elif e["score"] == 0:
                    msg = "0 points: " + _md_cell(e["hint"] or "no case passed")
                else:
                    msg = (f"{e['passed']} of {e['cases']} cases pass; first failure: "
                           + _md_cell(e["hint"]))
                lines.append(f"| {ex} | {e['score']:.2f} / {e['points']:g} | {msg} |")
            lines.append("")
            if r.get("notes"):
                lines += ["Notes from running your notebook:", ""]
                lines += [f"- {n}" for n in r["notes"]] + [""]
            old = _written_marks(out, stem)
            for q, ans in enumerate(r.get("answers", []), start=1):
                m = marks.get((student, stem, q))
                com = old.get((student, q), {}).get("comment", "")
                lines.append(f"Written question {q}: " + (
                    "not marked yet" if m is None else f"{m:g} / 1") + (f" ({com})" if com else ""))
            lines.append("")
        atomic_write_text(fb / f"{_safe(student)}.md", "\n".join(lines))


def _write_exports(out, rows, students, stems, info):
    by = {(r["student"], r["notebook"]): r for r in rows}
    canvas_fields = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] + \
        [f"Exercises {s}" for s in stems]
    canvas = [{"Student": "    Points Possible", **{f"Exercises {s}": by[(students[0], s)][
        "max_score"] for s in stems}}] if students else []
    moodle_fields = ["Email address", "ID number", "Username", "Full name"] + \
        [f"Exercises {s}" for s in stems]
    moodle = []
    for st in students:
        i = info.get(st, {})
        canvas.append({"Student": i.get("name") or st, "ID": i.get("id", ""),
                       "SIS User ID": i.get("sis_id", ""), "SIS Login ID": i.get("login", st),
                       "Section": i.get("section", ""),
                       **{f"Exercises {s}": by[(st, s)]["total"] for s in stems}})
        moodle.append({"Email address": i.get("email", ""), "ID number": i.get("id_number", ""),
                       "Username": i.get("login", st), "Full name": i.get("name") or st,
                       **{f"Exercises {s}": by[(st, s)]["total"] for s in stems}})
    _write_csv(out / "canvas.csv", canvas_fields, canvas)
    _write_csv(out / "moodle.csv", moodle_fields, moodle)
