"""Readers beside a live writer, and nothing touched outside the run directory (issue: round 3).

A writer process saves checkpoints as fast as it can while this process reads the same prefix
100 times: every read must return one whole save (the arrays and the metadata of one step), never
a false "corrupted". The lock file is never written through a link, nor created where a dangling
link points.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tostnp.io.checkpoint import load_checkpoint, save_checkpoint
from tostnp.io.runlock import UnsafeLockFile, run_lock, LOCK_NAME

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from test_reliability_checkpoint import _CHILD as _WRITER    # saves as fast as it can


def test_100_reads_beside_a_live_writer_see_whole_saves(tmp_path):
    prefix = str(tmp_path / "checkpoint")
    save_checkpoint(prefix, {"W": np.full((96, 96), 1, np.float32)}, {"v": 1},
                    extra_arrays={"m": np.full(5000, -1, np.float64)},
                    state={"step": 1, "pad": list(range(5000))})
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, prefix, "1"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        seen = set()
        for _ in range(100):
            params, config, extra, state = load_checkpoint(prefix)   # never raises
            step = state["step"]
            assert config == {"v": step}
            assert np.all(params["W"] == step) and np.all(extra["m"] == -step)
            seen.add(step)
        assert writer.poll() is None, "the writer died"
        assert len(seen) > 5, f"the writer did not overlap the reads: steps {sorted(seen)}"
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt", reason="POSIX links")
def test_lock_never_writes_through_a_link(tmp_path):
    pytest.importorskip("fcntl")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(victim, run / LOCK_NAME)
    with pytest.raises(UnsafeLockFile, match="not a regular file"):
        with run_lock(str(run)):
            pass
    assert victim.read_text() == "precious\n"
    # a dangling link: its target is not created
    os.unlink(run / LOCK_NAME)
    target = tmp_path / "created-through-the-link"
    os.symlink(target, run / LOCK_NAME)
    with pytest.raises(UnsafeLockFile):
        with run_lock(str(run)):
            pass
    assert not target.exists()
    # a FIFO in its place: refused at once, no hang
    os.unlink(run / LOCK_NAME)
    os.mkfifo(run / LOCK_NAME)
    t = time.monotonic()
    with pytest.raises(UnsafeLockFile):
        with run_lock(str(run)):
            pass
    assert time.monotonic() - t < 5


@pytest.mark.skipif(os.name == "nt", reason="POSIX links")
def test_train_refuses_a_linked_lock_in_one_line(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = tmp_path / "run"
    run.mkdir()
    os.symlink(victim, run / LOCK_NAME)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "tostnp", "train", "vision", "--out", str(run),
                        "--steps", "2", "--overwrite"], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "not a regular file" in r.stderr
    assert victim.read_text() == "precious\n"


def test_figures_keep_out_of_a_folder_a_training_holds(tmp_path):
    from tostnp.__main__ import main
    run = str(tmp_path / "run")
    assert main(["train", "vision", "--out", run, "--steps", "2", "--batch-size", "16",
                 "--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]) == 0
    before = sorted(os.listdir(run))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\n"
                               "from tostnp.io.runlock import run_lock\n"
                               "with run_lock(sys.argv[1], 'train'):\n"
                               "    print('held', flush=True); time.sleep(120)", run],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for f in ("memberships.png", "compression.png"):
            os.unlink(os.path.join(run, f))
        r = subprocess.run([sys.executable, "-m", "tostnp", "figures", "--checkpoint", run],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-1500:]
        assert "being written by" in r.stderr
        assert sorted(os.listdir(run)) == sorted(f for f in before
                                                  if f not in ("memberships.png",
                                                               "compression.png"))
        assert os.path.isfile(os.path.join(run + "-figures", "memberships.png"))
        r = subprocess.run([sys.executable, "-m", "tostnp", "figures", "--checkpoint", run,
                            "--out", run], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "in use" in r.stderr and "Traceback" not in r.stderr
    finally:
        holder.kill()
        holder.wait()
