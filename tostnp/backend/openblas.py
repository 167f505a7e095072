"""OpenBLAS's idle threads: how long they spin after a matrix product.

OpenBLAS, NumPy's BLAS on PyPI, keeps its worker threads spinning after each product in case
another comes, by default for 2^28 clock cycles. On a machine with few cores the spinning
thread holds a core, and a thread of ours on that core runs at a fraction of its speed: the
non-causal TSSA layer on batch slices (:func:`tostnp.nn.tssa.batch_slices`) is slowed right
after a two-thread product (the figures: docs/tuning.md).

The spin is set by the environment variable ``OPENBLAS_THREAD_TIMEOUT`` (2^value cycles), read
once, when OpenBLAS loads with NumPy. Imported before NumPy, tostnp sets it to 22 unless it is
set already: short enough that the slices lose nothing after a product, long enough that the
training steps stay as fast as with the default spin. Imported after NumPy (a notebook that
imports NumPy first) it changes nothing, and the layer does not run on slices
(:func:`spin_is_short`).
"""
from __future__ import annotations

import os
import sys

VARIABLE = "OPENBLAS_THREAD_TIMEOUT"
VALUE = 22
SHORT = 24          # at most 2^24 cycles: still short enough for the slices

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
