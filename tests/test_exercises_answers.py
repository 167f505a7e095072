"""Answers are real, finite numbers: every check refuses NaN, inf, complex, object and text
before comparing (one gate, tostnp.exercises._core.real_numbers), and honest answers in other
forms (lists, Python floats, integer arrays, a list for a tuple) still get full marks."""
from __future__ import annotations

import numpy as np
import pytest

from tostnp import exercises
from tostnp.exercises import _core
from tostnp.exercises import notebook as nbk


def _solution(stem: str, name: str):
    ns: dict = {}
    for src in nbk.solution_sections(stem).values():        # later sections use earlier ones
        exec(src, ns)
    return ns[f"{name}_mine"]


def _score(check, fn, monkeypatch) -> tuple[float, str]:
    """(score, hint) of ``check(fn)`` with the hidden cases, read from the record it sends."""
    records = []
    monkeypatch.setattr(_core.GRADING, "sink", records.append)
    try:
        check(fn, hidden=True)
    except AssertionError:
        pass
    assert len(records) == 1
    return records[0]["score"], records[0]["hint"]


def test_nan_basis_scores_zero(monkeypatch):
    def tight_basis(Z, Pi):
        return np.full((Pi.shape[1], Z.shape[1], Z.shape[1]), np.nan)
    score, hint = _score(exercises.check_tight_basis, tight_basis, monkeypatch)
    assert score == 0 and "NaN or inf" in hint


def test_complex_rate_scores_zero(monkeypatch):
    mine = _solution("04_variational", "variational_compression")
    score, hint = _score(exercises.check_variational_compression,
                         lambda *a: mine(*a) + 1e6j, monkeypatch)
    assert score == 0 and "complex" in hint
    score, _ = _score(exercises.check_variational_compression,
                      lambda *a: np.complex128(mine(*a)), monkeypatch)   # even with 0j
    assert score == 0


def test_all_nan_backward_keeps_no_case(monkeypatch):
    def tssa_backward(dy, x, params, num_heads):
        return np.full_like(x, np.nan), {k: np.full_like(v, np.nan) for k, v in params.items()}
    score, hint = _score(exercises.check_tssa_backward, tssa_backward, monkeypatch)
    assert score == 0 and "NaN or inf" in hint


@pytest.mark.parametrize("bad,word", [(np.array([1.0, np.inf]), "NaN or inf"),
                                      (float("nan"), "NaN or inf"),
                                      (np.array([np.ones(2), np.ones(3)], dtype=object), "object"),
                                      (np.array(["1.0"]), "not numbers"),
                                      ((np.ones(2), {"w": np.array([1j])}), "complex")])
def test_the_gate_names_what_is_wrong(bad, word):
    with pytest.raises(_core.Fail, match=word):
        _core.real_numbers(bad, "f")


def test_honest_answers_in_other_forms_get_full_marks(monkeypatch):
    """Lists for arrays, Python floats for NumPy ones, integer arrays, a list for a tuple."""
    rate = _solution("04_variational", "variational_compression")
    basis = _solution("04_variational", "tight_basis")
    backward = _solution("07_backprop_tssa", "tssa_backward")
    honest = [
        (exercises.check_variational_compression, lambda *a: np.array(rate(*a))),   # 0-d array
        (exercises.check_variational_compression, lambda *a: [rate(*a)][0]),
        (exercises.check_tight_basis, lambda Z, Pi: basis(Z, Pi).tolist()),
        (exercises.check_tssa_backward, lambda *a: list(backward(*a))),
        (exercises.check_bound_counterexample,
         lambda: ([[1, 0], [0, 1], [-1, 0], [0, -1]], np.ones((4, 1), dtype=int),
                  [[[1], [0]]], 1)),
    ]
    for check, fn in honest:
        score, hint = _score(check, fn, monkeypatch)
        assert score == getattr(check, "points", 1.0), hint


def test_in_a_notebook_the_hint_comes_without_the_checkers_traceback(tmp_path, monkeypatch):
    """A failed check shows its score line, then the hint alone (no frames of _core.py)."""
    import os
    import sys
    pytest.importorskip("nbclient")
    import nbformat
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import numpy as np\nfrom tostnp.exercises import check_tight_basis\n"
        "def tight_basis(Z, Pi):\n    return np.stack([np.eye(Z.shape[1])] * Pi.shape[1])\n"
        "check_tight_basis(tight_basis)")]
    nb, _ = nbk.execute(nb, tmp_path)
    outs = nb.cells[0].outputs
    kinds = [o["output_type"] for o in outs]
    assert kinds.index("stream") < kinds.index("error")
    assert "SCORE tight_basis" in next(o["text"] for o in outs if o["output_type"] == "stream")
    err = next(o for o in outs if o["output_type"] == "error")
    assert err["ename"] == "Fail" and "which basis makes a symmetric matrix diagonal" in err["evalue"]
    shown = "\n".join(err["traceback"])
    assert "_core.py" not in shown and len(err["traceback"]) == 1, shown


def test_float32_plot_gets_full_marks_and_bugs_still_fail(monkeypatch):
    """9.4 allows float32 pixels: rounding to float32 is not a mistake, a layout slip is."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def maps(order="C", dtype=np.float32, vmax=1.0):
        def membership_maps(Pi, grid):
            fig, axes = plt.subplots(1, Pi.shape[0], squeeze=False)
            for k, ax in enumerate(axes[0]):
                ax.imshow(Pi[k].astype(dtype).reshape(grid, grid, order=order), vmin=0.0,
                          vmax=vmax)
            return fig
        return membership_maps
    assert _score(exercises.check_membership_maps, maps(), monkeypatch)[0] == 1.0
    assert _score(exercises.check_membership_maps, maps(dtype=np.float64), monkeypatch)[0] == 1.0
    score, hint = _score(exercises.check_membership_maps, maps(order="F"), monkeypatch)
    assert score < 1.0 and "row by row" in hint
    score, hint = _score(exercises.check_membership_maps, maps(dtype=np.float16), monkeypatch)
    assert score < 1.0
