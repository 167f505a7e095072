"""`python -m tostnp verify` passes on the real code and FAILs (exit 1) on a broken identity."""
import subprocess
import sys
from pathlib import Path

import pytest

import tostnp.math.variational
from tostnp.__main__ import main

ROOT = Path(__file__).resolve().parents[1]


def test_verify_passes_in_process(capsys):
    assert main(["verify", "--seed", "1", "--draws", "5"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.rstrip().endswith(("PASS", "FAIL"))]
    assert len(rows) >= 10
    assert all(line.rstrip().endswith("PASS") for line in rows)
    assert "FAIL" not in out


@pytest.mark.slow
def test_verify_command_line_exit_status():
    proc = subprocess.run([sys.executable, "-m", "tostnp", "verify"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout and "FAIL" not in proc.stdout


def test_verify_fails_on_broken_gradient(monkeypatch, capsys):
    # A gradient off by a factor 2 must be caught: the report can fail.
    real = tostnp.math.variational.variational_compression_grad
    monkeypatch.setattr(tostnp.math.variational, "variational_compression_grad",
                        lambda *a, **k: 2.0 * real(*a, **k))
    assert main(["verify", "--draws", "2"]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.rstrip().endswith("FAIL")]
    assert any("grad R^var_c" in line for line in failed)
    assert any("tssa_step" in line for line in failed)
