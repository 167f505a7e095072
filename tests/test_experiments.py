"""The experiments: task generators checked against construction and a brute-force evaluator,
deterministic for a seed; every experiment's --quick run end to end through the CLI (result
file, seeds, mean/std, plot); the extrapolation of the scaling experiment; CLI errors."""
import json
import os

import numpy as np
import pytest

from tostnp.__main__ import main
from tostnp.experiments import EXPERIMENTS, markdown_report
from tostnp.experiments.scaling import fit_limit
from tostnp.data.synthetic import (needle_task, needle_codebook, listops_task, LISTOPS_TOKENS, PAD,
                              one_hot)


# ------------------------------------------------------------------------------------------
# needle
# ------------------------------------------------------------------------------------------
def test_needle_labels_follow_the_construction():
    X, y, pos = needle_task(200, 37, 2.5, seed=3)
    book = needle_codebook()
    assert X.shape == (200, 37, 16) and X.dtype == np.float32
    for i in range(200):
        # brute force: the tokens that are not one of the codebook words
        is_word = np.array([any(np.array_equal(t, w) for w in book) for t in X[i]])
        assert np.flatnonzero(~is_word).tolist() == [pos[i]]
        needle = X[i, pos[i]]
        assert np.isclose(np.linalg.norm(needle), 2.5)
        assert int(np.argmax(np.abs(needle))) == 14 + y[i]      # e_14 -> label 0, e_15 -> 1
    assert np.all(book[:, 14:] == 0) and np.allclose(np.linalg.norm(book, axis=1), 1)
    assert 60 < y.sum() < 140 and len(set(pos.tolist())) > 20    # both labels, many positions


def test_needle_is_deterministic_for_a_seed():
    a, b, c = needle_task(20, 9, 1.0, seed=5), needle_task(20, 9, 1.0, seed=5), \
        needle_task(20, 9, 1.0, seed=6)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[0], c[0])
    with pytest.raises(ValueError, match="norm > 0"):
        needle_task(3, 4, 0.0, seed=0)


# ------------------------------------------------------------------------------------------
# ListOps
# ------------------------------------------------------------------------------------------
def brute_force_listops(tokens):
    """Evaluate an expression given as token strings with an explicit stack."""
    ops = {"[MAX": max, "[MIN": min, "[SM": lambda a: sum(a) % 10,
           "[MED": lambda a: sorted(a)[(len(a) - 1) // 2]}
    stack = []
    for t in tokens:
        if t in ops:
            stack.append((t, []))
        elif t == "]":
            op, args = stack.pop()
            v = ops[op](args)
            if not stack:
                return v
            stack[-1][1].append(v)
        else:
            stack[-1][1].append(int(t))
    raise AssertionError("unbalanced expression")


def test_listops_labels_match_a_brute_force_evaluator():
    X, y, lengths = listops_task(60, 64, seed=1)
    assert X.shape == (60, 64) and X.dtype == np.int64
    for i in range(60):
        toks = [LISTOPS_TOKENS[t] for t in X[i, :lengths[i]]]
        assert 32 <= lengths[i] <= 64 and np.all(X[i, lengths[i]:] == PAD)
        assert PAD not in X[i, :lengths[i]]
        assert brute_force_listops(toks) == y[i]
    assert len(set(y.tolist())) >= 6                                # many classes occur


def test_listops_deterministic_and_operators():
    a, b = listops_task(5, 48, seed=7), listops_task(5, 48, seed=7)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert not np.array_equal(a[0], listops_task(5, 48, seed=8)[0])
    assert brute_force_listops("[MED 1 5 8 9 ]".split()) == 5       # lower median
    assert brute_force_listops("[SM 9 [MAX 4 7 ] [MIN 3 6 ] ]".split()) == 9
    with pytest.raises(ValueError, match="min_len"):
        listops_task(2, 10, seed=0, min_len=11)
    assert np.array_equal(one_hot(np.array([[1, 0]]), 3), [[[0, 1, 0], [1, 0, 0]]])


# ------------------------------------------------------------------------------------------
# the runs
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_quick_experiment_end_to_end(name, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")     # as run.py starts it
    out = str(tmp_path)
    assert main(["experiment", name, "--quick", "--out", out]) == 0
    printed = capsys.readouterr().out
    assert any(head in printed for head in ("| mixer |", "| registers |", "| comparison |",
                                            "| N | tssa |"))           # the table was printed
    with open(os.path.join(out, f"{name}.json")) as f:
        data = json.load(f)
    assert data["complete"] and data["quick"] and data["seeds"] == [0, 1, 2]
    assert data["command"] == f"python3 run.py experiment {name} --quick --out {out}"
    assert data["results"] and data["table"]
    for e in data["results"]:
        if "runs" in e:                                             # a condition over seeds
            assert e["seeds"] == [0, 1, 2] and len(e["runs"]) == 3
            for k, m in e["mean"].items():
                vals = [r[k] for r in e["runs"]]
                assert m == pytest.approx(np.mean(vals))
                assert e["std"][k] == pytest.approx(np.std(vals, ddof=1), abs=1e-12)
    assert os.path.getsize(os.path.join(out, f"{name}.png")) > 5000
    assert not [f for f in os.listdir(out) if "tmp" in f]
    report = markdown_report(out, "docs/experiments")
    assert data["command"] in report and data["table"] in report
    assert f"![{name}](docs/experiments/{name}.png)" in report


@pytest.mark.slow
def test_quick_run_is_deterministic(tmp_path):
    for d in ("a", "b"):
        assert main(["experiment", "needle", "--quick", "--out", str(tmp_path / d),
                     "--seeds", "4"]) == 0
    acc = [[e["mean"]["test_acc"] for e in json.load(open(tmp_path / d / "needle.json"))["results"]]
           for d in ("a", "b")]
    assert acc[0] == acc[1]


def test_experiment_cli_errors(tmp_path, capsys):
    assert main(["experiment", "needle", "--quick", "--seeds", "2-1", "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["experiment", "haystack"])
    assert "invalid choice" in capsys.readouterr().err


def test_scaling_extrapolation():
    lin = [(n, 1000 + 5 * n) for n in (100, 200)]
    assert fit_limit(lin, False, 1000 + 5 * 8000) == pytest.approx(8000)
    quad = [(n, 500 + 3 * n * n) for n in (100, 200)]
    assert fit_limit(quad, True, 500 + 3 * 4000 ** 2) == pytest.approx(4000)
