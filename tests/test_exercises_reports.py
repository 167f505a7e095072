"""The grader's reports as files other programs open: feedback pages show submission text as
text (no HTML runs), CSV cells never start a spreadsheet formula and read back unchanged, the
written marks merge reads the CSV variants a spreadsheet saves, and the gradebook exports leave
blank (not 0) what is not graded yet."""
from __future__ import annotations

import csv

from tostnp.exercises import grading
from tostnp.exercises.grading import reports

STEM = "02_coding_rate"


def _result(hint="", score=1.0, answer="", notes=()):
    return {"exercises": {"coding_rate": {"score": score, "points": 1.0, "passed": int(score),
                                          "cases": 1, "hint": hint}},
            "answers": [answer], "questions": ["Why?"], "notes": list(notes)}


def _class():
    return {("=1+2", STEM): _result(answer="=HYPERLINK(\"http://x.example\",\"click\")"),
            ("mallory", STEM): _result(hint="<script>alert(1)</script> <img src=x onerror=alert(2)>"
                                        " [see](javascript:alert(3))", score=0.0,
                                       notes=["cell 3 raised <b>bold</b>"]),
            ("alice", STEM): _result(answer="line one\nline two; with, separators")}


def _rows(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_feedback_pages_escape_html(tmp_path):
    reports.write_reports(tmp_path, _class(), [{"student": "mallory", "name": "<i>M</i>"}])
    page = (tmp_path / "feedback" / "mallory.md").read_text()
    assert "<script>" not in page and "<img" not in page and "<b>" not in page
    assert "<i>" not in page and "&lt;script&gt;" in page and "&lt;img" in page
    assert "[see](" not in page and "\\[see\\]" in page


def test_csv_cells_never_start_a_formula(tmp_path):
    reports.write_reports(tmp_path, _class(), [{"student": "zed", "name": "-2+3"}])
    for name in ("grades.csv", "canvas.csv", "moodle.csv", f"written/{STEM}.csv"):
        for row in _rows(tmp_path / name)[1:]:
            for cell in row:
                assert not (cell[:1] in ("=", "+", "@", "\t", "\r") or
                            (cell[:1] == "-" and not cell[1:2].isdigit())), (name, cell)
    written = _rows(tmp_path / "written" / f"{STEM}.csv")
    assert ["'=1+2", STEM, "1", "'=HYPERLINK(\"http://x.example\",\"click\")"] == written[1][:4]
    assert "'-2+3" in sum(_rows(tmp_path / "canvas.csv"), [])


def _mark(tmp_path, *, encoding, sep, line_end="\n", score="0,5"):
    """The written-answers CSV marked and saved again as a spreadsheet saves it."""
    rows = _rows(tmp_path / "written" / f"{STEM}.csv")
    head = rows[0]
    for r in rows[1:]:
        r[head.index("score")] = score
        r[head.index("comment")] = "ok"
    with open(tmp_path / "written" / f"{STEM}.csv", "w", newline="", encoding=encoding) as f:
        w = csv.writer(f, delimiter=sep, lineterminator=line_end)
        w.writerows(rows)


def test_marks_merge_reads_spreadsheet_csv_variants(tmp_path):
    for encoding, sep, line_end, score in [("utf-8-sig", ",", "\r\n", "0.5"),
                                           ("utf-8-sig", ";", "\r\n", "0,5"),
                                           ("cp1252", ";", "\r\n", "0,5"),
                                           ("utf-8", "\t", "\n", "0.5")]:
        out = tmp_path / f"{encoding}-{ord(sep)}"
        reports.write_reports(out, _class(), [])
        _mark(out, encoding=encoding, sep=sep, line_end=line_end, score=score)
        rep = reports.write_reports(out, _class(), [])
        by = {r["student"]: r for r in rep["rows"]}
        assert all(r["written_marked"] == "1/1" for r in by.values()), (encoding, sep)
        assert by["=1+2"]["written_total"] == 0.5 and by["alice"]["total"] == 1.5, (encoding, sep)


def test_roster_saved_by_a_spreadsheet(tmp_path):
    f = tmp_path / "roster.csv"
    f.write_bytes("\ufeffstudent;name\r\nalice;Alice A\r\n".encode("utf-8"))
    assert grading.read_roster(f) == [{"student": "alice", "name": "Alice A"}]


def test_exports_leave_ungraded_blank_not_zero(tmp_path):
    done = {("alice", STEM): _result(answer="an answer"), ("bob", STEM): _result()}
    rep = reports.write_reports(tmp_path, done, [{"student": "carol"}])
    assert reports.export_gaps(rep["rows"]) == {"missing": 1, "unmarked": 1}
    for name, key in (("canvas.csv", "SIS Login ID"), ("moodle.csv", "Username")):
        with open(tmp_path / name, newline="") as fh:
            rows = {r[key]: r[f"Exercises {STEM}"] for r in csv.DictReader(fh)}
        # alice's written answer is not marked, carol never submitted, bob left it blank (0)
        assert rows["alice"] == "" and rows["carol"] == "" and rows["bob"] == "1.0", rows
    grades = {r["student"]: r for r in csv.DictReader(open(tmp_path / "grades.csv"))}
    assert grades["carol"]["status"] == "missing" and grades["alice"]["written_marked"] == "0/1"
