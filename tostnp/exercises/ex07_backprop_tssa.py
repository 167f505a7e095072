"""Checkers for exercises/07_backprop_tssa.md: the adjoints of the TSSA pieces, a
finite-difference gradient check and the whole backward (parameters as in
:mod:`.ex06_tssa_layer`)."""
from __future__ import annotations

import autograd
import autograd.numpy as anp
import numpy as np

from . import _reference as ref
from ..analysis.oracle import rel_err
from ._core import Fail, call_student, run_specs, say
from ._compare import compare
from .ex06_tssa_layer import _FORBID_AD, _HIDDEN, _SHAPES, _inputs, _shape_label


# --------------------------------------------------------------------------------------------
# backward: the pieces, then the whole layer
# --------------------------------------------------------------------------------------------
def check_numerical_gradient(fn, hidden=None):
    """fn(f, x, delta) -> centred finite differences of the scalar function f at x (shape of x)."""
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
    hidden_specs = [("a scalar array", f1, g1, ())]

    def one(rng, label, f, g, shape):
        x = np.array(0.5 * rng.standard_normal(shape))
        if x.ndim == 0:
            # a lone scalar near 0 has a gradient (about 3 x^2) so small that the centred
            # difference's own O(delta^2) error exceeds rtol: keep |x| >= 0.3
            x = np.array(np.copysign(0.3 + abs(float(x)), float(x)))
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
    return run_specs("numerical_gradient", one, specs, hidden_specs, hidden=hidden, seed=33,
                     label=lambda label, f, g, shape: label)


def check_softmax_heads_backward(fn, hidden=None):
    """fn(dPi, Pi) -> dl: the adjoint of Pi = softmax(l) over the LAST axis (any leading axes)."""
    specs = [((2, 5, 3),), ((4, 1),), ((1, 3, 6),)]                 # (shape,)
    hidden_specs = [((3, 2, 1),)]

    def one(rng, shape):
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
        compare(got, want, f"dl for shape {shape}", diagnoses=diag, shape_desc="(like Pi)",
                derived=True)
    return run_specs("softmax_heads_backward", one, specs, hidden_specs, hidden=hidden, seed=34,
                     label=lambda shape: f"shape {shape}")


def check_token_norm_backward(fn, hidden=None):
    """fn(dq, w, num_heads) -> dw: adjoint of q_nk = sum_{c in head k} w_nc^2 / S1_c with
    S1_c = sum_n w_nc^2 (w (B, N, C), q and dq (B, N, h))."""
    specs = [(2, 6, 6, 3), (1, 4, 4, 1), (3, 5, 8, 4)]
    hidden_specs = [(1, 1, 2, 2)]

    def one(rng, B, N, C, h):
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
    return run_specs("token_norm_backward", one, specs, hidden_specs, hidden=hidden, seed=35,
                     label=lambda B, N, C, h: f"(B, N, C, h) = {(B, N, C, h)}")


def _rel(got, want):
    """rel_err of a student's array against the reference (inf where the shapes differ)."""
    got = np.asarray(got, dtype=float)
    return rel_err(got, want) if got.shape == np.shape(want) else float("inf")


def check_tssa_backward(fn, hidden=None, verbose=True):
    """fn(dy, x, params, num_heads) -> (dx (B, N, C), grads dict with the keys of params):
    the non-causal TSSA backward, derived by hand. Prints the relative error of every gradient
    against autograd and against centred finite differences."""
    def one(rng, B, N, C, h, kind=""):
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
            errs = [f"dx {_rel(dx, dx_ref):.1e}"] + \
                   [f"{k} {_rel(grads[k], g_ref[k]):.1e}"
                    for k in sorted(params) if np.shape(grads[k]) == g_ref[k].shape]
            say(f"  {label}: relative error vs autograd: " + ", ".join(errs))
        # in backward order: the first wrong gradient is the one nearest to the bug
        for k in ("b_o", "W_o", "temp", "b_u", "W_u"):
            if k in params:
                compare(grads[k], g_ref[k], f"grads[{k!r}] (checked in backward order: "
                        f"b_o, W_o, temp, b_u, W_u, dx) for {label}", rtol=1e-7,
                        shape_desc=f"(the shape of params[{k!r}])", factors={"N": N, "B": B})
        compare(dx, dx_ref, f"dx for {label}", rtol=1e-7, shape_desc="(B, N, C), like x",
                factors={"N": N, "B": B})

    def fd(rng):
        # a second opinion on a few entries: centred differences of sum(dy * y)
        x, params = _inputs(rng, 1, 4, 4, 2)
        dy = rng.standard_normal((1, 4, 4))
        _, grads = call_student(fn, dy.copy(), x.copy(), {k: v.copy() for k, v in params.items()},
                                2, forbidden=_FORBID_AD, what="tssa_backward")
        for k in ("temp", "W_u"):
            P = {kk: vv.copy() for kk, vv in params.items()}
            num = ref.numerical_gradient(
                lambda v: float(np.sum(dy * ref.tssa_forward(x, dict(P, **{k: v}), 2)[0])), P[k])
            err = _rel(grads[k], num)
            if verbose:
                say(f"  finite differences, grads[{k!r}]: relative error {err:.1e}")
            if err > 1e-6:
                raise Fail(f"grads[{k!r}] disagrees with centred finite differences (relative "
                           f"error {err:.1e})")
    return run_specs("tssa_backward", one, _SHAPES + [(2, 6, 8, 2, "nobias")], _HIDDEN[1:],
                     hidden=hidden, seed=36, label=_shape_label,
                     more=[("finite differences", fd)], points=2.0)


check_tssa_backward.points = 2.0
