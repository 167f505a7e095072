"""Windows and macOS, as far as this machine can tell: the main commands run with ``fcntl``,
``resource`` and ``termios`` unimportable and the POSIX-only signals and process-group calls gone
(tests/noposix.py), each command in its own process, and every Python process it starts (the
grader's child) under the same rules. Real Windows and macOS run the quick tests on GitHub."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress", "--eval-every", "0"]


@pytest.fixture(scope="module")
def noposix(tmp_path_factory):
    """The launcher, copied out of the repository (the grader hides the repository from its
    child, which is started through the launcher too)."""
    d = tmp_path_factory.mktemp("noposix")
    shutil.copy(ROOT / "tests" / "noposix.py", d)
    return d / "noposix.py"


def _run(noposix, *args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([sys.executable, str(noposix), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env, cwd=cwd or ROOT)
    return r


def _ok(r):
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    return r.stdout


def test_the_simulation_blocks_what_windows_lacks(noposix):
    r = _run(noposix, "-c", "import fcntl")
    assert r.returncode != 0 and "No module named 'fcntl'" in r.stderr
    probe = ("import os, signal, subprocess, sys\n"
             "assert not hasattr(signal, 'SIGKILL') and not hasattr(signal, 'SIGUSR1')\n"
             "assert not hasattr(os, 'killpg') and hasattr(signal, 'SIGTERM')\n"
             "r = subprocess.run([sys.executable, '-S', '-E', '-c', 'import resource'])\n"
             "sys.exit(0 if r.returncode else 3)")        # a grandchild is blocked as well
    _ok(_run(noposix, "-c", probe))


@pytest.mark.slow
def test_vision_train_evaluate_convert(noposix, tmp_path):
    run = tmp_path / "v"
    out = _ok(_run(noposix, "-m", "tostnp", "train", "vision", "--steps", "3", "--batch-size",
                   "32", "--stem", "conv", "--pos", "fourier", "--gelu", "erf", "--out", run, *TINY))
    acc = next(ln for ln in out.splitlines() if ln.startswith("test accuracy:")).split()[2]
    assert f"test accuracy {acc} " in _ok(_run(noposix, "-m", "tostnp", "evaluate",
                                               "--checkpoint", run))
    st = tmp_path / "v.safetensors"
    _ok(_run(noposix, "-m", "tostnp", "convert", run, st))
    _ok(_run(noposix, "-m", "tostnp", "convert", st, tmp_path / "back", "--image-size", "8"))
    assert f"test accuracy {acc} " in _ok(_run(noposix, "-m", "tostnp", "evaluate",
                                               "--checkpoint", tmp_path / "back"))
    _ok(_run(noposix, "-m", "tostnp", "train", "vision", "--seeds", "0-1", "--steps", "2",
             "--batch-size", "32", "--out", tmp_path / "seeds", *TINY))
    summary = json.loads((tmp_path / "seeds" / "seeds.json").read_text())
    assert summary["loadavg_1min_end"] is None                  # no os.getloadavg there


@pytest.mark.slow
def test_lm_train_sample_and_bench(noposix, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("hello world, hello tokens. " * 40)
    run = tmp_path / "lm"
    _ok(_run(noposix, "-m", "tostnp", "train", "lm", "--text", text, "--steps", "3", "--out",
             run, "--block-size", "16", "--batch-size", "4", "--word-rate-samples", "0", *TINY))
    s = _ok(_run(noposix, "-m", "tostnp", "sample", "--checkpoint", run, "--prompt", "hel",
                 "--length", "12", "--seed", "1"))
    assert s.startswith("hel") and len(s.rstrip("\n")) == 15
    _ok(_run(noposix, "-m", "tostnp", "bench", "--train", "--quick", "--repeats", "1",
             "--benches", "lm", "--no-progress", "--out", tmp_path / "b"))
    r = json.loads((tmp_path / "b" / "bench_train_cpu.json").read_text())["train"]["lm"]
    assert r["minflt_per_step"] is None and r["steps_per_s"] > 0      # no getrusage there


@pytest.mark.slow
def test_exercises_check(noposix, tmp_path):
    pytest.importorskip("jupytext")
    from tostnp.exercises import notebook as nbk
    stem = "04_variational"                             # the quickest notebook
    path = tmp_path / f"{stem}.md"
    nbk.write(nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), nbk.solution_sections(stem)), path)
    r = _run(noposix, "-m", "tostnp", "exercises", "check", path)
    out = _ok(r)
    assert "no `resource` module" in r.stderr                 # the missing memory cap is said
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith("  ")}
    for name in nbk.solution_sections(stem):
        assert "1.00 / 1  PASS" in lines[name]


def test_no_process_is_probed_with_kill_on_windows(tmp_path, monkeypatch):
    """On Windows os.kill(pid, 0) is TerminateProcess, not a probe: there the cleaner of stale
    temporaries keeps every other writer's temporary and never calls os.kill."""
    from tostnp.io.atomic import clean_stale_temporaries
    other = subprocess.Popen([sys.executable, "-c", "pass"])
    other.wait()                                              # a writer that is gone
    (tmp_path / f".tostnp-tmp-{other.pid}-xyz_9abc").mkdir()
    theirs = tmp_path / f".tostnp-tmp-{other.pid}-xyz_9abc" / "curves.png"
    theirs.write_bytes(b"")
    (tmp_path / f".tostnp-tmp-{os.getpid()}-abcdefgh").mkdir()
    mine = tmp_path / f".tostnp-tmp-{os.getpid()}-abcdefgh" / "checkpoint.npz"   # ours, failed
    mine.write_bytes(b"")

    def kill(pid, sig):
        raise AssertionError(f"os.kill({pid}, {sig}) would end that process on Windows")
    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(os, "name", "nt")
    removed = clean_stale_temporaries(tmp_path)
    monkeypatch.undo()
    assert removed == [str(mine)] and theirs.exists()
    assert clean_stale_temporaries(tmp_path) == [str(theirs)]  # on POSIX: its writer is gone
