"""Grading a class: the submissions of a folder, graded on several processes, each result
written as soon as it is graded (a re-run skips what is already graded).

Submissions are files the grader reads, never follows: a symbolic link (to another student's
notebook, to a solved notebook, to ``/etc/passwd``, or to nothing) is a refused submission with
its reason, and the rest of the class is graded; each file is opened with ``O_NOFOLLOW`` and
read only if it is a regular file of bounded size. A notebook named as in the plan
(``02_coding_rate.md``) is the one graded; a file whose name only ends so (a draft
``v0_02_coding_rate.md``) is graded only when it is the student's one file for that notebook.
Each student's results and feedback page live in a folder of its own (:func:`.reports.student_key`:
``jo smith`` and ``jo_smith`` never share one); the CSV keeps the original name."""
from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import stat
import tempfile
from pathlib import Path

from .. import notebook as nbk
from ...io.atomic import atomic_write_text
from . import isolation as iso
from .plan import notebook_stem, written_questions
from .reports import read_csv_rows, student_key, write_reports
from .submission import run_submission

MAX_SUBMISSION = 32 * 2**20          # the largest notebook file read


def scan_submissions(folder: Path) -> tuple[list[tuple[str, Path]], list[dict]]:
    """(graded, refused): (student, file) pairs to grade, from SUBMISSIONS/<student>/NN_name.(md|ipynb)
    or files directly in SUBMISSIONS (student = the file name; an .md wins over its paired
    .ipynb), and {"student", "notebook", "file", "reason"} for each file refused. Nothing is
    followed: symbolic links (files or folders) are refused, never read."""
    folder = Path(folder)
    cands: dict[tuple[str, str], list[Path]] = {}
    refused: list[dict] = []
    for d, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(x for x in dirs if x != ".ipynb_checkpoints")
        for x in [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            dirs.remove(x)
            refused.append({"student": str(Path(d, x).relative_to(folder)), "notebook": "",
                            "file": str(Path(d, x)), "reason": "the folder is a symbolic link: "
                            "submit the files themselves"})
        for name in sorted(files):
            p = Path(d, name)
            if p.suffix not in (".md", ".ipynb") or notebook_stem(p) is None:
                continue
            rel = p.parent.relative_to(folder)
            student = str(rel) if str(rel) != "." else p.stem
            cands.setdefault((student, notebook_stem(p)), []).append(p)
    graded = []
    for (student, stem), paths in sorted(cands.items()):
        exact = [p for p in paths if p.stem == stem]
        if exact:
            pick = sorted(exact, key=lambda p: p.suffix != ".md")[0]
        elif len({p.stem for p in paths}) == 1:
            pick = sorted(paths, key=lambda p: p.suffix != ".md")[0]
        else:
            refused.append({"student": student, "notebook": stem, "file": str(paths[0]),
                            "reason": f"several files for {stem} "
                            f"({', '.join(sorted(p.name for p in paths))}) and none named "
                            f"{stem}.md or {stem}.ipynb: keep one"})
            continue
        why = _not_a_file(pick)
        if why:
            refused.append({"student": student, "notebook": stem, "file": str(pick),
                            "reason": f"{pick.name} {why}"})
        else:
            graded.append((student, pick))
    return graded, refused


def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """The (student, file) pairs :func:`scan_submissions` grades."""
    return scan_submissions(folder)[0]


def _not_a_file(path: Path) -> str | None:
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link, not a notebook file: submit the notebook itself"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_size > MAX_SUBMISSION:
        return f"is larger than {MAX_SUBMISSION >> 20} MB"
    return None


def read_submission(path: Path) -> bytes:
    """The bytes of a submission file, opened without following a link (``O_NOFOLLOW``), read
    only if it is a regular file of at most :data:`MAX_SUBMISSION` bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SUBMISSION:
            raise ValueError(f"{Path(path).name} is not a regular file of at most "
                             f"{MAX_SUBMISSION >> 20} MB")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_SUBMISSION + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SUBMISSION:
        raise ValueError(f"{Path(path).name} is larger than {MAX_SUBMISSION >> 20} MB")
    return data


def _parse(data: bytes, suffix: str):
    import jupytext
    return jupytext.reads(data.decode("utf-8"), fmt=suffix.lstrip("."))


def parse_submission(path: Path):
    """The notebook of a submission file, read as :func:`read_submission` reads it."""
    return _parse(read_submission(path), Path(path).suffix)


def _result_path(out: Path, student: str, stem: str) -> Path:
    return out / "results" / student_key(student) / f"{stem}.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(read_submission(path)).hexdigest()


def _zero_result(stem: str, reason: str, note: str) -> dict:
    official = nbk.read(nbk.EXERCISES / f"{stem}.md")
    questions = written_questions(official)
    return {"notebook": stem, "notes": [note], "answers": [""] * len(questions),
            "questions": questions, "seconds": 0.0,
            "exercises": {n: {"score": 0.0, "points": nbk.points_of(n), "passed": 0, "cases": 0,
                              "hint": reason} for n in nbk.exercises_of(official)}}


def _grade_job(job) -> tuple[str, str, dict]:
    import contextlib
    student, path, stem, opts, out_json = job
    digest = ""
    try:
        data = read_submission(path)
        digest = hashlib.sha256(data).hexdigest()
        sub = _parse(data, Path(path).suffix)
        with contextlib.redirect_stdout(io.StringIO()):     # the checkers' PASS lines
            res = run_submission(sub, stem, **opts)
    except Exception as e:                                       # noqa: BLE001  never the run
        res = _zero_result(stem, "the notebook could not be read", "the submission could not "
                           f"be read as a notebook: {type(e).__name__}: {e}")
    res["student"], res["file"], res["sha256"] = student, str(path), digest
    res.setdefault("status", "graded")
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
                csv_path: Path | None = None, log=print, isolation: str | None = None) -> dict:
    """Grade every submission under ``folder`` into ``out`` (see the module docstring).
    ``isolation``: "bwrap" or "none" (default: what this machine has; the ``grade`` command
    refuses "none" unless asked); each result records the isolation its submission had."""
    folder, out = Path(folder).resolve(), Path(out).resolve()
    isolation = isolation or iso.available()
    remove_stale_folders()
    subs, refused = scan_submissions(folder)
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
            "memory_mb": memory_mb, "salt": salt, "protected": [str(p) for p in protected],
            "isolation": isolation}
    done, todo = {}, []
    for r in refused:
        if not r["notebook"]:
            log(f"  refused {r['student']}: {r['reason']}")
            continue
        res = _zero_result(r["notebook"], r["reason"], f"not graded: {r['reason']}")
        res.update(student=r["student"], file=r["file"], sha256="", status="refused",
                   isolation="")
        atomic_write_text(_result_path(out, r["student"], r["notebook"]), json.dumps(res, indent=1))
        done[(r["student"], r["notebook"])] = res
        log(f"  refused {r['student']:<20} {r['notebook']:<22} {r['reason']}")
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
    log(f"{len(subs)} submission(s): {len(subs) - len(todo)} already graded, {len(todo)} to "
        f"grade on {jobs} process(es); isolation: {iso.DESCRIPTION.get(isolation, isolation)}")
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


def remove_stale_folders() -> list[str]:
    """Remove the child folders (``tostnp-grade-*`` in the temporary folder) that a grading run
    killed before it could clean up left behind: only real folders of this user whose
    ``owner`` file names a process that no longer runs (links are never followed)."""
    removed = []
    tmp = tempfile.gettempdir()
    try:
        names = os.listdir(tmp)
    except OSError:
        return removed
    for name in names:
        if not name.startswith("tostnp-grade-"):
            continue
        p = os.path.join(tmp, name)
        try:
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(p, "owner"), os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                owner = json.loads(f.read(256))
            pid, started = int(owner["pid"]), owner["started"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if iso.process_started(pid) == started:       # its grader still runs
            continue
        import shutil
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed
