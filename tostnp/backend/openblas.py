"""OpenBLAS's idle threads: how long they spin after a matrix product.

OpenBLAS, NumPy's BLAS on PyPI, keeps its worker threads spinning after each product in case
another comes, by default for 2^28 clock cycles (about 0.1 s). On a machine with few cores
the spinning thread holds a core, and a thread of ours on that core runs at a fraction of its
speed: the non-causal TSSA layer on two batch slices (:func:`tostnp.nn.tssa.batch_slices`) took
11.4 ms right after a two-thread product against 6.5 ms without one (B 4, N 512, C 384).

The spin is set by the environment variable ``OPENBLAS_THREAD_TIMEOUT`` (2^value cycles), read
once, when OpenBLAS loads with NumPy. Imported before NumPy, tostnp sets it to 22 (2^22 cycles,
about 1.6 ms) unless it is set already; the slices then took 6.4 ms after a product, and the
default models' training steps were as fast as with the default spin (the digits step at 2
threads, four runs of each). Imported after NumPy (a notebook that imports NumPy first) it
changes nothing, and the layer does not run on slices (:func:`spin_is_short`).
"""
from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
VALUE = 22
SHORT = 24          # at most 2^24 cycles (about 6 ms): short enough for the slices

_numpy_first = "numpy" in sys.modules
if not _numpy_first:
    os.environ.setdefault(VARIABLE, str(VALUE))
_value = os.environ.get(VARIABLE)
_numpy_openblas: bool | None = None         # NumPy's BLAS is OpenBLAS (asked once, when needed)


def spin_is_short() -> bool:
    """True when NumPy's BLAS is OpenBLAS and its idle threads sleep within 2^SHORT cycles: the
    variable was in the environment when tostnp was first imported, as a number up to
    ``SHORT``. False for any other BLAS (MKL's and Accelerate's threads have their own
    settings), so the layer runs whole there."""
    global _numpy_openblas
    try:
        if _value is None or int(_value) > SHORT:
            return False
    except ValueError:
        return False
    if _numpy_openblas is None:
        try:
            from threadpoolctl import threadpool_info
        except ImportError:             # (a NumPy-only environment such as Pyodide's)
            _numpy_openblas = False
            return False
        _numpy_openblas = any(i.get("internal_api") == "openblas" and "numpy" in i.get("filepath", "")
                              for i in threadpool_info() if i.get("user_api") == "blas")
    return _numpy_openblas
