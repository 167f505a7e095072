"""AdamW, lr_schedule and clip_grad_norm against plain, independent references."""
import math

import numpy as np
import pytest

import array_api_strict as xps

from tostnp.train.optim import AdamW, clip_grad_norm, default_no_decay, lr_schedule

NAMES = ["blocks.0.tssa.W_u", "blocks.0.tssa.temp", "blocks.0.ln1.gamma", "blocks.0.mlp.b1",
         "head.W", "blocks.0.tssa.denom_bias"]
DECAYED = {"blocks.0.tssa.W_u", "head.W"}
SHAPES = [(3, 4), (2, 1), (4,), (5,), (4, 3), (2, 3, 1)]


def _params(seed, dtype=np.float64):
    r = np.random.default_rng(seed)
    return {n: r.standard_normal(s).astype(dtype) for n, s in zip(NAMES, SHAPES)}


def _grads(r, dtype=np.float64):
    return {n: r.standard_normal(s).astype(dtype) for n, s in zip(NAMES, SHAPES)}


def _adamw_loop(theta, grad_seq, lrs, b1, b2, eps, wd):
    """AdamW written element by element with Python floats (the paper's formulas)."""
    theta = [float(t) for t in theta]
    m = [0.0] * len(theta)
    v = [0.0] * len(theta)
    for t, (g, lr) in enumerate(zip(grad_seq, lrs), start=1):
        for i in range(len(theta)):
            gi = float(g[i])
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            mhat = m[i] / (1 - b1 ** t)
            vhat = v[i] / (1 - b2 ** t)
            theta[i] = theta[i] - lr * wd * theta[i] - lr * mhat / (math.sqrt(vhat) + eps)
    return np.array(theta)


def test_adamw_matches_elementwise_loop_float64():
    params = _params(0)
    start = {n: p.copy() for n, p in params.items()}
    opt = AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    r = np.random.default_rng(1)
    grad_seq, lrs = [], [1e-2, 3e-2, 2e-2, 5e-3, 1e-2]
    for k, lr in enumerate(lrs):
        g = _grads(r)
        grad_seq.append(g)
        opt.step(g, lr=None if k == 0 else lr)  # step 0 uses the default lr (1e-2)
    assert opt.t == 5
    for n in NAMES:
        wd = 0.1 if n in DECAYED else 0.0
        ref = _adamw_loop(start[n].ravel(), [g[n].ravel() for g in grad_seq], lrs,
                          0.9, 0.95, 1e-8, wd).reshape(start[n].shape)
        np.testing.assert_allclose(opt.params[n], ref, rtol=1e-12, atol=1e-14, err_msg=n)
        assert opt.params[n] is params[n]  # the caller's dict is the one updated
        np.testing.assert_array_equal(start[n], start[n])


def test_weight_decay_only_where_intended_zero_grads():
    # With g = 0 the Adam part is exactly 0, so a decayed parameter shrinks by (1 - lr wd).
    params = _params(2)
    start = {n: p.copy() for n, p in params.items()}
    opt = AdamW(params, lr=0.5, weight_decay=0.2)
    opt.step({n: np.zeros_like(p) for n, p in params.items()})
    for n in NAMES:
        factor = 1 - 0.5 * 0.2 if n in DECAYED else 1.0
        np.testing.assert_allclose(params[n], start[n] * factor, rtol=1e-15, err_msg=n)
    # custom rule: decay nothing
    params2 = _params(2)
    opt2 = AdamW(params2, lr=0.5, weight_decay=0.2, no_decay=lambda name: True)
    opt2.step({n: np.zeros_like(p) for n, p in params2.items()})
    for n in NAMES:
        np.testing.assert_array_equal(params2[n], start[n])


def test_adamw_float32_stays_float32_and_does_not_touch_old_arrays():
    params = _params(3, np.float32)
    held = params["head.W"]
    held_copy = held.copy()
    opt = AdamW(params, lr=1e-3)
    opt.step(_grads(np.random.default_rng(4), np.float32))
    for n in NAMES:
        assert params[n].dtype == np.float32, n
        assert opt.m[n].dtype == np.float32 and opt.v[n].dtype == np.float32
    np.testing.assert_array_equal(held, held_copy)  # new array assigned, old one intact
    assert not np.array_equal(params["head.W"], held_copy)


def test_state_dict_round_trip_resumes_identically():
    r = np.random.default_rng(5)
    grads = [_grads(r) for _ in range(5)]
    pa = _params(6)
    a = AdamW(pa, lr=1e-2)
    for g in grads[:3]:
        a.step(g)
    sd = a.state_dict()
    assert sd["step"] == 3
    assert set(sd["arrays"]) == {f"{k}.{n}" for k in "mv" for n in NAMES}
    host = {k: np.array(v) for k, v in sd["arrays"].items()}  # as a checkpoint would hand back
    pb = {n: p.copy() for n, p in pa.items()}
    b = AdamW(pb, lr=1e-2)
    b.load_state_dict({"step": sd["step"], "arrays": host})
    for g in grads[3:]:
        a.step(g)
        b.step(g)
    for n in NAMES:
        np.testing.assert_array_equal(pa[n], pb[n])
    # the state_dict was a copy, not a live view of the moments
    assert not np.array_equal(sd["arrays"]["m.head.W"], a.m["head.W"])


def test_adamw_strict_device1_matches_numpy():
    dev = xps.Device("device1")
    p_np = _params(7, np.float32)
    g_np = _grads(np.random.default_rng(8), np.float32)
    p_st = {n: xps.asarray(p, device=dev) for n, p in p_np.items()}
    g_st = {n: xps.asarray(g, device=dev) for n, g in g_np.items()}
    opt_np, opt_st = AdamW(p_np, lr=1e-2), AdamW(p_st, lr=1e-2)
    for _ in range(2):
        opt_np.step(g_np)
        opt_st.step(g_st)
    g_clip, norm = clip_grad_norm(g_st, 0.5)
    assert norm > 0.5
    sd = opt_st.state_dict()
    opt_st.load_state_dict({"step": 2, "arrays": {k: np.ones(tuple(a.shape), np.float32)
                                                  for k, a in sd["arrays"].items()}})
    for n in NAMES:
        assert p_st[n].device == dev and p_st[n].dtype == xps.float32
        assert g_clip[n].device == dev and opt_st.m[n].device == dev
        host = np.asarray(p_st[n].to_device(xps.Device("CPU_DEVICE")))
        np.testing.assert_allclose(host, p_np[n], rtol=1e-6, atol=1e-7, err_msg=n)


def test_adamw_bad_inputs():
    params = _params(9)
    opt = AdamW(params, lr=1e-3)
    g = _grads(np.random.default_rng(10))
    del g["head.W"]
    with pytest.raises(KeyError, match="head.W"):
        opt.step(g)
    g = _grads(np.random.default_rng(10))
    g["head.W"] = np.zeros((3, 3))
    with pytest.raises(ValueError, match="head.W.*expected"):
        opt.step(g)
    g = _grads(np.random.default_rng(10))
    g["head.W"] = g["head.W"].astype(np.float32)
    with pytest.raises(ValueError, match="dtype"):
        opt.step(g)
    with pytest.raises(ValueError, match="betas"):
        AdamW(_params(9), lr=1e-3, betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="params"):
        AdamW({}, lr=1e-3)
    with pytest.raises(TypeError, match="floating"):
        AdamW({"W": np.zeros(3, dtype=np.int64)}, lr=1e-3)
    with pytest.raises(KeyError, match="optimizer state is missing"):
        opt.load_state_dict({"step": 1, "arrays": {}})


@pytest.mark.parametrize("name,exempt", [
    ("blocks.0.tssa.W_u", False), ("blocks.0.tssa.W_o", False), ("blocks.3.mlp.W1", False),
    ("tok_embed.W", False), ("patch_embed.W", False), ("head.W", False), ("W_qkv", False),
    ("blocks.0.tssa.temp", True), ("blocks.0.tssa.denom_bias", True),
    ("blocks.0.ln1.gamma", True), ("blocks.0.ln1.beta", True), ("ln_f.gamma", True),
    ("norm.gamma", True), ("final_norm.weight", True), ("blocks.0.ls1.gamma", True),
    ("blocks.0.mlp.b1", True), ("blocks.0.mlp.b2", True), ("blocks.0.tssa.b_u", True),
    ("cls_blocks.0.attn.b_qkv", True), ("head.b", True), ("head.bias", True),
    ("pos_embed", True), ("pos_embed.W", True), ("wpe.W", True), ("cls_token", True),
    ("cls_blocks.0.attn.W_q", False),
])
def test_default_no_decay(name, exempt):
    assert default_no_decay(name) is exempt


def _ref_schedule(step, max_lr, min_lr, warmup, total):
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total:
        return min_lr
    frac = (step - warmup) / (total - warmup)
    return min_lr + 0.5 * (max_lr - min_lr) * (1 + math.cos(math.pi * frac))


def test_lr_schedule_values():
    kw = dict(max_lr=6e-4, min_lr=6e-5, warmup_steps=10, total_steps=110)
    assert lr_schedule(0, **kw) == pytest.approx(6e-5)  # 6e-4 * 1/10
    assert lr_schedule(9, **kw) == pytest.approx(6e-4)  # last warm-up step
    assert lr_schedule(10, **kw) == pytest.approx(6e-4)  # start of the cosine
    assert lr_schedule(60, **kw) == pytest.approx(0.5 * (6e-4 + 6e-5))  # half-way: cos = 0
    assert lr_schedule(110, **kw) == pytest.approx(6e-5)  # end of training
    assert lr_schedule(500, **kw) == pytest.approx(6e-5)
    lrs = [lr_schedule(s, **kw) for s in range(120)]
    assert all(a < b for a, b in zip(lrs[:9], lrs[1:10]))  # warm-up increases
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))  # then never increases
    assert all(6e-5 * (1 - 1e-12) <= lr <= 6e-4 * (1 + 1e-12) for lr in lrs)
    for s in range(0, 120, 7):
        assert lr_schedule(s, **kw) == pytest.approx(_ref_schedule(s, 6e-4, 6e-5, 10, 110))
    # no warm-up
    assert lr_schedule(0, max_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=4) == 1.0
    assert lr_schedule(2, max_lr=1.0, min_lr=0.0, warmup_steps=0, total_steps=4) == \
        pytest.approx(0.5)


def test_lr_schedule_bad_inputs():
    with pytest.raises(ValueError, match="total_steps"):
        lr_schedule(0, max_lr=1.0, min_lr=0.1, warmup_steps=10, total_steps=5)
    with pytest.raises(ValueError, match="min_lr"):
        lr_schedule(0, max_lr=0.1, min_lr=1.0, warmup_steps=1, total_steps=5)
    with pytest.raises(ValueError, match="step"):
        lr_schedule(-1, max_lr=1.0, min_lr=0.1, warmup_steps=1, total_steps=5)


def test_clip_grad_norm_against_numpy_norm():
    r = np.random.default_rng(11)
    grads = _grads(r, np.float32)
    before = {n: g.copy() for n, g in grads.items()}
    ref = float(np.linalg.norm(np.concatenate([g.astype(np.float64).ravel()
                                               for g in grads.values()])))
    clipped, norm = clip_grad_norm(grads, 1.0)
    assert isinstance(norm, float)
    assert norm == pytest.approx(ref, rel=1e-6)
    assert ref > 1.0
    new_norm = np.linalg.norm(np.concatenate([g.astype(np.float64).ravel()
                                              for g in clipped.values()]))
    assert new_norm == pytest.approx(1.0, rel=1e-5)
    for n in NAMES:
        assert clipped[n].dtype == np.float32
        np.testing.assert_allclose(clipped[n], before[n] / ref, rtol=1e-5)  # same direction
        np.testing.assert_array_equal(grads[n], before[n])  # inputs untouched
    same, norm2 = clip_grad_norm(grads, 10 * ref)  # under the threshold: unchanged
    assert norm2 == pytest.approx(ref, rel=1e-6)
    for n in NAMES:
        np.testing.assert_array_equal(same[n], before[n])
    _, norm3 = clip_grad_norm(grads, None)
    assert norm3 == pytest.approx(ref, rel=1e-6)


def test_clip_grad_norm_nonfinite_and_bad_inputs():
    grads = {"W": np.array([1.0, np.inf]), "b": np.array([3.0])}
    out, norm = clip_grad_norm(grads, 1.0)
    assert math.isinf(norm)
    np.testing.assert_array_equal(out["b"], grads["b"])
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm(grads, 0.0)
    with pytest.raises(TypeError, match="grads"):
        clip_grad_norm([np.zeros(2)], 1.0)
