"""What every checker shares: running cases, partial credit, hints computed from the error,
and catching a student function that calls the code it is meant to replace.

A checker is a list of cases, most often one per spec of the inputs (:func:`run_specs`: the
visible specs, then the hidden ones). Each case calls the student's function on one input and
compares the result with an independent reference (loops, eigenvalues, autograd, finite
differences, written in :mod:`tostnp.exercises._reference`, never the ``tostnp`` function under
study).
The score of an exercise is ``points * (cases passed) / (cases run)``; a failing exercise raises
``AssertionError`` with the hint of its first failing case, after recording its score. A case
that finds a broken rule (:class:`RuleBroken`), delegation, an unwritten function or a process
that ran out of time (:class:`Aborted`) scores the exercise 0 at once.

Two ways to run. In a notebook kernel (the student's check cell): the student's function is
called in-process, delegation is caught by a profiler, scores go to stdout and, when the
environment variable ``TOSTNP_EXERCISE_RESULTS`` names a file, one JSON line per exercise is
appended to it; ``TOSTNP_EXERCISE_HIDDEN=1`` adds the hidden edge cases. In the grading
process (:mod:`tostnp.exercises.grading`): the student's function is a remote name in a child
process (:func:`call_student` and :func:`measure` call it there), the inputs are drawn with a
salt set at grading time (:func:`rng`) and the records go to the grader (:data:`GRADING`).
"""
from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np

RESULTS_ENV = "TOSTNP_EXERCISE_RESULTS"
HIDDEN_ENV = "TOSTNP_EXERCISE_HIDDEN"


class Fail(AssertionError):
    """One case failed; the message is the hint shown to the student."""


class Delegated(AssertionError):
    """The student's function called the code under study (or autograd) instead of deriving it."""


class NotWritten(AssertionError):
    """The student's function still raises NotImplementedError."""


class RuleBroken(AssertionError):
    """The answer breaks a rule the exercise states (a complexity, no T x T array...): the
    exercise scores 0 at once, whatever its other cases give."""


class Aborted(AssertionError):
    """The student's code ran out of time or memory, or killed its process: the exercise
    scores 0 at once (grading only; the reason is the message)."""


# --------------------------------------------------------------------------------------------
# the grading context: set only in the grading process (tostnp.exercises.grading)
# --------------------------------------------------------------------------------------------
class _Grading:
    salt: int | None = None          # mixed into every checker's seed: inputs drawn at grading time
    sink = None                      # callable(record dict): where scores go instead of the file


GRADING = _Grading()


def rng(seed: int):
    """The generator of a checker: ``default_rng(seed)`` when a student checks (the inputs of
    the notebook's checks are reproducible), salted with a number drawn at grading time when
    grading (so a table of answers to the visible inputs is worth nothing)."""
    if GRADING.salt is None:
        return np.random.default_rng(seed)
    return np.random.default_rng([seed, GRADING.salt])


class FigureData:
    """A figure returned by the grading child: the images of its axes, as (array, (vmin, vmax))."""

    def __init__(self, images):
        self.images = list(images)


class OnDevice:
    """An argument the grading child turns into an ``array_api_strict`` array on its second
    device before calling the student's function."""

    def __init__(self, array):
        self.array = np.asarray(array)


class XpResult:
    """An ``array_api_strict`` result read back by the grading child: host copy and device name."""

    def __init__(self, host, device: str):
        self.host, self.device = host, device


class Opaque:
    """A value the grading child could not send as data (an object, a function...)."""

    def __init__(self, what: str):
        self.what = what

    def __repr__(self):
        return self.what


# --------------------------------------------------------------------------------------------
# catching delegation: a profiler watches the student's call for forbidden code
# --------------------------------------------------------------------------------------------
def _module_files(prefixes) -> dict[str, str]:
    """{source file: label} of every imported module whose name starts with one of ``prefixes``."""
    files = {}
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if f and any(name == p or name.startswith(p + ".") for p in prefixes):
            files[os.path.realpath(f)] = name
    return files


def _exercise_files() -> set[str]:
    here = Path(__file__).resolve().parent
    return {str(p.resolve()) for p in here.glob("*.py")}


@contextmanager
def forbid(*modules: str):
    """Run the body with a profiler that notes any call into the given modules (by name prefix,
    e.g. ``"tostnp.math.objective"``, ``"autograd"``); raises :class:`Delegated` afterwards if one
    happened. Every alias of a function shares its code object, so ``from tostnp import
    coding_rate as my_rate`` is caught as well as ``tostnp.coding_rate``."""
    if not modules:
        yield
        return
    for m in modules:                       # import them so that their files are known
        try:
            __import__(m)
        except ImportError:
            pass
    files = _module_files(modules)
    files = {f: n for f, n in files.items() if f not in _exercise_files()}
    seen: list[str] = []
    code_ok: dict = {}

    def prof(frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        hit = code_ok.get(code)
        if hit is None:
            f = os.path.realpath(code.co_filename)
            hit = files.get(f, "")
            code_ok[code] = hit
        if hit and not seen:
            seen.append(f"{hit}.{code.co_name}")

    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        yield
    finally:
        sys.setprofile(old)
    if seen:
        raise Delegated(f"your function calls {seen[0]}: this exercise asks you to write it "
                        "yourself in plain NumPy, without calling the tostnp code it replaces "
                        "(or autograd, where the point is to derive the gradient)")


# --------------------------------------------------------------------------------------------
# answers are real, finite numbers: one gate for every check, before any comparison
# --------------------------------------------------------------------------------------------
def real_numbers(value, what: str = "your function", _depth: int = 0):
    """``value`` unchanged if every number in it is real and finite; :class:`Fail` with a hint
    otherwise (NaN, inf, complex, object or text arrays). Walks tuples, lists and dicts (a
    backward's ``(dx, grads)``); leaves alone what is not numbers (None, text, a figure, a
    function, an array of another library, which its checker converts first)."""
    if _depth > 8 or value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, complex):
        raise Fail(_complex_hint(what))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Fail(f"{what}: the result is NaN or inf ({value}): {_NONFINITE}")
        return value
    if isinstance(value, (list, tuple)):
        for v in value:
            real_numbers(v, what, _depth + 1)
        return value
    if isinstance(value, dict):
        for k, v in value.items():
            real_numbers(v, f"{what} (its {k!r})", _depth + 1)
        return value
    if isinstance(value, XpResult):
        real_numbers(value.host, what, _depth + 1)
        return value
    if not isinstance(value, (np.ndarray, np.generic)):
        return value
    kind = value.dtype.kind
    if kind == "c":
        raise Fail(_complex_hint(what))
    if kind not in "biuf":
        raise Fail(f"{what} returned an array of {value.dtype}, not numbers (a list of arrays of "
                   "different shapes? text?): return a float64 array")
    if kind == "f" and not np.all(np.isfinite(value)):
        bad = np.argwhere(~np.isfinite(value))
        at = f" (first at index {tuple(int(i) for i in bad[0])})" if value.ndim else ""
        raise Fail(f"{what}: the result contains NaN or inf{at}: {_NONFINITE}")
    return value


_NONFINITE = ("a log of 0 or of a negative number, a division by a zero norm, an overflowing "
              "exp or det?")


def _complex_hint(what: str) -> str:
    return (f"{what} returned complex numbers: the answer is real (np.linalg.eig instead of "
            "eigh on a symmetric matrix? a square root of a negative number?); return a real "
            "float64 array")


def _shapes(args) -> str:
    return ", ".join(f"{tuple(a.shape)}" for a in args if hasattr(a, "shape"))


def call_student(fn, *args, forbidden=(), what="your function"):
    """Call the student's function; turn its crashes into hints, and catch delegation.

    ``fn`` may be a remote function of the grading child (:class:`tostnp.exercises.grading.Remote`):
    then it runs there, in a process without the code under study, and its arguments are
    written back (a function that modifies its inputs is seen doing so)."""
    remote_call = getattr(fn, "remote_call", None)
    if remote_call is not None:
        out = remote_call(args, what=what, writeback=True)["result"]
        if isinstance(out, Opaque):
            raise Fail(f"{what} returned {out.what}, not numbers")
        return real_numbers(out, what)
    try:
        with forbid(*forbidden):
            out = fn(*args)
    except (Delegated, Fail):
        raise
    except NotImplementedError as e:
        raise NotWritten(f"{what} is not written yet (it raises NotImplementedError: {e})") from None
    except AssertionError as e:
        raise Fail(f"{what} raised AssertionError: {e}") from None
    except Exception as e:                  # a shape slip surfaces as ValueError/IndexError
        raise student_error(what, type(e).__name__, str(e), args) from None
    return real_numbers(out, what)


def answer_of(result, *, forbidden=(), what="your function"):
    """The student's answer to a question answered by a value or by a function returning it:
    ``result`` itself, or what calling it returns (:func:`call_student`)."""
    if callable(result):
        return call_student(result, forbidden=forbidden, what=what)
    return real_numbers(result, what)


def student_error(what: str, ename: str, message: str, args=()) -> AssertionError:
    """The hint for a student function that raised ``ename`` (in this process or the child)."""
    if ename == "NotImplementedError":
        return NotWritten(f"{what} is not written yet (it raises NotImplementedError: {message})")
    if ename == "AssertionError":
        return Fail(f"{what} raised AssertionError: {message}")
    if ename == "MemoryError":
        return Fail(f"{what} ran out of memory (MemoryError): does it build an array much larger "
                    "than its inputs?")
    if ename in ("ImportError", "ModuleNotFoundError", "PermissionError"):
        return Fail(f"{what} raised {ename}: {message}")
    return Fail(f"{what} raised {ename}: {message} (called with arrays of shapes "
                f"{_shapes(args)}). Check the shapes you assume")


def cpu_clock():
    """``time.thread_time`` where the platform has it (a browser's Pyodide may not), else
    ``time.perf_counter``."""
    import time
    try:
        time.thread_time()
        return time.thread_time
    except (AttributeError, OSError):
        return time.perf_counter


def one_blas_thread():
    """A context with BLAS on one thread (threadpoolctl), or nothing where it is unavailable."""
    import contextlib
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(limits=1)
    except Exception:                       # noqa: BLE001  no threadpoolctl, no BLAS to find
        return contextlib.nullcontext()


def measure(fn, *args, repeats: int = 1, trace_memory: bool = False, what="your function"):
    """Call ``fn`` ``repeats`` times; returns (result, best seconds, peak traced bytes, best
    wall-clock seconds).

    The seconds are CPU seconds of the calling thread (``time.thread_time``; run BLAS on one
    thread), which other processes on a loaded machine barely disturb, unlike wall-clock time.
    Measured where the function runs (in the grading child, with a clock and tracemalloc taken
    before student code runs); a crash becomes a hint as in :func:`call_student`."""
    remote_call = getattr(fn, "remote_call", None)
    if remote_call is not None:
        r = remote_call(args, what=what, repeats=repeats, trace_memory=trace_memory)
        if r.get("trace_stopped"):
            raise Fail(f"{what} stopped tracemalloc: the memory check cannot run")
        out = real_numbers(r["result"], what)
        return out, float(r["seconds"]), int(r["peak"]), float(r["wall"])
    import time
    if trace_memory:
        from ..bench.peaks import traced_peak_bytes
    best, wall, peak, out = math.inf, math.inf, 0, None
    clock = cpu_clock()

    def once():
        nonlocal out, best, wall
        t0, w0 = clock(), time.perf_counter()
        out = call_student(fn, *args, what=what)
        best = min(best, clock() - t0)
        wall = min(wall, time.perf_counter() - w0)
    for _ in range(max(1, repeats)):
        if trace_memory:
            peak = max(peak, traced_peak_bytes(once))
        else:
            once()
    return out, best, peak, wall


# --------------------------------------------------------------------------------------------
# running an exercise: cases, partial credit, the pass line and the record
# --------------------------------------------------------------------------------------------
def hints_without_traceback() -> None:
    """In a notebook (an IPython kernel), show a failed check as its hint alone: the traceback
    through the checker's own code tells the student nothing (called when
    :mod:`tostnp.exercises` is imported)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return

    def show(self, etype, value, tb, tb_offset=None):
        stb = [f"{etype.__name__}: {value}"]
        self._showtraceback(etype, value, stb)       # IPython leaves the showing to the handler
        return stb
    shell.set_custom_exc((Fail, Delegated, NotWritten, RuleBroken, Aborted), show)


def hidden_enabled(hidden) -> bool:
    if hidden is None:
        return os.environ.get(HIDDEN_ENV, "") not in ("", "0")
    return bool(hidden)


def _record(name: str, score: float, points: float, passed: int, total: int, hint: str) -> None:
    if GRADING.sink is not None:
        GRADING.sink({"exercise": name, "score": round(score, 6), "points": points,
                      "passed": passed, "cases": total, "hint": hint})
        return
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    line = json.dumps({"exercise": name, "score": round(score, 6), "points": points,
                       "passed": passed, "cases": total, "hint": hint})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def say(line: str) -> None:
    """A score line, printed in a notebook; the grading process (``exercises check`` and
    ``grade``) prints one table of its records instead."""
    if GRADING.sink is None:
        print(line)


def run_cases(name: str, cases, *, points: float = 1.0) -> float:
    """Run ``cases`` (a list of (label, thunk)); print the pass line or raise the first hint.

    Returns the score. Delegation or a function that is not written yet scores 0 at once.
    """
    passed, first = 0, None
    for label, thunk in cases:
        try:
            thunk()
            passed += 1
        except (Delegated, NotWritten, Aborted, RuleBroken) as e:
            _record(name, 0.0, points, 0, len(cases), str(e))
            say(f"SCORE {name}: 0/{points:g}")
            raise type(e)(f"{name}: {e}") from None
        except Fail as e:
            if first is None:
                first = f"{label}: {e}"
    score = points * passed / len(cases)
    _record(name, score, points, passed, len(cases), first or "")
    if first is not None:
        say(f"SCORE {name}: {score:.2f}/{points:g} ({passed} of {len(cases)} cases pass)")
        raise Fail(f"{name}, {first}")
    say(f"PASS  {name}: all {len(cases)} cases ({points:g}/{points:g})")
    return score


def case(label: str, fn):
    """A (label, thunk) pair; spelled out so that checkers read as a list of cases."""
    return (label, fn)


def run_specs(name: str, one, specs, hidden_specs=(), *, label, hidden=None,
              seed: int | None = None, more=(), points: float = 1.0) -> float:
    """Run a checker made of one case per spec, the shape most checkers share; returns the score.

    ``specs`` are the visible cases (tuples); ``hidden_specs`` follow them when
    :func:`hidden_enabled` (``hidden``) says so. The case of ``spec`` is labelled
    ``label(*spec)`` and runs ``one(gen, *spec)``, where ``gen`` is the checker's generator
    :func:`rng` (``seed``; None when ``seed`` is None), one for all the cases. The cases draw
    from it only when they run, in order, so the inputs of the visible checks are those of
    ``default_rng(seed)`` case after case. ``more`` holds extra cases (label, fn), run after
    the specs as ``fn(gen)``, with the same generator.
    """
    gen = rng(seed) if seed is not None else None
    specs = list(specs) + (list(hidden_specs) if hidden_enabled(hidden) else [])
    cases = [case(label(*spec), lambda spec=spec: one(gen, *spec)) for spec in specs]
    cases += [case(text, lambda fn=fn: fn(gen)) for text, fn in more]
    return run_cases(name, cases, points=points)
