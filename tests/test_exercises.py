"""The exercise checkers (tostnp.exercises) and notebooks (exercises/NN_*.md).

* In-process, fast: every reference solution passes every checker, hidden edge cases included;
  every planted bug (exercises/instructor/mutants/NN_name.py) is rejected with its intended hint.
* Through a real kernel, one per notebook execution, three executions per notebook: with the
  solutions filled in (every exercise scores full marks, no cell errors), untouched (every
  check fails saying the exercise is not written yet, and no other cell errors), and with one
  planted bug (only that exercise fails, with its hint).
"""
from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("jupytext")
pytest.importorskip("nbclient")

from tostnp import exercises  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

NOTEBOOKS = nbk.notebooks()


MUTANTS = nbk.mutants()
# exercise name -> notebook stem
OWNER = {name: p.stem for p in NOTEBOOKS for name in nbk.student_cells(nbk.read(p))}
CHECK_SRC = {name: c.source for p in NOTEBOOKS for c in nbk.check_cells(nbk.read(p))
             for name in nbk.checks_in(c.source)}


@pytest.fixture
def kernel_env(monkeypatch):
    """The kernel is started as `python` from PATH: make it this interpreter."""
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def _namespace(stem: str) -> dict:
    """A namespace where every solution section of the notebook has run."""
    ns: dict = {}
    exec("import numpy as np\nfrom tostnp.exercises import *", ns)
    for src in nbk.solution_sections(stem).values():
        exec(src, ns)
    return ns


def test_every_notebook_is_complete():
    assert len(NOTEBOOKS) >= 5
    for p in NOTEBOOKS:
        nb = nbk.read(p)
        cells = nbk.student_cells(nb)
        sections = nbk.solution_sections(p.stem)
        assert set(cells) == set(sections) == set(nbk.exercises_of(nb)), p.name
        for name, c in cells.items():
            assert "TODO" in c.source and "raise NotImplementedError" in c.source, (p.name, name)
            assert hasattr(exercises, f"check_{name}"), name
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), p.name


def test_every_checker_has_four_mutants():
    names = [n for n in dir(exercises) if n.startswith("check_")]
    for n in names:
        assert len(MUTANTS.get(n[len("check_"):], [])) >= 4, f"{n} has fewer than 4 mutants"


@pytest.mark.parametrize("stem", sorted({p.stem for p in NOTEBOOKS}))
def test_solutions_pass_in_process(stem, monkeypatch, capsys):
    monkeypatch.setenv(exercises.HIDDEN_ENV, "1")
    ns = _namespace(stem)
    for name in nbk.solution_sections(stem):
        exec(CHECK_SRC[name], ns)
    out = capsys.readouterr().out
    assert out.count("PASS") == len(nbk.solution_sections(stem)), out


_MUTANT_IDS = [(ex, i) for ex, lst in MUTANTS.items() for i in range(len(lst))]


@pytest.mark.parametrize("ex,i", _MUTANT_IDS, ids=[f"{e}-{i}" for e, i in _MUTANT_IDS])
def test_mutant_is_caught_with_its_hint(ex, i, capsys):
    label, source, hint = MUTANTS[ex][i]
    ns = _namespace(OWNER[ex])
    exec(source, ns)
    with pytest.raises(AssertionError) as info:
        exec(CHECK_SRC[ex], ns)
    assert hint in str(info.value), f"{label}: the hint was: {info.value}"
    assert "SCORE" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# the notebooks, executed
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_three_ways(path, kernel_env):
    sections = nbk.solution_sections(path.stem)
    # 1. solutions: full marks, no error anywhere
    nb, res = nbk.execute(nbk.fill(nbk.read(path), sections), path.parent)
    assert nbk.errors(nb) == []
    assert all(r["score"] == r["points"] for r in res.values()), res
    # 2. untouched: every check fails with "not written yet", nothing else raises
    nb, res = nbk.execute(nbk.read(path), path.parent)
    errs = nbk.errors(nb)
    assert {e[0] for e in errs} == {nb.cells.index(c) for c in nbk.check_cells(nb)}, errs
    assert all(e[2] == "NotWritten" and "not written yet" in e[3] for e in errs), errs
    assert all(r["score"] == 0 for r in res.values())
    # 3. one planted bug: caught, with its hint, and only there
    ex = [n for n in nbk.exercises_of(nb) if n in MUTANTS][-1]     # nothing depends on it
    label, source, hint = MUTANTS[ex][0]
    bugged = dict(sections, **{ex: sections[ex] + "\n\n" + source})
    nb, res = nbk.execute(nbk.fill(nbk.read(path), bugged), path.parent)
    errs = nbk.errors(nb)
    assert len(errs) == 1 and hint in errs[0][3], (label, errs)
    assert res[ex]["score"] < res[ex]["points"]
    assert all(r["score"] == r["points"] for n, r in res.items() if n != ex)


# --------------------------------------------------------------------------------------------
# hints name only what the data supports
# --------------------------------------------------------------------------------------------
def _hint(check, fn):
    with pytest.raises(AssertionError) as info:
        check(fn)
    return str(info.value)


def test_hints_do_not_invent_a_constant_factor():
    import numpy as np
    # garbage of the right shape: zeros, noise, a sum: never "a constant factor"
    for fn in (lambda Z, eps: 0.0, lambda Z, eps: float(np.sum(Z)),
               lambda Z, eps: float(np.random.default_rng(0).standard_normal())):
        text = _hint(exercises.check_coding_rate, fn)
        assert "constant factor" not in text and "times the reference" not in text, text
    assert "all zeros" in _hint(exercises.check_coding_rate_grad, lambda Z, eps: np.zeros_like(Z))
    text = _hint(exercises.check_coding_rate_grad,
                 lambda Z, eps: np.random.default_rng(1).standard_normal(Z.shape))
    assert "barely related" in text and "factor" not in text, text

    def one_over_k(Z, Pi, eps):           # 1/K instead of n_k/n: close to 1, but no factor
        n, d = Z.shape
        K = Pi.shape[1]
        return sum(0.5 / K * np.linalg.slogdet(np.eye(d) + d / (Pi[:, k].sum() * eps**2)
                                               * Z.T @ (Pi[:, k:k + 1] * Z))[1] for k in range(K))
    text = _hint(exercises.check_compression, one_over_k)
    assert "times the reference" not in text, text
    # a real factor on an array is still named
    text = _hint(exercises.check_coding_rate_grad, lambda Z, eps: 3.7 * _grad(Z, eps))
    assert "3.7 times the reference" in text, text


def _grad(Z, eps):
    import numpy as np
    n, d = Z.shape
    a = d / (n * eps**2)
    return a * np.linalg.solve(np.eye(d) + a * Z.T @ Z, Z.T).T
