"""The best checkpoint (best.npz: the evaluation with the lowest validation loss) beside the last,
and ``evaluate`` reporting the figures ``train`` printed for the same checkpoint.

The references are independent of the code that keeps the best: the lowest validation loss is
found here in metrics.jsonl, and the best's parameters must equal those of a second run stopped
at that step (training is deterministic); the figures of ``evaluate`` are compared with those
``train`` wrote to result.json.
"""
import json
import os

import numpy as np
import pytest

from tostnp.__main__ import main
from tostnp.data import load_digits_split, split_validation
from tostnp.io.checkpoint import load_checkpoint
from tostnp.models import get_vision_config
from tostnp.train.loop import TrainConfig, train, read_metrics
from tostnp.train.tasks import VisionTask

TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]


def _task(val=True):
    Xtr, ytr, Xte, yte = load_digits_split()
    Xf, yf, Xv, yv = split_validation(Xtr[:200], ytr[:200], 0.2, seed=0)
    cfg = get_vision_config("tiny-digits", width=8, depth=1, num_heads=2, mlp_ratio=2)
    return VisionTask(cfg, (Xf, yf, Xte[:40], yte[:40]), batch_size=16, seed=0,
                      val=(Xv, yv) if val else None)


def _tcfg(**kw):
    # a high learning rate: the validation loss goes up and down, so the best is not the last
    return TrainConfig(**{**dict(steps=16, batch_size=16, lr=3e-2, warmup_steps=1,
                                 eval_every=2, log_every=1, seed=0), **kw})


def _lowest(out):
    evals = [r for r in read_metrics(os.path.join(out, "metrics.jsonl")) if r["kind"] == "eval"]
    return min(evals, key=lambda r: r["val_loss"])


def test_best_is_the_lowest_validation_loss_and_equals_a_run_stopped_there(tmp_path):
    out = str(tmp_path / "full")
    res = train(_task(), _tcfg(), out, progress=False, plot=False)
    low = _lowest(out)
    params, config, _, state = load_checkpoint(os.path.join(out, "best"))
    assert state["step"] == low["step"] == res["best"]["step"]
    assert state["eval"]["val_loss"] == low["val_loss"] and config["task"] == "vision"
    # the same run stopped at that step: its last checkpoint is the best's parameters
    stopped = str(tmp_path / "stopped")
    train(_task(), _tcfg(stop_at=low["step"]), stopped, progress=False, plot=False)
    ref, _, _, _ = load_checkpoint(os.path.join(stopped, "checkpoint"))
    assert set(ref) == set(params)
    for k in ref:
        np.testing.assert_array_equal(params[k], ref[k], err_msg=k)
    assert low["step"] < 16                # and the last is another checkpoint
    last, _, _, _ = load_checkpoint(os.path.join(out, "checkpoint"))
    assert any(not np.array_equal(last[k], params[k]) for k in params)


def test_resumed_run_keeps_the_same_best(tmp_path):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    train(_task(), _tcfg(), full, progress=False, plot=False)
    train(_task(), _tcfg(stop_at=7), part, progress=False, plot=False)
    train(_task(), _tcfg(), part, resume=True, progress=False, plot=False)
    a, _, _, sa = load_checkpoint(os.path.join(full, "best"))
    b, _, _, sb = load_checkpoint(os.path.join(part, "best"))
    assert sa == sb
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_no_best_without_a_validation_set(tmp_path):
    """Without a validation set the evaluations are on the test set: nothing is chosen on it."""
    res = train(_task(val=False), _tcfg(steps=4), str(tmp_path), progress=False, plot=False)
    assert res["best"] is None and not os.path.exists(tmp_path / "best.npz")


def _json(capsys, *argv):
    assert main([str(a) for a in argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_vision_evaluate_reports_what_train_reported(tmp_path, capsys):
    out = tmp_path / "v"
    assert main(["train", "vision", "--steps", "24", "--eval-every", "3", "--lr", "0.03",
                 "--out", str(out)] + TINY) == 0
    printed = capsys.readouterr().out
    with open(out / "result.json") as f:
        result = json.load(f)
    last = _json(capsys, "evaluate", "--checkpoint", out, "--which", "last", "--json")
    assert last["step"] == 24
    for k in ("val_acc", "test_acc"):                      # counts over the same images
        assert last[k] == result[k]
    for k in ("val_loss", "test_loss"):
        assert last[k] == pytest.approx(result[k], rel=1e-6)
    assert f"test accuracy: {last['test_acc']:.4f}" in printed
    best = _json(capsys, "evaluate", "--checkpoint", out, "--json")       # best by default
    assert best["step"] == result["best"]["step"] == _lowest(str(out))["step"]
    for k in ("val_acc", "test_acc"):
        assert best[k] == result["best"][k]
    for k in ("val_loss", "test_loss"):
        assert best[k] == pytest.approx(result["best"][k], rel=1e-6)
    assert "best checkpoint" in printed


@pytest.mark.slow
def test_lm_evaluate_reports_what_train_reported(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("hello world, hello tokens. the quick brown fox. " * 60)
    out = tmp_path / "lm"
    assert main(["train", "lm", "--text", str(text), "--tokenizer", "char", "--steps", "12",
                 "--eval-every", "3", "--eval-batches", "3", "--block-size", "16",
                 "--batch-size", "4", "--word-rate-samples", "0", "--out", str(out)]
                + TINY) == 0
    printed = capsys.readouterr().out
    with open(out / "result.json") as f:
        result = json.load(f)
    last = _json(capsys, "evaluate", "--checkpoint", out, "--which", "last",
                 "--word-rate-samples", "0", "--json")
    assert last["val_bpc"] == pytest.approx(result["val_bpc"], rel=1e-6)
    assert f"{last['val_bpc']:.3f} bits/char" in printed
    best = _json(capsys, "evaluate", "--checkpoint", out, "--word-rate-samples", "0", "--json")
    assert best["step"] == result["best"]["step"] == _lowest(str(out))["step"]
    assert best["val_bpc"] == pytest.approx(result["best"]["val_bpc"], rel=1e-6)
    # other windows give another figure, and evaluate says why
    assert main(["evaluate", "--checkpoint", str(out), "--which", "last", "--batches", "5",
                 "--word-rate-samples", "0"]) == 0
    assert "training evaluated the first 3" in capsys.readouterr().out


def test_which_needs_a_run_directory_and_a_best(tmp_path, capsys):
    assert main(["evaluate", "--checkpoint", str(tmp_path / "x" / "checkpoint"), "--which",
                 "best"]) == 2
    assert "--which picks a checkpoint of a run directory" in capsys.readouterr().err
    os.makedirs(tmp_path / "run")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "run"), "--which", "best"]) == 2
    assert "no best checkpoint" in capsys.readouterr().err
