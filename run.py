#!/usr/bin/env python3
"""Quick-start launcher: needs only Python 3.10+ (and PyPI the first time).

    python3 run.py train vision      # any `python -m tostnp ...` command
    python3 run.py test              # the whole test suite (pytest; extra args pass through)

On first use (or when requirements.txt / pyproject.toml change) it creates ``.venv`` and installs
the pinned ``requirements.txt`` plus tostnp itself (editable). Then it runs the command with the
venv's Python. After that, ``.venv/bin/python -m tostnp ...`` works directly too.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STAMP = VENV / ".tostnp-installed"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def wanted_stamp() -> str:
    h = hashlib.sha256()
    for name in ("requirements.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_venv() -> Path:
    if sys.version_info < (3, 10):
        sys.exit(f"tostnp needs Python >= 3.10, this is {sys.version.split()[0]}")
    py = venv_python()
    stamp = wanted_stamp()
    if py.exists() and STAMP.exists() and STAMP.read_text() == stamp:
        return py
    if not py.exists():
        print(f"[run.py] creating {VENV} ...", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("[run.py] installing requirements.txt and tostnp (first run: one to two minutes) ...",
          flush=True)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    subprocess.run(pip + ["-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)
    STAMP.write_text(stamp)
    return py


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    py = ensure_venv()
    if argv[0] == "test":
        cmd = [str(py), "-m", "pytest", *argv[1:]]
    else:
        cmd = [str(py), "-m", "tostnp", *argv]
    # how the user started us, for the commands tostnp prints (tostnp.cli.options.prog)
    env = dict(os.environ, TOSTNP_PROG=" ".join(
        ["python3" if shutil.which("python3") else sys.executable, sys.argv[0]]))
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
