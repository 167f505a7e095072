"""Grading a class: the submissions of a folder, graded on several processes, each result
written as soon as it is graded (a re-run skips what is already graded)."""
from __future__ import annotations

import hashlib
import io
import json
import secrets
from pathlib import Path

from .. import notebook as nbk
from ...io.atomic import atomic_write_text
from .plan import notebook_stem, written_questions
from .reports import _safe, read_csv_rows, write_reports
from .submission import run_submission


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
    rows = read_csv_rows(path)                 # as a spreadsheet may save it (BOM, ';')
    if not rows or "student" not in rows[0]:
        raise ValueError(f"{path}: a roster needs a 'student' column (the folder name of each "
                         "student's submissions)")
    return [{k: v for k, v in r.items() if k} for r in rows if r.get("student")]


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
