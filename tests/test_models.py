"""Whole-model checks for tostnp.models (vision classifier and causal LM).

The references are autograd.numpy (float64), built here from tests/references.py (TSSA per the
book's eq-layer-w .. eq-causal-out, class attention, LayerNorm, tanh-GELU, cross-entropy): a
ToST block, the class-attention block, the tied LM head. Nothing is imported from tostnp for
the reference.
"""
import math

import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from tostnp import backend
from tostnp.models import (get_vision_config, get_lm_config, vision_init, vision_forward,
                           vision_loss_and_grads, lm_init, lm_forward, lm_loss_and_grads,
                           lm_generate, num_params, VISION_CONFIGS, LM_CONFIGS)
from tostnp.train.optim import AdamW, clip_grad_norm, default_no_decay
from references import (ref_tssa, ref_layer_norm, ref_mlp, ref_class_attention,
                        ref_cross_entropy)

xp_np = backend.get_xp("cpu")


# ------------------------------------------------------------------------------------------
# independent autograd references
# ------------------------------------------------------------------------------------------
def r_block(x, P, pre, h, causal, eps):
    a = ref_layer_norm(x, P[pre + "ln1.gamma"], P[pre + "ln1.beta"], eps)
    x = x + P[pre + "ls1.gamma"] * ref_tssa(a, P, h, causal, pre=pre + "tssa.")
    b = ref_layer_norm(x, P[pre + "ln2.gamma"], P[pre + "ln2.beta"], eps)
    return x + P[pre + "ls2.gamma"] * ref_mlp(b, P, pre + "mlp.")


def r_vision_loss(P, images, y, cfg):
    B, S, _, Cin = images.shape
    Pz, g = cfg.patch_size, S // cfg.patch_size
    patches = images.reshape(B, g, Pz, g, Pz, Cin).transpose(0, 1, 3, 2, 4, 5)
    x = patches.reshape(B, g * g, Pz * Pz * Cin) @ P["patch.W"] + P["patch.b"] + P["pos_embed"]
    for i in range(cfg.depth):
        x = r_block(x, P, f"blocks.{i}.", cfg.num_heads, False, cfg.ln_eps)
    if cfg.pool == "cls":
        cls = P["cls_token"] * anp.ones((B, 1, 1))
        for j in range(cfg.num_cls_blocks):
            pre = f"cab.{j}."
            if cfg.cab == "published":
                cls, x = r_cab_published(cls, x, P, pre, cfg)
                continue
            u = ref_layer_norm(anp.concatenate([cls, x], axis=1), P[pre + "norm1.gamma"],
                     P[pre + "norm1.beta"], cfg.ln_eps)
            cls = cls + P[pre + "ls1.gamma"] * ref_class_attention(u, P, cfg.num_heads,
                                                                   pre=pre + "attn.")
            cls = cls + P[pre + "ls2.gamma"] * ref_mlp(
                ref_layer_norm(cls, P[pre + "norm2.gamma"], P[pre + "norm2.beta"], cfg.ln_eps), P,
                pre + "mlp.")
        pooled = cls[:, 0, :]
    else:
        pooled = anp.mean(x, axis=1)
    logits = ref_layer_norm(pooled, P["norm.gamma"], P["norm.beta"], cfg.ln_eps) @ P["head.W"] + P["head.b"]
    return ref_cross_entropy(logits, y)


def r_cab_published(cls, x, P, pre, cfg):
    """XCiT's class-attention block with tokens_norm (as the published models compute it):
    class token -> LN2(c) + gamma2 MLP(LN2(c)) with c = cls + gamma1 CA(LN1([cls; x]));
    patch token t -> 2 LN2(t + gamma1 LN1(t))."""
    eps, g1, g2 = cfg.ln_eps, P[pre + "ls1.gamma"], P[pre + "ls2.gamma"]
    u = ref_layer_norm(anp.concatenate([cls, x], axis=1), P[pre + "norm1.gamma"],
                       P[pre + "norm1.beta"], eps)
    c = cls + g1 * ref_class_attention(u, P, cfg.num_heads, pre=pre + "attn.")
    ln2 = lambda z: ref_layer_norm(z, P[pre + "norm2.gamma"], P[pre + "norm2.beta"], eps)  # noqa
    new_cls = ln2(c) + g2 * ref_mlp(ln2(c), P, pre + "mlp.")
    return new_cls, 2.0 * ln2(x + g1 * u[:, 1:, :])


def r_lm_loss(P, ids, targets, cfg, E_out=None):
    """E_out: a separate output matrix (untied) to split the two uses of wte."""
    T = ids.shape[1]
    x = P["wte"][ids] + P["wpe"][:T]
    for i in range(cfg.depth):
        x = r_block(x, P, f"blocks.{i}.", cfg.num_heads, True, cfg.ln_eps)
    hN = ref_layer_norm(x, P["ln_f.gamma"], P["ln_f.beta"], cfg.ln_eps)
    E = P["wte"] if E_out is None else E_out
    return ref_cross_entropy(hN @ E.T, targets)


# ------------------------------------------------------------------------------------------
def _perturbed(params, seed, scale=0.2):
    """float64 host copies, moved away from init (LayerScale 1e-5, zero biases hide bugs)."""
    rng = np.random.default_rng(seed)
    return {k: np.asarray(v, dtype=np.float64) + scale * rng.standard_normal(v.shape)
            for k, v in params.items()}


def _assert_grads_close(got, want, rtol=1e-6, atol=1e-9):
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_allclose(np.asarray(got[k]), want[k], rtol=rtol, atol=atol, err_msg=k)


TINY_V = dict(width=8, depth=2, num_heads=2, mlp_ratio=2)


@pytest.mark.parametrize("pool,cab", [("cls", "published"), ("cls", "cls-only"),
                                      ("mean", "published")])
def test_vision_grad_matches_autograd(pool, cab):
    cfg = get_vision_config("tiny-digits", pool=pool, num_cls_blocks=2, cab=cab, **TINY_V)
    P = _perturbed(vision_init(cfg, backend.RNG(0), xp_np, dtype=xp_np.float64), 1)
    rng = np.random.default_rng(2)
    images, y = rng.random((3, 8, 8, 1)), np.array([1, 7, 1])
    loss, grads, logits = vision_loss_and_grads(P, images, y, cfg)
    assert logits.shape == (3, 10)
    ref = r_vision_loss(P, images, y, cfg)
    assert float(loss) == pytest.approx(float(ref), rel=1e-10)
    _assert_grads_close(grads, autograd.grad(r_vision_loss)(P, images, y, cfg))


def test_vision_grad_finite_differences():
    """Second opinion on a few coordinates: centred differences, h = 1e-5."""
    cfg = get_vision_config("tiny-digits", **TINY_V)
    P = _perturbed(vision_init(cfg, backend.RNG(3), xp_np, dtype=xp_np.float64), 4)
    rng = np.random.default_rng(5)
    images, y = rng.random((2, 8, 8, 1)), np.array([0, 3])
    _, grads, _ = vision_loss_and_grads(P, images, y, cfg)
    for k in ("patch.W", "blocks.0.tssa.temp", "blocks.1.tssa.W_u", "cab.0.attn.W_kv",
              "cls_token", "pos_embed"):
        idx = tuple(int(rng.integers(0, s)) for s in P[k].shape)
        vals = []
        for sgn in (1, -1):
            Q = dict(P)
            Q[k] = P[k].copy()
            Q[k][idx] += sgn * 1e-5
            vals.append(float(vision_loss_and_grads(Q, images, y, cfg)[0]))
        fd, an = (vals[0] - vals[1]) / 2e-5, float(grads[k][idx])
        assert abs(fd - an) / max(1e-8, abs(fd) + abs(an)) < 1e-6, (k, fd, an)


TINY_LM = dict(vocab_size=11, block_size=8, width=8, depth=2, num_heads=2, mlp_ratio=2)


def test_lm_grad_matches_autograd():
    cfg = get_lm_config("tiny-char", **TINY_LM)
    P = _perturbed(lm_init(cfg, backend.RNG(0), xp_np, dtype=xp_np.float64), 6)
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 11, (2, 6))
    ids[0, :3] = 4                                       # repeated tokens: scatter-add path
    tg = rng.integers(0, 11, (2, 6))
    loss, grads, logits = lm_loss_and_grads(P, ids, tg, cfg)
    assert logits.shape == (2, 6, 11)
    assert float(loss) == pytest.approx(float(r_lm_loss(P, ids, tg, cfg)), rel=1e-10)
    _assert_grads_close(grads, autograd.grad(r_lm_loss)(P, ids, tg, cfg))


def test_lm_tied_embedding_gradient_is_sum_of_both_uses():
    cfg = get_lm_config("tiny-char", **TINY_LM)
    P = _perturbed(lm_init(cfg, backend.RNG(1), xp_np, dtype=xp_np.float64), 8)
    rng = np.random.default_rng(9)
    ids, tg = rng.integers(0, 11, (2, 5)), rng.integers(0, 11, (2, 5))
    _, grads, _ = lm_loss_and_grads(P, ids, tg, cfg)
    g_in = autograd.grad(lambda Q: r_lm_loss(Q, ids, tg, cfg, E_out=P["wte"]))(P)["wte"]
    g_out = autograd.grad(lambda E: r_lm_loss(P, ids, tg, cfg, E_out=E))(P["wte"])
    assert np.abs(g_in).max() > 1e-6 and np.abs(g_out).max() > 1e-6
    np.testing.assert_allclose(grads["wte"], g_in + g_out, rtol=1e-6, atol=1e-10)
    with pytest.raises(AssertionError):  # either use alone is not the gradient
        np.testing.assert_allclose(grads["wte"], g_out, rtol=1e-3)


def test_lm_is_causal():
    cfg = get_lm_config("tiny-char", **TINY_LM)
    P = _perturbed(lm_init(cfg, backend.RNG(2), xp_np, dtype=xp_np.float64), 10)
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    ids2 = ids.copy()
    ids2[0, 4:] = [9, 0]
    a, _ = lm_forward(ids, P, cfg)
    b, _ = lm_forward(ids2, P, cfg)
    np.testing.assert_allclose(a[:, :4], b[:, :4], rtol=1e-12, atol=1e-12)
    assert np.abs(a[:, 4:] - b[:, 4:]).max() > 1e-6


def test_lm_init_follows_the_published_recipe():
    cfg = get_lm_config("tiny-char", vocab_size=50, width=64, depth=4, num_heads=4)
    P = lm_init(cfg, backend.RNG(0), xp_np)
    assert not any(k.endswith(("b_u", "b_o", "b1", "b2")) for k in P)      # no biases
    assert np.std(P["wte"]) == pytest.approx(0.02, rel=0.1)
    assert np.std(P["blocks.0.tssa.W_o"]) == pytest.approx(0.02 / math.sqrt(8), rel=0.1)
    assert np.std(P["blocks.3.mlp.W2"]) == pytest.approx(0.02 / math.sqrt(8), rel=0.1)
    assert np.all(P["blocks.2.ls1.gamma"] == np.float32(1e-5))
    assert all(v.dtype == np.float32 for v in P.values())


def test_generate_greedy_equals_argmax_of_full_forward():
    cfg = get_lm_config("tiny-char", **dict(TINY_LM, block_size=12))
    P = {k: np.asarray(v) for k, v in
         _perturbed(lm_init(cfg, backend.RNG(4), xp_np, dtype=xp_np.float64), 11, 0.5).items()}
    prompt = np.array([[3, 1, 4], [1, 5, 9]])
    out = lm_generate(P, cfg, prompt, 6, temperature=0.0)
    seq = prompt.copy()
    for _ in range(6):
        logits, _ = lm_forward(seq, P, cfg)
        seq = np.concatenate([seq, np.argmax(logits[:, -1], axis=-1)[:, None]], axis=1)
    np.testing.assert_array_equal(np.asarray(out), seq)


def test_generate_seeded_topk_and_beyond_context():
    cfg = get_lm_config("tiny-char", **TINY_LM)                 # block_size 8
    P = lm_init(cfg, backend.RNG(5), xp_np)
    prompt = np.array([[1, 2]])
    a = np.asarray(lm_generate(P, cfg, prompt, 20, temperature=1.0, top_k=3, seed=7))
    b = np.asarray(lm_generate(P, cfg, prompt, 20, temperature=1.0, top_k=3, seed=7))
    c = np.asarray(lm_generate(P, cfg, prompt, 20, temperature=1.0, seed=8))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (1, 22) and a.min() >= 0 and a.max() < 11
    assert not np.array_equal(a, c)
    # top_k=1 is greedy
    np.testing.assert_array_equal(
        np.asarray(lm_generate(P, cfg, prompt, 5, temperature=1.0, top_k=1, seed=3)),
        np.asarray(lm_generate(P, cfg, prompt, 5, temperature=0.0)))
    with pytest.raises(ValueError, match="temperature"):
        lm_generate(P, cfg, prompt, 3, temperature=-1.0)


# ------------------------------------------------------------------------------------------
# one full training step on array_api_strict device1, float32, equals NumPy
# ------------------------------------------------------------------------------------------
def _one_step(xp, device, kind):
    if kind == "vision":
        cfg = get_vision_config("tiny-digits", **TINY_V)
        params = vision_init(cfg, backend.RNG(0), xp, xp.float32, device)
        rng = np.random.default_rng(0)
        batch = (backend.from_host(xp, rng.random((4, 8, 8, 1)), dtype=xp.float32, device=device),
                 backend.from_host(xp, np.array([0, 1, 2, 3]), dtype=xp.int64, device=device))
        loss, grads, _ = vision_loss_and_grads(params, *batch, cfg)
    else:
        cfg = get_lm_config("tiny-char", **TINY_LM)
        params = lm_init(cfg, backend.RNG(0), xp, xp.float32, device)
        rng = np.random.default_rng(0)
        ids = backend.from_host(xp, rng.integers(0, 11, (2, 8)), dtype=xp.int64, device=device)
        tg = backend.from_host(xp, rng.integers(0, 11, (2, 8)), dtype=xp.int64, device=device)
        loss, grads, _ = lm_loss_and_grads(params, ids, tg, cfg)
    grads, _ = clip_grad_norm(grads, 1.0)
    opt = AdamW(params, lr=1e-2, no_decay=default_no_decay)
    opt.step(grads)
    return loss, grads, opt.params


@pytest.mark.parametrize("kind", ["vision", "lm"])
def test_training_step_on_strict_device_matches_numpy(kind, device):
    loss_s, grads_s, params_s = _one_step(device.xp, device.dev, kind)
    # the same (plain) code on NumPy: the fast path rounds differently, and AdamW turns the
    # rounding noise of gradients that are zero in exact arithmetic (the key bias of class
    # attention) into +-lr updates; tests/test_kernels.py compares the two paths
    old = backend.set_fast(False)
    try:
        loss_n, grads_n, params_n = _one_step(xp_np, None, kind)
    finally:
        backend.set_fast(old)
    f32 = device.dtype("float32")
    assert loss_s.dtype == f32 and device.holds(loss_s)
    assert float(backend.to_host(loss_s)) == pytest.approx(float(loss_n), rel=1e-5)
    for k in params_n:
        assert params_s[k].dtype == f32 and device.holds(params_s[k]), k
        np.testing.assert_allclose(backend.to_host(grads_s[k]), grads_n[k], rtol=2e-4, atol=1e-6,
                                   err_msg=k)
        np.testing.assert_allclose(backend.to_host(params_s[k]), params_n[k], rtol=1e-5,
                                   atol=1e-6, err_msg=k)


def test_generate_on_strict_device():
    xps = pytest.importorskip("array_api_strict")
    dev = xps.Device("device1")
    cfg = get_lm_config("tiny-char", **TINY_LM)
    P = lm_init(cfg, backend.RNG(5), xps, xps.float32, dev)
    Pn = lm_init(cfg, backend.RNG(5), xp_np)
    prompt = backend.from_host(xps, np.array([[1, 2]]), dtype=xps.int64, device=dev)
    out = lm_generate(P, cfg, prompt, 10, temperature=0.0)
    assert out.device == dev
    np.testing.assert_array_equal(np.asarray(out.to_device(xps.Device("CPU_DEVICE"))),
                                  np.asarray(lm_generate(Pn, cfg, np.array([[1, 2]]), 10,
                                                         temperature=0.0)))


# ------------------------------------------------------------------------------------------
def test_configs_instantiate_and_count_parameters():
    T = get_vision_config("T")
    assert (T.width, T.depth, T.num_heads, T.num_patches) == (192, 12, 4, 196)
    S = get_vision_config("S")
    assert (S.width, S.depth, S.num_heads) == (384, 12, 8)
    base = get_lm_config("base")
    assert (base.width, base.depth, base.num_heads) == (768, 12, 12)
    # counted from the shapes by hand for the tiny vision model (C=8, H=16, 16 patches, P=2)
    cfg = get_vision_config("tiny-digits", **TINY_V)
    C, H = 8, 16
    block = 4 * C + (2 * C * C + 2 * C + 2) + 2 * C + (C * H + H + H * C + C)
    cab = 4 * C + (C * C + C + 2 * C * C + 2 * C + C * C + C) + 2 * C + (C * H + H + H * C + C)
    want = (4 * C + C) + 16 * C + 2 * block + C + cab + 2 * C + (C * 10 + 10)
    assert num_params(vision_init(cfg, backend.RNG(0), xp_np)) == want
    assert set(VISION_CONFIGS) >= {"tiny-digits", "T", "S"}
    assert set(LM_CONFIGS) >= {"tiny-char", "base"}


def test_bad_inputs_raise_clear_errors():
    cfg = get_vision_config("tiny-digits", **TINY_V)
    P = vision_init(cfg, backend.RNG(0), xp_np)
    with pytest.raises(ValueError, match=r"images must have shape \(B, 8, 8, 1\)"):
        vision_forward(np.zeros((2, 7, 7, 1), dtype=np.float32), P, cfg)
    with pytest.raises(ValueError, match="multiple of num_heads"):
        get_vision_config("tiny-digits", width=10, num_heads=4)
    with pytest.raises(ValueError, match="unknown config"):
        get_lm_config("huge")
    lcfg = get_lm_config("tiny-char", **TINY_LM)
    LP = lm_init(lcfg, backend.RNG(0), xp_np)
    with pytest.raises(ValueError, match="block_size"):
        lm_forward(np.zeros((1, 9), dtype=np.int64), LP, lcfg)
    with pytest.raises(ValueError, match=r"ids must be an integer array of shape \(B, T\)"):
        lm_forward(np.zeros((1, 4), dtype=np.float32), LP, lcfg)
