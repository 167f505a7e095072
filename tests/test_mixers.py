"""The token-mixer choice (tostnp.nn.mixers) in the layer, the block and both models.

* ``tssa-uniform`` against an autograd reference written directly with Pi = 1/h (float64);
* every mixer in the whole vision model (also with register tokens) and the whole LM against
  the whole-model autograd references of tests/test_models.py with the block's mixer replaced
  by the plain per-layer references of tests/references.py and tests/test_attention.py (tiny
  sizes, float64);
* a training step on the strict device for the mixers that are new here; clear errors.
"""
import autograd
import autograd.numpy as anp
import numpy as np
import pytest

from tostnp import backend
from tostnp.models import (get_vision_config, get_lm_config, vision_init, vision_loss_and_grads,
                           lm_init, lm_forward, lm_loss_and_grads, lm_generate, num_params)
from tostnp.nn import mixers as M
import test_models as TM
from references import (ref_tssa, ref_layer_norm, ref_mlp, ref_cross_entropy,
                        ref_softmax_attention, ref_linear_attention)
from test_attention import check_layer, make_params

xp_np = backend.get_xp("cpu")
B, N, C, H = 2, 5, 6, 2


# ------------------------------------------------------------------------------------------
# references
# ------------------------------------------------------------------------------------------
def ref_tssa_uniform(x, P, h, causal, pre=""):
    """TSSA with Pi_nk = 1/h for every token and head (book/06_tssa_layer.md, eq-layer-pi replaced by 1/h)."""
    Bx, n, Cx = x.shape
    p = Cx // h
    w = x @ P[pre + "W_u"] + P.get(pre + "b_u", 0.0)
    outs = []
    for k in range(h):
        wk = w[:, :, k * p:(k + 1) * p]                                   # (B, N, p)
        if causal:
            S2 = anp.cumsum(wk ** 2 / h, axis=1)                          # (B, T, p)
            S3 = (np.arange(1, n + 1) / h)[None, :, None]                 # sum_{s<=t} 1/h
            m = S2 / (S3 + 1e-8)
        else:
            m = anp.sum(wk ** 2 / h, axis=1, keepdims=True) / (n / h + 1e-8)   # (B, 1, p)
        outs.append(-wk / h / (1.0 + m))
    return anp.concatenate(outs, axis=-1) @ P[pre + "W_o"] + P.get(pre + "b_o", 0.0)


def ref_mixer(name, x, P, pre, h, causal):
    """The mixer's output from the plain references; ``pre`` is the block prefix ("blocks.0.")."""
    if name == "tssa":
        return ref_tssa(x, P, h, causal, pre=pre + "tssa.")
    if name == "tssa-uniform":
        return ref_tssa_uniform(x, P, h, causal, pre + "tssa.")
    Q = {k[len(pre) + 5:]: v for k, v in P.items() if k.startswith(pre + "attn.")}
    if name in ("softmax", "flash"):
        return ref_softmax_attention(x, Q, h, causal)
    return ref_linear_attention(x, Q, h, causal)


@pytest.fixture
def mixer_refs(monkeypatch):
    """Route the whole-model references of test_models through ``ref_mixer(name, ...)``."""
    def use(name):
        def r_block(x, P, pre, h, causal, eps):
            a = ref_layer_norm(x, P[pre + "ln1.gamma"], P[pre + "ln1.beta"], eps)
            x = x + P[pre + "ls1.gamma"] * ref_mixer(name, a, P, pre, h, causal)
            b = ref_layer_norm(x, P[pre + "ln2.gamma"], P[pre + "ln2.beta"], eps)
            return x + P[pre + "ls2.gamma"] * ref_mlp(b, P, pre + "mlp.")
        monkeypatch.setattr(TM, "r_block", r_block)
    return use


def r_vision_loss_registers(P, images, y, cfg):
    """test_models.r_vision_loss with R register tokens appended after the position embedding
    and dropped after the blocks (mean pooling)."""
    Bx, S, _, Cin = images.shape
    Pz, g = cfg.patch_size, S // cfg.patch_size
    patches = images.reshape(Bx, g, Pz, g, Pz, Cin).transpose(0, 1, 3, 2, 4, 5)
    x = patches.reshape(Bx, g * g, Pz * Pz * Cin) @ P["patch.W"] + P["patch.b"] + P["pos_embed"]
    x = anp.concatenate([x, P["registers"] * anp.ones((Bx, 1, 1))], axis=1)
    for i in range(cfg.depth):
        x = TM.r_block(x, P, f"blocks.{i}.", cfg.num_heads, False, cfg.ln_eps)
    pooled = anp.mean(x[:, :g * g, :], axis=1)
    logits = ref_layer_norm(pooled, P["norm.gamma"], P["norm.beta"], cfg.ln_eps) @ P["head.W"] \
        + P["head.b"]
    return ref_cross_entropy(logits, y)


# ------------------------------------------------------------------------------------------
# the layer
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_tssa_uniform_matches_autograd(causal, bias):
    x = np.random.default_rng(1).standard_normal((B, N, C))
    P = make_params(2, {"W_u": (C, C), "b_u": (C,), "W_o": (C, C), "b_o": (C,)}, bias)
    y, cache = M.mixer_forward("tssa-uniform", x, P, H, causal=causal)
    assert np.array_equal(cache["Pi"], np.full((B, H, N), 1.0 / H))
    check_layer(lambda x, P: M.mixer_forward("tssa-uniform", x, P, H, causal=causal),
                M.mixer_backward, lambda x, P: ref_tssa_uniform(x, P, H, causal), x, P)


@pytest.mark.parametrize("name", M.MIXERS)
def test_mixer_init_and_spec_agree(name):
    for causal in (False, True):
        P = M.mixer_init(backend.RNG(0), xp_np, name, 8, 2, causal=causal, max_len=7,
                         dtype=xp_np.float64)
        spec = M.mixer_spec(name, 8, 2, causal)
        assert set(P) <= set(spec) and all(k in P for k, (_, req) in spec.items() if req)
        for k, a in P.items():
            assert tuple(7 if s == "max_len" else s for s in spec[k][0]) == a.shape, k
        x = np.random.default_rng(3).standard_normal((2, 7, 8))
        y, c = M.mixer_forward(name, x, P, 2, causal=causal)
        dx, g = M.mixer_backward(np.ones_like(y), c)
        assert y.shape == dx.shape == x.shape and set(g) == set(P)


def test_mixer_errors():
    with pytest.raises(ValueError, match="mixer must be one of tssa, tssa-uniform, softmax"):
        M.check_mixer("performer")
    with pytest.raises(ValueError, match="mixer must be one of"):
        get_vision_config("tiny-digits", mixer="flashy")
    P = M.mixer_init(backend.RNG(0), xp_np, "tssa", 6, 2, dtype=xp_np.float64)
    with pytest.raises(ValueError, match="'tssa-uniform' has no parameter 'temp'"):
        M.mixer_forward("tssa-uniform", np.zeros((1, 3, 6)), P, 2)
    with pytest.raises(ValueError, match="num_registers"):
        get_vision_config("tiny-digits", num_registers=-1)


# ------------------------------------------------------------------------------------------
# whole models
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mixer", M.MIXERS)
def test_vision_grad_matches_autograd_every_mixer(mixer, mixer_refs):
    mixer_refs(mixer)
    cfg = get_vision_config("tiny-digits", mixer=mixer, **TM.TINY_V)
    P = TM._perturbed(vision_init(cfg, backend.RNG(0), xp_np, dtype=xp_np.float64), 1)
    rng = np.random.default_rng(2)
    images, y = rng.random((3, 8, 8, 1)), np.array([1, 7, 1])
    loss, grads, _ = vision_loss_and_grads(P, images, y, cfg)
    assert float(loss) == pytest.approx(float(TM.r_vision_loss(P, images, y, cfg)), rel=1e-10)
    TM._assert_grads_close(grads, autograd.grad(TM.r_vision_loss)(P, images, y, cfg))


@pytest.mark.parametrize("mixer", ["tssa", "softmax"])
def test_vision_with_registers_matches_autograd(mixer, mixer_refs):
    mixer_refs(mixer)
    cfg = get_vision_config("tiny-digits", mixer=mixer, num_registers=3, pool="mean", **TM.TINY_V)
    P = TM._perturbed(vision_init(cfg, backend.RNG(0), xp_np, dtype=xp_np.float64), 1)
    assert P["registers"].shape == (1, 3, 8)
    rng = np.random.default_rng(2)
    images, y = rng.random((3, 8, 8, 1)), np.array([1, 7, 1])
    loss, grads, _ = vision_loss_and_grads(P, images, y, cfg)
    assert float(loss) == pytest.approx(float(r_vision_loss_registers(P, images, y, cfg)),
                                        rel=1e-10)
    TM._assert_grads_close(grads, autograd.grad(r_vision_loss_registers)(P, images, y, cfg))


@pytest.mark.parametrize("mixer", M.MIXERS)
def test_lm_grad_matches_autograd_every_mixer(mixer, mixer_refs):
    mixer_refs(mixer)
    cfg = get_lm_config("tiny-char", mixer=mixer, **TM.TINY_LM)
    P = TM._perturbed(lm_init(cfg, backend.RNG(0), xp_np, dtype=xp_np.float64), 6)
    rng = np.random.default_rng(7)
    ids, tg = rng.integers(0, 11, (2, 6)), rng.integers(0, 11, (2, 6))
    loss, grads, _ = lm_loss_and_grads(P, ids, tg, cfg)
    assert float(loss) == pytest.approx(float(TM.r_lm_loss(P, ids, tg, cfg)), rel=1e-10)
    TM._assert_grads_close(grads, autograd.grad(TM.r_lm_loss)(P, ids, tg, cfg))


def test_parameter_counts_differ_only_in_the_mixer():
    """Same model, other mixer: only the mixer's weights change (4C^2 + 4C against 2C^2 + 2C + h)."""
    base = dict(TM.TINY_V)
    n = {m: num_params(vision_init(get_vision_config("tiny-digits", mixer=m, **base),
                                   backend.RNG(0), xp_np)) for m in M.MIXERS}
    C_, h, depth = base["width"], base["num_heads"], base["depth"]
    assert n["softmax"] == n["flash"] == n["linear"]
    assert n["softmax"] - n["tssa"] == depth * ((4 * C_ * C_ + 4 * C_) - (2 * C_ * C_ + 2 * C_ + h))
    assert n["tssa"] - n["tssa-uniform"] == depth * h


@pytest.mark.parametrize("mixer", ["softmax", "tssa-uniform"])
def test_lm_generate_without_decoder_is_greedy_argmax(mixer):
    cfg = get_lm_config("tiny-char", mixer=mixer, **TM.TINY_LM)
    P = lm_init(cfg, backend.RNG(4), xp_np)
    out = lm_generate(P, cfg, np.array([[1, 2], [3, 4]]), 9, temperature=0.0)
    assert out.shape == (2, 11)
    for t in range(2, 11):
        ctx = out[:, max(0, t - cfg.block_size):t]
        logits, _ = lm_forward(ctx, P, cfg)
        assert np.array_equal(out[:, t], np.argmax(logits[:, -1], axis=-1))


@pytest.mark.parametrize("mixer", ["tssa-uniform", "flash", "linear"])
@pytest.mark.parametrize("kind", ["vision", "lm"])
def test_training_step_on_strict_device_every_mixer(kind, mixer, monkeypatch):
    """One clipped AdamW step on array_api_strict's device1 equals NumPy (float32)."""
    xps = pytest.importorskip("array_api_strict")
    orig_v, orig_l = TM.get_vision_config, TM.get_lm_config
    monkeypatch.setattr(TM, "get_vision_config", lambda n, **k: orig_v(n, mixer=mixer, **k))
    monkeypatch.setattr(TM, "get_lm_config", lambda n, **k: orig_l(n, mixer=mixer, **k))
    dev = xps.Device("device1")
    loss_s, grads_s, params_s = TM._one_step(xps, dev, kind)
    loss_n, grads_n, params_n = TM._one_step(xp_np, None, kind)
    cpu = xps.Device("CPU_DEVICE")
    assert loss_s.device == dev and float(loss_s) == pytest.approx(float(loss_n), rel=1e-5)
    assert any(k.split(".")[2] in ("attn", "tssa") for k in params_n if k.startswith("blocks."))
    for k in params_n:
        assert params_s[k].device == dev, k
        np.testing.assert_allclose(np.asarray(grads_s[k].to_device(cpu)), grads_n[k], rtol=2e-4,
                                   atol=1e-6, err_msg=k)


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_trains_with_every_mixer_choice(tmp_path, capsys):
    from tostnp.__main__ import main
    from tostnp.io import load_model
    tiny = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress", "--steps", "2"]
    out = str(tmp_path / "v")
    assert main(["train", "vision", "--mixer", "flash", "--registers", "2", "--batch-size", "16",
                 "--out", out] + tiny) == 0
    assert "ToST vision (flash)" in capsys.readouterr().out
    _, cfg, params, _ = load_model(out)
    assert (cfg.mixer, cfg.num_registers) == ("flash", 2) and "blocks.0.attn.W_qkv" in params
    text = tmp_path / "t.txt"
    text.write_text("hello world, hello tokens. " * 40)
    out = str(tmp_path / "lm")
    assert main(["train", "lm", "--mixer", "tssa-uniform", "--text", str(text), "--block-size",
                 "16", "--batch-size", "4", "--out", out] + tiny) == 0
    _, cfg, params, _ = load_model(out)
    assert cfg.mixer == "tssa-uniform" and "blocks.0.tssa.temp" not in params
    with pytest.raises(SystemExit):
        main(["train", "vision", "--mixer", "performer", "--out", str(tmp_path / "x")])
    assert "invalid choice: 'performer'" in capsys.readouterr().err
