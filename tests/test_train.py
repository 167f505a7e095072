"""The training loop: determinism, bit-identical resume, metrics and plots, the no-decay set."""
import json
import os

import numpy as np
import pytest

from tostnp import backend
from tostnp.io.checkpoint import load_checkpoint
from tostnp.data import load_digits_split, CharTokenizer
from tostnp.models import get_vision_config, get_lm_config
from tostnp.data import random_shift
from tostnp.train.tasks import VisionTask, LMTask
from tostnp.train.loop import TrainConfig, train, read_metrics

_TEXT = ("the quick brown fox jumps over the lazy dog. " * 20)


def _vision_task(seed=0):
    Xtr, ytr, Xte, yte = load_digits_split()
    cfg = get_vision_config("tiny-digits", width=8, depth=1, num_heads=2, mlp_ratio=2)
    return VisionTask(cfg, (Xtr[:40], ytr[:40], Xte[:20], yte[:20]), batch_size=16, seed=seed,
                      augment_shift=1)                      # 2 batches per epoch


def _lm_task(seed=0):
    tok = CharTokenizer(_TEXT)
    ids = tok.encode(_TEXT)
    cfg = get_lm_config("tiny-char", vocab_size=tok.vocab_size, block_size=8, width=8, depth=1,
                        num_heads=2, mlp_ratio=2)
    return LMTask(cfg, ids[:800], ids[800:], tok, batch_size=4, seed=seed, eval_batches=2)


def _tcfg(**kw):
    base = dict(steps=6, batch_size=16, lr=1e-2, warmup_steps=2, eval_every=3, log_every=1,
                seed=3)
    base.update(kw)
    return TrainConfig(**base)


def _losses(out_dir):
    return [(r["step"], r["kind"], r.get("loss"), r.get("test_loss"), r.get("val_loss"))
            for r in read_metrics(os.path.join(out_dir, "metrics.jsonl"))]


@pytest.mark.parametrize("make_task", [_vision_task, _lm_task], ids=["vision", "lm"])
def test_resume_is_bit_identical(tmp_path, make_task):
    full, part = str(tmp_path / "full"), str(tmp_path / "part")
    bs = 16 if make_task is _vision_task else 4
    r_full = train(make_task(), _tcfg(batch_size=bs), full, progress=False, plot=False)
    # stop at k = 3 (mid-epoch for vision: 2 batches per epoch), then resume in a new task
    r_part = train(make_task(), _tcfg(batch_size=bs, stop_at=3), part, progress=False,
                   plot=False)
    assert r_part["step"] == 3
    # a stale metrics line written after the checkpoint must be dropped on resume
    with open(os.path.join(part, "metrics.jsonl"), "a") as f:
        f.write(json.dumps({"step": 4, "kind": "train", "loss": -1.0}) + "\n")
    r_res = train(make_task(), _tcfg(batch_size=bs), part, resume=True, progress=False,
                  plot=False)
    assert r_res["step"] == 6
    assert _losses(full) == _losses(part)                   # exact float equality
    assert len(_losses(full)) == 6 + 2
    for k, v in r_full["params"].items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(r_res["params"][k]), err_msg=k)


def test_training_is_deterministic_and_changes_with_seed(tmp_path):
    a = train(_vision_task(), _tcfg(steps=3), str(tmp_path / "a"), progress=False, plot=False)
    b = train(_vision_task(), _tcfg(steps=3), str(tmp_path / "b"), progress=False, plot=False)
    c = train(_vision_task(), _tcfg(steps=3, seed=4), str(tmp_path / "c"), progress=False,
              plot=False)
    assert _losses(str(tmp_path / "a")) == _losses(str(tmp_path / "b"))
    assert _losses(str(tmp_path / "a")) != _losses(str(tmp_path / "c"))
    np.testing.assert_array_equal(a["params"]["head.W"], b["params"]["head.W"])


def test_training_lowers_the_loss_and_writes_outputs(tmp_path):
    out = str(tmp_path / "run")
    res = train(_lm_task(), _tcfg(steps=40, batch_size=4, eval_every=40, warmup_steps=5), out,
                progress=False, plot=True)
    tr = [r for r in res["metrics"] if r["kind"] == "train"]
    assert np.mean([r["loss"] for r in tr[-5:]]) < tr[0]["loss"] - 0.3
    assert all(r["grad_norm"] >= 0 and r["lr"] > 0 for r in tr)
    ev = [r for r in res["metrics"] if r["kind"] == "eval"]
    assert ev[-1]["val_bpc"] == pytest.approx(ev[-1]["val_loss"] / np.log(2))
    for f in ("metrics.jsonl", "curves.png", "checkpoint.npz", "checkpoint.json"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    with open(os.path.join(out, "curves.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    params, config, extra, state = load_checkpoint(os.path.join(out, "checkpoint"))
    assert state["step"] == 40 and config["task"] == "lm"
    assert any(k.startswith("opt.m.") for k in extra)         # optimizer moments saved
    assert params["wte"].dtype == np.float32


def test_random_shift_moves_pixels_within_bounds():
    rng = backend.RNG(0)
    X = np.zeros((50, 8, 8, 1), dtype=np.float32)
    X[:, 3, 4, 0] = 1.0
    Y = random_shift(X, 1, rng)
    assert Y.shape == X.shape and Y.dtype == X.dtype
    pos = np.argwhere(Y[..., 0] == 1.0)[:, 1:]                # (50, 2) new positions
    assert np.all(np.abs(pos - [3, 4]) <= 1) and len(np.unique(pos, axis=0)) > 3
    assert np.array_equal(random_shift(X, 0, rng), X)


def test_resume_without_checkpoint_and_bad_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(_vision_task(), _tcfg(), str(tmp_path / "none"), resume=True, progress=False)
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(steps=5, warmup_steps=6).validate()
    with pytest.raises(ValueError, match="config expects"):
        VisionTask(get_vision_config("tiny-mnist"), load_digits_split(), batch_size=4)
