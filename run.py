#!/usr/bin/env python3
"""Quick-start launcher: needs only Python 3.11 to 3.14 (and PyPI the first time).

    python3 run.py train vision      # any tostnp command: train, evaluate, verify, sample, ...
    python3 run.py test              # the whole test suite (pytest; extra args pass through)
    python3 run.py exercises start   # the exercise notebooks in JupyterLab
    python3 run.py book              # build the book into _build/html (every page executed)

On first use it creates ``.venv`` and installs, pinned, only what the command needs:
requirements.txt (training, evaluation, verify) for the tostnp commands, plus
requirements-test.txt for ``test``, requirements-exercises.txt for ``exercises`` and
requirements-book.txt for ``book``; tostnp itself is installed editable. A file that changes
is installed again. After that, ``.venv/bin/python -m tostnp ...`` works directly too.
"""
from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
MIN_PYTHON = (3, 11)
# command -> the requirement file it needs (each one includes requirements.txt)
STACKS = {"test": "requirements-test.txt", "exercises": "requirements-exercises.txt",
          "book": "requirements-book.txt"}
LAUNCHER_ENV = "TOSTNP_LAUNCHER"   # read by tostnp.cli.options.how_to_run for the hints it prints


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def included(name: str) -> list[str]:
    """``name`` and the requirement files it includes (``-r``), in order."""
    out = [name]
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("-r "):
            out += [f for f in included(line[3:].strip()) if f not in out]
    return out


def stamp_of(reqfile: str) -> str:
    h = hashlib.sha256()
    for name in included(reqfile) + ["pyproject.toml"]:
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_venv(reqfile: str) -> Path:
    """The venv's Python, with ``reqfile`` (and tostnp, editable) installed."""
    py = venv_python()
    stamp_file = VENV / f".tostnp-{reqfile}.stamp"
    if py.exists() and stamp_file.exists() and stamp_file.read_text() == stamp_of(reqfile):
        return py
    if not py.exists():
        print(f"[run.py] creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print(f"[run.py] installing {reqfile} and tostnp (once; a minute or two) ...", flush=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["-r", str(ROOT / reqfile)], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)
    for name in included(reqfile):          # requirements.txt is in with every other file
        (VENV / f".tostnp-{name}.stamp").write_text(stamp_of(name))
    return py


def launcher() -> str:
    """How this script was started, for the commands tostnp prints as advice."""
    script = sys.argv[0] if sys.argv and sys.argv[0] else "run.py"
    here = Path.cwd()
    if Path(script).resolve() == ROOT / "run.py":
        try:
            script = os.path.relpath(ROOT / "run.py", here)
        except ValueError:                 # another drive (Windows)
            script = str(ROOT / "run.py")
    return f"{'py' if os.name == 'nt' else 'python3'} {shlex.quote(script)}"


def command_for(argv: list[str], py: Path) -> tuple[list[str], str | None]:
    """(command, working directory): pytest runs in the repository, tostnp in the caller's."""
    if argv[0] == "test":
        return [str(py), "-m", "pytest", *argv[1:]], str(ROOT)
    if argv[0] == "book":
        return ["bash", str(ROOT / ".ci" / "build-book"), *argv[1:]], str(ROOT)
    return [str(py), "-m", "tostnp", *argv], None


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    if sys.version_info < MIN_PYTHON:
        print(f"tostnp needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}, this is "
              f"{sys.version.split()[0]}", file=sys.stderr)
        return 2
    try:
        py = ensure_venv(STACKS.get(argv[0], "requirements.txt"))
    except KeyboardInterrupt:
        print("[run.py] interrupted while installing; the same command starts the install again",
              file=sys.stderr)
        return 130
    except subprocess.CalledProcessError as e:
        print(f"[run.py] the install failed (exit status {e.returncode}); see pip's message above",
              file=sys.stderr)
        return 1
    cmd, cwd = command_for(argv, py)
    env = dict(os.environ)
    if argv[0] not in ("test", "book"):
        env[LAUNCHER_ENV] = launcher()
    if argv[0] == "book":
        env["VENV"] = str(VENV)
    if os.name == "posix":
        # Become the command (exec): Ctrl-C, SIGTERM and the exit status reach and come from
        # tostnp itself, with no launcher in between to print a traceback or lose a signal.
        if cwd:
            os.chdir(cwd)
        if argv[0] not in ("test", "book"):
            # Ctrl-C ignored across the exec until tostnp turns it back on (tostnp/_startup.py):
            # one pressed while Python itself starts would print CPython's traceback
            import signal
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            env["TOSTNP_SIGINT_DEFERRED"] = "1"
        sys.stdout.flush()
        os.execve(cmd[0] if os.path.isabs(cmd[0]) else _which(cmd[0]), cmd, env)
    # Windows: Ctrl-C reaches every process of the console; wait for the command's own ending.
    proc = subprocess.Popen(cmd, cwd=cwd, env=env)
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def _which(name: str) -> str:
    import shutil
    path = shutil.which(name)
    if path is None:
        print(f"[run.py] {name} is not installed", file=sys.stderr)
        sys.exit(2)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
