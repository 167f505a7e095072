"""Checkers for exercises/10_causal_language.md: prefix statistics, causal TSSA, the recurrent
decoder step. Parameters as ``tostnp.nn.tssa_forward(..., causal=True)``: the non-causal ones plus
"denom_bias" (h, max_len, 1)."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import RuleBroken, cpu_clock
from ._core import Fail, call_student, measure, run_specs
from ._compare import compare

_FORBID = ("tostnp.nn", "tostnp.models")


def _shape_label(B, T, C, h):
    return f"(B, T, C, h) = {(B, T, C, h)}"


def _prefix_loop(w, Pi, h):
    """S1, S2 (B, T, C) and S3 (B, T, h) by explicit sums over s <= t."""
    B, T, C = w.shape
    p = C // h
    S1, S2, S3 = np.zeros((B, T, C)), np.zeros((B, T, C)), np.zeros((B, T, h))
    for b in range(B):
        for t in range(T):
            for s in range(t + 1):
                S1[b, t] += w[b, s] ** 2
                S2[b, t] += np.repeat(Pi[b, s], p) * w[b, s] ** 2
                S3[b, t] += Pi[b, s]
    return S1, S2, S3


def check_prefix_statistics(fn, hidden=None):
    """fn(w, Pi, num_heads) -> (S1, S2, S3): for every t the sums over tokens s <= t of w_s^2
    (B, T, C), of Pi_s w_s^2 (each coordinate weighted by its head's membership, (B, T, C)) and
    of Pi_s (B, T, h); w (B, T, C), Pi (B, T, h)."""
    specs = [(2, 7, 6, 3), (1, 1, 4, 2), (3, 5, 4, 1)]
    hidden_specs = [(1, 40, 2, 2)]

    def one(rng, B, T, C, h):
        p = C // h
        w = rng.standard_normal((B, T, C))
        Pi = rng.dirichlet(np.ones(h), size=(B, T))
        want = _prefix_loop(w, Pi, h)
        got = call_student(fn, w.copy(), Pi.copy(), h, forbidden=_FORBID,
                           what="prefix_statistics")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Fail("return a triple (S1, S2, S3)")
        X = [w**2, np.repeat(Pi, p, axis=-1) * w**2, Pi]
        for name, g, wnt, x in zip(("S1", "S2", "S3"), got, want, X):
            diag = [("these are suffix sums (over s >= t): causal statistics sum the past",
                     lambda x=x: np.flip(np.cumsum(np.flip(x, 1), 1), 1)),
                    ("token t must include itself: sum over s <= t, not s < t",
                     lambda x=x: np.cumsum(x, 1) - x),
                    ("these are sums over the whole sequence: token t may only see s <= t",
                     lambda x=x: np.broadcast_to(x.sum(1, keepdims=True), x.shape)),
                    ("the running sum goes over the wrong axis (the tokens are axis 1)",
                     lambda x=x: np.cumsum(x, -1))]
            if name == "S2":
                diag.append(("each coordinate takes the membership of its own head: "
                             "coordinate c belongs to head c // p",
                             lambda: np.cumsum(np.tile(Pi, (1, 1, p)) * w**2, 1)))
            compare(g, wnt, f"{name} for (B, T, C, h) = {(B, T, C, h)}", diagnoses=diag,
                    shape_desc="(B, T, h)" if name == "S3" else "(B, T, C)")
    return run_specs("prefix_statistics", one, specs, hidden_specs, hidden=hidden, seed=61,
                     label=_shape_label,
                     more=[("O(T): memory and time at T = 4000", lambda rng: _prefix_cost(fn, rng))])


# the stated rules of 10.1, measured: at T = 4000 a T x T array takes 128 MB (float64) or 16 MB
# (bool); running sums take a few arrays of T x C. A Python loop over t costs microseconds per
# token; running sums, tens of nanoseconds.
COST_T, COST_C, COST_H = 4000, 4, 2
MEMORY_PER_TOKEN = 2048          # bytes per token allowed at peak (the inputs take 48)
TIME_RATIO = 25.0                # your time / the time of np.cumsum on the same statistics


def _prefix_cost(fn, rng):
    T, C, h = COST_T, COST_C, COST_H
    w = rng.standard_normal((1, T, C))
    Pi = rng.dirichlet(np.ones(h), size=(1, T))
    got, secs, peak, _ = measure(fn, w, Pi, h, repeats=3, trace_memory=True, what="prefix_statistics")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        raise Fail("return a triple (S1, S2, S3)")
    compare(got[0], np.cumsum(w**2, 1), f"S1 for T = {T}", shape_desc="(B, T, C)")
    if peak > MEMORY_PER_TOKEN * T:
        raise RuleBroken(f"at T = {T} your function's memory peaks at {peak / 2**20:.1f} MiB (the inputs "
                   f"take {(w.nbytes + Pi.nbytes) / 2**20:.2f} MiB): it builds an array that grows "
                   "like T x T (a mask, a T x T sum). Running sums need O(T) memory")
    best, clock = float("inf"), cpu_clock()
    p = C // h
    for _ in range(3):                                       # the same work, done with cumsum
        t0 = clock()
        sq = w**2
        np.cumsum(sq, 1), np.cumsum(np.repeat(Pi, p, axis=-1) * sq, 1), np.cumsum(Pi, 1)
        best = min(best, clock() - t0)
    if secs > TIME_RATIO * max(best, 2e-5):
        raise RuleBroken(f"at T = {T} your function takes {secs * 1e3:.1f} ms, {secs / best:.0f} times "
                   "running sums over the token axis (np.cumsum): a Python loop over t? The "
                   "statistics of every t come from one cumulative sum along axis 1")


def _causal_inputs(rng, B, T, C, h, max_len):
    params = ref.tssa_params(rng, C, h, causal=True, max_len=max_len)
    return rng.standard_normal((B, T, C)), params


def _causal_y(fn, x, params, h):
    """The student's causal layer at x: y (the first of a pair (y, Pi) is accepted too)."""
    got = call_student(fn, x, {k: v.copy() for k, v in params.items()}, h, forbidden=_FORBID,
                       what="causal_tssa_forward")
    if isinstance(got, (tuple, list)) and len(got) == 2:
        got = got[0]
    return got


def check_causal_tssa_forward(fn, hidden=None):
    """fn(x, params, num_heads) -> y (B, T, C): causal TSSA (token t sees tokens 0..t only)."""
    specs = [(2, 6, 8, 2, 8), (1, 1, 4, 2, 3), (2, 5, 6, 3, 5), (1, 7, 4, 1, 9)]
    hidden_specs = [(1, 12, 2, 2, 12)]

    def one(rng, B, T, C, h, L):
        x, params = _causal_inputs(rng, B, T, C, h, L)
        want = ref.tssa_forward(x, params, h, causal=True)[0]
        nobias = dict(params, denom_bias=np.zeros_like(params["denom_bias"]))
        diag = [("the layer sees the future: every statistic of token t sums over s <= t",
                 lambda: ref.tssa_forward(x, {k: v for k, v in params.items()
                                              if k != "denom_bias"}, h)[0]),
                ("denom_bias is not added to the logits",
                 lambda: ref.tssa_forward(x, nobias, h, causal=True)[0])]
        got = _causal_y(fn, x.copy(), params, h)
        compare(got, want, f"y for (B, T, C, h) = {(B, T, C, h)}, max_len {L}",
                shape_desc="(B, T, C)", diagnoses=diag, rtol=1e-9)
        # the future must not matter: change the last token, earlier outputs stay
        if T > 1:
            x2 = x.copy()
            x2[:, -1] += 1.0
            got2 = _causal_y(fn, x2, params, h)
            if not np.allclose(np.asarray(got2)[:, :-1], np.asarray(got)[:, :-1],
                               rtol=1e-12, atol=1e-12):
                raise Fail("changing the LAST token changed earlier outputs: the layer "
                           "is not causal")
    return run_specs("causal_tssa_forward", one, specs, hidden_specs, hidden=hidden, seed=62,
                     label=lambda B, T, C, h, L: _shape_label(B, T, C, h))


def check_decode_step(fn, hidden=None):
    """fn(state, x_t, params, num_heads, t) -> (y_t (B, C), new_state); state holds "S1" (B, C),
    "S2" (B, C), "S3" (B, h) and "t"; starting from zeros and feeding tokens 0, 1, ... must
    reproduce the causal layer row by row, and the input state must not change."""
    specs = [(2, 6, 8, 2), (1, 4, 4, 4), (3, 5, 6, 3)]
    hidden_specs = [(1, 1, 2, 1)]

    def one(rng, B, T, C, h):
        x, params = _causal_inputs(rng, B, T, C, h, T + 2)
        want = ref.tssa_forward(x, params, h, causal=True)[0]
        state = {"S1": np.zeros((B, C)), "S2": np.zeros((B, C)), "S3": np.zeros((B, h)),
                 "t": 0}
        for t in range(T):
            before = {k: (v.copy() if isinstance(v, np.ndarray) else v)
                      for k, v in state.items()}
            got = call_student(fn, state, x[:, t].copy(), params, h, t, forbidden=_FORBID,
                               what="decode_step")
            if not isinstance(got, (tuple, list)) or len(got) != 2 or not isinstance(got[1], dict):
                raise Fail("return a pair (y_t, new_state) with new_state a dict")
            for k, v in before.items():
                if not np.array_equal(np.asarray(state[k]), np.asarray(v)):
                    raise Fail(f"the input state's {k!r} was modified: return a new state "
                               "and leave the old one as it was")
            y_t, new = got
            if set(new) != {"S1", "S2", "S3", "t"}:
                raise Fail(f"the new state must have keys S1, S2, S3, t; got {sorted(new)}")
            if new["t"] != t + 1:
                raise Fail(f"after token {t} the state's t must be {t + 1}, got {new['t']!r}")
            compare(y_t, want[:, t], f"y at token t={t} for (B, T, C, h) = {(B, T, C, h)}",
                    shape_desc="(B, C)", rtol=1e-9,
                    diagnoses=[("token t must see itself: add its statistics to the state "
                                "before computing its output",
                                lambda t=t: _stale_row(x, params, h, t))])
            state = new
    return run_specs("decode_step", one, specs, hidden_specs, hidden=hidden, seed=63,
                     label=_shape_label)


def _stale_row(x, params, h, t):
    """Row t computed with statistics up to t - 1 only (a common slip), for the hint."""
    B, T, C = x.shape
    p = C // h
    w = x @ params["W_u"] + params["b_u"]                              # (B, T, C)
    S1 = np.maximum(np.sum(w[:, :t] ** 2, axis=1), 1e-12)
    q = (w[:, t] ** 2 / S1).reshape(B, h, p).sum(-1) + p * params["denom_bias"][:, t, 0]
    l = q * params["temp"][:, 0]
    e = np.exp(l - l.max(-1, keepdims=True))
    Pis = []
    for s in range(t + 1):
        S1s = np.maximum(np.sum(w[:, :s + 1] ** 2, axis=1), 1e-12)
        qs = (w[:, s] ** 2 / S1s).reshape(B, h, p).sum(-1) + p * params["denom_bias"][:, s, 0]
        ls = qs * params["temp"][:, 0]
        es = np.exp(ls - ls.max(-1, keepdims=True))
        Pis.append(es / es.sum(-1, keepdims=True))
    Pi_t = e / e.sum(-1, keepdims=True)
    if t == 0:
        m = np.zeros((B, h, p))
    else:
        Pi = np.stack(Pis[:t], 1)                                       # (B, t, h)
        wh = w[:, :t].reshape(B, t, h, p)
        m = np.einsum("bsk,bski->bki", Pi, wh**2) / (Pi.sum(1)[..., None] + 1e-8)
    out = -w[:, t].reshape(B, h, p) * Pi_t[..., None] / (1 + m)
    return out.reshape(B, C) @ params["W_o"] + params["b_o"]
