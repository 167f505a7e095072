"""Checkers for exercises/06_tssa_layer.md: memberships and the TSSA forward (the inputs and
the planted-slip variants are shared with :mod:`.ex07_backprop_tssa`).

Parameters follow the layout of ``tostnp.nn.tssa_forward``: "W_u" (C, C), "b_u" (C,), "temp"
(h, 1), "W_o" (C, C), "b_o" (C,); heads are contiguous slices of the width.
"""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import call_student, run_specs
from ._compare import compare

_FORBID = ("tostnp.nn", "tostnp.models")
_FORBID_AD = _FORBID + ("autograd",)

_SHAPES = [(2, 10, 12, 3), (1, 1, 4, 2), (3, 7, 8, 1), (2, 5, 6, 6)]   # (B, N, C, h)
_HIDDEN = [(1, 16, 8, 2, "dead"), (2, 3, 4, 4, "nobias")]             # (B, N, C, h, kind)


def _inputs(rng, B, N, C, h, kind=""):
    params = ref.tssa_params(rng, C, h, bias=(kind != "nobias"))
    x = rng.standard_normal((B, N, C))
    if kind == "dead":                         # a coordinate of w that is 0 for every token
        params["W_u"][:, 0] = 0.0
        params["b_u"][0] = 0.0
    return x, params


def _variant(x, params, h, *, pi_axis=-1, norm_axis=1, m_raw=True, sign=-1.0, temp=True,
             bias_o=True):
    """TSSA with one of the usual slips switched on; returns (y (B, N, C), Pi (B, h, N))."""
    B, N, C = x.shape
    p = C // h
    w = x @ params["W_u"] + params.get("b_u", 0.0)                          # (B, N, C)
    nrm = np.maximum(np.sqrt(np.sum(w**2, axis=norm_axis, keepdims=True)), 1e-12)
    q = ((w / nrm) ** 2).reshape(B, N, h, p).sum(-1)                        # (B, N, h)
    if temp:
        q = q * params["temp"][:, 0]
    e = np.exp(q - q.max(axis=pi_axis, keepdims=True))
    Pi = e / e.sum(axis=pi_axis, keepdims=True)                             # (B, N, h)
    v = (w if m_raw else w / nrm).reshape(B, N, h, p)
    m = np.einsum("bnk,bnkp->bkp", Pi, v**2) / (Pi.sum(1)[..., None] + 1e-8)
    out = sign * w.reshape(B, N, h, p) * Pi[..., None] / (1 + m[:, None])
    y = out.reshape(B, N, C) @ params["W_o"] + (params.get("b_o", 0.0) if bias_o else 0.0)
    return y, Pi.transpose(0, 2, 1)


def _forward_diagnoses(x, params, h):
    return [("Pi is normalised over the tokens: the softmax runs over the heads (each token's "
             "memberships sum to 1)", lambda: _variant(x, params, h, pi_axis=1)[0]),
            ("the normalisation of w: each coordinate is divided by its norm along the TOKEN "
             "axis", lambda: _variant(x, params, h, norm_axis=2)[0]),
            ("the statistic m is a moment of the raw w, not of the normalised one",
             lambda: _variant(x, params, h, m_raw=False)[0]),
            ("the sign of the layer's output: TSSA is a descent step",
             lambda: _variant(x, params, h, sign=1.0)[0]),
            ("the temperatures temp are not applied to the logits",
             lambda: _variant(x, params, h, temp=False)[0]),
            ("the output bias b_o is missing", lambda: _variant(x, params, h, bias_o=False)[0])]


def _shape_label(B, N, C, h, kind=""):
    return f"(B, N, C, h) = {(B, N, C, h)} {kind}"


def check_tssa_memberships(fn, hidden=None):
    """fn(w, temp, num_heads) -> Pi (B, h, N): TSSA memberships from w = x W_u + b_u (B, N, C)."""
    def one(rng, B, N, C, h, kind=""):
        x, params = _inputs(rng, B, N, C, h, kind)
        w = x @ params["W_u"] + params.get("b_u", 0.0)
        want = ref.tssa_forward(x, params, h)[1]
        ident = {"W_u": np.eye(C), "temp": params["temp"], "W_o": np.eye(C)}
        diag = [("each token's memberships must sum to 1 over the heads: the softmax runs "
                 "over the wrong axis", lambda: _variant(w, ident, h, pi_axis=1)[1]),
                ("each coordinate is normalised by its norm along the TOKEN axis",
                 lambda: _variant(w, ident, h, norm_axis=2)[1]),
                ("the temperatures are not applied",
                 lambda: _variant(w, ident, h, temp=False)[1])]
        got = call_student(fn, w.copy(), params["temp"].copy(), h, forbidden=_FORBID,
                           what="tssa_memberships")
        compare(got, want, f"Pi for (B, N, C, h) = {(B, N, C, h)}",
                shape_desc="(B, h, N): heads before tokens", diagnoses=diag, rtol=1e-9)
    return run_specs("tssa_memberships", one, _SHAPES, _HIDDEN, hidden=hidden, seed=31,
                     label=_shape_label)


def check_tssa_forward(fn, hidden=None):
    """fn(x, params, num_heads) -> y (B, N, C), the non-causal TSSA layer (a pair (y, Pi) is
    accepted too: only y is checked)."""
    def one(rng, B, N, C, h, kind=""):
        x, params = _inputs(rng, B, N, C, h, kind)
        want = ref.tssa_forward(x, params, h)[0]
        got = call_student(fn, x.copy(), {k: v.copy() for k, v in params.items()}, h,
                           forbidden=_FORBID, what="tssa_forward")
        if isinstance(got, (tuple, list)) and len(got) == 2:
            got = got[0]
        diag = _forward_diagnoses(x, params, h) if "b_o" in params else \
            _forward_diagnoses(x, params, h)[:-1]
        compare(got, want, f"y for (B, N, C, h) = {(B, N, C, h)}{' ' + kind if kind else ''}",
                shape_desc="(B, N, C)", diagnoses=diag, rtol=1e-9)
    return run_specs("tssa_forward", one, _SHAPES + [(2, 6, 8, 2, "nobias")], _HIDDEN,
                     hidden=hidden, seed=32, label=_shape_label)
