"""`python -m tostnp exercises start | check | build | grade`: the student and instructor
editions, the working copies, the command-line check and the grade CSV."""
from __future__ import annotations

import csv
import json
import os
import sys

import pytest

pytest.importorskip("jupytext")
pytest.importorskip("nbclient")

from tostnp.__main__ import main  # noqa: E402
from tostnp.cli import exercises_command as cli  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

SMALL = "04_variational"          # the quickest notebook to execute


@pytest.fixture
def kernel_env(monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def test_student_edition_has_no_solutions(tmp_path, capsys):
    assert main(["exercises", "build", "--student", str(tmp_path / "s")]) == 0
    out = tmp_path / "s"
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    stems = [p.stem for p in nbk.notebooks()]
    top = sorted(f for f in files if not f.startswith("tostnp/"))
    assert top == sorted(["README.md", "run.py", "requirements.txt", "pyproject.toml",
                          "requirements-exercises.txt"]
                         + [f"exercises/{s}.md" for s in stems]
                         + [f"exercises/{s}.ipynb" for s in stems])
    assert "tostnp/exercises/grading/__init__.py" in files and "tostnp/__main__.py" in files
    for p in nbk.notebooks():                                    # the tracked notebook, unchanged
        assert (out / "exercises" / p.name).read_bytes() == p.read_bytes()
        ipynb = nbk.read(out / "exercises" / (p.stem + ".ipynb"))
        assert [c.source for c in ipynb.cells] == [c.source for c in nbk.read(p).cells]
    text = " ".join((out / f).read_text() for f in top)
    assert "MUTANTS" not in text and "# %% ex-" not in text and "instructor" not in " ".join(files)
    readme = (out / "README.md").read_text()
    assert "python3 run.py exercises start" in readme and "python3 run.py exercises check" in readme
    assert "student edition" in capsys.readouterr().out


def test_student_edition_checks_on_its_own(tmp_path):
    """The student README's check command works in the edition alone (its own tostnp)."""
    import subprocess
    assert main(["exercises", "build", "--student", str(tmp_path / "s")]) == 0
    out = tmp_path / "s"
    nbk.write(nbk.fill(nbk.read(nbk.EXERCISES / f"{SMALL}.md"), nbk.solution_sections(SMALL)),
              out / f"{SMALL}.md")
    env = dict(os.environ, PYTHONPATH=str(out))
    r = subprocess.run([sys.executable, "-m", "tostnp", "exercises", "check", f"{SMALL}.md"],
                       cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3.00 / 3" in r.stdout


def test_instructor_edition_has_solutions_and_hidden_tests(tmp_path):
    assert main(["exercises", "build", "--instructor", str(tmp_path / "i")]) == 0
    out = tmp_path / "i"
    assert (out / "exercises" / "instructor" / "mutants" / "02_coding_rate.py").is_file()
    assert "nbgrader" in (out / "exercises" / "instructor" / "README.md").read_text()
    for p in nbk.notebooks():
        solved = nbk.read(out / "solutions" / p.name)
        cells = nbk.student_cells(solved)
        assert cells and all("NotImplementedError" not in c.source for c in cells.values())
        hidden = [c for c in solved.cells if "hidden-check" in c.metadata.get("tags", [])]
        assert len(hidden) == len(nbk.check_cells(solved))
        assert all("hidden=True" in c.source for c in hidden)
        assert (out / "exercises" / "instructor" / "solutions" / f"{p.stem}.py").is_file()


def test_build_refuses_exercises_folder(capsys):
    assert main(["exercises", "build", "--student", str(nbk.EXERCISES / "x")]) == 2
    assert "outside exercises/" in capsys.readouterr().err


def test_start_copies_without_overwriting(tmp_path):
    work = tmp_path / "my"
    copied, kept = cli.prepare_workdir(work)
    assert sorted(copied) == [p.name for p in nbk.notebooks()] and kept == []
    mine = work / nbk.notebooks()[0].name
    mine.write_text(mine.read_text() + "\n# my work\n")
    copied, kept = cli.prepare_workdir(work)
    assert copied == [] and mine.read_text().endswith("# my work\n")
    conf = json.loads((work / ".jupyter" / "labconfig" / "default_setting_overrides.json").read_text())
    viewers = conf["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["markdown"] == viewers["myst"] == "Jupytext Notebook"
    assert 'formats = "ipynb,md:myst"' in (work / "jupytext.toml").read_text()
    cmd, env = cli.lab_command(work, ["--", "--no-browser"])
    assert cmd[1:3] == ["-m", "jupyterlab"] and f"--ServerApp.root_dir={work}" in cmd
    assert "--no-browser" in cmd and "--" not in cmd
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(work / ".jupyter")


def test_start_refuses_the_tracked_folder(capsys):
    assert main(["exercises", "start", "--no-lab", "--dir", str(nbk.EXERCISES)]) == 2
    assert "work on copies" in capsys.readouterr().err


def test_check_prints_scores(tmp_path, kernel_env, capsys):
    path = tmp_path / f"{SMALL}.md"
    nbk.write(nbk.fill(nbk.read(nbk.EXERCISES / f"{SMALL}.md"), nbk.solution_sections(SMALL)), path)
    assert main(["exercises", "check", str(path)]) == 0
    out = capsys.readouterr().out
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ")}
    for name in nbk.solution_sections(SMALL):
        assert "1.00 / 1  PASS" in lines[name]
    assert "3.00 / 3" in lines["total"]
    assert "SCORE" not in out and "PASS  " not in out          # one table, no score lines


def test_check_table_keeps_hints_whole():
    import io
    hint = ("n=30, d=5, K=3, eps=0.3: R^var_c exceeds R_c by 1.23e-01. For group 2, "
            "U_k^T (Z^T Diag(pi_k) Z) U_k is not diagonal: which basis makes a symmetric "
            "matrix diagonal?")
    res = {"tight_basis": {"score": 0.0, "points": 1.0, "hint": hint},
           "variational_compression": {"score": 1.0, "points": 1.0, "hint": ""}}
    buf = io.StringIO()
    assert cli._report("x.md", res, out=buf, width=70) == (1.0, 2.0)
    lines = buf.getvalue().splitlines()
    assert max(len(ln) for ln in lines) <= 70
    first = next(i for i, ln in enumerate(lines) if "tight_basis" in ln)
    col = lines[first].index("n=30")
    rest = lines[first + 1:first + 1 + len(lines) - 4]
    assert all(ln[:col].strip() == "" for ln in rest)               # wrapped under the column
    assert " ".join(ln.strip() for ln in [lines[first][col:]] + rest) == hint


def test_check_rejects_other_files(tmp_path, capsys):
    (tmp_path / "x.md").write_text("# just text\n")
    assert main(["exercises", "check", str(tmp_path / "x.md")]) == 2
    assert "not an exercise notebook" in capsys.readouterr().err
    assert main(["exercises", "check", str(tmp_path / "missing.md")]) == 2


def test_grade_writes_csv(tmp_path, capsys):
    """The grade command end to end on two students (the full class is in
    tests/test_exercises_grading.py)."""
    sub = tmp_path / "subs"
    (sub / "alice").mkdir(parents=True)
    (sub / "bob").mkdir()
    solved = nbk.fill(nbk.read(nbk.EXERCISES / f"{SMALL}.md"), nbk.solution_sections(SMALL))
    for c in solved.cells:                               # alice also answers the written question
        if c.cell_type == "markdown" and "written" in c.metadata.get("tags", []):
            c.source = "*Your answer:* it still compresses the p kept directions."
    nbk.write(solved, sub / "alice" / f"{SMALL}.ipynb")
    (sub / "bob" / f"{SMALL}.md").write_bytes((nbk.EXERCISES / f"{SMALL}.md").read_bytes())
    assert main(["exercises", "grade", str(sub), "--out", str(tmp_path / "out"),
                 "--csv", str(tmp_path / "g.csv"), "--jobs", "1", "--allow-unsandboxed"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    by = {r["student"]: r for r in rows}
    assert set(by) == {"alice", "bob"}
    names = list(nbk.solution_sections(SMALL))
    assert list(rows[0])[:3] == ["student", "notebook", "status"] and list(rows[0])[-6:] == [
        "exercises_total", "written_marked", "written_total", "total", "max_score", "percent"]
    assert all(float(by["alice"][n]) == 1.0 for n in names)
    assert float(by["alice"]["exercises_total"]) == 3.0 and by["alice"]["max_score"] == "4.0"
    assert all(float(by["bob"][n]) == 0.0 for n in names) and float(by["bob"]["total"]) == 0.0
    assert by["alice"]["written_marked"] == "0/1" and by["bob"]["written_marked"] == "1/1"
    assert (tmp_path / "out" / "feedback" / "alice.md").is_file()
    assert "wrote" in capsys.readouterr().out


def test_grade_refuses_without_a_sandbox_unless_asked(tmp_path, monkeypatch, capsys):
    """Where no sandbox can be had, grade says so before it starts and grades only with
    --allow-unsandboxed; grades.csv records the isolation each submission had."""
    monkeypatch.setenv("TOSTNP_GRADING_ISOLATION", "none")
    sub = tmp_path / "subs" / "bob"
    sub.mkdir(parents=True)
    (sub / f"{SMALL}.md").write_bytes((nbk.EXERCISES / f"{SMALL}.md").read_bytes())
    assert main(["exercises", "grade", str(tmp_path / "subs"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no sandbox" in err and "--allow-unsandboxed" in err and not (tmp_path / "o").exists()
    assert main(["exercises", "grade", str(tmp_path / "subs"), "--out", str(tmp_path / "o"),
                 "--jobs", "1", "--allow-unsandboxed"]) == 0
    assert "isolation of each submission: none" in capsys.readouterr().out
    rows = list(csv.DictReader(open(tmp_path / "o" / "grades.csv")))
    assert [r["isolation"] for r in rows] == ["none"]


def test_start_prints_the_command_that_works(tmp_path, monkeypatch, capsys):
    """The check command `start` prints is the one the user can run: through run.py when run.py
    started us (it sets TOSTNP_LAUNCHER), else this interpreter with -m tostnp."""
    monkeypatch.delenv("TOSTNP_LAUNCHER", raising=False)
    assert main(["exercises", "start", "--no-lab", "--dir", str(tmp_path / "a")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "check one with" in ln)
    assert " -m tostnp exercises check " in line
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    assert main(["exercises", "start", "--no-lab", "--dir", str(tmp_path / "b")]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "check one with" in ln)
    assert "check one with:  python3 run.py exercises check " in line
