"""The command line end to end with tiny settings (in-process, through tostnp.__main__.main)."""
import os

import pytest

from tostnp import backend
from tostnp.__main__ import main

TINY_V = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]
TINY_LM = ["--width", "8", "--depth", "1", "--heads", "2", "--block-size", "16",
           "--batch-size", "4", "--no-progress"]


@pytest.mark.slow
def test_vision_train_evaluate_figures(tmp_path, capsys):
    out = str(tmp_path / "v")
    assert main(["train", "vision", "--steps", "4", "--batch-size", "32", "--out", out] + TINY_V) == 0
    text = capsys.readouterr().out
    assert "parameters" in text and "test accuracy:" in text
    for f in ("checkpoint.npz", "checkpoint.json", "metrics.jsonl", "curves.png",
              "memberships.png", "compression.png", "compression.json"):
        assert os.path.getsize(os.path.join(out, f)) > 0, f
    assert main(["evaluate", "--checkpoint", out]) == 0
    assert "test accuracy" in capsys.readouterr().out
    fig_dir = str(tmp_path / "figs")
    assert main(["figures", "--checkpoint", os.path.join(out, "checkpoint"), "--out", fig_dir,
                 "--num-images", "2"]) == 0
    assert sorted(os.listdir(fig_dir)) == ["compression.json", "compression.png",
                                           "memberships.png"]


@pytest.mark.slow
def test_lm_train_sample_resume(tmp_path, capsys):
    text_file = tmp_path / "t.txt"
    text_file.write_text("hello world, hello tokens. " * 40)
    out = str(tmp_path / "lm")
    args = ["train", "lm", "--text", str(text_file), "--steps", "4", "--out", out] + TINY_LM
    assert main(args + ["--stop-at", "2"]) == 0
    assert "stopped at step 2" in capsys.readouterr().out
    assert main(["train", "lm", "--out", out, "--resume", "--no-progress"]) == 0
    o = capsys.readouterr().out
    assert "validation loss" in o and "bits/char" in o
    assert main(["sample", "--checkpoint", out, "--prompt", "hel", "--length", "12",
                 "--seed", "1"]) == 0
    s1 = capsys.readouterr().out
    assert s1.startswith("hel") and len(s1.rstrip("\n")) == 15
    assert main(["sample", "--checkpoint", out, "--prompt", "hel", "--length", "12",
                 "--seed", "1"]) == 0
    assert capsys.readouterr().out == s1                     # seeded
    assert main(["evaluate", "--checkpoint", out, "--batches", "2"]) == 0
    assert main(["sample", "--checkpoint", out, "--prompt", "Z"]) == 2  # not in vocabulary
    assert "not in the tokenizer" in capsys.readouterr().err


@pytest.mark.skipif(backend.gpu_available(), reason="a GPU is present")
@pytest.mark.parametrize("cmd", [["train", "vision"], ["train", "lm"],
                                 ["evaluate", "--checkpoint", "x"],
                                 ["sample", "--checkpoint", "x"],
                                 ["figures", "--checkpoint", "x"]])
def test_device_gpu_without_gpu_fails_clearly(cmd, capsys):
    assert main(cmd + ["--device", "gpu"]) != 0
    assert "needs CuPy and a usable CUDA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [[], ["train"], ["train", "vision"], ["train", "lm"],
                                 ["evaluate"], ["sample"], ["figures"]])
def test_help_everywhere(cmd, capsys):
    with pytest.raises(SystemExit) as e:
        main(cmd + ["--help"])
    assert e.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_missing_checkpoint_is_a_clear_error(tmp_path, capsys):
    assert main(["evaluate", "--checkpoint", str(tmp_path / "nope")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    assert main(["train", "vision", "--data", "mnist", "--out", str(tmp_path)]) == 2
    assert "--data-dir" in capsys.readouterr().err
    assert main(["train", "lm", "--text", str(tmp_path / "none.txt"), "--out",
                 str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
