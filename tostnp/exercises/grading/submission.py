"""Grading one submission: its plan run in one child per phase, each check run here."""
from __future__ import annotations

import time

from .. import _core
from .. import notebook as nbk
from .plan import Plan, plan
from . import isolation as iso
from .sandbox import PHASES, site_dirs
from .session import Remote, Session
from .wire import Lost


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
    try:
        session.start()
    except Lost as e:
        notes.append(f"your notebook's process {e}")
        return
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
                   protected=(), isolation: str | None = None) -> dict:
    """Grade one submission (an nbformat node of notebook ``stem``); returns its result:
    {"exercises": {name: {score, points, passed, cases, hint}}, "notes": [...], "answers",
    "questions", "salt", "seconds", "isolation"}. ``isolation``: "bwrap" or "none" (default:
    what this machine has). Outside a sandbox, a submission that changed the interpreter's site
    folders (a .pth file runs in the next Python started) scores 0 and the note names the
    files."""
    t0 = time.monotonic()
    isolation = isolation or iso.available()
    site_before = iso.site_state(site_dirs()) if isolation == iso.NONE else None
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
                              protected=protected, deadline=deadline, package=package,
                              isolation=isolation)
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
    tampered = iso.changed(site_before, iso.site_state(site_dirs())) if site_before else []
    if tampered:
        notes.append("your notebook changed the Python install, which scores 0: "
                     + ", ".join(tampered[:5]))
        p.problems.update({n: "your notebook changed the Python install (a file in "
                           "site-packages), so every exercise scores 0" for n in p.exercises})
    for name in p.exercises:
        if name in p.problems:
            zero(name, p.problems[name])
        elif name not in results:
            zero(name, cell_errors.get(name) or "the check did not run (time budget?)")
    ordered = {n: results[n] for n in p.exercises}
    notes = list(dict.fromkeys(notes))                  # a cell that failed in two phases
    return {"notebook": stem, "exercises": ordered, "notes": notes, "answers": p.answers,
            "questions": p.questions, "salt": salt, "restarts": restarts,
            "seconds": round(time.monotonic() - t0, 2), "output_tail": tail[-1000:],
            "isolation": isolation}
