"""The devices the device tests run on, for the ``device`` fixture of tests/conftest.py.

* "strict": array_api_strict's non-default ``Device("device1")``, always (where
  array_api_strict is installed): it raises on host conversion, on mixing devices and on
  non-standard calls, exactly where CuPy code breaks -- the GPU path tested without a GPU;
* "cupy": CuPy on a CUDA GPU, only when ``cupy.cuda.is_available()`` (``import cupy``
  succeeding proves nothing); skipped otherwise. ``.ci/gpu-check`` runs these on a GPU machine.

Each test runs the same assertions on every device.
"""
from __future__ import annotations

import numpy as np
import pytest

from tostnp import backend

NAMES = ("strict", "cupy")


class Device:
    """``xp`` the namespace, ``dev`` the device to pass to tostnp (None: the namespace's
    default), ``put`` a host array there, ``holds`` whether an array is there."""

    def __init__(self, name: str):
        self.name = name
        if name == "strict":
            xps = pytest.importorskip("array_api_strict")
            self.xp, self.dev = xps, xps.Device("device1")
        elif name == "cupy":
            if not backend.gpu_available():
                pytest.skip("no CUDA GPU (cupy.cuda.is_available() is False or no CuPy)")
            self.xp, self.dev = backend.get_xp("gpu"), None
        else:
            raise ValueError(name)

    def dtype(self, name: str):
        return getattr(self.xp, name)

    def put(self, a, dtype: str = "float32"):
        return backend.from_host(self.xp, np.asarray(a), dtype=self.dtype(dtype), device=self.dev)

    def holds(self, a) -> bool:
        if self.name == "strict":
            return a.device == self.dev
        import array_api_compat
        return array_api_compat.is_cupy_array(a)

    def __repr__(self):
        return self.name
