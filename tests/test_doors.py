"""Validate once, at the door: the public entry points check their arguments and name the wrong
one; the layer cores below them trust their callers; nothing keeps validation state.

"The walk" of a call is measured as a reader would follow it through the code: the tostnp
functions it enters, in the order of their first entry (comprehensions are part of their
function); a *stay* is a run of consecutive functions in one module (a *room*). Run this file
as a script to print the walk of ``lm_forward`` and ``vision_forward``.
"""
import os
import sys
import types

import numpy as np
import pytest

import tostnp
from tostnp import backend
from tostnp.backend import validate
from tostnp.models import (get_lm_config, get_vision_config, lm_init, lm_forward, lm_backward,
                           lm_generate, vision_init, vision_forward, vision_backward,
                           vision_predict)
from tostnp.nn import tost_block_forward, tssa_forward

XP = backend.get_xp("cpu")
ROOT = os.path.dirname(tostnp.__file__)
VALIDATE = os.path.relpath(validate.__file__, ROOT)


def _lm(depth=1):
    cfg = get_lm_config("tiny-char", vocab_size=11, width=16, depth=depth, num_heads=2,
                        block_size=8)
    return cfg, lm_init(cfg, backend.RNG(0), XP, XP.float64)


def _ids(T=8):
    return XP.asarray(np.random.default_rng(0).integers(0, 11, size=(2, T)))


def _vision():
    cfg = get_vision_config("tiny-digits", width=16, depth=1, num_heads=2)
    return cfg, vision_init(cfg, backend.RNG(0), XP, XP.float64)


def _images(B=3):
    return XP.asarray(np.random.default_rng(1).random((B, 8, 8, 1)))


def trace(fn):
    """Call fn() under a profiler -> [(module path relative to tostnp/, function, caller module)]
    for every call of a tostnp function (comprehensions and generators left out)."""
    events = []

    def prof(frame, event, arg):
        if event != "call" or frame.f_code.co_name.startswith("<"):
            return
        f = frame.f_code.co_filename
        if f.startswith(ROOT):
            back = frame.f_back
            caller = back.f_code.co_filename if back is not None else ""
            events.append((os.path.relpath(f, ROOT), frame.f_code.co_name,
                           os.path.relpath(caller, ROOT) if caller.startswith(ROOT) else ""))

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return events


def walk(fn):
    """(stays, rooms, validation entries) of fn(): stays = runs of one module in the sequence of
    functions ordered by first entry; validation entries = {function of validate.py: calls from
    outside validate.py}."""
    first = list(dict.fromkeys((m, n) for m, n, _ in trace(fn)))
    mods = [m for m, _ in first]
    stays = [m for i, m in enumerate(mods) if i == 0 or mods[i - 1] != m]
    entries = {}
    for m, n, caller in trace(fn):
        if m == VALIDATE and caller != VALIDATE:
            entries[n] = entries.get(n, 0) + 1
    return stays, sorted(set(mods)), entries


# --------------------------------------------------------------------------------------------
# the contract
# --------------------------------------------------------------------------------------------
def test_lm_walk_is_short_and_validates_once():
    cfg, params = _lm(depth=4)
    ids = _ids()
    stays, rooms, entries = walk(lambda: lm_forward(ids, params, cfg))
    # 18 stays before the block on NumPy folded its LayerNorms' and LayerScales' weights into
    # its products (nn/block_fold.py: one module more on the way, and the folded LayerNorm
    # shift becomes the TSSA input bias, whose add enters backend/ once more): 21; the MLP asks
    # backend/runtime.py whether a backward follows (backward_ahead: a training step keeps the
    # GELU's slope, a forward alone its gate): 22; the causal layer's NumPy fast path has a
    # file of its own (backend/kernels_causal.py), which calls the fast path's shared helpers
    # in backend/kernels.py (the head indicator, the softmax over heads) and comes back: 24
    assert len(stays) <= 24, " -> ".join(stays)
    assert entries and max(entries.values()) == 1, entries
    assert set(entries) >= {"check_token_ids", "check_params"}


@pytest.mark.parametrize("call", ["vision_forward", "vision_predict", "lm_backward",
                                  "lm_generate"])
def test_every_door_enters_each_check_at_most_once(call):
    if call.startswith("vision"):
        cfg, params = _vision()
        x = _images()
        fn = {"vision_forward": lambda: vision_forward(x, params, cfg),
              "vision_predict": lambda: vision_predict(params, x, cfg, batch_size=1)}[call]
    else:
        cfg, params = _lm(depth=2)
        ids = _ids()
        logits, cache = lm_forward(ids, params, cfg)
        fn = {"lm_backward": lambda: lm_backward(XP.ones_like(logits), cache),
              "lm_generate": lambda: lm_generate(params, cfg, ids[:, :3], 4, seed=0)}[call]
    _, _, entries = walk(fn)
    assert entries and max(entries.values()) == 1, entries


def test_validation_keeps_no_state():
    """No cache of checked calls, no thread-local trust flag: validate.py holds functions only."""
    for name, value in vars(validate).items():
        if name.startswith("__") or name == "annotations":
            continue
        assert callable(value) or isinstance(value, types.ModuleType), name
    cfg, params = _lm()
    ids = _ids()
    y1, _ = lm_forward(ids, params, cfg)
    y2, _ = lm_forward(ids, params, cfg)
    assert np.array_equal(y1, y2)
    bad = dict(params)                       # a bad call after good ones is still checked
    bad["blocks.0.mlp.W1"] = params["blocks.0.mlp.W1"][:, :5]
    with pytest.raises(ValueError, match=r"params\['blocks\.0\.mlp\.W1'\] must have shape \(16, 64\)"):
        lm_forward(ids, bad, cfg)


def test_lm_door_names_the_wrong_argument():
    cfg, params = _lm()
    ids = _ids()
    bad = dict(params)
    bad["blocks.0.tssa.W_u"] = XP.astype(params["blocks.0.tssa.W_u"], XP.float32)
    with pytest.raises(TypeError, match=r"blocks\.0\.tssa\.W_u.*dtype"):
        lm_forward(ids, bad, cfg)
    bad = dict(params)
    del bad["blocks.0.tssa.W_o"]
    with pytest.raises(ValueError, match=r"missing key 'blocks\.0\.tssa\.W_o'"):
        lm_forward(ids, bad, cfg)
    bad = dict(params, extra=params["wte"])
    with pytest.raises(ValueError, match=r"unknown key 'extra'"):
        lm_forward(ids, bad, cfg)
    with pytest.raises(TypeError, match="params must be a dict"):
        lm_forward(ids, [params["wte"]], cfg)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V\)"):
        lm_forward(XP.full((2, 8), 11), params, cfg)
    with pytest.raises(ValueError, match=r"ids must be an integer array of shape \(B, T\)"):
        lm_forward(XP.zeros((2, 8)), params, cfg)
    with pytest.raises(ValueError, match="block_size"):
        lm_forward(_ids(9), params, cfg)
    logits, cache = lm_forward(ids, params, cfg)
    with pytest.raises(ValueError, match="dlogits must have the logits' shape"):
        lm_backward(logits[:, :4], cache)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, V\)"):
        lm_generate(params, cfg, XP.full((1, 2), -1), 3)


def test_vision_door_names_the_wrong_argument():
    cfg, params = _vision()
    images = _images()
    with pytest.raises(ValueError, match="images must have shape"):
        vision_forward(images[:, :4], params, cfg)
    with pytest.raises(TypeError, match=r"params\['patch\.W'\] has dtype float64 but the input has float32"):
        vision_forward(XP.astype(images, XP.float32), params, cfg)
    bad = dict(params)
    del bad["head.b"]
    with pytest.raises(ValueError, match=r"missing key 'head\.b'"):
        vision_forward(images, bad, cfg)
    with pytest.raises(ValueError, match="images must have shape"):
        vision_predict(params, images[:, :4], cfg)
    logits, cache = vision_forward(images, params, cfg)
    with pytest.raises(ValueError, match="dlogits must have the logits' shape"):
        vision_backward(logits[:2], cache)


def test_public_layers_are_doors_too():
    """A layer called by a user checks its arguments; the same layer inside a model does not."""
    cfg, params = _lm()
    from tostnp.nn.params import sub
    bp = sub(params, "blocks.0")
    x = XP.asarray(np.random.default_rng(2).standard_normal((2, 8, 16)))
    with pytest.raises(ValueError, match=r"missing key 'tssa\.W_o'"):
        tost_block_forward(x, {k: v for k, v in bp.items() if k != "tssa.W_o"}, 2, causal=True)
    with pytest.raises(ValueError, match="x must have 3 dimensions"):
        tssa_forward(x[0], sub(bp, "tssa"), 2, causal=True)
    _, _, entries = walk(lambda: tost_block_forward(x, bp, 2, causal=True))
    assert entries and max(entries.values()) == 1, entries


if __name__ == "__main__":
    for label, make in [("lm_forward (tiny-char, depth 4)", lambda: (_lm(4), _ids())),
                        ("vision_forward (tiny-digits, depth 1)", lambda: (_vision(), _images()))]:
        (cfg, params), x = make()
        fwd = lm_forward if label.startswith("lm") else vision_forward
        stays, rooms, entries = walk(lambda: fwd(x, params, cfg))
        print(f"{label}: {len(stays)} stays in {len(rooms)} rooms; validate.py entries {entries}")
        print("   " + " -> ".join(s[:-3] for s in stays))
