"""The Gradescope autograder (`exercises build --gradescope`): the zip holds setup.sh and
run_autograder at its root, and run_autograder, run on a local folder laid out as Gradescope
lays it out (source/ = the zip, submission/, results/), writes results.json in Gradescope's
format with the scores `exercises grade` gives."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest

pytest.importorskip("jupytext")

from tostnp.__main__ import main  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

STEM = "04_variational"
EXS = ["variational_compression", "tight_basis", "bound_counterexample"]


@pytest.fixture(scope="module")
def autograder(tmp_path_factory):
    out = tmp_path_factory.mktemp("gs")
    assert main(["exercises", "build", "--gradescope", str(out / "ag.zip"),
                 "--notebook", STEM]) == 0
    return out / "ag.zip"


def _layout(zip_path, root):
    """/autograder as Gradescope builds it: the zip unpacked in source/, run_autograder
    copied beside it, an empty submission/ and results/."""
    src = root / "source"
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(src)
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    shutil.copyfile(src / "run_autograder", root / "run_autograder")
    os.chmod(root / "run_autograder", 0o755)
    (root / "submission").mkdir()
    (root / "results").mkdir()
    return modes


def _run(root):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TOSTNP_AUTOGRADER_ROOT=str(root), TOSTNP_AUTOGRADER_PYTHON=sys.executable)
    r = subprocess.run([str(root / "run_autograder")], cwd=root, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((root / "results" / "results.json").read_text())


def test_the_zip_is_what_gradescope_expects(autograder, tmp_path):
    modes = _layout(autograder, tmp_path)
    assert modes["setup.sh"] & stat.S_IXUSR and modes["run_autograder"] & stat.S_IXUSR
    names = set(modes)
    assert {"setup.sh", "run_autograder", "requirements-exercises.txt", "requirements.txt",
            f"exercises/{STEM}.md", "tostnp/exercises/grading/__init__.py"} <= names
    assert not any("instructor" in n or "mutants" in n for n in names)
    for script in ("setup.sh", "run_autograder"):
        assert subprocess.run(["bash", "-n", str(tmp_path / "source" / script)]).returncode == 0


def test_run_autograder_grades_a_submission_into_results_json(autograder, tmp_path):
    _layout(autograder, tmp_path)
    sections = dict(nbk.solution_sections(STEM))
    sections["tight_basis"] = ("import numpy as np\n\ndef tight_basis_mine(Z, Pi):\n"
                               "    return np.full((Pi.shape[1], Z.shape[1], Z.shape[1]), np.nan)\n")
    nbk.write(nbk.fill(nbk.read(nbk.EXERCISES / f"{STEM}.md"), sections),
              tmp_path / "submission" / f"{STEM}.ipynb")
    res = _run(tmp_path)
    tests = {t["name"]: t for t in res["tests"]}
    assert list(tests) == [f"{STEM}: {n}" for n in EXS]
    for t in res["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output"}
        assert isinstance(t["score"], float) and isinstance(t["max_score"], float)
    assert tests[f"{STEM}: variational_compression"]["status"] == "passed"
    nan = tests[f"{STEM}: tight_basis"]
    assert nan["score"] == 0 and nan["status"] == "failed" and "NaN" in nan["output"]
    assert res["score"] == 2.0 and "written answer" in res["output"]


def test_run_autograder_scores_zero_for_a_notebook_not_handed_in(autograder, tmp_path):
    _layout(autograder, tmp_path)
    (tmp_path / "submission" / "notes.txt").write_text("nothing here\n")
    res = _run(tmp_path)
    assert res["score"] == 0 and len(res["tests"]) == len(EXS)
    assert all("not handed in" in t["output"] for t in res["tests"])
