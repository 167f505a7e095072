"""Reports of a graded class: the grades CSV, a feedback page per student, the written answers
per question for manual marking (merged back once marked), and gradebook files for Canvas and
Moodle."""
from __future__ import annotations

import csv
import hashlib
import html
import io
import re
from pathlib import Path

from .. import notebook as nbk
from ...io.atomic import atomic_write_text


def student_key(name: str) -> str:
    """A folder and file name of one student: the name with every character outside
    ``A-Za-z0-9_.-`` replaced, followed by a digest of the original name whenever it was changed
    or holds capitals (so that ``jo smith`` and ``jo_smith``, or ``Jo`` and ``jo`` on a
    case-insensitive disk, never share a folder)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip(".") or "_"
    if safe != name or safe.lower() != safe:
        safe = f"{safe[:60]}-{hashlib.sha256(name.encode('utf-8', 'surrogateescape')).hexdigest()[:10]}"
    return safe


RUBRIC = [("full", 1.0, "correct and complete"), ("partial", 0.5, "partly right, or right "
                                                                    "with a gap in the reasoning"),
          ("none", 0.0, "missing, or wrong")]
WRITTEN_FIELDS = ["student", "notebook", "question", "answer", "max_points", "level", "score",
                  "comment"]


# a spreadsheet runs a cell that starts with one of these as a formula (OWASP, CSV injection):
# such a cell is written with a leading ' (and so is one that starts with ', so that reading
# back removes exactly what writing added)
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_cell(value):
    """``value`` as a CSV cell a spreadsheet shows as text: a string that could start a formula
    gets a leading ``'``; numbers are left alone."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _uncell(value: str) -> str:
    return value[1:] if value.startswith("'") and value[1:].startswith(_FORMULA_START) else value


def read_csv_rows(path: Path) -> list[dict]:
    """The rows of a CSV file as the grader wrote it or as a spreadsheet saved it again: UTF-8
    with or without a byte-order mark (else Windows-1252), ``,``, ``;`` or tab between cells
    (Excel's choice depends on the locale); keys and values stripped, the ``'`` of
    :func:`csv_cell` removed."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace")
    head = text.split("\n", 1)[0]
    sep = max((",", ";", "\t"), key=head.count)
    rows = csv.DictReader(io.StringIO(text, newline=""), delimiter=sep)
    return [{(k or "").strip(): _uncell((v or "").strip()) for k, v in r.items()
             if isinstance(v, str) or v is None} for r in rows]


def _same_text(a: str, b: str) -> bool:
    """Two answers are the same text whatever the spreadsheet did to line ends and spaces."""
    return " ".join((a or "").split()) == " ".join((b or "").split())


def _written_marks(out: Path, stem: str) -> dict:
    """{(student, question): {"level", "score", "comment", "answer"}} already entered by hand."""
    f = out / "written" / f"{stem}.csv"
    if not f.exists():
        return {}
    marks = {}
    for r in read_csv_rows(f):
        for k in ("student", "question"):
            if k not in r:
                raise ValueError(f"{f}: no {k!r} column (columns: {', '.join(r)}); keep the "
                                 "header row as the grader wrote it")
        try:
            marks[(r["student"], int(float(r["question"])))] = r
        except ValueError:
            raise ValueError(f"{f}: question {r['question']!r} of {r['student']} is not a "
                             "number") from None
    return marks


def written_score(row: dict, max_points: float = 1.0) -> float | None:
    """The points of a marked answer: a number in ``score``, else the rubric ``level``."""
    s = (row.get("score") or "").strip()
    if s:
        try:
            v = float(s.replace(",", ".") if "," in s and "." not in s else s)   # 0,5 (Excel)
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
    w.writerows({k: csv_cell(v) for k, v in r.items()} for r in rows)
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
                keep = prev if _same_text(prev.get("answer", ""), ans) else {}
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
                   "status": r.get("status", "graded") if r else "missing",
                   "isolation": r.get("isolation", "") if r else ""}
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
    fields = ["student", "notebook", "status", "isolation"]
    for stem in stems:
        fields += [n for n in all_ex[stem] if n not in fields]
    fields += ["exercises_total", "written_marked", "written_total", "total", "max_score",
               "percent"]
    csv_path = Path(csv_path) if csv_path else out / "grades.csv"
    _write_csv(csv_path, fields, rows)
    _write_feedback(out, done, rows, students, stems, marks, info)
    _write_exports(out, rows, students, stems, info)
    return {"rows": rows, "csv": csv_path, "students": students, "notebooks": stems}


def _md_text(text) -> str:
    """Text from a submission (an exception message, a note) or a roster, shown as text on a
    Markdown page: no HTML (``<script>``, ``<img onerror=...>``), no link or image (code spans
    stay: Markdown shows HTML inside them as text)."""
    text = html.escape(str(text or ""), quote=False)
    return re.sub(r"([\[\]])", r"\\\1", text)


def _md_cell(text: str) -> str:
    return _md_text(text).replace("|", "\\|").replace("\n", " ")


def _write_feedback(out, done, rows, students, stems, marks, info):
    fb = out / "feedback"
    fb.mkdir(parents=True, exist_ok=True)
    by = {(r["student"], r["notebook"]): r for r in rows}
    for student in students:
        name = _md_text(info.get(student, {}).get("name") or student).replace("\n", " ")
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
                lines += [f"- {_md_cell(n)}" for n in r["notes"]] + [""]
            old = _written_marks(out, stem)
            for q, ans in enumerate(r.get("answers", []), start=1):
                m = marks.get((student, stem, q))
                com = old.get((student, q), {}).get("comment", "")
                lines.append(f"Written question {q}: " + (
                    "not marked yet" if m is None else f"{m:g} / 1") + (f" ({_md_cell(com)})" if com else ""))
            lines.append("")
        atomic_write_text(fb / f"{student_key(student)}.md", "\n".join(lines))


def _lms_total(row):
    """The total a gradebook gets: blank (Canvas and Moodle leave a blank cell ungraded) for a
    notebook never submitted or with written answers not marked yet, never a silent 0."""
    done, of = row["written_marked"].split("/")
    return "" if row["status"] == "missing" or done != of else row["total"]


def export_gaps(rows) -> dict:
    """How many gradebook cells are left blank, and why (printed by ``grade``)."""
    return {"missing": sum(r["status"] == "missing" for r in rows),
            "unmarked": sum(r["status"] != "missing" and _lms_total(r) == "" for r in rows)}


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
        totals = {f"Exercises {s}": _lms_total(by[(st, s)]) for s in stems}
        canvas.append({"Student": i.get("name") or st, "ID": i.get("id", ""),
                       "SIS User ID": i.get("sis_id", ""), "SIS Login ID": i.get("login", st),
                       "Section": i.get("section", ""), **totals})
        moodle.append({"Email address": i.get("email", ""), "ID number": i.get("id_number", ""),
                       "Username": i.get("login", st), "Full name": i.get("name") or st,
                       **totals})
    _write_csv(out / "canvas.csv", canvas_fields, canvas)
    _write_csv(out / "moodle.csv", moodle_fields, moodle)
