"""Checkers for exercises/08_tost_block.md: LayerNorm forward and backward, the ToST block.

The block (pre-norm, LayerScale, residuals; MLP = Linear -> GELU (tanh form) -> Linear):

    x1 = x  + ls1 * TSSA(LN1(x))        y = x1 + ls2 * MLP(LN2(x1))       LN eps = 1e-6
"""
from __future__ import annotations

import math

import autograd
import autograd.numpy as anp
import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, run_specs
from ._compare import compare

_FORBID = ("tostnp.nn.layers", "tostnp.nn.block", "tostnp.models")
LN_EPS = 1e-6


def _ln(x, gamma, beta, eps, stop_stats=False):
    """LayerNorm over the last axis, for autograd; ``stop_stats`` holds mean and var fixed."""
    C = x.shape[-1]
    mu = anp.sum(x, axis=-1, keepdims=True) / C
    var = anp.sum((x - mu) ** 2, axis=-1, keepdims=True) / C
    if stop_stats:
        mu, var = np.asarray(getattr(mu, "_value", mu)), np.asarray(getattr(var, "_value", var))
    return (x - mu) / anp.sqrt(var + eps) * gamma + beta


def _ln_loop(x, gamma, beta, eps):
    """LayerNorm row by row, statistics written out."""
    X = x.reshape(-1, x.shape[-1])
    out = np.zeros_like(X)
    for i, row in enumerate(X):
        mu = sum(row) / len(row)
        var = sum((v - mu) ** 2 for v in row) / len(row)
        out[i] = [(v - mu) / math.sqrt(var + eps) * g + b for v, g, b in zip(row, gamma, beta)]
    return out.reshape(x.shape)


def check_layer_norm(fn, hidden=None):
    """fn(x, gamma, beta, eps) -> y, LayerNorm over the last axis (biased variance)."""
    specs = [((4, 6),), ((2, 3, 5),), ((7, 1, 8),), ((3, 2),)]              # (shape,)
    hidden_specs = [((1, 1, 1),), ((2, 9),)]

    def one(rng, shape):
        x = 3 * rng.standard_normal(shape) + 1
        g, b = rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
        eps = 1e-3
        want = _ln_loop(x, g, b, eps)
        C = shape[-1]
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        diag = [("the variance: LayerNorm uses the biased one (divide by C, not C - 1)",
                 lambda: (x - mu) / np.sqrt(x.var(-1, ddof=1, keepdims=True) + eps) * g + b),
                ("eps goes inside the square root, with the variance",
                 lambda: (x - mu) / (np.sqrt(var) + eps) * g + b),
                ("the statistics are taken over the wrong axis: one mean and variance per "
                 "token, over its C features",
                 lambda: (x - x.mean(0, keepdims=True)) / np.sqrt(x.var(0, keepdims=True) + eps)
                 * g + b),
                ("gamma and beta are swapped", lambda: (x - mu) / np.sqrt(var + eps) * b + g)]
        got = call_student(fn, x.copy(), g.copy(), b.copy(), eps, forbidden=_FORBID,
                           what="layer_norm")
        compare(got, want, f"LayerNorm of shape {shape}", diagnoses=diag if C > 1 else [],
                shape_desc="(like x)")
    return run_specs("layer_norm", one, specs, hidden_specs, hidden=hidden, seed=51,
                     label=lambda shape: f"shape {shape}")


def check_layer_norm_backward(fn, hidden=None):
    """fn(dy, x, gamma, beta, eps) -> (dx, dgamma, dbeta), the adjoint of LayerNorm."""
    # the last case has entries near 1e4: finite differences lose 6 digits there
    specs = [((4, 6), 1.0), ((2, 3, 5), 1.0), ((5, 2), 1.0), ((3, 8), 1e4)]
    hidden_specs = [((1, 1, 3), 1.0), ((2, 2, 4), 3e4)]

    def one(rng, shape, scale):
        x = 2 * scale * rng.standard_normal(shape) + scale
        g, b = rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
        dy = rng.standard_normal(shape)
        eps = 1e-3

        def L(x, g, b, stop=False):
            return anp.sum(dy * _ln(x, g, b, eps, stop))
        dx, dg, db = autograd.grad(L, (0, 1, 2))(x, g, b)
        held = autograd.grad(lambda x: L(x, g, b, True))(x)
        got = call_student(fn, dy.copy(), x.copy(), g.copy(), b.copy(), eps,
                           forbidden=_FORBID + ("autograd",), what="layer_norm_backward")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Fail("return a triple (dx, dgamma, dbeta)")
        M = int(np.prod(shape[:-1]))
        at = f" for shape {shape}" + (f", entries near {scale:g}" if scale != 1 else "")
        compare(got[2], db, f"dbeta{at}", shape_desc="(C,): summed over tokens",
                factors={"the number of tokens": M}, derived=True)
        compare(got[1], dg, f"dgamma{at}", shape_desc="(C,): summed over tokens",
                factors={"the number of tokens": M}, derived=True)
        compare(got[0], dx, f"dx{at}", shape_desc="(like x)", derived=True,
                diagnoses=[("the mean and the variance depend on x too: their paths are "
                            "missing", lambda: held)])
    return run_specs("layer_norm_backward", one, specs, hidden_specs, hidden=hidden, seed=52,
                     label=lambda shape, scale: f"shape {shape}" + (
                         f", scale {scale:g}" if scale != 1 else ""))


def _gelu(x):
    return 0.5 * x * (1.0 + anp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def block_reference(x, P, h, *, variant=""):
    """The block, from the LayerNorm above and the TSSA reference; ``variant`` switches on one
    of the usual slips (for hints)."""
    tssa = {k[5:]: v for k, v in P.items() if k.startswith("tssa.")}
    a = _ln(x, P["ln1.gamma"], P["ln1.beta"], LN_EPS)
    t = np.asarray(ref.tssa_parts(a, tssa, h)[0])
    x1 = (0 if variant == "no-res1" else x) + (1 if variant == "no-ls" else P["ls1.gamma"]) * t
    b = _ln(x if variant == "ln2-of-x" else x1, P["ln2.gamma"], P["ln2.beta"], LN_EPS)
    hid = b @ P["mlp.W1"] + P["mlp.b1"]
    if variant == "erf":
        from scipy.special import erf
        act = 0.5 * hid * (1 + erf(hid / math.sqrt(2)))
    else:
        act = _gelu(hid)
    m = act @ P["mlp.W2"] + P["mlp.b2"]
    return (0 if variant == "no-res2" else x1) + (1 if variant == "no-ls" else P["ls2.gamma"]) * m


def block_params(rng, C, h, H):
    P = {"ln1.gamma": 1 + 0.1 * rng.standard_normal(C), "ln1.beta": 0.1 * rng.standard_normal(C)}
    P.update({"tssa." + k: v for k, v in ref.tssa_params(rng, C, h).items()})
    P.update({"ls1.gamma": rng.uniform(0.5, 1.5, C), "ln2.gamma": 1 + 0.1 * rng.standard_normal(C),
              "ln2.beta": 0.1 * rng.standard_normal(C),
              "mlp.W1": 0.4 * rng.standard_normal((C, H)), "mlp.b1": 0.1 * rng.standard_normal(H),
              "mlp.W2": 0.4 * rng.standard_normal((H, C)), "mlp.b2": 0.1 * rng.standard_normal(C),
              "ls2.gamma": rng.uniform(0.5, 1.5, C)})
    return P


def check_tost_block(fn, hidden=None):
    """fn(x, params, num_heads) -> y (B, N, C): the ToST block (keys as tostnp.nn.tost_block_init)."""
    specs = [(2, 6, 8, 2, 16), (1, 1, 4, 1, 8), (3, 5, 6, 3, 12)]
    hidden_specs = [(1, 9, 4, 4, 4)]

    def one(rng, B, N, C, h, H):
        P = block_params(rng, C, h, H)
        x = rng.standard_normal((B, N, C))
        want = block_reference(x, P, h)
        names = {"no-res1": "the residual around the attention branch is missing",
                 "no-res2": "the residual around the MLP branch is missing",
                 "no-ls": "the LayerScale factors ls1 / ls2 are missing",
                 "ln2-of-x": "the second LayerNorm must see x1 (after the first residual), "
                             "not x",
                 "erf": "this block's GELU is the tanh approximation, not the erf form"}
        diag = [(text, lambda v=v: block_reference(x, P, h, variant=v))
                for v, text in names.items()]
        got = call_student(fn, x.copy(), {k: v.copy() for k, v in P.items()}, h,
                           forbidden=_FORBID, what="tost_block")
        compare(got, want, f"block output for (B, N, C, h) = {(B, N, C, h)}",
                shape_desc="(B, N, C)", diagnoses=diag, rtol=1e-9)
    return run_specs("tost_block", one, specs, hidden_specs, hidden=hidden, seed=53,
                     label=lambda B, N, C, h, H: f"(B, N, C, h) = {(B, N, C, h)}")
