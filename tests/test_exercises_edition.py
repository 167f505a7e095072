"""The student edition works as its README prints it: built to a folder of its own, every
command its README.md (exercises/STUDENT.md) prints is read from that page and run there, in its
order: `python3 run.py exercises start` (in its no-browser form) and `python3 run.py exercises
check my-exercises/...` on the notebook start copied. A command added to the page is run too.

run.py would create .venv and pip-install the first time; offline, the test gives the edition a
.venv whose site-packages is this interpreter's, with the stamps run.py writes after an install
(computed by the edition's own run.py, so every requirements file it names must be there)."""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import pytest

pytest.importorskip("jupytext")
pytest.importorskip("nbclient")

from page_commands import page_commands, split_prefix  # noqa: E402
from tostnp.__main__ import main  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

def _run_py(edition: Path):
    spec = importlib.util.spec_from_file_location("_edition_run_py", edition / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _installed_venv(edition: Path) -> None:
    """``edition/.venv`` as run.py leaves it after installing requirements-exercises.txt."""
    run_py = _run_py(edition)
    v = edition / ".venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(v)
    rel = Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    site = v / rel
    site.rmdir()
    site.symlink_to(sysconfig.get_path("purelib"), target_is_directory=True)
    reqfile = run_py.STACKS["exercises"]
    for name in run_py.included(reqfile):           # raises if the edition lacks one
        (v / f".tostnp-{name}.stamp").write_text(run_py.stamp_of(name))
    assert Path(run_py.ensure_venv.__globals__["venv_python"]()).exists()


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("edition") / "student"
    assert main(["exercises", "build", "--student", str(out)]) == 0
    if os.name == "nt" or sys.prefix == sys.base_prefix:
        pytest.skip("needs a POSIX venv to lend its site-packages")
    _installed_venv(out)
    return out


def _env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOSTNP_LAUNCHER")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def test_the_edition_ships_what_its_run_py_installs(edition):
    run_py = _run_py(edition)
    for name in ["pyproject.toml"] + run_py.included(run_py.STACKS["exercises"]):
        assert (edition / name).is_file(), name
    assert "array-api-strict" in (edition / "requirements-exercises.txt").read_text()


def _start(edition: Path, args: list[str]) -> str:
    """Run a printed ``exercises start`` in its no-browser form (``--no-browser`` added where the
    page did not print it): JupyterLab starts and prints its address; then it is stopped
    (SIGINT, as Ctrl-C). Returns what it printed."""
    i = args.index("--") if "--" in args else len(args)
    if "--no-browser" not in args[:i]:
        args = args[:i] + ["--no-browser"] + args[i:]
    log = edition / "lab.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "run.py", *args], cwd=edition, env=_env(),
                                stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if "http://" in log.read_text() and "token=" in log.read_text():
                break
            time.sleep(0.5)
        text = log.read_text()
        assert proc.poll() is None, text
        assert "http://" in text, text
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
    return text


def _run(edition: Path, args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=edition, env=_env(),
                          capture_output=True, text=True, timeout=600)


def _check(edition: Path, args: list[str]) -> None:
    """A printed ``exercises check`` on the notebooks as ``start`` copied them (every exercise
    still a TODO: each scores 0, with a hint, exit 1), then on the same files with the reference
    solutions written in, as a student who did the work has them (full marks, exit 0)."""
    files = [edition / a for a in args[2:] if not a.startswith("-")]
    assert files and all(f.is_file() for f in files), f"check names a file start did not copy: {args}"
    r = _run(edition, args)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "Traceback" not in out and "SCORE" not in out and "installing" not in out, out
    assert _totals(r.stdout) and all(got == 0 for got, _ in _totals(r.stdout)), out
    assert "not written yet" in r.stdout, out
    for f in files:
        nbk.write(nbk.fill(nbk.read(f), nbk.solution_sections(f.stem)), f)
    r = _run(edition, args)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "Traceback" not in out and "SCORE" not in out and "installing" not in out, out
    assert len(_totals(r.stdout)) == len(files), out
    assert all(got == most > 0 for got, most in _totals(r.stdout)), out


def _totals(text: str) -> list[tuple[float, float]]:
    """(score, out of) of each notebook's ``total`` row of check's table."""
    return [(float(a), float(b)) for a, b in re.findall(r"^\s*total\s+([\d.]+) / ([\d.]+)", text, re.M)]


def test_the_editions_readme_commands_run_there_as_printed(edition):
    """Every command the edition's README.md (exercises/STUDENT.md) prints, read from it and
    run in its order inside the edition: ``start`` (no browser) copies the notebooks into
    my-exercises/, ``check`` scores one of them; any other command exits 0."""
    readme = edition / "README.md"
    assert readme.read_text(encoding="utf-8") == (nbk.EXERCISES / "STUDENT.md").read_text(
        encoding="utf-8")
    done, kinds = set(), set()
    for argv in page_commands([readme]):
        prefix, args = split_prefix(argv)
        assert prefix == ["python3", "run.py"], f"the edition has only run.py: {' '.join(argv)}"
        key = tuple(args)
        if args[:2] == ["exercises", "start"]:
            key = ("start", *[a for a in args[2:] if a != "--no-browser"])
        if key in done:
            continue
        done.add(key)
        if args[:2] == ["exercises", "start"]:
            _start(edition, args)
            assert sorted(p.name for p in (edition / "my-exercises").glob("[0-9][0-9]_*.md")) \
                == sorted(p.name for p in nbk.notebooks())
        elif args[:2] == ["exercises", "check"]:
            _check(edition, args)
        else:
            r = _run(edition, args)
            assert r.returncode == 0, f"{' '.join(argv)}: {r.stdout + r.stderr}"
        kinds.add(tuple(args[:2]))
    assert {("exercises", "start"), ("exercises", "check")} <= kinds
