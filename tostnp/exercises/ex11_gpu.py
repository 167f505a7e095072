"""Checkers for exercises/11_gpu.md: code that runs on any Array API library and device.

The student's function gets ``array_api_strict`` arrays placed on its non-default device
(``Device("device1")``): it raises on NumPy calls, on host conversion and on mixing devices,
exactly where CuPy code would break. The result must stay on that device.
"""
from __future__ import annotations

import numpy as np

from ..backend import to_host
from . import _reference as ref
from ._core import OnDevice, XpResult
from ._core import Fail, call_student, run_specs
from ._compare import compare

_FORBID = ("tostnp.math.objective", "tostnp.nn")


def _strict():
    import array_api_strict as xps
    return xps, xps.Device("device1")


def _run_on_device(fn, what, *arrays_and_args):
    xps, dev = _strict()
    remote = hasattr(fn, "remote_call")           # grading: the child builds the device arrays
    args = [(OnDevice(a) if remote else xps.asarray(a, device=dev)) if isinstance(a, np.ndarray)
            else a for a in arrays_and_args]
    try:
        out = call_student(fn, *args, forbidden=_FORBID, what=what)
    except Fail as e:
        text = str(e)
        if any(f"raised {k}" in text for k in ("TypeError", "AttributeError", "ValueError",
                                                 "RuntimeError")):
            raise Fail(f"{text}. On another device, use only the namespace of the input "
                       "(xp = array_api_compat.array_namespace(x)): no np. functions, no "
                       "array methods outside the standard, new arrays created with "
                       "device=x.device") from None
        raise
    if out is None:
        raise Fail(f"{what} returned None")
    if isinstance(out, XpResult):
        if out.device != str(dev):
            raise Fail(f"{what}'s result is on {out.device}, the input on {dev}: keep it there")
        return out.host
    if remote or not hasattr(out, "device") or isinstance(out, np.ndarray):
        raise Fail(f"{what} returned a {type(out).__name__}: return an array of the input's "
                   "namespace (the result must stay on the device)")
    if out.device != dev:
        raise Fail(f"{what}'s result is on {out.device}, the input on {dev}: keep it there")
    return to_host(out)


def check_xp_coding_rate(fn, hidden=None):
    """fn(Z, eps) -> R(Z) as a 0-d array of Z's namespace, on Z's device."""
    specs = [(30, 5, 0.5), (4, 9, 1.0), (60, 12, 0.1)]
    hidden_specs = [(1, 2, 0.3)]

    def one(rng, n, d, eps):
        Z = rng.standard_normal((n, d))
        got = _run_on_device(fn, "xp_coding_rate", Z, eps)
        compare(got, ref.coding_rate(Z, eps), f"R(Z) for n={n}, d={d}, eps={eps}",
                factors={"n": n, "d": d})
    return run_specs("xp_coding_rate", one, specs, hidden_specs, hidden=hidden, seed=81,
                     label=lambda n, d, eps: f"n={n}, d={d}")


def check_xp_softmax(fn, hidden=None):
    """fn(l) -> softmax over the last axis, any leading axes, for any namespace and device;
    stable for large logits."""
    specs = [((4, 3), 1.0), ((2, 5, 4), 1.0), ((6,), 500.0)]
    hidden_specs = [((3, 1), 1.0)]

    def one(rng, shape, s):
        l = s * rng.standard_normal(shape)
        e = np.exp(l - l.max(axis=-1, keepdims=True))
        want = e / e.sum(axis=-1, keepdims=True)
        got = _run_on_device(fn, "xp_softmax", l)
        compare(got, want, f"softmax of shape {shape}, scale {s}", shape_desc="(like l)",
                diagnoses=[("the softmax runs over the wrong axis: the last one",
                            lambda: np.exp(l - l.max(0, keepdims=True))
                            / np.exp(l - l.max(0, keepdims=True)).sum(0, keepdims=True))])
    return run_specs("xp_softmax", one, specs, hidden_specs, hidden=hidden, seed=82,
                     label=lambda shape, s: f"shape {shape}, scale {s}")
