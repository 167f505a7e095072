"""Grading a class (tostnp.exercises.grading): isolation, forgeries, one set of rules for check
and grade, feedback, written answers, roster and gradebook exports.

The class is built from notebook 02 (four exercises, quick to run): a perfect submission, a
partial one, infinite loops (in a cell and in a function), os._exit, a syntax error, a memory
blow-up, deleted and edited check cells, a helper cell, a student in the roster with no
submission, and each forgery of the kind the grader must refuse. Expected scores are written
here by hand, from what each submission does; none is taken from the grader.
"""
from __future__ import annotations

import csv
import json

import time

import numpy as np
import pytest

pytest.importorskip("jupytext")

from tostnp.exercises import _reference as ref  # noqa: E402
from tostnp.exercises import grading  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

STEM = "02_coding_rate"
EXS = ["coding_rate", "compression", "coding_rate_grad", "max_rate_design"]
SOL = nbk.solution_sections(STEM)
CELL_TIMEOUT = 6.0


def _submission(sections=None, *, drop_check=(), edit_check=None, helper=None, answer=None):
    """The official notebook with ``sections`` (exercise -> source; the solution when absent,
    the TODO when None) in its student cells, and the given edits."""
    import nbformat
    nb = nbk.read(nbk.EXERCISES / f"{STEM}.md")
    cells = nbk.student_cells(nb)
    for name in EXS:
        src = (sections or {}).get(name, SOL[name])
        if src is not None:
            cells[name].source = src
    out = []
    for c in nb.cells:
        names = nbk.checks_in(c.source) if "check" in c.metadata.get("tags", []) else []
        if names and names[0] in drop_check:
            continue
        if names and edit_check and names[0] in edit_check:
            c.source = edit_check[names[0]]
        if helper and "ex-coding_rate" in c.metadata.get("tags", []):
            out.append(nbformat.v4.new_code_cell(helper))        # untagged, before the exercise
        if answer and c.cell_type == "markdown" and "written" in c.metadata.get("tags", []):
            c.source = answer
        out.append(c)
    nb.cells = out
    return nb


def _table_forgery():
    """coding_rate_mine as a table of the answers to the checker's own inputs (seed 11)."""
    rng = np.random.default_rng(11)
    table = {}
    for n, d, eps in [(40, 6, 0.5), (5, 30, 1.0), (200, 16, 0.1), (1, 3, 0.7), (120, 100, 0.01),
                      (3, 3, 1e-3), (64, 64, 2.0), (7, 1, 0.3)]:
        Z = rng.standard_normal((n, d))
        table[repr(round(float(Z.sum()), 9))] = ref.coding_rate(Z, eps)
    return (f"TABLE = {table!r}\n"
            "def coding_rate_mine(Z, eps):\n"
            "    return TABLE[repr(round(float(Z.sum()), 9))]\n")


SOLUTIONS_FILE = nbk.SOLUTIONS / f"{STEM}.py"
FD_GRAD = ("import numpy as np\n"
           "def coding_rate_grad_mine(Z, eps):\n"
           "    def R(Z):\n"
           "        n, d = Z.shape\n"
           "        return 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z.T @ Z)[1]\n"
           "    g = np.zeros_like(Z)\n"
           "    for i in np.ndindex(Z.shape):\n"
           "        h = 1e-5 * max(1.0, abs(Z[i]))\n"
           "        a, b = Z.copy(), Z.copy()\n"
           "        a[i] += h\n"
           "        b[i] -= h\n"
           "        g[i] = (R(a) - R(b)) / (2 * h)\n"
           "    return g\n")
TODO = None

# student -> (submission, {exercise: expected score}, a word the reason of each 0 must contain)
CLASS = {
    "perfect": (_submission(answer="*Your answer:* attention is permutation-equivariant."),
                dict.fromkeys(EXS, 1.0), {}),
    "partial": (_submission({"coding_rate_grad": SOL["coding_rate_grad"] + "\n_g = coding_rate_grad_mine\n"
                             "def coding_rate_grad_mine(Z, eps):\n    return 2 * _g(Z, eps)\n",
                             "max_rate_design": TODO}),
                {"coding_rate": 1.0, "compression": 1.0, "coding_rate_grad": 0.0,
                 "max_rate_design": 0.0},
                {"coding_rate_grad": "factor", "max_rate_design": "not written yet"}),
    "loop_in_function": (_submission({"compression": "def compression_mine(Z, Pi, eps):\n"
                                                     "    while True:\n        pass\n"}),
                         {**dict.fromkeys(EXS, 1.0), "compression": 0.0},
                         {"compression": "time budget"}),
    "loop_in_cell": (_submission({"coding_rate": "while True:\n    pass\n"}),
                     {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0},
                     {"coding_rate": "time budget"}),
    "os_exit": (_submission({"coding_rate_grad": "import os\n"
                             "def coding_rate_grad_mine(Z, eps):\n    os._exit(1)\n"}),
                {**dict.fromkeys(EXS, 1.0), "coding_rate_grad": 0.0},
                {"coding_rate_grad": "exit code 1"}),
    "syntax_error": (_submission({"compression": "def compression_mine(Z, Pi, eps)\n    return 0\n"}),
                     {**dict.fromkeys(EXS, 1.0), "compression": 0.0},
                     {"compression": "SyntaxError"}),
    "memory": (_submission({"max_rate_design": "import numpy as np\n"
                            "def max_rate_design_mine(n, d, eps):\n"
                            "    big = np.ones((2**28,))\n    return big[:n * d].reshape(n, d)\n"}),
               {**dict.fromkeys(EXS, 1.0), "max_rate_design": 0.0},
               {"max_rate_design": "memory"}),
    "huge_result": (_submission({"max_rate_design": "import numpy as np\n"
                                 "def max_rate_design_mine(n, d, eps):\n"
                                 "    return np.zeros((3000, 3000))\n"}),
                    {**dict.fromkeys(EXS, 1.0), "max_rate_design": 0.0},
                    {"max_rate_design": "the limit is"}),
    "deleted_check": (_submission(drop_check=("coding_rate",)),
                      {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0},
                      {"coding_rate": "missing"}),
    "edited_check": (_submission(edit_check={"compression": "check_compression(lambda *a: 0.0)"}),
                     {**dict.fromkeys(EXS, 1.0), "compression": 0.0},
                     {"compression": "edited"}),
    "helper_cell": (_submission({"coding_rate": "def coding_rate_mine(Z, eps):\n"
                                 "    return _half_logdet(Z, eps)\n"},
                                helper="import numpy as np\n"
                                       "def _half_logdet(Z, eps):\n"
                                       "    n, d = Z.shape\n"
                                       "    return 0.5 * float(np.linalg.slogdet(np.eye(d) + "
                                       "d / (n * eps**2) * Z.T @ Z)[1])\n"),
                    dict.fromkeys(EXS, 1.0), {}),
    # forgeries: each leaves the exercises it touches unwritten or forged
    "forge_record": (_submission({"coding_rate": "import tostnp.exercises._core as c\n"
                                  "c._record = lambda *a, **k: None\n",
                                  "compression": TODO}),
                     {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0, "compression": 0.0},
                     {"coding_rate": "not defined", "compression": "not written yet"}),
    "forge_solutions_file": (_submission({"coding_rate": f"exec(open({str(SOLUTIONS_FILE)!r}).read())\n",
                                          "compression": TODO, "coding_rate_grad": TODO,
                                          "max_rate_design": TODO}),
                             dict.fromkeys(EXS, 0.0), {"coding_rate": "not defined"}),
    "forge_reference": (_submission({"coding_rate": "from tostnp.exercises._reference import "
                                     "coding_rate as coding_rate_mine\n",
                                     "compression": "from tostnp.exercises import _reference\n"
                                     "compression_mine = _reference.compression\n"}),
                        {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0, "compression": 0.0},
                        {"coding_rate": "not defined", "compression": "not defined"}),
    "forge_package": (_submission({"coding_rate": "import sys, tostnp\nsys.setprofile(None)\n"
                                   "def coding_rate_mine(Z, eps):\n"
                                   "    return float(tostnp.coding_rate(Z, eps))\n",
                                   "compression": "import threading\nfrom tostnp.math.objective import "
                                   "compression as _c\n"
                                   "def compression_mine(Z, Pi, eps):\n"
                                   "    out = []\n"
                                   "    t = threading.Thread(target=lambda: out.append(_c(Z, Pi, eps)))\n"
                                   "    t.start(); t.join()\n    return out[0]\n"}),
                      {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0, "compression": 0.0},
                      {"coding_rate": "AttributeError", "compression": "not defined"}),
    "forge_compare": (_submission({"coding_rate": "import tostnp.exercises.ex02_coding_rate as m\n"
                                   "m.compare = lambda *a, **k: None\n"
                                   "def coding_rate_mine(Z, eps):\n    return 0.0\n"}),
                      {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0},
                      {"coding_rate": "not defined"}),
    "forge_table": (_submission({"coding_rate": _table_forgery()}),
                    {**dict.fromkeys(EXS, 1.0), "coding_rate": 0.0},
                    {"coding_rate": "KeyError"}),
    "forge_autograd": (_submission({"coding_rate_grad": "import autograd, autograd.numpy as anp\n"
                                    "def coding_rate_grad_mine(Z, eps):\n"
                                    "    n, d = Z.shape\n"
                                    "    f = lambda Z: 0.5 * anp.linalg.slogdet(anp.eye(d) + "
                                    "d / (n * eps**2) * anp.dot(Z.T, Z))[1]\n"
                                    "    return autograd.grad(f)(Z)\n"}),
                       {**dict.fromkeys(EXS, 1.0), "coding_rate_grad": 0.0},
                       {"coding_rate_grad": "not defined"}),
    "forge_finite_differences": (_submission({"coding_rate_grad": FD_GRAD}),
                                 {**dict.fromkeys(EXS, 1.0), "coding_rate_grad": 0.0},
                                 {"coding_rate_grad": "finite differences"}),
}
ROSTER = sorted(CLASS) + ["zoe_nothing"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    subs = root / "subs"
    for student, (nb, _, _) in CLASS.items():
        (subs / student).mkdir(parents=True)
        nbk.write(nb, subs / student / f"{STEM}.md")
    with open(root / "roster.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student", "name", "id", "email"])
        for i, s in enumerate(ROSTER):
            w.writerow([s, s.replace("_", " ").title(), 1000 + i, f"{s}@uni.example"])
    t0 = time.monotonic()
    rep = grading.grade_class(subs, root / "out", jobs=2, cell_timeout=CELL_TIMEOUT,
                              notebook_timeout=90, memory_mb=1024, roster=root / "roster.csv",
                              log=lambda *a: None)
    return root, rep, time.monotonic() - t0


@pytest.mark.slow
def test_class_grades_are_right_for_every_row(graded):
    root, rep, seconds = graded
    rows = {r["student"]: r for r in csv.DictReader(open(root / "out" / "grades.csv"))}
    assert set(rows) == set(ROSTER)
    for student, (_, want, why) in CLASS.items():
        res = json.loads((root / "out" / "results" / student / f"{STEM}.json").read_text())
        got = {n: e["score"] for n, e in res["exercises"].items()}
        assert got == want, (student, {n: (e["score"], e["hint"][:150])
                                       for n, e in res["exercises"].items()})
        for n, word in why.items():
            assert word in res["exercises"][n]["hint"], (student, n, res["exercises"][n]["hint"])
        assert float(rows[student]["exercises_total"]) == sum(want.values())
        assert rows[student]["status"] == "graded"
    assert rows["zoe_nothing"]["status"] == "missing" and float(rows["zoe_nothing"]["total"]) == 0
    # bounded: every submission within its budget, the loops cost their cell timeout only
    assert seconds < 180, seconds


@pytest.mark.slow
def test_feedback_pages_written_answers_and_exports(graded):
    root, rep, _ = graded
    out = root / "out"
    page = (out / "feedback" / "partial.md").read_text()
    assert "| coding_rate_grad | 0.00 / 1 | 0 points:" in page and "factor" in page
    assert "| coding_rate | 1.00 / 1 | PASS |" in page
    assert "No submission was received" in (out / "feedback" / "zoe_nothing.md").read_text()
    assert "cell" in (out / "feedback" / "syntax_error.md").read_text()
    # written answers: one row per student who submitted; only "perfect" answered
    rows = list(csv.DictReader(open(out / "written" / f"{STEM}.csv")))
    assert {r["student"] for r in rows} == set(CLASS)
    by = {r["student"]: r for r in rows}
    assert "permutation-equivariant" in by["perfect"]["answer"]
    assert by["partial"]["score"] == "0" and by["partial"]["comment"] == "no answer"
    assert by["perfect"]["score"] == "" and by["perfect"]["level"] == ""
    assert "Question 1" in (out / "written" / f"{STEM}-rubric.md").read_text()
    grades = {r["student"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert grades["perfect"]["written_marked"] == "0/1" and grades["perfect"]["total"] == "4.0"
    # mark it with the rubric, grade again: nothing is re-run, the mark is merged
    by["perfect"]["level"] = "partial"
    by["perfect"]["comment"] = "the second invariance is missing"
    with open(out / "written" / f"{STEM}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=grading.WRITTEN_FIELDS)
        w.writeheader()
        w.writerows(by.values())
    # a run killed after the others were written: only the missing result is graded again
    (out / "results" / "forge_table" / f"{STEM}.json").unlink()
    logs = []
    grading.grade_class(root / "subs", out, cell_timeout=CELL_TIMEOUT, notebook_timeout=90,
                        memory_mb=1024, roster=root / "roster.csv", log=logs.append)
    assert f"{len(CLASS) - 1} already graded, 1 to grade" in logs[0], logs
    grades = {r["student"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    assert grades["perfect"]["written_total"] == "0.5" and grades["perfect"]["total"] == "4.5"
    assert grades["perfect"]["percent"] == "90.0"
    assert "second invariance is missing" in (out / "feedback" / "perfect.md").read_text()
    # Canvas: the fixed columns, a Points Possible row, one row per roster student
    canvas = list(csv.DictReader(open(out / "canvas.csv")))
    assert list(canvas[0])[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    assert canvas[0]["Student"].strip() == "Points Possible"
    assert canvas[0][f"Exercises {STEM}"] == "5.0"
    cz = {r["SIS Login ID"]: r for r in canvas[1:]}
    assert set(cz) == set(ROSTER) and cz["perfect"][f"Exercises {STEM}"] == "4.5"
    assert cz["zoe_nothing"]["ID"] == str(1000 + ROSTER.index("zoe_nothing"))
    moodle = {r["Email address"]: r for r in csv.DictReader(open(out / "moodle.csv"))}
    assert moodle["partial@uni.example"][f"Exercises {STEM}"] == "2.0"


@pytest.mark.slow
def test_check_follows_the_same_rules(graded):
    """`check` (visible cases, fixed inputs) gives the same scores as `grade` on the rule cases."""
    for student in ("deleted_check", "edited_check", "helper_cell", "partial", "syntax_error"):
        nb, want, _ = CLASS[student]
        res = grading.run_submission(nb, STEM, hidden=False, cell_timeout=CELL_TIMEOUT)
        assert {n: e["score"] for n, e in res["exercises"].items()} == want, student


def test_forged_table_passes_fixed_inputs_but_not_grading():
    """The table of answers works on the inputs a student sees (why grading draws new ones)."""
    nb = _submission({"compression": TODO, "coding_rate_grad": TODO, "max_rate_design": TODO,
                      "coding_rate": _table_forgery()})
    seen = grading.run_submission(nb, STEM, hidden=True, cell_timeout=CELL_TIMEOUT)
    graded = grading.run_submission(nb, STEM, hidden=True, cell_timeout=CELL_TIMEOUT, salt=7)
    assert seen["exercises"]["coding_rate"]["score"] == 1.0
    assert graded["exercises"]["coding_rate"]["score"] == 0.0


def test_plan_rules():
    nb = _submission(drop_check=("coding_rate",),
                     edit_check={"compression": "check_compression(compression_mine, hidden=False)"},
                     helper="x = 1")
    p = grading.plan(nb, STEM)
    assert "missing" in p.problems["coding_rate"] and "edited" in p.problems["compression"]
    assert [s.exercise for s in p.steps if s.kind == "check"] == ["coding_rate_grad",
                                                                  "max_rate_design"]
    assert any(s.kind == "exec" and s.source == "x = 1" for s in p.steps)


def test_sandbox_has_no_reference_and_empties_the_code_under_study(tmp_path):
    grading.build_sandbox("08_tost_block", tmp_path)
    pkg = tmp_path / "pkgs" / "tostnp"
    files = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*.py")}
    assert "exercises/_reference.py" not in files and "math/objective.py" not in files
    assert "analysis/oracle.py" not in files
    assert "nn/block.py" not in files and "nn/tssa.py" in files
    fused = (pkg / "backend" / "kernels.py").read_text()
    assert "not available while grading" in fused
    assert "def layer_norm_forward" in fused
    grading.build_sandbox("02_coding_rate", tmp_path / "b")
    files = {p.relative_to(tmp_path / "b").as_posix() for p in (tmp_path / "b").rglob("*.py")}
    assert files == {"pkgs/tostnp/__init__.py", "pkgs/tostnp/exercises/__init__.py"}


@pytest.mark.slow
def test_other_notebooks_forgeries():
    """8.1 and 8.2 through tostnp.backend.kernels, 1.1 through the reference, 1.3 with made-up times."""
    stem = "08_tost_block"
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), dict(
        nbk.solution_sections(stem),
        layer_norm="from tostnp.backend.kernels import layer_norm_forward\n"
                   "def layer_norm_mine(x, gamma, beta, eps):\n"
                   "    return layer_norm_forward(x, gamma, beta, eps)[0]\n",
        layer_norm_backward="import tostnp.backend.kernels as F\n"
                            "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
                            "    y, xhat, rstd = F.layer_norm_forward(x, gamma, beta, eps)\n"
                            "    return F.layer_norm_backward(dy, xhat, rstd, gamma)\n"))
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=30, salt=3)
    got = {n: e["score"] for n, e in res["exercises"].items()}
    # the block calls the forged layer_norm_mine: it fails with it
    assert got == {"layer_norm": 0.0, "layer_norm_backward": 0.0, "tost_block": 0.0}, res
    assert "not available while grading" in res["exercises"]["layer_norm"]["hint"]
    stem = "01_attention_cost"
    sections = nbk.solution_sections(stem)
    made_up = ("def attention_scaling_mine():\n"
               "    Ns = [256, 512, 1024, 2048]\n"
               "    secs = [1e-10 * n**2 for n in Ns]\n"
               "    return {'N': Ns, 'seconds': secs, 'slope': loglog_slope_mine(Ns, secs)}\n")
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), dict(
        sections, attention_scaling=made_up,
        softmax_attention="from tostnp.exercises._reference import softmax_attention as "
                          "softmax_attention_mine\n"))
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=60, salt=3)
    got = {n: e["score"] for n, e in res["exercises"].items()}
    assert got["softmax_attention"] == 0.0 and got["attention_scaling"] == 0.0, res
    assert got["loglog_slope"] == 1.0


@pytest.mark.slow
def test_patches_through_the_model_code_are_refused():
    """Notebook 09's training needs the model code, which holds a patch extraction: 9.1 is
    checked in a child without it (the training, in a child with it)."""
    stem = "09_images"
    forged = ("import array_api_compat.numpy as xp\n"
              "from tostnp.nn.layers import _patchify\n"
              "def patchify_mine(images, P):\n"
              "    return _patchify(xp, images, P)\n")
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"),
                  dict(nbk.solution_sections(stem), patchify=forged))
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=60, salt=3)
    got = {n: e["score"] for n, e in res["exercises"].items()}
    assert got == {"patchify": 0.0, "adam_step": 1.0, "digits_training": 2.0,
                   "membership_maps": 1.0}, res
    assert "not defined" in res["exercises"]["patchify"]["hint"]


# one exercise per kind of value the wire carries: callbacks and inputs written back
# (numerical_gradient), a state dict written back (decode_step), tuples (layer_norm_backward), a dict of
# gradients (tssa_backward), a figure (membership_maps), device arrays (xp_softmax), a value
# rather than a function (bound_counterexample), a float (coding_rate)
WIRE = ["numerical_gradient", "decode_step", "layer_norm_backward", "tssa_backward", "membership_maps",
        "xp_softmax", "bound_counterexample", "coding_rate"]


def _first_mutants():
    mutants = nbk.mutants()
    owner = {n: p.stem for p in nbk.notebooks() for n in nbk.student_cells(nbk.read(p))}
    return [(owner[ex], ex, mutants[ex][0]) for ex in WIRE]


@pytest.mark.slow
@pytest.mark.parametrize("stem,ex,mutant", _first_mutants(), ids=[m[1] for m in _first_mutants()])
def test_planted_bug_caught_through_the_grading_child(stem, ex, mutant):
    """A planted bug graded through the child gets the same hint as in the kernel (all planted
    bugs run in-process in tests/test_exercises.py; the first of every exercise passed this test
    through the child when the grader was written)."""
    label, source, hint = mutant
    sections = nbk.solution_sections(stem)
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"),
                  dict(sections, **{ex: sections[ex] + "\n\n" + source}))
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=120, salt=5)
    e = res["exercises"][ex]
    assert e["score"] < e["points"] and hint in e["hint"], (label, e)
