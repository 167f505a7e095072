"""tostnp.train.seeds: seed parsing and the mean ± sd summary against Python's statistics module."""
from __future__ import annotations

import statistics

import pytest

from tostnp.train.seeds import parse_seeds, run_over_seeds, summarise


@pytest.mark.parametrize("text, expected", [
    ("3", [3]), ("0-4", [0, 1, 2, 3, 4]), ("0,2,7", [0, 2, 7]), ("0-2,9", [0, 1, 2, 9]),
    (" 1 - 2 ", [1, 2]), (5, [5]), ([4, 1], [4, 1]),
])
def test_parse_seeds(text, expected):
    assert parse_seeds(text) == expected


@pytest.mark.parametrize("text", ["", "a", "3-1", "1,,2", "-1", "1,1", "0-2,2", True])
def test_parse_seeds_rejects(text):
    with pytest.raises(ValueError, match="seed"):
        parse_seeds(text)


def test_summary_matches_statistics_module():
    seeds = [0, 1, 2, 3]
    vals = [0.97, 0.981, 0.9633, 0.975]
    out = run_over_seeds(lambda s: {"acc": vals[s], "name": "x", "n": s + 1}, "0-3",
                         progress=False)
    assert out["seeds"] == seeds
    assert out["mean"]["acc"] == pytest.approx(statistics.fmean(vals), rel=1e-15)
    assert out["std"]["acc"] == pytest.approx(statistics.stdev(vals), rel=1e-12)
    assert out["mean"]["n"] == pytest.approx(2.5)
    assert "name" not in out["mean"] and out["runs"][2]["name"] == "x"


def test_single_seed_has_zero_sd_and_fn_is_checked():
    assert summarise([{"a": 2.0}], [7])["std"]["a"] == 0.0
    with pytest.raises(TypeError, match="dict"):
        run_over_seeds(lambda s: 1.0, "0", progress=False)
    with pytest.raises(ValueError, match="runs"):
        summarise([{"a": 1.0}], [1, 2])
