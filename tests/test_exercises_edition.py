"""The student edition works as its README prints it: built to a folder of its own, its own
`python3 run.py exercises check` and `python3 run.py exercises start --no-browser` run there.

run.py would create .venv and pip-install the first time; offline, the test gives the edition a
.venv whose site-packages is this interpreter's, with the stamps run.py writes after an install
(computed by the edition's own run.py, so every requirements file it names must be there)."""
from __future__ import annotations

import importlib.util
import os
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

from tostnp.__main__ import main  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

SMALL = "04_variational"


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


def test_the_editions_check_runs_from_the_edition(edition):
    nbk.write(nbk.fill(nbk.read(nbk.EXERCISES / f"{SMALL}.md"), nbk.solution_sections(SMALL)),
              edition / f"{SMALL}.md")
    r = subprocess.run([sys.executable, "run.py", "exercises", "check", f"{SMALL}.md"],
                       cwd=edition, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "installing" not in r.stdout + r.stderr               # the venv was used as it is
    assert "3.00 / 3" in r.stdout and "SCORE" not in r.stdout


def test_the_editions_start_without_a_browser(edition):
    """start copies the notebooks, starts JupyterLab without a browser, prints its address;
    stopped at once (SIGINT, as Ctrl-C)."""
    log = edition / "lab.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "run.py", "exercises", "start", "--no-browser",
                                 "--", "--ServerApp.port=0", "--ServerApp.token=t"],
                                cwd=edition, env=_env(), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
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
    assert sorted(p.name for p in (edition / "my-exercises").glob("[0-9][0-9]_*.md")) == \
        sorted(p.name for p in nbk.notebooks())
