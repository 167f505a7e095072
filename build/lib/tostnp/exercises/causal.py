"""Checkers for exercises/10_causal_language.md: prefix statistics, causal TSSA, the recurrent
decoder step. Parameters as ``tostnp.nn.tssa_forward(..., causal=True)``: the non-causal ones plus
"denom_bias" (h, max_len, 1)."""
from __future__ import annotations

import numpy as np

from . import _reference as ref
from ._core import Fail, call_student, case, compare, hidden_enabled, run_cases

_FORBID = ("tostnp.nn", "tostnp.models")


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
    rng = np.random.default_rng(61)
    specs = [(2, 7, 6, 3), (1, 1, 4, 2), (3, 5, 4, 1)]
    if hidden_enabled(hidden):
        specs += [(1, 40, 2, 2)]
    cases = []
    for B, T, C, h in specs:
        def one(B=B, T=T, C=C, h=h):
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
        cases.append(case(f"(B, T, C, h) = {(B, T, C, h)}", one))
    return run_cases("prefix_statistics", cases)


def _causal_inputs(rng, B, T, C, h, max_len):
    params = ref.tssa_params(rng, C, h, causal=True, max_len=max_len)
    return rng.standard_normal((B, T, C)), params


def check_causal_tssa_forward(fn, hidden=None):
    """fn(x, params, num_heads) -> y (B, T, C): causal TSSA (token t sees tokens 0..t only)."""
    rng = np.random.default_rng(62)
    specs = [(2, 6, 8, 2, 8), (1, 1, 4, 2, 3), (2, 5, 6, 3, 5), (1, 7, 4, 1, 9)]
    if hidden_enabled(hidden):
        specs += [(1, 12, 2, 2, 12)]
    cases = []
    for B, T, C, h, L in specs:
        def one(B=B, T=T, C=C, h=h, L=L):
            x, params = _causal_inputs(rng, B, T, C, h, L)
            want = ref.tssa_forward(x, params, h, causal=True)[0]
            nobias = dict(params, denom_bias=np.zeros_like(params["denom_bias"]))
            diag = [("the layer sees the future: every statistic of token t sums over s <= t",
                     lambda: ref.tssa_forward(x, {k: v for k, v in params.items()
                                                  if k != "denom_bias"}, h)[0]),
                    ("denom_bias is not added to the logits",
                     lambda: ref.tssa_forward(x, nobias, h, causal=True)[0])]
            got = call_student(fn, x.copy(), {k: v.copy() for k, v in params.items()}, h,
                               forbidden=_FORBID, what="causal_tssa_forward")
            if isinstance(got, (tuple, list)) and len(got) == 2:
                got = got[0]
            compare(got, want, f"y for (B, T, C, h) = {(B, T, C, h)}, max_len {L}",
                    shape_desc="(B, T, C)", diagnoses=diag, rtol=1e-9)
            # the future must not matter: change the last token, earlier outputs stay
            if T > 1:
                x2 = x.copy()
                x2[:, -1] += 1.0
                got2 = call_student(fn, x2, {k: v.copy() for k, v in params.items()}, h,
                                    forbidden=_FORBID, what="causal_tssa_forward")
                if isinstance(got2, (tuple, list)) and len(got2) == 2:
                    got2 = got2[0]
                if not np.allclose(np.asarray(got2)[:, :-1], np.asarray(got)[:, :-1],
                                   rtol=1e-12, atol=1e-12):
                    raise Fail("changing the LAST token changed earlier outputs: the layer "
                               "is not causal")
        cases.append(case(f"(B, T, C, h) = {(B, T, C, h)}", one))
    return run_cases("causal_tssa_forward", cases)


def check_decode_step(fn, hidden=None):
    """fn(state, x_t, params, num_heads, t) -> (y_t (B, C), new_state); state holds "S1" (B, C),
    "S2" (B, C), "S3" (B, h) and "t"; starting from zeros and feeding tokens 0, 1, ... must
    reproduce the causal layer row by row, and the input state must not change."""
    rng = np.random.default_rng(63)
    specs = [(2, 6, 8, 2), (1, 4, 4, 4), (3, 5, 6, 3)]
    if hidden_enabled(hidden):
        specs += [(1, 1, 2, 1)]
    cases = []
    for B, T, C, h in specs:
        def one(B=B, T=T, C=C, h=h):
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
        cases.append(case(f"(B, T, C, h) = {(B, T, C, h)}", one))
    return run_cases("decode_step", cases)


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
