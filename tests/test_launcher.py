"""How students start tostnp: run.py (install on first need, exec into the command so Ctrl-C and
the exit status are tostnp's own), and the command lines the CLI prints as advice, which must
name the way the process was started."""
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tostnp.cli.options import how_to_run

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra):
    env = dict(os.environ)
    env.pop("TOSTNP_LAUNCHER", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    env.update(extra)
    return env


# ---------------------------------------------------------------------------------------------
# how_to_run: the prefix of every printed command
# ---------------------------------------------------------------------------------------------
def test_hint_under_run_py(monkeypatch):
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    assert how_to_run("train", "vision", "--out", "runs/a b", "--resume") == \
        "python3 run.py train vision --out 'runs/a b' --resume"


def test_hint_under_console_script(monkeypatch):
    monkeypatch.delenv("TOSTNP_LAUNCHER", raising=False)
    monkeypatch.setattr(sys, "argv", ["/some/venv/bin/tostnp", "train"])
    assert how_to_run("verify") == "tostnp verify"


def test_hint_under_python_m_runs_as_printed(monkeypatch, tmp_path):
    """Started as ``<this python> -m tostnp``: the printed prefix, run from the same directory,
    starts tostnp (not some other python3 on PATH that lacks the packages)."""
    monkeypatch.delenv("TOSTNP_LAUNCHER", raising=False)
    monkeypatch.setattr(sys, "argv", [str(ROOT / "tostnp" / "__main__.py")])
    line = how_to_run("verify", "--help")
    assert line.endswith(" -m tostnp verify --help") and "run.py" not in line
    r = subprocess.run(shlex.split(line), capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 0 and "verify" in r.stdout, r.stderr


def test_parser_errors_and_help_name_the_launcher():
    env = _env(TOSTNP_LAUNCHER="python3 run.py")
    r = subprocess.run([sys.executable, "-m", "tostnp", "train", "vison"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 2 and "see: python3 run.py train --help" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "tostnp", "experiment", "--help"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert "python3 run.py experiment needle --quick" in r.stdout
    assert "python -m tostnp" not in r.stdout


# ---------------------------------------------------------------------------------------------
# run.py: a copy beside a ready "venv" (a wrapper around this Python), so no install happens
# ---------------------------------------------------------------------------------------------
def _launcher_copy(tmp_path) -> Path:
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_py", ROOT / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    home = tmp_path / "clone"
    home.mkdir()
    for f in ["run.py", "pyproject.toml", *(p.name for p in ROOT.glob("requirements*.txt"))]:
        (home / f).write_bytes((ROOT / f).read_bytes())
    run_py.ROOT, run_py.VENV = home, home / ".venv"
    py = run_py.venv_python()
    py.parent.mkdir(parents=True)
    py.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    py.chmod(0o755)
    for name in run_py.included("requirements-book.txt"):
        (run_py.VENV / f".tostnp-{name}.stamp").write_text(run_py.stamp_of(name))
    return home


@pytest.mark.skipif(os.name != "posix", reason="run.py execs into the command on POSIX")
def test_run_py_passes_status_and_names_itself(tmp_path):
    home = _launcher_copy(tmp_path)
    r = subprocess.run([sys.executable, "run.py", "train", "vison"], cwd=home,
                       capture_output=True, text=True, env=_env(), timeout=120)
    assert r.returncode == 2 and "see: python3 run.py train --help" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "installing" not in r.stdout


@pytest.mark.slow
@pytest.mark.skipif(os.name != "posix", reason="signals")
@pytest.mark.parametrize("group", [False, True], ids=["kill", "ctrl-c"])
def test_run_py_sigint_ends_with_the_resume_line(tmp_path, group):
    """SIGINT to run.py (kill -INT, or Ctrl-C: the whole process group): the package's own
    'interrupted ... resume with: python3 run.py ...' line, exit 130, no traceback."""
    home = _launcher_copy(tmp_path)
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "run.py", "train", "vision", "--out", str(out),
                          "--steps", "3000", "--checkpoint-every", "0", "--eval-every", "0",
                          "--width", "8", "--depth", "1", "--heads", "2", "--no-progress"],
                         cwd=home, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env(), start_new_session=True)
    metrics = out / "metrics.jsonl"
    t0 = time.time()
    while time.time() - t0 < 120:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    if group:
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert f"resume with: python3 run.py train vision --out {out} --resume" in err, err[-2000:]


# ---------------------------------------------------------------------------------------------
# Ctrl-C outside the training loop's own handling: one line saying how to go on, exit 130
# ---------------------------------------------------------------------------------------------
def _interrupting(*a, **k):
    raise KeyboardInterrupt


def test_ctrl_c_in_any_command_says_how_to_start_again(monkeypatch, capsys):
    from tostnp.__main__ import main
    from tostnp.cli import verify_command
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    monkeypatch.setattr(verify_command, "run", _interrupting)
    assert main(["verify"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "interrupted; start again with: python3 run.py verify"


def test_second_ctrl_c_in_training_says_resume_when_a_checkpoint_exists(tmp_path, monkeypatch,
                                                                       capsys):
    from tostnp.__main__ import main
    from tostnp.cli import train_command
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.setattr(train_command, "run", _interrupting)
    assert main(["train", "vision", "--out", str(out)]) == 130
    assert "start again with: python3 run.py train vision --out" in capsys.readouterr().err
    (out / "checkpoint.npz").write_bytes(b"")      # only its presence is looked at
    assert main(["train", "vision", "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip() == \
        f"interrupted; resume with: python3 run.py train vision --out {out} --resume"
