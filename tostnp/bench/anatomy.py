"""Where a NumPy training step's time goes: its matrix products (how many, their shapes and
layouts, their time when each is run alone), its other NumPy calls (elementwise ufuncs,
reductions, array functions) and its Python overhead (function calls per step).

:func:`step_anatomy` runs the step once with the parameters viewed as a recording subclass of
``numpy.ndarray`` (every array computed from them is one too, so every ufunc -- ``@``, ``*``,
``np.exp``, ``np.add.at`` -- and every NumPy function on them is logged with its operands'
shapes), once under :func:`sys.setprofile` to count the Python and C function calls, and then
times them: all of a step's products in one pass, alternating with the step itself (medians),
and each distinct product alone (to rank them). The difference between the step's
time and its products' is the "rest": elementwise work, reductions, copies, and the Python
between them. Nothing here changes the step's numbers: the recording step computes the same
values (the subclass only logs), and the parameters are put back afterwards.
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from collections import Counter

import numpy as np

__all__ = ["step_anatomy", "count_calls", "format_anatomy"]


def _layout(a) -> str:
    """"C" (row-major), "T" (a transposed row-major matrix: column-major in its last 2 axes),
    or "strided" (anything else: NumPy copies it or loops without BLAS)."""
    if a.ndim < 2 or a.flags.c_contiguous:
        return "C"
    if a.strides[-2] == a.itemsize and a.strides[-1] == a.shape[-2] * a.itemsize:
        return "T"
    return "strided"


class _Recording(np.ndarray):
    """An ndarray that logs the ufuncs and array functions applied to it (class-level log)."""
    log = None

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        plain = [i.view(np.ndarray) if isinstance(i, _Recording) else i for i in inputs]
        outs = kw.get("out")
        if outs is not None:
            kw["out"] = tuple(o.view(np.ndarray) if isinstance(o, _Recording) else o
                              for o in outs)
        log = _Recording.log
        if log is not None:
            if ufunc is np.matmul and method == "__call__":
                a, b = plain[0], plain[1]
                log["matmul"][(tuple(a.shape), _layout(a), tuple(b.shape), _layout(b),
                               str(np.result_type(a, b)))] += 1
            else:
                log["ufunc"][f"{ufunc.__name__}" + ("" if method == "__call__"
                                                    else f".{method}")] += 1
        res = getattr(ufunc, method)(*plain, **kw)
        if outs is not None:
            return outs[0] if len(outs) == 1 else outs
        if isinstance(res, tuple):
            return tuple(r.view(_Recording) if type(r) is np.ndarray else r for r in res)
        return res.view(_Recording) if type(res) is np.ndarray else res

    def __array_function__(self, func, types, args, kwargs):
        if _Recording.log is not None:
            _Recording.log["function"][getattr(func, "__name__", str(func))] += 1
        return super().__array_function__(func, types, args, kwargs)


def _record(step, params: dict) -> dict:
    """One step with ``params``' arrays viewed as :class:`_Recording`; the log."""
    saved = dict(params)
    log = {"matmul": Counter(), "ufunc": Counter(), "function": Counter()}
    try:
        for k, v in saved.items():
            if type(v) is np.ndarray:
                params[k] = v.view(_Recording)
        _Recording.log = log
        step()
    finally:
        _Recording.log = None
        params.update(saved)
    return log


def count_calls(step) -> dict:
    """Python-level and C-level function calls of one ``step()`` on the calling thread
    (sys.setprofile events; NumPy operators such as ``a * b`` run inside the bytecode and are
    not calls)."""
    n = Counter()

    def prof(frame, event, arg):
        if event in ("call", "c_call"):
            n[event] += 1
    old = sys.getprofile()
    sys.setprofile(prof)
    try:
        step()
    finally:
        sys.setprofile(old)
    return {"python_calls": n["call"], "c_calls": n["c_call"]}


def _operands(key, rng):
    """Random operands of a recorded product's shapes, layouts and dtype ("strided" operands
    are made row-major: the product's BLAS time, not the copy NumPy makes first)."""
    sa, la, sb, lb, dt = key

    def make(shape, layout):
        if layout == "T":          # a transposed row-major array of this shape
            return np.ascontiguousarray(rng.standard_normal(
                shape[:-2] + (shape[-1], shape[-2])).astype(dt)).swapaxes(-1, -2)
        return rng.standard_normal(shape).astype(dt)
    return make(sa, la), make(sb, lb)


def _best_each(a, b, repeats: int) -> float:
    """Seconds of one ``a @ b`` alone: the fastest of ``repeats`` samples of ~2 ms each."""
    t0 = time.perf_counter()
    a @ b
    k = max(1, min(1000, int(2e-3 / max(time.perf_counter() - t0, 1e-7))))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            a @ b
        ts.append((time.perf_counter() - t0) / k)
    return min(ts)


def step_anatomy(step, params: dict, *, repeats: int = 7, step_repeats: int = 5) -> dict:
    """Anatomy of ``step()`` (a NumPy training step whose parameters are the dict ``params``).

    The step and a "products pass" (every recorded product, as many times as the step runs it,
    on fresh operands of the same shapes and layouts) alternate ``step_repeats`` times and the
    medians are taken, so both see the same machine (on a busy machine a short sample can
    catch an idle moment that a whole step never does). Each product is also timed alone (the
    fastest of ``repeats`` ~2 ms samples), to rank them. The products pass runs on the calling
    thread (BLAS's threads apply): for a step that runs its batch in shards on several threads
    the split does not hold. The step right after a products pass starts with colder caches
    than in training: read ``step_s`` as the split's total, not as the step's speed.

    Returns {"step_s", "products_s" (the products pass), "rest_s" (step_s - products_s:
    elementwise work, reductions, copies, the Python between them), "calls":
    count_calls(step), "numpy_calls": {"matmul", "ufunc", "function"} per step, "ufuncs":
    {name: count}, "functions": {name: count}, "products": [{"a", "a_layout", "b",
    "b_layout", "dtype", "count", "gflop", "s_each" (alone)}] by total time}."""
    log = _record(step, params)
    calls = count_calls(step)
    rng = np.random.default_rng(0)
    ops = [(key, cnt, _operands(key, rng)) for key, cnt in log["matmul"].items()]

    def products_pass():
        for _, cnt, (a, b) in ops:
            for _ in range(cnt):
                a @ b
    steps, passes = [], []
    for _ in range(step_repeats):
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        products_pass()
        t2 = time.perf_counter()
        steps.append(t1 - t0)
        passes.append(t2 - t1)
    step_s, products_s = statistics.median(steps), statistics.median(passes)
    prods = []
    for (sa, la, sb, lb, dt), cnt, (a, b) in ops:
        flop = 2.0 * math.prod(np.broadcast_shapes(sa[:-2], sb[:-2])) \
            * sa[-2] * sa[-1] * sb[-1] if len(sa) >= 2 and len(sb) >= 2 \
            else 2.0 * math.prod(a.shape) * (b.shape[-1] if b.ndim == 2 else 1)
        prods.append({"a": list(sa), "a_layout": la, "b": list(sb), "b_layout": lb,
                      "dtype": dt, "count": cnt, "gflop": flop / 1e9,
                      "s_each": _best_each(a, b, repeats)})
    prods.sort(key=lambda p: -p["count"] * p["s_each"])
    return {"step_s": step_s, "products_s": products_s, "rest_s": step_s - products_s,
            "calls": calls,
            "numpy_calls": {"matmul": sum(log["matmul"].values()),
                            "ufunc": sum(log["ufunc"].values()),
                            "function": sum(log["function"].values())},
            "ufuncs": dict(log["ufunc"].most_common()),
            "functions": dict(log["function"].most_common()),
            "products": prods, "step_samples_s": steps, "products_samples_s": passes}


def format_anatomy(name: str, a: dict) -> str:
    """A few lines for the console."""
    ms = lambda s: f"{1e3 * s:.2f} ms"  # noqa: E731
    n = a["numpy_calls"]
    lines = [f"  {name}: step {ms(a['step_s'])}; products {n['matmul']} calls "
             f"{ms(a['products_s'])}; rest (elementwise, reductions, copies, "
             f"Python) {ms(a['rest_s'])}; {n['ufunc']} other ufunc calls, {n['function']} "
             f"NumPy function calls; {a['calls']['python_calls']} Python + "
             f"{a['calls']['c_calls']} C function calls per step"]
    for p in a["products"][:8]:
        lines.append(f"    {p['count']:3d} x {tuple(p['a'])}{'' if p['a_layout'] == 'C' else p['a_layout']}"
                     f" @ {tuple(p['b'])}{'' if p['b_layout'] == 'C' else p['b_layout']}"
                     f" {p['dtype']}: {ms(p['s_each'])} each alone, "
                     f"{p['gflop'] / max(p['s_each'], 1e-12):.0f} GFLOP/s")
    return "\n".join(lines)
