"""The array backend: the one place where tostnp steps outside the Python Array API standard.

Everything else in tostnp takes its namespace from its inputs (``xp = namespace(x)``) and is
written against the standard, so the same code runs on NumPy (CPU), CuPy (GPU) and
``array_api_strict`` (the tests' stand-in for a GPU). The three needs the standard does not
cover live here and only here:

* seeded random numbers  -> :class:`RNG` (draws on the host with NumPy, then moves the result
  to the target device, so a seed gives the same numbers on every backend);
* scatter-add            -> :func:`scatter_add` (embedding backward);
* moving to the host     -> :func:`to_host` (plots, saving, printing);
* the error function     -> :func:`erf` (the exact GELU; SciPy / CuPy, or a standard-only form).

It is also the one switch for the CPU fast path: :func:`fused` hands out :mod:`tostnp.backend.kernels`
(fewer passes over memory, no temporaries, for NumPy arrays only) where the plain array-API code
is measured hot (:func:`add_bias`, the bias add of every linear map, is its one dispatcher here);
CuPy and ``array_api_strict`` always run the plain code, which stays the
specification. :func:`threads` sets the CPU thread count of BLAS and of the fast path, and :func:`keep_freed_memory`
keeps freed arrays in the process instead of handing them back to the operating system (so a
training step reuses warm memory rather than faulting in fresh pages).

Modules: :mod:`.openblas` (how long OpenBLAS's idle threads spin), :mod:`.arrays` (namespaces,
devices, host transfers, index arrays, scatter-add), :mod:`.rng`
(seeded draws), :mod:`.special` (erf), :mod:`.runtime` (fast-path switch, threads, allocator),
:mod:`.kernels` (the NumPy fast kernels), :mod:`.tuning` (every piece and block size, with how it
was chosen), :mod:`.validate` (argument checks for entry points).
"""
from __future__ import annotations

from . import openblas  # noqa: F401  (first: sets OpenBLAS's spin before NumPy loads it)
from .arrays import (namespace, is_numpy, is_cupy, gpu_available, get_xp, device_of, to_host,
                     from_host, indices, scatter_add)
from .rng import RNG
from .special import erf, erf_array_api
from .runtime import (fused, add_bias, set_fast, threads, cpu_cores, keep_freed_memory,
                      backward_ahead)
from .compiled import set_jit

__all__ = [
    "namespace", "get_xp", "gpu_available", "device_of", "to_host", "from_host",
    "indices", "scatter_add", "RNG", "is_numpy", "erf", "erf_array_api", "fused", "add_bias",
    "set_fast", "set_jit", "threads", "cpu_cores", "keep_freed_memory", "backward_ahead",
]

