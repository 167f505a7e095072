"""Reliability of checkpoints: one atomic unit, killed saves, crafted and mistyped files.

The kill loop runs a child process that saves checkpoints in a loop and kills it with SIGKILL at
random instants; after every kill the newest complete checkpoint must load, whole and consistent.
TOSTNP_KILL_RUNS sets the number of kills (20 here; run it with 100 for a longer check).
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest

from crafted import npy_bytes, rewrite_member

from tostnp.io.checkpoint import load_checkpoint, save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def _consistent(prefix):
    """Load and check that arrays, config and state all come from the same save."""
    params, cfg, extra, state = load_checkpoint(prefix)
    step = state["step"]
    assert cfg == {"v": step}
    np.testing.assert_array_equal(params["W"], np.full((64, 64), step, np.float32))
    np.testing.assert_array_equal(extra["m"], np.full(300, -step, np.float64))
    return step


def _save(prefix, step):
    # the padded state makes the JSON part of a save take a while, as a real run's does
    save_checkpoint(prefix, {"W": np.full((64, 64), step, np.float32)}, {"v": step},
                    extra_arrays={"m": np.full(300, -step, np.float64)},
                    state={"step": step, "pad": list(range(20000))})


# ---------------------------------------------------------------------------------------------
# item 1: the checkpoint is one atomic unit
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("crash_at", [0, 1])
def test_crash_at_each_rename_leaves_a_complete_checkpoint(tmp_path, monkeypatch, crash_at):
    prefix = str(tmp_path / "ckpt")
    _save(prefix, 1)
    real_replace, calls = os.replace, []

    def dying_replace(src, dst):  # the process "dies" at the crash_at-th rename of a save
        if len(calls) == crash_at:
            raise KeyboardInterrupt
        calls.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        _save(prefix, 2)
    monkeypatch.setattr(os, "replace", real_replace)
    assert _consistent(prefix) in (1, 2)


def test_temporaries_of_a_killed_save_are_cleaned(tmp_path):
    import subprocess
    import sys
    prefix = str(tmp_path / "ckpt")
    _save(prefix, 1)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    folder = tmp_path / f".tostnp-tmp-{dead.pid}-abcd_123"     # a killed writer's folder
    folder.mkdir()
    junk = [folder / "ckpt.npz", folder / "ckpt.json"]
    for j in junk:
        j.write_bytes(b"PK\x03\x04 half a checkpoint")
    # a user's own files that merely look like temporaries are never touched
    users = [tmp_path / ".ckpt.npz.abc123.tmp", tmp_path / ".ckpt.json.xyz.tmp"]
    for u in users:
        u.write_bytes(b"mine")
    _save(prefix, 2)
    assert sorted(os.listdir(tmp_path)) == sorted(["ckpt.json", "ckpt.npz"]
                                                  + [u.name for u in users])
    assert all(u.read_bytes() == b"mine" for u in users)
    assert _consistent(prefix) == 2


_CHILD = r"""
import sys, numpy as np
from tostnp.io.checkpoint import save_checkpoint
prefix, step = sys.argv[1], int(sys.argv[2])
print("ready", flush=True)
while True:
    step += 1
    save_checkpoint(prefix, {"W": np.full((64, 64), step, np.float32)}, {"v": step},
                    extra_arrays={"m": np.full(300, -step, np.float64)},
                    state={"step": step, "pad": list(range(20000))})
    print(step, flush=True)
"""


@pytest.mark.slow
def test_kill_during_save_loop(tmp_path):
    runs = int(os.environ.get("TOSTNP_KILL_RUNS", "20"))
    prefix = str(tmp_path / "ckpt")
    _save(prefix, 0)
    rnd = random.Random(12)
    step, losses = 0, []
    for run in range(runs):
        p = subprocess.Popen([sys.executable, "-c", _CHILD, prefix, str(step)],
                             stdout=subprocess.PIPE, text=True, env=_env())
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rnd.uniform(0.0, 0.15))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        done = [int(x) for x in out.split()]
        try:
            got = _consistent(prefix)
        except (ValueError, FileNotFoundError, AssertionError) as e:
            losses.append((run, repr(e)[:200]))
            break
        # never older than the last save the child reported as finished
        assert got >= (done[-1] if done else step), (run, got, done[-1:])
        step = got
    assert losses == [], f"{len(losses)} of {runs} kills lost the checkpoint: {losses}"
    _save(prefix, step + 1)  # the next save cleans whatever the kills left behind
    assert sorted(os.listdir(tmp_path)) == ["ckpt.json", "ckpt.npz"]


# ---------------------------------------------------------------------------------------------
# items 5 and 6: crafted or mistyped checkpoints are refused before anything is allocated
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny trained vision run and a tiny LM run (2 updates each), made once."""
    from tostnp.__main__ import main
    d = tmp_path_factory.mktemp("runs")
    v, lm = str(d / "v"), str(d / "lm")
    tiny = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress", "--steps", "4"]
    assert main(["train", "vision", "--out", v, "--stop-at", "2", "--batch-size", "32"] + tiny) == 0
    text = d / "t.txt"
    text.write_text("hello world, hello tokens. " * 40)
    assert main(["train", "lm", "--text", str(text), "--out", lm, "--stop-at", "2",
                 "--block-size", "16", "--batch-size", "4"] + tiny) == 0
    return v, lm


def _craft(src_run, dst, model=None, add=None, drop=None, config=None):
    """Copy a run's checkpoint with its model config / arrays changed (save_checkpoint writes
    whatever it is given: it is the crafting tool)."""
    params, cfg, extra, state = load_checkpoint(os.path.join(src_run, "checkpoint"))
    cfg = json.loads(json.dumps(cfg))
    if model:
        cfg["model"].update(model)
    if config:
        cfg.update(config)
    params.update(add or {})
    for k in drop or ():
        params.pop(k)
    os.makedirs(dst, exist_ok=True)
    save_checkpoint(os.path.join(dst, "checkpoint"), params, cfg, extra_arrays=extra, state=state)
    return dst


@pytest.mark.parametrize("change,needle", [
    ({"width": 10**6}, "width"),            # would allocate 4e12 bytes
    ({"num_classes": 10**9}, "num_classes"),
    ({"depth": 5000}, "depth"),
    ({"width": 32}, "parameters"),          # disagrees with the arrays
    ({"width": "8"}, "width"),              # wrong type
    ({"ln_eps": -1.0}, "ln_eps"),
    ({"pool": ["cls"]}, "pool"),
    ({"heads": 2}, "heads"),                # unknown key
])
def test_crafted_model_config_refused_by_load_model(runs, tmp_path, change, needle):
    from tostnp.io import load_model
    bad = _craft(runs[0], str(tmp_path / "bad"), model=change)
    with pytest.raises(ValueError, match=needle):
        load_model(bad)


def test_unknown_and_missing_parameters_refused(runs, tmp_path):
    from tostnp.io import load_model
    bad = _craft(runs[0], str(tmp_path / "a"), add={"evil": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="evil"):
        load_model(bad)
    bad = _craft(runs[0], str(tmp_path / "b"), drop=["head.W"])
    with pytest.raises(ValueError, match="head.W"):
        load_model(bad)



def test_compressed_member_refused(tmp_path):
    prefix = str(tmp_path / "c")
    npz, _ = save_checkpoint(prefix, {"W": np.zeros(3, np.float32)}, {})
    # 64 MB of zeros deflate to ~64 KB: a "zip bomb" in miniature
    rewrite_member(npz, "params/Z.npy", npy_bytes(np.zeros(8 << 20)), zipfile.ZIP_DEFLATED)
    assert os.path.getsize(npz) < 1 << 20
    with pytest.raises(ValueError, match="is compressed"):
        load_checkpoint(prefix)


def test_lying_npy_header_and_bad_members_refused(tmp_path):
    prefix = str(tmp_path / "c")
    npz, _ = save_checkpoint(prefix, {"W": np.zeros(3, np.float32)}, {})
    header = npy_bytes(np.zeros(1))
    lie = header.replace(b"(1,)", b"(1000000000,)".ljust(4))  # declares 8 GB, holds 8 bytes
    rewrite_member(npz, "params/W.npy", lie)
    with pytest.raises(ValueError, match="params/W"):
        load_checkpoint(prefix)
    npz, _ = save_checkpoint(prefix, {"W": np.zeros(3, np.float32)}, {})
    rewrite_member(npz, "params/H.npy", npy_bytes(np.zeros(3, np.float16)))
    with pytest.raises(ValueError, match="float16"):
        load_checkpoint(prefix)
    npz, _ = save_checkpoint(prefix, {"W": np.zeros(3, np.float32)}, {})
    rewrite_member(npz, "notes.txt", b"hello")
    with pytest.raises(ValueError, match="notes.txt"):
        load_checkpoint(prefix)
    npz, _ = save_checkpoint(prefix, {"W": np.zeros(1000, np.float32)}, {})
    with pytest.raises(ValueError, match="max_bytes"):
        load_checkpoint(prefix, max_bytes=1000)


def _cli(args, capsys):
    from tostnp.__main__ import main
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    return code, err


def test_lm_checkpoint_resumed_as_vision_is_refused(runs, capsys):
    code, err = _cli(["train", "vision", "--out", runs[1], "--resume", "--no-progress"], capsys)
    assert code == 2 and err.startswith("error:") and "'lm'" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_resume_refusals_exit_2_like_evaluate(runs, tmp_path, capsys):
    bad = _craft(runs[0], str(tmp_path / "bad"), model={"width": 32})
    for args in (["train", "vision", "--out", bad, "--resume", "--no-progress"],
                 ["evaluate", "--checkpoint", bad]):
        code, err = _cli(args, capsys)
        assert code == 2 and err.startswith("error:") and "parameters" in err, (args, err)
        assert len(err.strip().splitlines()) == 1
    # a truncated checkpoint
    trunc = _craft(runs[0], str(tmp_path / "trunc"))
    npz = os.path.join(trunc, "checkpoint.npz")
    raw = open(npz, "rb").read()
    open(npz, "wb").write(raw[: len(raw) // 2])
    code, err = _cli(["train", "vision", "--out", trunc, "--resume", "--no-progress"], capsys)
    assert code == 2 and "corrupted or truncated" in err and len(err.strip().splitlines()) == 1
    # resume state that does not fit the schedule
    params, cfg, extra, state = load_checkpoint(os.path.join(runs[0], "checkpoint"))
    save_checkpoint(os.path.join(str(tmp_path / "st"), "checkpoint"), params, cfg,
                    extra_arrays=extra, state=dict(state, step=10**9))
    code, err = _cli(["train", "vision", "--out", str(tmp_path / "st"), "--resume",
                      "--no-progress"], capsys)
    assert code == 2 and "step" in err and len(err.strip().splitlines()) == 1
