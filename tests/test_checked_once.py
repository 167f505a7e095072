"""Validation once per kind of model call (tostnp.backend.validate.checked_once).

The first call with a given signature runs every layer's checks; later identical calls skip
the structural checks. Every error a user can trigger must still appear, with its message, and
the trusted calls must compute exactly what the checked ones do.
"""
import numpy as np
import pytest

from tostnp import backend
from tostnp.backend import validate as _validate
from tostnp.models import get_lm_config, get_vision_config, lm_init, lm_forward, lm_backward, \
    vision_init, vision_forward

XP = backend.get_xp("cpu")


def _lm():
    cfg = get_lm_config("tiny-char", vocab_size=11, width=16, depth=1, num_heads=2,
                        block_size=8)
    return cfg, lm_init(cfg, backend.RNG(0), XP, XP.float64)


def test_second_call_is_trusted_and_identical():
    cfg, params = _lm()
    ids = XP.asarray(np.random.default_rng(0).integers(0, 11, size=(2, 8)))
    y1, c1 = lm_forward(ids, params, cfg)
    y2, c2 = lm_forward(ids, params, cfg)
    assert c2["trusted"] and not _validate.checks_off()
    assert np.array_equal(y1, y2)
    g1, g2 = lm_backward(XP.ones_like(y1), c1), lm_backward(XP.ones_like(y2), c2)
    assert all(np.array_equal(g1[k], g2[k]) for k in g1)


def test_errors_keep_their_messages_after_trusted_calls():
    cfg, params = _lm()
    ids = XP.asarray(np.random.default_rng(0).integers(0, 11, size=(2, 8)))
    lm_forward(ids, params, cfg)
    lm_forward(ids, params, cfg)                       # now trusted for this signature
    bad = dict(params)
    bad["blocks.0.mlp.W1"] = params["blocks.0.mlp.W1"][:, :5]
    with pytest.raises(ValueError, match=r"mlp\.W2"):  # a changed shape is a new signature
        lm_forward(ids, bad, cfg)
    bad = dict(params)
    bad["blocks.0.tssa.W_u"] = XP.astype(params["blocks.0.tssa.W_u"], XP.float32)
    with pytest.raises(TypeError, match="dtype"):
        lm_forward(ids, bad, cfg)
    bad = dict(params)
    del bad["blocks.0.tssa.W_o"]
    with pytest.raises(ValueError, match=r"missing key 'tssa\.W_o'"):
        lm_forward(ids, bad, cfg)
    with pytest.raises(ValueError, match=r"\[0, V\)"):  # a value check: runs on every call
        lm_forward(XP.full((2, 8), 11), params, cfg)


def test_vision_wrong_image_shape_after_trusted_calls():
    cfg = get_vision_config("tiny-digits", width=16, depth=1, num_heads=2)
    params = vision_init(cfg, backend.RNG(0), XP, XP.float64)
    images = XP.asarray(np.random.default_rng(1).random((3, 8, 8, 1)))
    vision_forward(images, params, cfg)
    _, cache = vision_forward(images, params, cfg)
    assert cache["trusted"]
    with pytest.raises(ValueError, match="images must have shape"):
        vision_forward(images[:, :4], params, cfg)
