"""The course kit: the plan assigns every notebook, the instructor material stays out of the student
edition and the book, and the sample exam's worked solutions hold (the notebook is executed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tostnp.__main__ import main
from tostnp.exercises import notebook as nbk

ROOT = Path(__file__).resolve().parents[1]
INSTRUCTOR_ONLY = [nbk.INSTRUCTOR / "notes.md", nbk.INSTRUCTOR / "sample_exam.md"]
MARK = "Instructor edition only"


def test_the_plan_assigns_every_notebook_once_with_its_written_question():
    plan = (ROOT / "book" / "syllabus.md").read_text(encoding="utf-8")
    weekly = plan.split("## Week by week", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in weekly.splitlines() if re.match(r"\| \d+ \|", r)]
    assert 8 <= len(rows) <= 10, f"{len(rows)} weeks"
    for p in nbk.notebooks():
        ref = "{doc}`../exercises/" + p.stem + "`"
        weeks = [r for r in rows if ref in r]
        assert len(weeks) == 1, f"{p.name} is assigned in {len(weeks)} weeks"
        # the week names the notebook's written question by its number (e.g. 5.4)
        question = re.search(r"^## Inline question (\d+\.\d+)", p.read_text(encoding="utf-8"), re.M)
        assert question and question.group(1) in weeks[0].split("|")[-2], (p.name, question)
    weights = [int(w) for w in re.findall(r"^\| [^|]+ \| (\d+)% \|", plan, re.M)]
    assert sum(weights) == 100, weights
    assert "laptop_to_cluster" in plan


def test_laptop_to_cluster_has_a_part_of_its_own_and_is_on_the_landing_page():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    parts = [[c["file"] for c in part["chapters"]] for part in toc["parts"]]
    assert ["book/laptop_to_cluster"] in parts
    assert "{doc}`laptop_to_cluster`" in (ROOT / "book" / "index.md").read_text(encoding="utf-8")


def test_instructor_material_is_marked_and_outside_the_book():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert "exercises/instructor" in config["exclude_patterns"]
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for f in INSTRUCTOR_ONLY:
        assert MARK in f.read_text(encoding="utf-8")[:2000], f"{f.name} lacks the mark"
        assert f.stem not in toc


def test_student_edition_has_no_instructor_material(tmp_path):
    assert main(["exercises", "build", "--student", str(tmp_path / "s")]) == 0
    files = [p for p in (tmp_path / "s").rglob("*") if p.is_file()]
    assert files
    names = {p.name for p in files}
    for f in INSTRUCTOR_ONLY:
        assert f.name not in names
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        assert MARK not in text, f"{p.name} carries instructor material"
    assert main(["exercises", "build", "--instructor", str(tmp_path / "i")]) == 0
    for f in INSTRUCTOR_ONLY:
        assert (tmp_path / "i" / "exercises" / "instructor" / f.name).read_bytes() == f.read_bytes()


def test_instructor_notes_cover_every_chapter_and_every_planted_bug_group():
    notes = (nbk.INSTRUCTOR / "notes.md").read_text(encoding="utf-8")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    chapters = [c["file"] for part in toc["parts"] if part.get("numbered") for c in part["chapters"]]
    headings = re.findall(r"^## Chapter (\d+) ", notes, re.M)
    assert [int(h) for h in headings] == list(range(1, len(chapters) + 1))
    # every checker with planted bugs is named in the notes' "common mistakes" of some chapter
    planted = nbk.mutants()
    assert planted
    missing = [name for name in planted if f"`{name}`" not in notes]
    assert not missing, f"checkers with planted bugs the notes do not discuss: {missing}"


def test_sample_exam_solutions_hold(tmp_path):
    """Execute the exam: every worked solution is followed by an assert against autograd, an
    eigenvalue formula or a loop; a cell that raises fails here."""
    nb = nbk.read(nbk.INSTRUCTOR / "sample_exam.md")
    n_asserts = sum(c.source.count("assert ") for c in nb.cells if c.cell_type == "code")
    assert n_asserts >= 10
    import nbclient
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    out = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                  for o in c.get("outputs", []))
    for q in range(1, 6):
        assert f"Q{q}:" in out, f"question {q} printed nothing"
    assert "Practice:" in out, "the practice question on chapter 7 printed nothing"


def _exam_questions():
    """(number, points, text) of every exam question of sample_exam.md (practice excluded)."""
    text = (nbk.INSTRUCTOR / "sample_exam.md").read_text(encoding="utf-8")
    exam = text.split("## After the mid-term", 1)[0]
    return [(int(n), int(pts), body) for n, pts, body in
            re.findall(r"^## Question (\d+) \((\d+) points\)(.*?)(?=^## |\Z)", exam, re.M | re.S)], text


def test_the_mid_term_covers_only_weeks_1_to_4():
    """The week-5 exam may use only chapters taught in weeks 1-4 (the syllabus's table): no
    question names a label defined in a later chapter, and its header counts its questions."""
    plan = (ROOT / "book" / "syllabus.md").read_text(encoding="utf-8")
    weekly = plan.split("## Week by week", 1)[1].split("\n## ", 1)[0]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \|([^|]*)\|", weekly, re.M)}
    taught = {c for w in range(1, 5) for c in re.findall(r"\{doc\}`(\d\d_\w+)`", rows[w])}
    later = {c for w, r in rows.items() if w >= 5 for c in re.findall(r"\{doc\}`(\d\d_\w+)`", r)}
    assert taught and later and not taught & later
    labels = {}
    for chap in taught | later:
        src = (ROOT / "book" / f"{chap}.md").read_text(encoding="utf-8")
        for lab in re.findall(r"^\$\$ \((eq-[\w-]+)\)", src, re.M):
            labels[lab] = chap
    questions, text = _exam_questions()
    assert [q for q, _, _ in questions] == list(range(1, len(questions) + 1))
    for q, _, body in questions:
        used = set(re.findall(r"\{eq\}`(eq-[\w-]+)`", body))
        late = sorted(lab for lab in used if labels.get(lab) in later)
        assert not late, f"mid-term question {q} uses {late}, taught after week 4"
    words = {5: "Five", 6: "Six", 4: "Four"}
    total = sum(p for _, p, _ in questions)
    assert f"{words[len(questions)]} questions, {total} points" in text


def test_the_syllabus_counts_are_recounted_from_the_notebooks():
    """The numbers the syllabus states (notebooks, graded exercises, written questions) are the
    numbers in the notebooks' sources."""
    plan = (ROOT / "book" / "syllabus.md").read_text(encoding="utf-8")
    notebooks = nbk.notebooks()
    sources = [p.read_text(encoding="utf-8") for p in notebooks]
    n_ex = sum(len(re.findall(r"^## Exercise \d+\.\d+", t, re.M)) for t in sources)
    n_q = sum(len(re.findall(r"^## Inline question \d+\.\d+", t, re.M)) for t in sources)
    m = re.search(r"All\s+\*\*(\d+)\*\*\s+notebooks\s+are\s+assigned;\s+together\s+they\s+hold\s+\*\*(\d+)\*\*\s+graded\s+"
                  r"exercises\s+and\s+\*\*(\d+)\*\*\s+written\s+questions", plan)
    assert m, "the syllabus should state its counts in the sentence this test reads"
    assert tuple(int(g) for g in m.groups()) == (len(notebooks), n_ex, n_q)
    assert re.search(rf"\| exercise notebooks \({len(notebooks)}\) \|", plan)
    assert re.search(rf"\| written questions \({n_q}:", plan)


def test_week_10_lecture_fits_ninety_minutes():
    notes = (nbk.INSTRUCTOR / "notes.md").read_text(encoding="utf-8")
    table = notes.split("**Week 10 at a glance**", 1)[1].split("\n\n", 2)[1]
    minutes = [int(m) for m in re.findall(r"^\|[^|]+\| (\d+) \|$", table, re.M)]
    assert len(minutes) == 3 and sum(minutes) == 90, minutes
    # each part's own timing in its chapter's section says the same
    for heading, mins in (("## Chapter 11 ", minutes[0]), ("## Chapter 12 ", minutes[1])):
        section = notes.split(heading, 1)[1].split("\n## ", 1)[0]
        assert f"Lecture ({mins} min" in section, heading
    assert f"{minutes[2]} min in the week-10 lecture" in notes.split("## From the laptop to a cluster", 1)[1]


def test_the_final_project_has_a_brief_and_a_rubric_that_add_up():
    plan = (ROOT / "book" / "syllabus.md").read_text(encoding="utf-8")
    assert "### The final project: brief" in plan
    rubric = plan.split("### Rubric for the final project", 1)[1].split("\n\n", 2)[1]
    points = [int(p) for p in re.findall(r"^\| [^|]+ \| (\d+) \|", rubric, re.M)]
    assert len(points) >= 4 and sum(points) == 25, points
