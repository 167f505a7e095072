"""Smoke test of ``python -m tostnp bench``: tiny sizes through the CLI entry, no timing asserts."""
import json
import math
import os

import pytest

from tostnp import bench
from tostnp.__main__ import main


def _numbers(obj):
    """Every int/float leaf of a JSON value (bools excluded)."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return []
    if isinstance(obj, (int, float)):
        return [obj]
    if isinstance(obj, dict):
        return [v for x in obj.values() for v in _numbers(x)]
    if isinstance(obj, list):
        return [v for x in obj for v in _numbers(x)]
    return []


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    rc = main(["bench", "--quick", "--sizes", "32", "64", "--batch", "1", "--width", "24",
               "--heads", "2", "--repeats", "1", "--warmup", "0", "--no-progress",
               "--out", str(out)])
    with open(out / "bench_cpu.json") as f:
        return rc, out, json.load(f)


@pytest.mark.slow
def test_exit_status_and_files(quick_run):
    rc, out, _ = quick_run
    assert rc == 0
    for name in ("bench_cpu.json", "bench_cpu_time.png", "bench_cpu_memory.png",
                 "bench_cpu_decode.png"):
        path = out / name
        assert path.is_file() and path.stat().st_size > 1000, name
        if name.endswith(".png"):
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # atomic writes leave no temporary files behind
    assert not [p for p in os.listdir(out) if "tmp" in p]


@pytest.mark.slow
def test_every_section_has_positive_finite_numbers(quick_run):
    _, _, r = quick_run
    assert set(r) >= {"meta", "reference_matmuls", "layers", "decode", "train", "targets"}
    assert r["meta"]["sizes"] == [32, 64] and r["meta"]["width"] == 24
    for N in ("32", "64"):
        ref = r["reference_matmuls"][N]
        assert set(ref) == {"x@W_s", "xT@dy_s", "fwd_2mm_s", "fwdbwd_6mm_s"}
        for name in bench.LAYERS:
            e = r["layers"][name][N]
            for key in ("fwd_s", "fwdbwd_s", "fwd_peak_bytes", "fwdbwd_peak_bytes"):
                assert key in e, (name, N, key)
    for N in ("32", "64"):                # the paired ratios are those of the samples
        for name, v in r["paired"][N].items():
            assert len(v["per_round"]) == 1 and v["median"] == v["min"] == v["max"] > 0
        assert set(r["paired"][N]) == {"tssa_fwd_over_2mm", "tssa_fwdbwd_over_6mm"}
        e, ref = r["layers"]["tssa"][N], r["reference_matmuls"][N]
        assert r["paired"][N]["tssa_fwd_over_2mm"]["median"] == pytest.approx(
            e["fwd_s"] / ref["fwd_2mm_s"])         # one round: the pair is the two medians
    assert r["meta"]["cpu"]
    assert set(r["decode"]) == {"16", "32"}
    assert set(r["train"]) == {"vision:tiny-digits", "lm:tiny-char"}
    assert r["train"]["vision:tiny-digits"]["images_per_s"] > 0
    assert r["train"]["lm:tiny-char"]["tokens_per_s"] > 0
    for section in ("reference_matmuls", "layers", "decode", "train"):
        nums = _numbers(r[section])
        assert nums, section
        assert all(math.isfinite(v) and v > 0 for v in nums), section
    # forward+backward allocates more than the forward alone (the gradients)
    for name in bench.LAYERS:
        e = r["layers"][name]["64"]
        assert e["fwdbwd_peak_bytes"] >= e["fwd_peak_bytes"] > 0


@pytest.mark.slow
def test_targets_listed_and_unmeasured_at_tiny_sizes(quick_run):
    _, _, r = quick_run
    assert len(r["targets"]) == 7
    assert all(t["status"] == "not measured" and t["value"] is None for t in r["targets"])


@pytest.mark.slow
def test_skips_sizes_over_the_memory_budget(tmp_path):
    rc = main(["bench", "--quick", "--sizes", "64", "--max-mem-gb", "0.00001", "--no-train",
               "--no-progress", "--contexts", "8", "--out", str(tmp_path)])
    assert rc == 0
    r = json.loads((tmp_path / "bench_cpu.json").read_text())
    for name in bench.LAYERS:
        assert "skipped" in r["layers"][name]["64"]
    assert r["train"] == {"skipped": "--no-train"}


def test_paired_ratios_round_by_round():
    """Each round's layer time over the same round's products time; median and range."""
    times = {("layers", "tssa", "64", "fwd_s"): [3.0, 4.0, 10.0],
             ("reference_matmuls", "64", "fwd_2mm_s"): [2.0, 2.0, 4.0],
             ("layers", "tssa", "64", "fwdbwd_s"): [6.0, 6.0, 6.0],
             ("reference_matmuls", "64", "fwdbwd_6mm_s"): [5.0, 4.0, 3.0]}
    p = bench.paired_ratios(times, "64")
    f, fb = p["tssa_fwd_over_2mm"], p["tssa_fwdbwd_over_6mm"]
    assert f["per_round"] == [1.5, 2.0, 2.5] and f["median"] == 2.0
    assert (f["min"], f["max"]) == (1.5, 2.5)
    # the ratio of the medians (4 / 2 = 2.0 here too) is not what is paired: fwd+bwd's
    # medians give 6 / 4 = 1.5, its rounds 1.2, 1.5, 2.0
    assert fb["per_round"] == [1.2, 1.5, 2.0] and fb["median"] == 1.5
    # a size where the layer was not measured (skipped) has no pair
    assert bench.paired_ratios(times, "128") == {}


def test_targets_pass_and_miss():
    ref = {"4096": {"fwd_2mm_s": 1.0, "fwdbwd_6mm_s": 3.0}}
    layers = {"tssa": {"1024": {"fwdbwd_s": 1.0, "fwdbwd_peak_bytes": 10},
                       "16384": {"fwdbwd_s": 25.0, "fwdbwd_peak_bytes": 170},
                       "4096": {"fwd_s": 1.2, "fwdbwd_s": 4.0, "fwdbwd_peak_bytes": 10}},
              "softmax": {"4096": {"fwdbwd_s": 40.0, "fwdbwd_peak_bytes": 50}}}
    dec = {"256": {"per_token_s": 1.0}, "8192": {"per_token_s": 1.1}}
    t = bench.evaluate_targets({"reference_matmuls": ref, "layers": layers, "decode": dec})
    assert [x["status"] for x in t] == ["MISS", "PASS", "PASS", "MISS", "PASS", "PASS", "PASS"]
    assert t[0]["value"] == pytest.approx(25.0) and t[3]["value"] == pytest.approx(5.0)


def test_bad_options_and_missing_gpu(tmp_path, capsys, monkeypatch):
    assert main(["bench", "--quick", "--width", "25", "--heads", "2",
                 "--out", str(tmp_path)]) == 2
    assert "error: --heads" in capsys.readouterr().err
    monkeypatch.setattr(bench.backend, "gpu_available", lambda: False)
    assert main(["bench", "--quick", "--device", "gpu", "--out", str(tmp_path / "g")]) == 2
    assert "GPU" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()


def test_train_bench_smoke(tmp_path, capsys):
    """bench --train: tiny shapes, every bench and the plain comparison, no timing asserts."""
    rc = main(["bench", "--train", "--quick", "--repeats", "1", "--compare-plain",
               "--threads", "1", "--no-progress", "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "bench_train_cpu.json") as f:
        r = json.load(f)
    assert r["meta"]["blas_threads"] == [1] or r["meta"]["blas_threads"] == []
    for name in ("lm", "vision", "block", "lm:plain", "vision:plain", "block:plain"):
        e = r["train"][name]
        for key in ("step_s", "steps_per_s", "items_per_s", "forward_s", "backward_s",
                    "optimiser_s"):
            assert math.isfinite(e[key]) and e[key] > 0, (name, key)
        assert e["minflt_per_step"] >= 0
        assert e["peak_traced_mb"] > 0
        assert e["peak_rss_mb"] is None or e["peak_rss_mb"] > e["peak_traced_mb"]
        assert e["forward_s"] + e["backward_s"] + e["optimiser_s"] <= 1.01 * e["step_s"]
    assert r["train"]["lm"]["ratio_fast_plain"] > 0
    out = capsys.readouterr().out
    assert "fast path / plain path" in out and "faults/step" in out and "RSS MB" in out


def test_memory_measures_against_known_allocations():
    """traced_peak_bytes sees a NumPy array of known size; the RSS peak sees its pages."""
    import numpy as np
    from tostnp.bench.peaks import (peak_rss_bytes, reset_peak_rss, rss_bytes,
                                     traced_peak_bytes)
    n = 8 * 2**20                                          # 64 MiB of float64

    def touch():
        a = np.ones(n)                                     # every page written
        b = a[:10] * 2.0
        del a
        return b                                           # the result counts until it returns

    assert 8 * n <= traced_peak_bytes(touch) < 8 * n + 2**20
    if rss_bytes() is None:                                # no /proc: nothing more to check
        return
    if reset_peak_rss():
        before = rss_bytes()
        touch()
        assert peak_rss_bytes() >= before + 0.9 * 8 * n


def test_train_bench_thread_counts(tmp_path, capsys):
    rc = main(["bench", "--train", "--quick", "--repeats", "1", "--benches", "lm",
               "--threads", "1", "2", "--no-progress", "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "bench_train_cpu.json") as f:
        r = json.load(f)["train"]
    assert set(r) == {"lm@1t", "lm@2t"} and r["lm@2t"]["threads"] == 2
    assert r["lm@2t"]["ratio_to_1t_paired"] > 0


def test_train_bench_rejects_unknown_bench(tmp_path, capsys):
    rc = main(["bench", "--train", "--benches", "gpt", "--out", str(tmp_path)])
    assert rc == 2 and "error: --benches" in capsys.readouterr().err


def test_step_anatomy_counts_a_known_step():
    """A step of known work: 3 products of 2 shapes (one on a transposed operand), 2 tanh,
    1 add. The anatomy counts them from the arrays themselves, the step computes the same
    numbers while recorded, and the parameters are plain ndarrays again afterwards."""
    import numpy as np
    from tostnp.bench.anatomy import step_anatomy
    g = np.random.default_rng(0)
    x = g.standard_normal((6, 8))
    params = {"W": g.standard_normal((8, 4)), "V": g.standard_normal((4, 4))}
    seen = []

    def step():
        h = np.tanh(x @ params["W"])                       # (6, 8) @ (8, 4)
        y = np.tanh(h @ params["V"]) + 1.0                 # (6, 4) @ (4, 4)
        gW = h.T @ y                                       # (4, 6)T @ (6, 4)
        seen.append(float(np.sum(y)) + float(np.sum(gW)))

    ref = (np.tanh(np.tanh(x @ params["W"]) @ params["V"]) + 1.0)
    ref_sum = float(np.sum(ref)) + float(np.sum(np.tanh(x @ params["W"]).T @ ref))
    a = step_anatomy(step, params, repeats=2, step_repeats=2)
    assert all(type(v) is np.ndarray for v in params.values())
    assert seen[0] == ref_sum                              # the recorded step: same numbers
    shapes = {(tuple(p["a"]), p["a_layout"], tuple(p["b"]), p["b_layout"]): p["count"]
              for p in a["products"]}
    assert shapes == {((6, 8), "C", (8, 4), "C"): 1, ((6, 4), "C", (4, 4), "C"): 1,
                      ((4, 6), "T", (6, 4), "C"): 1}
    assert a["numpy_calls"]["matmul"] == 3
    assert a["ufuncs"]["tanh"] == 2 and a["ufuncs"]["add"] == 1
    assert a["functions"]["sum"] == 2
    assert a["calls"]["python_calls"] >= 1 and a["step_s"] > 0
    assert a["products_s"] > 0 and a["rest_s"] == a["step_s"] - a["products_s"]


def test_cpu_slug_and_machine_info():
    from tostnp.bench.machine import cpu_slug, machine_info
    assert cpu_slug("Intel(R) Xeon(R) Processor") == "intel-xeon"
    assert cpu_slug("AMD EPYC 7763 64-Core Processor") == "amd-epyc-7763"
    assert cpu_slug("Intel(R) Core(TM) i7-8550U CPU @ 1.80GHz") == "intel-core-i7-8550u"
    m = machine_info()
    assert m["cpu"] and m["cpu_slug"] == cpu_slug(m["cpu"]) and m["logical_cpus"] >= 1
    import numpy as np
    assert m["numpy"] == np.__version__
