"""Checkers for exercises/06_tssa_layer.md and 07_backprop_tssa.md: memberships, the TSSA
forward, the adjoints of its pieces, a finite-difference gradient check and the whole backward.

Parameters follow the layout of ``tostnp.nn.tssa_forward``: "W_u" (C, C), "b_u" (C,), "temp"
(h, 1), "W_o" (C, C), "b_o" (C,); heads are contiguous slices of the width.
"""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, case, compare, hidden_enabled, run_cases

_FORBID = ("tostnp.nn", "tostnp.models")
_FORBID_AD = _FORBID + ("autograd",)

_SHAPES = [(2, 10, 12, 3), (1, 1, 4, 2), (3, 7, 8, 1), (2, 5, 6, 6)]   # (B, N, C, h)
_HIDDEN = [(1, 16, 8, 2, "dead"), (2, 3, 4, 4, "nobias")]


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


def check_tssa_memberships(fn, hidden=None):
    """fn(w, temp, num_heads) -> Pi (B, h, N): TSSA memberships from w = x W_u + b_u (B, N, C)."""
    rng = np.random.default_rng(31)
    cases = []
    for spec in _SHAPES + (_HIDDEN if hidden_enabled(hidden) else []):
        B, N, C, h = spec[:4]
        kind = spec[4] if len(spec) > 4 else ""

        def one(B=B, N=N, C=C, h=h, kind=kind):
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
        cases.append(case(f"(B, N, C, h) = {(B, N, C, h)} {kind}", one))
    return run_cases("tssa_memberships", cases)


def check_tssa_forward(fn, hidden=None):
    """fn(x, params, num_heads) -> y (B, N, C), the non-causal TSSA layer (a pair (y, Pi) is
    accepted too: only y is checked)."""
    rng = np.random.default_rng(32)
    cases = []
    for spec in _SHAPES + [(2, 6, 8, 2, "nobias")] + (_HIDDEN if hidden_enabled(hidden) else []):
        B, N, C, h = spec[:4]
        kind = spec[4] if len(spec) > 4 else ""

        def one(B=B, N=N, C=C, h=h, kind=kind):
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
        cases.append(case(f"(B, N, C, h) = {(B, N, C, h)} {kind}", one))
    return run_cases("tssa_forward", cases)


# --------------------------------------------------------------------------------------------
# backward: the pieces, then the whole layer
# --------------------------------------------------------------------------------------------
def check_numerical_gradient(fn, hidden=None):
    """fn(f, x, delta) -> centred finite differences of the scalar function f at x (shape of x)."""
    rng = np.random.default_rng(33)

    def f1(x):
        return float(np.sum(np.sin(x) * x**2))

    def g1(x):
        return np.cos(x) * x**2 + 2 * x * np.sin(x)

    def f2(x):
        return float(np.sum(np.exp(x @ x.T)) / x.size)

    def g2(x):
        E = np.exp(x @ x.T)
        return (E + E.T) @ x / x.size
    specs = [("sin(x) x^2, a vector", f1, g1, (7,)), ("sin(x) x^2, a matrix", f1, g1, (3, 4)),
             ("sum exp(x x^T) / size", f2, g2, (4, 3))]
    if hidden_enabled(hidden):
        specs += [("a scalar array", f1, g1, ())]
    cases = []
    for label, f, g, shape in specs:
        def one(f=f, g=g, shape=shape, label=label):
            x = np.array(0.5 * rng.standard_normal(shape))
            x0 = x.copy()
            calls = [0]

            def counted(z):
                calls[0] += 1
                return f(z)
            got = call_student(fn, counted, x, 1e-5, forbidden=("autograd",),
                               what="numerical_gradient")
            if not np.array_equal(x, x0):
                raise Fail(f"{label}: x was changed by your function: restore each entry after "
                           "perturbing it")

            def one_sided():
                out = np.zeros_like(x0)
                for i in np.ndindex(x0.shape):
                    z = x0.copy()
                    z[i] += 1e-5
                    out[i] = (f(z) - f(x0)) / 1e-5
                return out
            diag = [("a one-sided difference (f(x + delta) - f(x)) / delta has an O(delta) error; "
                     "use a centred difference", one_sided)]
            compare(got, g(x0), label, rtol=1e-7, diagnoses=diag, shape_desc="(the shape of x)")
            if calls[0] > 2 * max(x0.size, 1) + 1:
                raise Fail(f"{label}: {calls[0]} evaluations of f for {x0.size} entries: two per "
                           "entry are enough")
        cases.append(case(label, one))
    return run_cases("numerical_gradient", cases)


def check_softmax_heads_backward(fn, hidden=None):
    """fn(dPi, Pi) -> dl: the adjoint of Pi = softmax(l) over the LAST axis (any leading axes)."""
    rng = np.random.default_rng(34)
    shapes = [(2, 5, 3), (4, 1), (1, 3, 6)]
    if hidden_enabled(hidden):
        shapes += [(3, 2, 1)]
    cases = []
    for shape in shapes:
        def one(shape=shape):
            l = rng.standard_normal(shape)
            dPi = rng.standard_normal(shape)

            def soft(l):
                e = anp.exp(l - anp.max(l, axis=-1, keepdims=True))
                return e / anp.sum(e, axis=-1, keepdims=True)
            Pi = np.asarray(soft(l))
            want = autograd.grad(lambda l: anp.sum(dPi * soft(l)))(l)
            diag = [("only the diagonal of the softmax Jacobian: each Pi_k depends on every "
                     "logit through the normalisation", lambda: Pi * dPi),
                    ("the sum over heads runs over the wrong axis",
                     lambda: Pi * (dPi - np.sum(Pi * dPi, axis=0, keepdims=True)))]
            got = call_student(fn, dPi.copy(), Pi.copy(), forbidden=_FORBID_AD,
                               what="softmax_heads_backward")
            compare(got, want, f"dl for shape {shape}", diagnoses=diag, shape_desc="(like Pi)")
        cases.append(case(f"shape {shape}", one))
    return run_cases("softmax_heads_backward", cases)


def check_token_norm_backward(fn, hidden=None):
    """fn(dq, w, num_heads) -> dw: adjoint of q_nk = sum_{c in head k} w_nc^2 / S1_c with
    S1_c = sum_n w_nc^2 (w (B, N, C), q and dq (B, N, h))."""
    rng = np.random.default_rng(35)
    shapes = [(2, 6, 6, 3), (1, 4, 4, 1), (3, 5, 8, 4)]
    if hidden_enabled(hidden):
        shapes += [(1, 1, 2, 2)]
    cases = []
    for B, N, C, h in shapes:
        def one(B=B, N=N, C=C, h=h):
            p = C // h
            w = rng.standard_normal((B, N, C))
            dq = rng.standard_normal((B, N, h))

            def q_of(w, hold=None):
                S1 = anp.sum(w**2, axis=1, keepdims=True) if hold is None else hold
                return anp.sum(anp.reshape(w**2 / S1, (B, N, h, p)), axis=-1)
            want = autograd.grad(lambda w: anp.sum(dq * q_of(w)))(w)
            S1 = np.sum(w**2, axis=1, keepdims=True)
            held = autograd.grad(lambda w: anp.sum(dq * q_of(w, S1)))(w)
            diag = [("the norms S1 depend on w too: the path through S1 is missing", lambda: held)]
            got = call_student(fn, dq.copy(), w.copy(), h, forbidden=_FORBID_AD,
                               what="token_norm_backward")
            compare(got, want, f"dw for (B, N, C, h) = {(B, N, C, h)}", diagnoses=diag,
                    shape_desc="(B, N, C)", factors={"N": N, "p": p}, floor=1e-6)
        cases.append(case(f"(B, N, C, h) = {(B, N, C, h)}", one))
    return run_cases("token_norm_backward", cases)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(a) + np.abs(b)))))


def check_tssa_backward(fn, hidden=None, verbose=True):
    """fn(dy, x, params, num_heads) -> (dx (B, N, C), grads dict with the keys of params):
    the non-causal TSSA backward, derived by hand. Prints the relative error of every gradient
    against autograd and against centred finite differences."""
    rng = np.random.default_rng(36)
    cases = []
    for spec in _SHAPES + [(2, 6, 8, 2, "nobias")] + (_HIDDEN[1:] if hidden_enabled(hidden) else []):
        B, N, C, h = spec[:4]
        kind = spec[4] if len(spec) > 4 else ""

        def one(B=B, N=N, C=C, h=h, kind=kind):
            x, params = _inputs(rng, B, N, C, h, kind)
            dy = rng.standard_normal((B, N, C))
            dx_ref, g_ref = ref.tssa_backward(dy, x, params, h)
            got = call_student(fn, dy.copy(), x.copy(), {k: v.copy() for k, v in params.items()},
                               h, forbidden=_FORBID_AD, what="tssa_backward")
            if not isinstance(got, (tuple, list)) or len(got) != 2 or not isinstance(got[1], dict):
                raise Fail("return a pair (dx, grads) with grads a dict keyed like params")
            dx, grads = got
            missing = sorted(set(params) - set(grads))
            if missing:
                raise Fail(f"grads lacks the key(s) {missing}: one gradient per parameter")
            extra = sorted(set(grads) - set(params))
            if extra:
                raise Fail(f"grads has key(s) {extra} that params does not have")
            label = f"(B, N, C, h) = {(B, N, C, h)}{' ' + kind if kind else ''}"
            if verbose:
                errs = [f"dx {_rel(np.asarray(dx, dtype=float), dx_ref):.1e}"] + \
                       [f"{k} {_rel(np.asarray(grads[k], dtype=float), g_ref[k]):.1e}"
                        for k in sorted(params) if np.shape(grads[k]) == g_ref[k].shape]
                print(f"  {label}: relative error vs autograd: " + ", ".join(errs))
            # in backward order: the first wrong gradient is the one nearest to the bug
            for k in ("b_o", "W_o", "temp", "b_u", "W_u"):
                if k in params:
                    compare(grads[k], g_ref[k], f"grads[{k!r}] (checked in backward order: "
                            f"b_o, W_o, temp, b_u, W_u, dx) for {label}", rtol=1e-7,
                            shape_desc=f"(the shape of params[{k!r}])", factors={"N": N, "B": B})
            compare(dx, dx_ref, f"dx for {label}", rtol=1e-7, shape_desc="(B, N, C), like x",
                    factors={"N": N, "B": B})
        cases.append(case(f"(B, N, C, h) = {(B, N, C, h)} {kind}", one))

    def fd():
        # a second opinion on a few entries: centred differences of sum(dy * y)
        x, params = _inputs(rng, 1, 4, 4, 2)
        dy = rng.standard_normal((1, 4, 4))
        _, grads = call_student(fn, dy.copy(), x.copy(), {k: v.copy() for k, v in params.items()},
                                2, forbidden=_FORBID_AD, what="tssa_backward")
        for k in ("temp", "W_u"):
            P = {kk: vv.copy() for kk, vv in params.items()}
            num = ref.numerical_gradient(
                lambda v: float(np.sum(dy * ref.tssa_forward(x, dict(P, **{k: v}), 2)[0])), P[k])
            err = _rel(np.asarray(grads[k], dtype=float), num)
            if verbose:
                print(f"  finite differences, grads[{k!r}]: relative error {err:.1e}")
            if err > 1e-6:
                raise Fail(f"grads[{k!r}] disagrees with centred finite differences (relative "
                           f"error {err:.1e})")
    cases.append(case("finite differences", fd))
    return run_cases("tssa_backward", cases, points=2.0)


check_tssa_backward.points = 2.0
