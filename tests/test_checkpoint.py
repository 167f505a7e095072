"""Checkpoints: bit-exact round trip, corruption detected, pickles refused, atomic writes."""
import dataclasses
import hashlib
import json
import os

import numpy as np
import pytest

import array_api_strict as xps

from tostnp.backend import RNG
from tostnp.io.checkpoint import checkpoint_paths, load_checkpoint, save_checkpoint


@dataclasses.dataclass(frozen=True)
class _Cfg:
    width: int = 8
    depth: int = 2
    pool: str = "cls"


def _params(seed=0):
    r = np.random.default_rng(seed)
    W = r.standard_normal((4, 3)).astype(np.float32)
    W[0, 0] = np.nan  # odd values must survive bit for bit
    W[0, 1] = -0.0
    return {"blocks.0.tssa.W_u": W,
            "blocks.0.tssa.temp": r.standard_normal((2, 1)),  # float64
            "tok_embed.W": r.standard_normal((5, 3)).astype(np.float32),
            "counts": np.arange(7, dtype=np.int64)}


def _bits(a):
    return a.view(np.uint8).tobytes() if a.dtype.kind == "f" else a.tobytes()


def _listing(d):
    return sorted(os.listdir(d))


def test_round_trip_bit_exact(tmp_path):
    params = _params()
    extra = {"m.blocks.0.tssa.W_u": np.ones((4, 3), np.float32) / 3}
    rng = RNG(123)
    rng.normal(np, (3,), np.float64)
    state = {"step": 17, "rng": rng.get_state(), "metrics": {"loss": np.float32(1.25)},
             "tokenizer": {"type": "char", "chars": "ab∑"}}
    prefix = os.path.join(str(tmp_path), "runs", "digits", "ckpt")  # parents get created
    npz, js = save_checkpoint(prefix, params, _Cfg(), extra_arrays=extra, state=state)
    assert (npz, js) == checkpoint_paths(prefix) == (prefix + ".npz", prefix + ".json")
    assert _listing(os.path.dirname(prefix)) == ["ckpt.json", "ckpt.npz"]
    for path in (prefix, prefix + ".npz", prefix + ".json"):
        p2, cfg, e2, st = load_checkpoint(path)
        assert set(p2) == set(params) and set(e2) == set(extra)
        for k, a in params.items():
            assert isinstance(p2[k], np.ndarray)
            assert p2[k].dtype == a.dtype and p2[k].shape == a.shape
            assert _bits(p2[k]) == _bits(a), k
        assert _bits(e2["m.blocks.0.tssa.W_u"]) == _bits(extra["m.blocks.0.tssa.W_u"])
        assert cfg == {"width": 8, "depth": 2, "pool": "cls"}
        assert _Cfg(**cfg) == _Cfg()
        assert st["step"] == 17 and st["metrics"]["loss"] == 1.25
        assert st["tokenizer"]["chars"] == "ab∑"
    # the RNG state survives JSON: a restored RNG continues the same stream
    r2 = RNG(0)
    r2.set_state(st["rng"])
    np.testing.assert_array_equal(r2.normal(np, (4,), np.float64), rng.normal(np, (4,), np.float64))
    # the recorded checksum is the SHA-256 of the npz bytes
    with open(npz, "rb") as f:
        assert json.load(open(js))["npz_sha256"] == hashlib.sha256(f.read()).hexdigest()


def test_saves_backend_arrays_and_empty_extras(tmp_path):
    p = {"W": xps.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))}  # default device
    prefix = str(tmp_path / "c")
    save_checkpoint(prefix, p, {"a": 1})
    params, cfg, extra, state = load_checkpoint(prefix)
    np.testing.assert_array_equal(params["W"], np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert params["W"].dtype == np.float32
    assert extra == {} and state == {} and cfg == {"a": 1}


def test_overwrite_replaces(tmp_path):
    prefix = str(tmp_path / "c")
    save_checkpoint(prefix, {"W": np.zeros(3)}, {}, state={"step": 1})
    save_checkpoint(prefix, {"W": np.ones(3)}, {}, state={"step": 2})
    params, _, _, state = load_checkpoint(prefix)
    np.testing.assert_array_equal(params["W"], np.ones(3))
    assert state["step"] == 2 and _listing(str(tmp_path)) == ["c.json", "c.npz"]


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corruption_detected(tmp_path, damage):
    prefix = str(tmp_path / "c")
    npz, _ = save_checkpoint(prefix, _params(), {})
    raw = bytearray(open(npz, "rb").read())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    else:
        raw[len(raw) // 3] ^= 0x01
    open(npz, "wb").write(bytes(raw))
    with pytest.raises(ValueError, match="corrupted or truncated"):
        load_checkpoint(prefix)


def test_missing_files(tmp_path):
    prefix = str(tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="c.json"):
        load_checkpoint(prefix)
    npz, js = save_checkpoint(prefix, _params(), {})
    os.remove(npz)
    with pytest.raises(FileNotFoundError, match="c.npz"):
        load_checkpoint(prefix)
    save_checkpoint(str(tmp_path / "d"), _params(), {})
    open(str(tmp_path / "d.json"), "w").write('{"format": "tostnp-checkpo')
    with pytest.raises(ValueError, match="corrupted or truncated"):
        load_checkpoint(str(tmp_path / "d"))


_UNPICKLED = []


class _Trap:
    """Records it if it is ever unpickled."""

    def __reduce__(self):
        return (_UNPICKLED.append, ("unpickled!",))


def test_pickled_object_array_refused(tmp_path):
    prefix = str(tmp_path / "c")
    npz, js = save_checkpoint(prefix, {"W": np.zeros(2)}, {})
    obj = np.empty(2, dtype=object)
    obj[0], obj[1] = _Trap(), _Trap()
    with open(npz, "wb") as f:  # a hostile npz whose checksum has been updated to match
        np.savez(f, **{"params/W": obj})
    meta = json.load(open(js))
    meta["npz_sha256"] = hashlib.sha256(open(npz, "rb").read()).hexdigest()
    json.dump(meta, open(js, "w"))
    with pytest.raises(ValueError, match="(?i)pickle"):
        load_checkpoint(prefix)
    assert _UNPICKLED == []
    with pytest.raises(TypeError, match="numeric"):  # and never written in the first place
        save_checkpoint(prefix, {"W": obj}, {})
    assert _UNPICKLED == []


def test_failed_save_leaves_no_partial_file(tmp_path, monkeypatch):
    d = str(tmp_path)
    prefix = os.path.join(d, "c")
    good = _params(1)
    save_checkpoint(prefix, good, {"v": 1}, state={"step": 5})
    before = _listing(d)
    real_savez = np.savez

    def broken_savez(file, **arrays):  # writes part of the archive, then dies
        file.write(b"PK\x03\x04 partial archive bytes")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(np, "savez", broken_savez)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(prefix, _params(2), {"v": 2}, state={"step": 6})
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(os.path.join(d, "fresh"), _params(2), {"v": 2})
    monkeypatch.setattr(np, "savez", real_savez)
    assert _listing(d) == before  # no temporary files, no partial fresh.npz
    params, cfg, _, state = load_checkpoint(prefix)  # the previous checkpoint is intact
    assert state["step"] == 5 and cfg == {"v": 1}
    for k in good:
        assert _bits(params[k]) == _bits(good[k])


def test_interrupted_between_files_loads_the_new_checkpoint(tmp_path, monkeypatch):
    # The npz is the atomic unit: killed after it is in place but before its readable json
    # copy, the load returns the new checkpoint whole (the stale json copy is recognised).
    prefix = str(tmp_path / "c")
    save_checkpoint(prefix, _params(1), {}, state={"step": 1})
    real_replace = os.replace

    def replace_npz_only(src, dst):  # "crash" after the npz is in place, before the json
        if dst.endswith(".json"):
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace_npz_only)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(prefix, _params(2), {}, state={"step": 2})
    monkeypatch.setattr(os, "replace", real_replace)
    assert _listing(str(tmp_path)) == ["c.json", "c.npz"]
    params, _, _, state = load_checkpoint(prefix)
    assert state["step"] == 2
    for k, a in _params(2).items():
        assert _bits(params[k]) == _bits(a)


def test_bad_inputs(tmp_path):
    prefix = str(tmp_path / "c")
    with pytest.raises(TypeError, match="params"):
        save_checkpoint(prefix, [np.zeros(2)], {})
    with pytest.raises(TypeError, match="config"):
        save_checkpoint(prefix, {"W": np.zeros(2)}, "width=8")
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(prefix, {"W": np.zeros(2)}, {}, state={"W": np.zeros(3)})
    with pytest.raises(ValueError, match="prefix"):
        save_checkpoint(str(tmp_path) + os.sep, {"W": np.zeros(2)}, {})
    assert _listing(str(tmp_path)) == []  # nothing written by any failed call
