"""The command line end to end with tiny settings (in-process, through tostnp.__main__.main)."""
import os

import pytest

from tostnp import backend
from tostnp.__main__ import main

TINY_V = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]
TINY_LM = ["--width", "8", "--depth", "1", "--heads", "2", "--block-size", "16",
           "--batch-size", "4", "--no-progress", "--word-rate-samples", "0"]


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
    assert main(["evaluate", "--checkpoint", out, "--batches", "2",
                 "--word-rate-samples", "0"]) == 0
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


def test_train_over_seeds_summary(tmp_path, capsys):
    import json
    import statistics
    out = str(tmp_path / "v")
    assert main(["train", "vision", "--steps", "3", "--batch-size", "32", "--out", out,
                 "--seeds", "0,2"] + TINY_V) == 0
    text = capsys.readouterr().out
    assert "test accuracy over 2 seeds (0,2):" in text and "mean ± sd" in text
    with open(os.path.join(out, "seeds.json")) as f:
        summary = json.load(f)
    assert summary["seeds"] == [0, 2]
    accs = []
    for seed, run in zip([0, 2], summary["runs"]):     # each seed is a full run of its own
        with open(os.path.join(out, f"seed-{seed}", "result.json")) as f:
            res = json.load(f)
        assert res["seed"] == seed and res["test_acc"] == run["test_acc"]
        assert 0 < res["val_acc"] <= 1 and res["train_cpu_s"] > 0
        accs.append(res["test_acc"])
    assert summary["mean"]["test_acc"] == pytest.approx(statistics.mean(accs))
    assert summary["std"]["test_acc"] == pytest.approx(statistics.stdev(accs))
    # the validation set is held out of the training images: evaluate reports both
    assert main(["evaluate", "--checkpoint", os.path.join(out, "seed-2")]) == 0
    assert "validation accuracy" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["3-1", "x", "-2"])
def test_bad_seeds_are_a_clear_error(tmp_path, capsys, bad):
    assert main(["train", "vision", "--seeds", bad, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --seeds") and "Traceback" not in err


def test_lm_reports_word_rate(tmp_path, capsys):
    import json
    text_file = tmp_path / "t.txt"
    text_file.write_text("hello world, hello tokens. " * 40)
    out = str(tmp_path / "lm")
    assert main(["train", "lm", "--text", str(text_file), "--steps", "2", "--out", out]
                + TINY_LM[:-1] + ["1"]) == 0
    assert "word rate" in capsys.readouterr().out     # 1 sample: prompt 'h' (no 'T' in the text)
    with open(os.path.join(out, "result.json")) as f:
        assert 0.0 <= json.load(f)["word_rate"] <= 1.0
    with pytest.raises(SystemExit) as e:        # argparse: "error: argument ...", exit 2
        main(["evaluate", "--checkpoint", out, "--batches", "1", "--word-rate-samples", "-1"])
    assert e.value.code == 2
    assert "--word-rate-samples" in capsys.readouterr().err
    assert main(["sample", "--checkpoint", out, "--prompt", "hel", "--length", "30"]) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("word rate") and "word rate" not in captured.out
