"""Honest answers get full marks through the grader: every notebook's solutions, graded as
`exercises grade` grades (the grading child, hidden cases, inputs drawn at grading time), from
the install `run.py exercises` makes (requirements-exercises.txt: notebook 11 needs
array-api-strict), and the honest variants a careful student writes."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("jupytext")

from tostnp.exercises import grading  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

NOTEBOOKS = nbk.notebooks()
ROOT = nbk.ROOT


def _pins(name: str) -> set[str]:
    """The distributions a requirements file installs, its includes followed."""
    out = set()
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-r "):
            out |= _pins(line[3:].strip())
        elif "==" in line:
            out.add(line.split("==")[0].strip().lower().replace("_", "-"))
    return out


def test_the_exercises_install_holds_what_the_notebooks_import():
    pins = _pins("requirements-exercises.txt")
    imported = set()
    for p in NOTEBOOKS:
        for c in nbk.read(p).cells:
            if c.cell_type == "code":
                imported |= set(re.findall(r"^\s*(?:import|from)\s+(\w+)", c.source, re.M))
        for src in nbk.solution_sections(p.stem).values():
            imported |= set(re.findall(r"^\s*(?:import|from)\s+(\w+)", src, re.M))
    for mods in grading.PRELOAD.values():
        imported |= {m.split(".")[0] for m in mods}
    stdlib = {"math", "time", "os", "sys", "itertools", "functools", "collections", "tracemalloc"}
    needed = {m.replace("_", "-") for m in imported - stdlib - {"tostnp"}}
    assert needed <= pins, sorted(needed - pins)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_solutions_get_full_marks_through_the_grader(path: Path):
    nb = nbk.fill(nbk.read(path), nbk.solution_sections(path.stem))
    res = grading.run_submission(nb, path.stem, hidden=True, cell_timeout=120.0,
                                 notebook_timeout=900.0)
    wrong = {n: r for n, r in res["exercises"].items() if r["score"] != r["points"]}
    assert not wrong, wrong


def _honest_variants():
    """Notebook 04 solved as careful students write it, each with one harmless difference."""
    import nbformat
    stem = "04_variational"

    def solved():
        return nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), nbk.solution_sections(stem))

    def comment(nb):                 # an answer cell that names its check in a comment
        c = nbk.student_cells(nb)["tight_basis"]
        c.source = "# check_tight_basis(tight_basis) runs below\n" + c.source + \
            "\n'''then check_tight_basis(...)'''"
        return nb

    def try_first(nb):               # the check called once by hand above the official cell
        i = nb.cells.index(nbk.student_cells(nb)["tight_basis"])
        nb.cells.insert(i + 1, nbformat.v4.new_code_cell("check_tight_basis(tight_basis_mine)"))
        return nb

    def own_cell(nb):                # the written answer in a new cell under "Your answer:"
        i = next(i for i, c in enumerate(nb.cells) if "written" in c.metadata.get("tags", []))
        nb.cells.insert(i + 1, nbformat.v4.new_markdown_cell("It drops the directions p < d."))
        return nb

    def magic(nb):                   # an IPython magic in an answer cell
        c = nbk.student_cells(nb)["variational_compression"]
        c.source = "%matplotlib inline\n" + c.source
        return nb
    def shows(nb):                   # IPython's display() in an answer cell
        c = nbk.student_cells(nb)["tight_basis"]
        c.source = "display('the eigenvectors of each group')\n" + c.source
        return nb
    def timed(nb):                   # a cell magic that runs its body, a shell escape
        c = nbk.student_cells(nb)["bound_counterexample"]
        c.source = "%%time\n!echo hello\n" + c.source
        return nb
    return stem, {f.__name__: f(solved())
                  for f in (comment, try_first, own_cell, magic, shows, timed)}


def test_honest_variants_plan():
    stem, variants = _honest_variants()
    for label, nb in variants.items():
        p = grading.plan(nb, stem)
        assert p.problems == {}, (label, p.problems)
        assert [s.exercise for s in p.steps if s.kind == "check"] == p.exercises, label
    assert grading.plan(variants["own_cell"], stem).answers == ["It drops the directions p < d."]
    assert grading.plan(variants["comment"], stem).answers == [""]


@pytest.mark.slow
def test_honest_variants_get_full_marks_through_the_grader():
    stem, variants = _honest_variants()
    for label, nb in variants.items():
        res = grading.run_submission(nb, stem, hidden=True, cell_timeout=120.0)
        wrong = {n: r for n, r in res["exercises"].items() if r["score"] != r["points"]}
        assert not wrong, (label, wrong)


@pytest.mark.slow
def test_float32_plot_gets_full_marks_through_the_grader():
    """9.4 allows float32 pixels; the grading child sends the figure's images as drawn."""
    stem = "09_images"
    sections = dict(nbk.solution_sections(stem))
    sections["membership_maps"] = sections["membership_maps"].replace(
        "Pi[k].reshape(grid, grid)", "Pi[k].astype(np.float32).reshape(grid, grid)")
    assert "float32" in sections["membership_maps"]
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), sections)
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=120.0,
                                 notebook_timeout=900.0)
    r = res["exercises"]["membership_maps"]
    assert r["score"] == r["points"], r
