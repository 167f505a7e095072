"""What every checker shares: running cases, partial credit, hints computed from the error,
and catching a student function that calls the code it is meant to replace.

A checker is a list of cases. Each case calls the student's function on one input and compares
the result with an independent reference (loops, eigenvalues, autograd, finite differences,
written in :mod:`tostnp.exercises._reference`, never the ``tostnp`` function under study).
The score of an exercise is ``points * (cases passed) / (cases run)``; a failing exercise raises
``AssertionError`` with the hint of its first failing case, after recording its score.

Scores go to stdout and, when the environment variable ``TOSTNP_EXERCISE_RESULTS`` names a
file, one JSON line per exercise is appended to it (``python -m tostnp exercises check`` and
``grade`` read them). ``TOSTNP_EXERCISE_HIDDEN=1`` adds the edge cases the notebooks do not
show (the instructor edition and the grade command set it).
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


def call_student(fn, *args, forbidden=(), what="your function"):
    """Call the student's function; turn its crashes into hints, and catch delegation."""
    try:
        with forbid(*forbidden):
            return fn(*args)
    except (Delegated, Fail):
        raise
    except NotImplementedError as e:
        raise NotWritten(f"{what} is not written yet (it raises NotImplementedError: {e})") from None
    except AssertionError as e:
        raise Fail(f"{what} raised AssertionError: {e}") from None
    except Exception as e:                  # a shape slip surfaces as ValueError/IndexError
        shapes = ", ".join(f"{tuple(a.shape)}" for a in args if hasattr(a, "shape"))
        raise Fail(f"{what} raised {type(e).__name__}: {e} (called with arrays of shapes "
                   f"{shapes}). Check the shapes you assume") from None


# --------------------------------------------------------------------------------------------
# hints computed from the error
# --------------------------------------------------------------------------------------------
_NAMED_RATIOS = [
    (-1.0, "the sign is flipped"),
    (2.0, "it is twice the reference: a factor 1/2 is missing"),
    (0.5, "it is half the reference: an extra factor 1/2 (or a missing 2)"),
    (-2.0, "the sign is flipped and a factor 1/2 is missing"),
    (-0.5, "the sign is flipped and there is an extra factor 1/2"),
    (1.0 / math.log(2.0), "it is 1/ln 2 times the reference: a logarithm in base 2? (use the "
                          "natural log)"),
    (1.0 / math.log(10.0), "it is 1/ln 10 times the reference: a logarithm in base 10? (use "
                           "the natural log)"),
]


def _close(a: float, b: float, tol: float = 1e-6) -> bool:
    return abs(a - b) <= tol * max(abs(a), abs(b), 1e-300)


def ratio_hint(r: float, factors: dict | None = None) -> str | None:
    """Name a constant factor r (got = r * reference) from known ratios and the case's sizes."""
    for val, text in _NAMED_RATIOS:
        if _close(r, val):
            return text
    for name, val in (factors or {}).items():
        val = float(val)
        if val in (0.0, 1.0, -1.0):
            continue
        for s, sign in ((1.0, ""), (-1.0, "the sign is flipped and ")):
            if _close(r, s * val):
                return f"{sign}it is {name} times the reference: a missing division by {name}?"
            if _close(r, s / val):
                return f"{sign}it is the reference divided by {name}: an extra division by {name}?"
    return None


def compare(got, want, what: str, *, rtol: float = 1e-8, factors: dict | None = None,
            diagnoses=(), shape_desc: str = "", need_float64: bool = True,
            floor: float = 1e-12) -> None:
    """Raise :class:`Fail` with a hint unless ``got`` matches ``want`` (relative error < rtol,
    relative to max(max |want|, floor)). ``diagnoses`` is a sequence of (hint, thunk): a thunk returns the
    value a known mistake gives; if ``got`` matches it, that hint is used."""
    if got is None:
        raise Fail(f"{what}: your function returned None (did you forget `return`?)")
    want = np.asarray(want)
    try:
        g = np.asarray(got)
    except Exception as e:                                    # ragged lists and the like
        raise Fail(f"{what}: could not read the result as an array ({e})") from None
    if g.dtype == object or not (np.issubdtype(g.dtype, np.number) or g.dtype == bool):
        raise Fail(f"{what}: expected numbers, got an array of {g.dtype}")
    if g.shape != want.shape:
        desc = f" {shape_desc}" if shape_desc else ""
        if g.size == want.size and g.shape == want.shape[::-1] and g.ndim >= 2:
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: transposed?")
        if g.size == want.size and tuple(s for s in g.shape if s != 1) == \
                tuple(s for s in want.shape if s != 1):
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: an extra or missing "
                       "axis of length 1 (keepdims? a reshape?)")
        if g.size == want.size and sorted(g.shape) == sorted(want.shape):
            raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc}: the axes are in "
                       "the wrong order")
        if want.ndim == 0 and g.ndim >= 1:
            raise Fail(f"{what}: expected a single number, got an array of shape {g.shape} "
                       "(a sum or a reduction is missing, or it is over the wrong axis)")
        raise Fail(f"{what}: shape {g.shape}, expected {want.shape}{desc} (an axis summed or "
                   "kept by mistake?)")
    if need_float64 and np.issubdtype(g.dtype, np.floating) and g.dtype.itemsize < 8:
        raise Fail(f"{what}: the result is {g.dtype}; compute in float64 (do not cast to "
                   "float32: its 1e-7 precision cannot pass a 1e-8 check)")
    g = g.astype(np.float64) if g.dtype != bool else g.astype(np.float64)
    if not np.all(np.isfinite(g)):
        bad = np.argwhere(~np.isfinite(g))
        at = f" (first at index {tuple(int(i) for i in bad[0])})" if g.ndim else ""
        raise Fail(f"{what}: the result contains NaN or inf{at}: a log of 0 or of a negative "
                   "number, a division by a zero norm, an overflowing exp or det?")
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, floor)
    err = float(np.max(np.abs(g - want))) / scale if want.size else 0.0
    if err <= rtol:
        return
    for hint, thunk in diagnoses:
        try:
            bad = np.asarray(thunk(), dtype=np.float64)
        except Exception:
            continue
        if bad.shape == g.shape and np.max(np.abs(g - bad)) <= 1e-6 * scale:
            raise Fail(f"{what}: {hint}")
    ww = float(np.sum(want * want))
    if ww > 0:
        r = float(np.sum(g * want)) / ww
        resid = float(np.max(np.abs(g - r * want))) / scale
        if resid <= 1e-6 and not _close(r, 1.0, 1e-5):
            text = ratio_hint(r, factors) or f"it is {r:.4g} times the reference: a constant " \
                                               "factor is wrong"
            raise Fail(f"{what}: {text}")
    if g.ndim >= 2 and g.shape[-1] == g.shape[-2]:
        wT = np.swapaxes(want, -1, -2)
        if np.max(np.abs(g - wT)) <= 1e-6 * scale:
            raise Fail(f"{what}: it is the transpose of the reference (rows and columns swapped)")
    if 1e-9 < err < 1e-4:
        raise Fail(f"{what}: agrees only to a relative error of {err:.1e}, the precision of "
                   "float32 (or a wrong small constant such as a clamp); compute everything in "
                   "float64 and check the small constants")
    where = ""
    if g.ndim >= 1:
        idx = np.unravel_index(int(np.argmax(np.abs(g - want))), g.shape)
        where = f", largest at index {tuple(int(i) for i in idx)}"
    raise Fail(f"{what}: relative error {err:.1e}{where}")


# --------------------------------------------------------------------------------------------
# running an exercise: cases, partial credit, the pass line and the record
# --------------------------------------------------------------------------------------------
def hidden_enabled(hidden) -> bool:
    if hidden is None:
        return os.environ.get(HIDDEN_ENV, "") not in ("", "0")
    return bool(hidden)


def _record(name: str, score: float, points: float, passed: int, total: int, hint: str) -> None:
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    line = json.dumps({"exercise": name, "score": round(score, 6), "points": points,
                       "passed": passed, "cases": total, "hint": hint})
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def run_cases(name: str, cases, *, points: float = 1.0) -> float:
    """Run ``cases`` (a list of (label, thunk)); print the pass line or raise the first hint.

    Returns the score. Delegation or a function that is not written yet scores 0 at once.
    """
    passed, first = 0, None
    for label, thunk in cases:
        try:
            thunk()
            passed += 1
        except (Delegated, NotWritten) as e:
            _record(name, 0.0, points, 0, len(cases), str(e))
            print(f"SCORE {name}: 0/{points:g}")
            raise type(e)(f"{name}: {e}") from None
        except Fail as e:
            if first is None:
                first = f"{label}: {e}"
    score = points * passed / len(cases)
    _record(name, score, points, passed, len(cases), first or "")
    if first is not None:
        print(f"SCORE {name}: {score:.2f}/{points:g} ({passed} of {len(cases)} cases pass)")
        raise Fail(f"{name}, {first}")
    print(f"PASS  {name}: all {len(cases)} cases ({points:g}/{points:g})")
    return score


def case(label: str, fn):
    """A (label, thunk) pair; spelled out so that checkers read as a list of cases."""
    return (label, fn)
