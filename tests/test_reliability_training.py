"""Reliability of training runs and the command line: interruption, full disks, torn metrics,
divergence, and options that must be refused in one line (exit 2, never a traceback)."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tostnp.io.checkpoint import load_checkpoint
from tostnp.data import load_digits_split
from tostnp.models import get_vision_config
from tostnp.train.tasks import VisionTask
from tostnp.train.loop import TrainConfig, train, read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    return env


def _cli(args, capsys):
    """Exit status and stderr of the CLI, run in-process (argparse errors included)."""
    from tostnp.__main__ import main
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _vision_task(images=None):
    Xtr, ytr, Xte, yte = load_digits_split()
    Xtr = Xtr[:64] if images is None else images
    cfg = get_vision_config("tiny-digits", width=8, depth=1, num_heads=2, mlp_ratio=2)
    return VisionTask(cfg, (Xtr, ytr[:len(Xtr)], Xte[:20], yte[:20]), batch_size=16, seed=0)


def _step(prefix):
    return load_checkpoint(prefix)[3]["step"]


# ---------------------------------------------------------------------------------------------
# item 2: SIGINT / SIGTERM finish the step, save, say how to resume, exit 130 / 143
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_training_saves_then_resume(tmp_path, sig):
    out = str(tmp_path / "run")
    cmd = [sys.executable, "-m", "tostnp", "train", "vision", "--out", out, "--steps", "3000",
           "--checkpoint-every", "0", "--eval-every", "0"] + TINY
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env())
    metrics = os.path.join(out, "metrics.jsonl")
    t0 = time.time()
    while time.time() - t0 < 120:  # wait until training is under way
        if os.path.exists(metrics) and len(open(metrics).read().splitlines()) >= 3:
            break
        time.sleep(0.05)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, err[-2000:]
    assert "Traceback" not in err and "--resume" in err and f"--out {out}" in err
    step = _step(os.path.join(out, "checkpoint"))
    assert 0 < step < 3000
    code = subprocess.run([sys.executable, "-m", "tostnp", "train", "vision", "--out", out,
                           "--resume", "--stop-at", str(step + 5), "--no-progress"],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert code.returncode == 0, code.stderr[-2000:]
    assert _step(os.path.join(out, "checkpoint")) == step + 5
    steps = [r["step"] for r in read_metrics(metrics) if r["kind"] == "train"]
    assert steps == sorted(steps) and steps[-1] == step + 5


def test_periodic_checkpoints_on_by_default(tmp_path):
    class Dies(RuntimeError):
        pass

    task = _vision_task()
    real = task.loss_and_grads
    calls = []

    def loss_and_grads(params, batch):  # the process "crashes" in update 31 of 40
        calls.append(1)
        if len(calls) == 31:
            raise Dies
        return real(params, batch)

    task.loss_and_grads = loss_and_grads
    tcfg = TrainConfig(steps=40, batch_size=16, lr=1e-3, warmup_steps=2, eval_every=0)
    with pytest.raises(Dies):
        train(task, tcfg, str(tmp_path), progress=False, plot=False)
    assert _step(str(tmp_path / "checkpoint")) == 30      # every 5% of 40 updates = every 2


def _run_limited(args, fsize, cwd):
    """The CLI with a file-size limit: writes past `fsize` bytes fail like a full disk."""
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize}))\n"
            "from tostnp.__main__ import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True,
                          env=_env(), timeout=300, cwd=cwd)


@pytest.mark.slow
def test_disk_full_is_one_line_and_loses_nothing(tmp_path, capsys):
    out = str(tmp_path / "run")
    base = ["train", "vision", "--out", out, "--steps", "40", "--eval-every", "0",
            "--checkpoint-every", "5"] + TINY
    code, err = _cli(base + ["--stop-at", "10"], capsys)
    assert code == 0, err
    size = os.path.getsize(os.path.join(out, "checkpoint.npz"))
    r = _run_limited(["train", "vision", "--out", out, "--resume", "--no-progress"],
                     size // 2, str(tmp_path))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and r.stderr.startswith("error:")
    assert len(r.stderr.strip().splitlines()) == 1 and "step 10 is intact" in r.stderr
    assert _step(os.path.join(out, "checkpoint")) == 10
    assert [f for f in os.listdir(out) if "tmp" in f] == []


def test_unwritable_out_is_one_line(tmp_path, capsys):
    f = tmp_path / "a_file"
    f.write_text("not a directory")
    code, err = _cli(["train", "vision", "--out", str(f / "run"), "--steps", "2"] + TINY, capsys)
    assert code == 2 and err.startswith("error:") and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# item 3: a torn last line of metrics.jsonl does not block --resume
# ---------------------------------------------------------------------------------------------
def test_torn_metrics_line_dropped_on_resume(tmp_path):
    out = str(tmp_path)
    tcfg = TrainConfig(steps=8, batch_size=16, lr=1e-3, warmup_steps=2, eval_every=0,
                       log_every=1)
    train(_vision_task(), TrainConfig(**{**tcfg.__dict__, "stop_at": 4}), out, progress=False,
          plot=False)
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write('{"step": 5, "kind": "train", "lo')           # the disk filled up here
    with pytest.warns(RuntimeWarning, match="torn"):
        res = train(_vision_task(), tcfg, out, resume=True, progress=False, plot=False)
    assert res["step"] == 8
    steps = [r["step"] for r in read_metrics(os.path.join(out, "metrics.jsonl"))
             if r["kind"] == "train"]
    assert steps == list(range(1, 9))
    # a bad line that is not the last one is an error naming the line
    with open(os.path.join(out, "metrics.jsonl"), "a") as f:
        f.write("garbage\n" + json.dumps({"step": 9, "kind": "train", "loss": 1.0}) + "\n")
    with pytest.raises(ValueError, match="line 10"):
        read_metrics(os.path.join(out, "metrics.jsonl"))


# ---------------------------------------------------------------------------------------------
# item 4: options validated; zero is never silently replaced by a default
# ---------------------------------------------------------------------------------------------
BAD_OPTIONS = [
    (["train", "vision", "--lr", "0"], "--lr"),
    (["train", "vision", "--lr", "nan"], "--lr"),
    (["train", "vision", "--lr", "inf"], "--lr"),
    (["train", "vision", "--batch-size", "0"], "--batch-size"),
    (["train", "vision", "--steps", "0"], "--steps"),
    (["train", "vision", "--epochs", "0"], "--epochs"),
    (["train", "vision", "--stop-at", "0"], "--stop-at"),
    (["train", "vision", "--heads", "0"], "--heads"),
    (["train", "vision", "--patch-size", "0"], "--patch-size"),
    (["train", "vision", "--width", "-8"], "--width"),
    (["train", "vision", "--min-lr", "nan"], "--min-lr"),
    (["train", "vision", "--weight-decay", "-1"], "--weight-decay"),
    (["train", "vision", "--warmup-steps", "-1"], "--warmup-steps"),
    (["train", "vision", "--checkpoint-every", "-1"], "--checkpoint-every"),
    (["train", "vision", "--layer-scale-init", "inf"], "--layer-scale-init"),
    (["train", "lm", "--eval-batches", "-1"], "--eval-batches"),
    (["train", "lm", "--eval-batches", "0"], "--eval-batches"),
    (["train", "lm", "--block-size", "0"], "--block-size"),
    (["sample", "--checkpoint", "x", "--temperature", "nan"], "--temperature"),
    (["sample", "--checkpoint", "x", "--temperature", "-1"], "--temperature"),
    (["sample", "--checkpoint", "x", "--top-k", "0"], "--top-k"),
    (["evaluate", "--checkpoint", "x", "--batches", "0"], "--batches"),
    (["figures", "--checkpoint", "x", "--num-images", "0"], "--num-images"),
]


@pytest.mark.parametrize("args,option", BAD_OPTIONS, ids=[" ".join(a[1:]) for a, _ in BAD_OPTIONS])
def test_bad_option_is_one_line_exit_2(tmp_path, capsys, args, option):
    if args[0] == "train":  # tiny valid settings first; the bad option comes last and wins
        small = ["--steps", "1"] + (["--epochs", "1"] if args[1] == "vision" else []) + TINY
        args = args[:2] + small + ["--out", str(tmp_path / "o")] + args[2:]
    code, err = _cli(args, capsys)
    assert code == 2, err
    assert err.startswith("error:") and option in err and len(err.strip().splitlines()) == 1
    assert not os.path.exists(str(tmp_path / "o"))  # nothing ran


# ---------------------------------------------------------------------------------------------
# item 8: a NaN/Inf loss stops before the update, names the step and the likely cause
# ---------------------------------------------------------------------------------------------
def test_nan_in_data_stops_before_update_with_the_right_hint(tmp_path):
    Xtr = np.array(load_digits_split()[0][:64])
    Xtr[40:] = np.nan                       # batches of 16: the third batch (update 3) has NaN
    task = _vision_task(Xtr)
    order = np.arange(64)
    task.perm, task.pos = order, 0          # a fixed order, so the bad batch is update 3
    tcfg = TrainConfig(steps=40, batch_size=16, lr=1e-3, warmup_steps=2, eval_every=0,
                       checkpoint_every=1)
    with pytest.raises(FloatingPointError) as e:
        train(task, tcfg, str(tmp_path), progress=False, plot=False)
    msg = str(e.value)
    assert "step 3" in msg and "data" in msg and "--lr" not in msg
    params, _, _, state = load_checkpoint(str(tmp_path / "checkpoint"))
    assert state["step"] == 2 and all(np.isfinite(a).all() for a in params.values())


def test_divergence_from_a_huge_lr_suggests_a_smaller_lr(tmp_path):
    task = _vision_task()
    real, calls = task.loss_and_grads, []

    def loss_and_grads(params, batch):  # the loss climbs, then overflows
        loss, grads, extra = real(params, batch)
        calls.append(1)
        return (loss * 10.0 ** len(calls) if len(calls) < 5 else loss * np.inf), grads, extra

    task.loss_and_grads = loss_and_grads
    tcfg = TrainConfig(steps=40, batch_size=16, lr=1e-3, warmup_steps=2, eval_every=0,
                       log_every=1)
    with pytest.raises(FloatingPointError, match="step 5.*smaller --lr"):
        train(task, tcfg, str(tmp_path), progress=False, plot=False)
