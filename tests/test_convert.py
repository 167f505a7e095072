"""``python -m tostnp convert``: weight interchange with the published PyTorch ToST models.

* round trips tostnp -> .safetensors -> tostnp are bit-exact (vision with the published stem;
  language models with and without bias), parameters, BatchNorm state and logits;
* the published layouts of ToST-T, ToST-S and Base (tests/data/official-layout.json, measured on
  the published code) come out of the exporter in names, shapes, dtypes and order, and their
  parameter counts are the published ones -- built from zero-stride arrays, nothing allocated;
* every bad input is one line, exit status 2, and nothing written; a PyTorch pickle is never
  opened (its payload would create a file).
"""
import json
import os
import pickle
import struct

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from tostnp import backend
from tostnp.__main__ import main
from tostnp.io.checkpoint import save_checkpoint, load_checkpoint
from tostnp.io.interchange import published_layout, from_published, to_published
from tostnp.io import load_model
from tostnp.models import (VisionConfig, LMConfig, get_vision_config, get_lm_config, vision_init,
                           lm_init, vision_forward, lm_forward)
from tostnp.nn.params import num_params, is_state

HERE = os.path.dirname(__file__)
LAYOUT = json.load(open(os.path.join(HERE, "data", "official-layout.json")))
XP = backend.get_xp("cpu")

VISION = VisionConfig(image_size=16, in_chans=3, patch_size=8, num_classes=5, width=16,
                      depth=2, num_heads=4, mlp_ratio=2, num_cls_blocks=2, stem="conv",
                      pos="fourier", gelu="erf", cab="published", init_std=0.2)


def _stress(params, seed=0):
    """Move every value off its init (gammas, temps, BatchNorm state, biases) so that a dropped
    or swapped tensor shows in the logits."""
    r = np.random.default_rng(seed)
    out = {}
    for k, v in params.items():
        a = np.asarray(v)
        if k.endswith("num_batches_tracked"):
            out[k] = np.asarray(7.0, dtype=a.dtype)
        elif k.endswith("running_var"):
            out[k] = r.uniform(0.5, 2.0, a.shape).astype(a.dtype)
        else:
            out[k] = (a + 0.1 * r.standard_normal(a.shape)).astype(a.dtype)
    return out


def _save_run(tmp_path, name, kind, cfg, params, extra=None):
    import dataclasses
    run = tmp_path / name
    config = {"task": kind, "model": dataclasses.asdict(cfg), **(extra or {})}
    save_checkpoint(str(run / "checkpoint"), params, config)
    return str(run)


def _vision_run(tmp_path):
    params = _stress(vision_init(VISION, backend.RNG(0), XP))
    return _save_run(tmp_path, "v", "vision", VISION, params, {"data": "digits"}), params


def _lm_cfg(bias):
    return LMConfig(vocab_size=11, block_size=8, width=16, depth=2, num_heads=4, mlp_ratio=2,
                    bias=bias, gelu="erf")


def _lm_run(tmp_path, bias, name="lm"):
    cfg = _lm_cfg(bias)
    params = _stress(lm_init(cfg, backend.RNG(1), XP), seed=1)
    return _save_run(tmp_path, name, "lm", cfg, params), params, cfg


def _convert(capsys, *args):
    code = main(["convert", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------------------------
def test_vision_round_trip_bit_exact(tmp_path, capsys):
    run, params = _vision_run(tmp_path)
    f = tmp_path / "v.safetensors"
    code, out, err = _convert(capsys, run, f)
    assert code == 0, err
    assert "patch_size=8" in out and "depth=2" in out
    code, out, err = _convert(capsys, f, tmp_path / "back")
    assert code == 0, err
    got, _, _, _ = load_checkpoint(str(tmp_path / "back" / "checkpoint"))
    assert set(got) == set(params)
    for k in params:
        assert got[k].dtype == params[k].dtype and np.array_equal(got[k], params[k]), k
    kind, cfg, p2, _ = load_model(str(tmp_path / "back"), dtype=XP.float64)
    assert kind == "vision" and cfg == VISION
    x = np.random.default_rng(2).standard_normal((3, 16, 16, 3))
    _, _, p1, _ = load_model(run, dtype=XP.float64)
    assert np.array_equal(vision_forward(x, p1, VISION)[0], vision_forward(x, p2, VISION)[0])
    # the file holds exactly the published layout of this architecture
    tensors = load_file(str(f))
    assert sorted(tensors) == sorted(n for n, _, _ in published_layout("vision", VISION))


@pytest.mark.parametrize("bias", [False, True])
def test_lm_round_trip_bit_exact(tmp_path, capsys, bias):
    run, params, cfg = _lm_run(tmp_path, bias)
    f = tmp_path / "lm.safetensors"
    assert _convert(capsys, run, f)[0] == 0
    tensors = load_file(str(f))
    assert np.array_equal(tensors["lm_head.weight"], tensors["transformer.wte.weight"])
    assert ("transformer.ln_f.bias" in tensors) == bias
    assert ("transformer.h.0.attn.c_attn.bias" in tensors) == bias
    assert _convert(capsys, f, tmp_path / "back")[0] == 0
    got, _, _, _ = load_checkpoint(str(tmp_path / "back" / "checkpoint"))
    assert set(got) == set(params)
    for k in params:
        assert np.array_equal(got[k], params[k]), k
    kind, cfg2, p2, _ = load_model(str(tmp_path / "back"), dtype=XP.float64)
    assert kind == "lm" and cfg2 == cfg
    ids = np.random.default_rng(3).integers(0, 11, (2, 8))
    _, _, p1, _ = load_model(run, dtype=XP.float64)
    assert np.array_equal(lm_forward(ids, p1, cfg)[0], lm_forward(ids, p2, cfg)[0])


def test_wrapped_names_and_one_tied_name_accepted(tmp_path, capsys):
    run, params, cfg = _lm_run(tmp_path, False)
    f = tmp_path / "lm.safetensors"
    assert _convert(capsys, run, f)[0] == 0
    t = load_file(str(f))
    del t["lm_head.weight"]                                   # safetensors.torch.save_model
    g = tmp_path / "wrapped.safetensors"
    save_file({"module._orig_mod." + k: v for k, v in t.items()}, str(g))
    assert _convert(capsys, g, tmp_path / "back")[0] == 0
    got, _, _, _ = load_checkpoint(str(tmp_path / "back" / "checkpoint"))
    assert all(np.array_equal(got[k], params[k]) for k in params)


# ---------------------------------------------------------------------------------------------
# the published layouts: T, S, Base
# ---------------------------------------------------------------------------------------------
def _zero_stride(layout):
    return {n: np.broadcast_to(np.zeros((), dtype=d), tuple(s)) for n, s, d in layout}


@pytest.mark.parametrize("key,preset,count", [
    ("tost_cab_tiny_12_p16", "T", 5_769_328),
    ("tost_cab_small_12_p16", "S", 22_589_944),
    ("gpt_tssa_base_bias_False", "base", 110_384_016),
])
def test_published_layouts(key, preset, count):
    want = [(n, tuple(s), d) for n, s, d in LAYOUT[key]["tensors"]]
    kind = "vision" if preset in ("T", "S") else "lm"
    cfg = get_vision_config(preset) if kind == "vision" else get_lm_config(preset)
    assert published_layout(kind, cfg) == want
    got_kind, got_cfg, params = from_published(_zero_stride(want))  # nothing allocated
    assert got_kind == kind
    assert num_params({k: v for k, v in params.items() if not is_state(k)}) == count
    out = to_published(kind, got_cfg, params)
    assert [(n, tuple(a.shape), str(a.dtype)) for n, a in out.items()] == want


def test_published_base_with_bias_layout():
    want = [(n, tuple(s), d) for n, s, d in LAYOUT["gpt_tssa_base_bias_True"]["tensors"]]
    kind, cfg, params = from_published(_zero_stride(want))
    assert kind == "lm" and cfg.bias
    out = to_published(kind, cfg, params)
    assert [(n, tuple(a.shape), str(a.dtype)) for n, a in out.items()] == want


def test_vision_init_of_T_has_the_published_count():
    """(S and Base are counted from their layouts above; their inits follow the same code.)"""
    params = vision_init(get_vision_config("T"), backend.RNG(0), XP)
    assert num_params(params) == 5_769_328                    # state excluded by num_params
    assert sum(1 for k in params if is_state(k)) == 3 * 4     # 4 BatchNorms


# ---------------------------------------------------------------------------------------------
# bad input: one line, exit 2, nothing written
# ---------------------------------------------------------------------------------------------
@pytest.fixture
def vision_file(tmp_path, capsys):
    run, _ = _vision_run(tmp_path)
    f = tmp_path / "v.safetensors"
    assert _convert(capsys, run, f)[0] == 0
    return f


def _refused(capsys, tmp_path, src, *extra, match):
    dst = tmp_path / "out"
    code, out, err = _convert(capsys, src, dst, *extra)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert match in err, err
    assert not dst.exists()
    return err


def _edit(vision_file, tmp_path, fn, name="bad.safetensors"):
    t = dict(load_file(str(vision_file)))
    fn(t)
    g = tmp_path / name
    save_file(t, str(g))
    return g


def test_missing_tensor(vision_file, tmp_path, capsys):
    g = _edit(vision_file, tmp_path, lambda t: t.pop("blocks.1.attn.temp"))
    _refused(capsys, tmp_path, g, match="blocks.1.attn.temp")


def test_unexpected_tensor(vision_file, tmp_path, capsys):
    g = _edit(vision_file, tmp_path, lambda t: t.update({"blocks.0.extra": np.zeros(3, np.float32)}))
    _refused(capsys, tmp_path, g, match="unexpected tensor 'blocks.0.extra'")


def test_wrong_shape(vision_file, tmp_path, capsys):
    g = _edit(vision_file, tmp_path,
              lambda t: t.update({"norm.bias": np.zeros(17, np.float32)}))
    err = _refused(capsys, tmp_path, g, match="'norm.bias'")
    assert "(17,)" in err and "(16,)" in err


def test_wrong_dtype(vision_file, tmp_path, capsys):
    g = _edit(vision_file, tmp_path,
              lambda t: t.update({"head.bias": t["head.bias"].astype(np.float16)}))
    _refused(capsys, tmp_path, g, match="'head.bias'")


def test_non_finite(vision_file, tmp_path, capsys):
    def poison(t):
        a = t["blocks.0.mlp.fc1.weight"].copy()
        a[1, 2] = np.nan
        t["blocks.0.mlp.fc1.weight"] = a
    g = _edit(vision_file, tmp_path, poison)
    _refused(capsys, tmp_path, g, match="NaN")


def test_not_safetensors(tmp_path, capsys):
    g = tmp_path / "x.safetensors"
    g.write_bytes(b"hello, this is not a tensor file at all")
    _refused(capsys, tmp_path, g, match="not a safetensors file")


def test_oversized_header(tmp_path, capsys):
    g = tmp_path / "big.safetensors"
    g.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    _refused(capsys, tmp_path, g, match="header")


def test_arch_mismatch(vision_file, tmp_path, capsys):
    _refused(capsys, tmp_path, vision_file, "--arch", "T", match="--arch T")


def test_export_arch_mismatch_and_linear_stem_refused(tmp_path, capsys):
    run, _ = _vision_run(tmp_path)
    dst = tmp_path / "o.safetensors"
    code, _, err = _convert(capsys, run, dst, "--arch", "S")
    assert code == 2 and "--arch S" in err and not dst.exists()
    cfg = get_vision_config("tiny-digits")
    run2 = _save_run(tmp_path, "lin", "vision", cfg, vision_init(cfg, backend.RNG(0), XP))
    code, _, err = _convert(capsys, run2, dst)
    assert code == 2 and "stem='linear'" in err and not dst.exists()


class _Evil:
    """Unpickling this would create a file (what a hostile checkpoint can do)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_pickle_is_never_opened(tmp_path, capsys):
    marker = tmp_path / "pwned"
    src = tmp_path / "model.pth"
    src.write_bytes(pickle.dumps({"model": _Evil(str(marker))}))
    dst = tmp_path / "out"
    code, out, err = _convert(capsys, src, dst)
    assert code == 2
    assert "weights_only=True" in err and "save_file" in err and '"model"' in err
    assert not marker.exists() and not dst.exists()
    # the same bytes under another name are recognised by their content
    src2 = tmp_path / "model.safetensors"
    src2.write_bytes(src.read_bytes())
    code, _, err = _convert(capsys, src2, dst)
    assert code == 2 and not marker.exists() and not dst.exists()


# ---------------------------------------------------------------------------------------------
# train here (BatchNorm in training mode), export, bring back: evaluate, sample, train --resume
# ---------------------------------------------------------------------------------------------
SMALL_V = ["--steps", "6", "--batch-size", "32", "--width", "16", "--depth", "1", "--heads",
           "2", "--eval-every", "3", "--no-progress"]


def _cli(capsys, *args):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


@pytest.fixture(scope="module")
def trained_vision(tmp_path_factory):
    """A small published-form model trained 6 steps through the CLI (BatchNorm in training
    mode), and its export."""
    d = tmp_path_factory.mktemp("trained")
    run, f = d / "run", d / "run.safetensors"
    assert main(["train", "vision", "--stem", "conv", "--pos", "fourier", "--gelu", "erf",
                 *SMALL_V, "--out", str(run)]) == 0
    assert main(["convert", str(run), str(f)]) == 0
    return run, f


@pytest.mark.slow
def test_train_published_form_export_and_bring_back(trained_vision, tmp_path, capsys):
    run, f = trained_vision
    host, config, _, _ = load_checkpoint(str(run / "checkpoint"))
    # BatchNorm ran in training mode for every update: its state moved and counted 6 batches
    assert float(host["stem.0.bn.num_batches_tracked"]) == 6.0
    assert not np.allclose(host["stem.0.bn.running_var"], 1.0)
    ev = json.loads(_cli(capsys, "evaluate", "--checkpoint", run, "--which", "last", "--json"))
    back = tmp_path / "back"
    out = _cli(capsys, "convert", f, back)
    assert "metadata" in out
    # the file's metadata restored the dataset: evaluate gives the same numbers (eval mode);
    # the imported run starts at step 0 (a fresh schedule)
    ev_back = json.loads(_cli(capsys, "evaluate", "--checkpoint", back, "--json"))
    assert ev.pop("step") == 6 and ev_back.pop("step") == 0 and ev_back == ev
    # and training continues from the imported weights (fresh AdamW, fresh schedule)
    _cli(capsys, "train", "vision", "--out", back, "--resume", "--no-progress")
    h2, _, _, st = load_checkpoint(str(back / "checkpoint"))
    assert st["step"] == 6 and float(h2["stem.0.bn.num_batches_tracked"]) == 12.0


@pytest.mark.slow
def test_import_without_metadata_needs_like(trained_vision, tmp_path, capsys):
    run, f = trained_vision
    bare = tmp_path / "bare.safetensors"
    save_file(dict(load_file(str(f))), str(bare))              # as torch would save it
    _cli(capsys, "convert", bare, tmp_path / "b1", "--image-size", "8")
    code = main(["evaluate", "--checkpoint", str(tmp_path / "b1")])
    err = capsys.readouterr().err
    assert code == 2 and "--like" in err
    _cli(capsys, "convert", bare, tmp_path / "b2", "--like", run)
    assert "test accuracy" in _cli(capsys, "evaluate", "--checkpoint", tmp_path / "b2")


@pytest.mark.slow
def test_lm_export_and_bring_back_samples_the_same(tmp_path, capsys):
    run = tmp_path / "lm"
    _cli(capsys, "train", "lm", "--steps", "3", "--batch-size", "4", "--width", "16",
         "--depth", "1", "--heads", "2", "--block-size", "16", "--no-bias", "--gelu", "erf",
         "--eval-every", "3", "--eval-batches", "1", "--no-progress", "--out", run)
    f = tmp_path / "lm.safetensors"
    _cli(capsys, "convert", run, f)
    _cli(capsys, "convert", f, tmp_path / "back")
    a = _cli(capsys, "sample", "--checkpoint", run, "--length", "20", "--prompt", "The ",
             "--seed", "0")
    b = _cli(capsys, "sample", "--checkpoint", tmp_path / "back", "--length", "20",
             "--prompt", "The ", "--seed", "0")
    assert a == b
