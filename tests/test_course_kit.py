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
    for q in range(1, 7):
        assert f"Q{q}:" in out, f"question {q} printed nothing"
