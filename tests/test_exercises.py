"""The exercise notebooks (exercises/*.md, MyST notebooks) are executed, three ways each:

* with the reference solution (exercises/solutions/*.py) pasted into the cell tagged "student":
  every check must pass and print PASS;
* untouched: the TODO raises NotImplementedError, so the check cell must fail;
* with a plausible wrong answer (the solution plus a bug): the check cell must raise
  AssertionError, i.e. the checks really compare values.

The kernel is started as ``python`` from PATH, so the test puts this interpreter's directory
first on PATH and the repository root on PYTHONPATH.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")
from nbclient.exceptions import CellExecutionError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"

# notebook -> (solution file, functions the student writes, a bug appended to the solution)
CASES = {
    "01_coding_rate.md": (
        "ex01_coding_rate.py", ["coding_rate_mine", "compression_mine"],
        "_R_ok = coding_rate_mine\n"
        "def coding_rate_mine(Z, eps):          # bug: forgot the 1/2\n"
        "    return 2 * _R_ok(Z, eps)\n"),
    "02_variational_gradient.md": (
        "ex02_variational_gradient.py", ["variational_compression_grad_mine"],
        "_g_ok = variational_compression_grad_mine\n"
        "def variational_compression_grad_mine(Z, Pi, U, eps):   # bug: forgot the 1/n\n"
        "    return Z.shape[0] * _g_ok(Z, Pi, U, eps)\n"),
    "03_tssa_forward.md": (
        "ex03_tssa_forward.py", ["tssa_forward_mine"],
        "_f_ok = tssa_forward_mine\n"
        "def tssa_forward_mine(x, params, num_heads):   # bug: drops the output bias\n"
        "    y, Pi = _f_ok(x, params, num_heads)\n"
        "    return y - params['b_o'], Pi\n"),
}


@pytest.fixture
def kernel_env(monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("MPLBACKEND", "Agg")


def _student_cells(nb):
    return [c for c in nb.cells
            if c.cell_type == "code" and "student" in c.get("metadata", {}).get("tags", [])]


def _execute(name: str, student_source: str | None):
    """Run exercises/<name>, optionally replacing the student cell; returns the executed notebook."""
    nb = jupytext.read(EXERCISES / name)
    if student_source is not None:
        (cell,) = _student_cells(nb)
        cell.source = student_source
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(EXERCISES)}})
    client.execute()
    return nb


def _stdout(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")


@pytest.mark.parametrize("name", sorted(CASES))
def test_notebook_structure(name):
    """One student cell with a TODO that raises; the solution defines the same functions."""
    sol_file, funcs, _ = CASES[name]
    nb = jupytext.read(EXERCISES / name)
    (cell,) = _student_cells(nb)
    assert "TODO" in cell.source and "raise NotImplementedError" in cell.source
    solution = (EXERCISES / "solutions" / sol_file).read_text()
    for f in funcs:
        assert f"def {f}(" in cell.source and f"def {f}(" in solution
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_solution_passes(name, kernel_env):
    sol_file, _, _ = CASES[name]
    nb = _execute(name, (EXERCISES / "solutions" / sol_file).read_text())
    out = _stdout(nb)
    assert "All checks passed." in out and out.count("PASS") >= 2, out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_todo_fails(name, kernel_env):
    with pytest.raises(CellExecutionError) as info:
        _execute(name, None)
    assert info.value.ename == "NotImplementedError", info.value.ename


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_answer_fails(name, kernel_env):
    sol_file, _, bug = CASES[name]
    source = (EXERCISES / "solutions" / sol_file).read_text() + "\n" + bug
    with pytest.raises(CellExecutionError) as info:
        _execute(name, source)
    assert info.value.ename == "AssertionError", info.value.ename
