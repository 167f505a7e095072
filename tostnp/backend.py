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

It is also the one switch for the CPU fast path: :func:`fused` hands out :mod:`tostnp.fused`
(fewer passes over memory, no temporaries, for NumPy arrays only) where the plain array-API code
is measured hot; CuPy and ``array_api_strict`` always run the plain code, which stays the
specification. :func:`threads` sets the CPU thread count of BLAS and of the fast path, and :func:`keep_freed_memory`
keeps freed arrays in the process instead of handing them back to the operating system (so a
training step reuses warm memory rather than faulting in fresh pages).
"""
from __future__ import annotations

import contextlib
import math
import os

import numpy as np
import array_api_compat

__all__ = [
    "namespace", "get_xp", "gpu_available", "device_of", "to_host", "from_host",
    "scatter_add", "RNG", "is_numpy", "erf", "erf_array_api", "fused", "set_fast", "threads",
    "cpu_cores", "keep_freed_memory",
]


_NUMPY_XP = array_api_compat.array_namespace(np.empty(0))


def namespace(*arrays):
    """The Array API namespace of ``arrays`` (array-api-compat wrapper for NumPy and CuPy).

    Plain NumPy arrays get array-api-compat's NumPy namespace without the general lookup (the
    same module object; a training step asks a few hundred times)."""
    if len(arrays) == 1:
        if type(arrays[0]) is np.ndarray:
            return _NUMPY_XP
    elif arrays and all(type(a) is np.ndarray for a in arrays):
        return _NUMPY_XP
    return array_api_compat.array_namespace(*arrays)


def is_numpy(xp) -> bool:
    return array_api_compat.is_numpy_namespace(xp)


def is_cupy(xp) -> bool:
    return array_api_compat.is_cupy_namespace(xp)


# --------------------------------------------------------------------------------------------
# the CPU fast path
# --------------------------------------------------------------------------------------------
_NUMPY_NAMES = ("numpy", "array_api_compat.numpy")
_fast_on = os.environ.get("TOSTNP_FAST", "1") != "0"


def fused(xp):
    """The NumPy fast kernels (module :mod:`tostnp.fused`) for namespace ``xp``, or None.

    Layers ask ``fast = backend.fused(xp)`` and run ``fast.<op>`` when it is not None, the
    plain array-API code otherwise. None for CuPy, ``array_api_strict`` and any other
    namespace, and for NumPy too after ``set_fast(False)`` (or with ``TOSTNP_FAST=0`` in the
    environment), which is how tests compare the two paths.
    """
    if _fast_on and getattr(xp, "__name__", None) in _NUMPY_NAMES:
        from . import fused as _fused
        return _fused
    return None


def set_fast(on: bool) -> bool:
    """Switch the NumPy fast path on or off for the whole process; returns the old setting."""
    global _fast_on
    old, _fast_on = _fast_on, bool(on)
    return old


def cpu_cores() -> int:
    """CPU cores this process may run on (its affinity set where the OS reports one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextlib.contextmanager
def threads(n: int | None):
    """CPU threads inside the ``with`` block: BLAS's (OpenBLAS/MKL, via threadpoolctl) and the
    fast path's (:func:`tostnp.fused.set_threads`: its kernels split their arrays into pieces
    and run them on this many threads; NumPy's own elementwise operations use one).

    ``n`` None or 0 leaves the defaults alone (the library's for BLAS, one thread for the fast
    path).
    """
    if not n:
        yield
        return
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"threads must be a positive int (or 0 for the default), got {n!r}")
    from threadpoolctl import threadpool_limits
    from . import fused as _fused
    old = _fused.set_threads(n)
    try:
        with threadpool_limits(limits=n, user_api="blas"):
            yield
    finally:
        _fused.set_threads(old)


def keep_freed_memory() -> bool:
    """Ask glibc's allocator to keep freed memory in the process (Linux/glibc only).

    By default glibc serves every allocation above a threshold (128 KiB, growing to at most
    32 MiB) with a fresh ``mmap`` and unmaps it on free, so each training step faults in its
    activations page by page again (the kernel zeroes every page). Raising the mmap threshold to
    its maximum and disabling the trimming of the heap's top keeps freed arrays for reuse.
    Arrays above 32 MiB are still mapped fresh. Returns True when the settings were applied.
    Process-wide and idempotent; :func:`tostnp.train.train` and ``bench --train`` call it.
    """
    try:
        import ctypes
        import ctypes.util
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    ok = mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024)
    ok &= mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1)
    return bool(ok)


def gpu_available() -> bool:
    """True only when CuPy imports *and* sees a usable CUDA device.

    ``import cupy`` alone proves nothing: it succeeds on machines without CUDA.
    """
    try:
        import cupy  # noqa: F401
        return bool(cupy.cuda.is_available())
    except Exception:  # ImportError, CUDA driver errors
        return False


def get_xp(device: str = "cpu"):
    """Namespace for ``device`` in {"cpu", "gpu"}; "gpu" raises a clear error without a GPU."""
    if device == "cpu":
        import array_api_compat.numpy as xp_np
        return xp_np
    if device == "gpu":
        if not gpu_available():
            raise RuntimeError(
                "device='gpu' needs CuPy and a usable CUDA GPU, but cupy.cuda.is_available() "
                "is False (or CuPy is not installed: pip install cupy-cuda12x). "
                "Use device='cpu'.")
        import array_api_compat.cupy as xp_cp
        return xp_cp
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


def device_of(x):
    return array_api_compat.device(x)


def to_host(x) -> np.ndarray:
    """Copy an array (NumPy, CuPy, ...) to a NumPy array on the host."""
    if isinstance(x, np.ndarray) or np.isscalar(x):
        return np.asarray(x)
    if array_api_compat.is_cupy_array(x):
        return x.get()
    if array_api_compat.is_array_api_strict_namespace(namespace(x)):
        # the tests' stand-in for a GPU: an explicit transfer, like CuPy's .get(). (A bare
        # np.asarray raises for arrays on its non-CPU devices, which is what keeps the rest of
        # tostnp honest: host transfers happen here and nowhere else.)
        import array_api_strict
        return np.asarray(x.to_device(array_api_strict.Device("CPU_DEVICE")))
    return np.asarray(x)


def from_host(xp, a, dtype=None, device=None):
    """Move a host (NumPy) array ``a`` to namespace ``xp`` on ``device``."""
    a = np.asarray(a)
    if dtype is not None:
        # dtype is an xp dtype; build the host array with the same-named NumPy dtype
        a = a.astype(np.dtype(_dtype_name(dtype)), copy=False)
    if device is None:
        return xp.asarray(a)
    return xp.asarray(a, device=device)


def _dtype_name(dtype) -> str:
    name = getattr(dtype, "name", None)
    if name is None and isinstance(dtype, type):
        name = dtype.__name__          # NumPy/CuPy scalar types, e.g. numpy.float32 -> "float32"
    name = name or str(dtype)
    return name.rsplit(".", 1)[-1]


def scatter_add(idx, values, num_rows: int):
    """``out[idx[i]] += values[i]`` summed over repeats: out has shape (num_rows, *values.shape[1:]).

    idx: (M,) integer array; values: (M, ...) floating array, same namespace and device.
    """
    xp = namespace(values)
    if is_numpy(xp):
        out = np.zeros((num_rows,) + tuple(values.shape[1:]), dtype=values.dtype)
        np.add.at(out, np.asarray(idx), np.asarray(values))
        return out
    if is_cupy(xp):
        import cupy
        import cupyx
        out = cupy.zeros((num_rows,) + tuple(values.shape[1:]), dtype=values.dtype)
        cupyx.scatter_add(out, idx, values)
        return out
    # Standard-only fallback (array_api_strict): a one-hot matrix product, O(M * num_rows).
    dev = device_of(values)
    rows = xp.arange(num_rows, device=dev)
    onehot = xp.astype(xp.reshape(idx, (-1, 1)) == xp.reshape(rows, (1, -1)), values.dtype)
    flat = xp.reshape(values, (values.shape[0], -1))
    return xp.reshape(xp.matrix_transpose(onehot) @ flat, (num_rows,) + tuple(values.shape[1:]))


class RNG:
    """Seeded random numbers for every backend.

    Draws happen on the host with NumPy's PCG64 and are then moved to ``device``, so one seed
    gives bit-identical numbers on NumPy, CuPy and array_api_strict. The state is a plain,
    JSON-serialisable dict (used by checkpoints to resume bit-identically).
    """

    def __init__(self, seed: int = 0):
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        self._gen = np.random.Generator(np.random.PCG64(int(seed)))

    # --- state -----------------------------------------------------------------------------
    def get_state(self) -> dict:
        return self._gen.bit_generator.state

    def set_state(self, state: dict) -> None:
        self._gen.bit_generator.state = state

    # --- draws -----------------------------------------------------------------------------
    def normal(self, xp, shape, dtype, std: float = 1.0, mean: float = 0.0, device=None):
        a = self._gen.standard_normal(size=tuple(shape))
        return from_host(xp, a * std + mean, dtype=dtype, device=device)

    def uniform(self, xp, shape, dtype, low: float = 0.0, high: float = 1.0, device=None):
        a = self._gen.uniform(low, high, size=tuple(shape))
        return from_host(xp, a, dtype=dtype, device=device)

    def bernoulli(self, xp, shape, p_true: float, dtype, device=None):
        """0/1 mask with P(1) = p_true, in ``dtype``."""
        a = self._gen.random(size=tuple(shape)) < p_true
        return from_host(xp, a, dtype=dtype, device=device)

    def permutation(self, n: int) -> np.ndarray:
        """A host permutation of range(n) (used for data shuffling)."""
        return self._gen.permutation(n)

    def integers(self, low: int, high: int, size=None) -> np.ndarray:
        """Host integers in [low, high)."""
        return self._gen.integers(low, high, size=size)

    def orthogonal(self, xp, d: int, dtype, device=None):
        """A Haar-random d x d orthogonal matrix (QR of a Gaussian, signs fixed)."""
        q, r = np.linalg.qr(self._gen.standard_normal((d, d)))
        q = q * np.sign(np.diag(r))[None, :]
        return from_host(xp, q, dtype=dtype, device=device)


# ---------------------------------------------------------------------------------------------
# erf: the exact GELU needs it, and the Array API standard has no erf
# ---------------------------------------------------------------------------------------------
def erf(x):
    """The error function, elementwise, in the dtype of ``x`` (float32 or float64).

    NumPy -> ``scipy.special.erf``; CuPy -> ``cupyx.scipy.special.erf``; any other namespace
    (``array_api_strict``) -> :func:`erf_array_api`, written in standard operations only.
    """
    xp = namespace(x)
    if is_numpy(xp):
        from scipy.special import erf as _erf   # scipy: a scikit-learn dependency, pinned
        return _erf(x)
    if is_cupy(xp):
        from cupyx.scipy.special import erf as _erf
        return _erf(x)
    return erf_array_api(x)


# Where the power series hands over to the continued fraction, and how many terms each uses
# (both reach float64 rounding on their side of the switch; checked against scipy in
# tests/test_stem.py).
_ERF_SWITCH = 2.5
_ERF_SERIES_TERMS = 70
_ERF_CF_TERMS = 70


def erf_array_api(x):
    """erf written in Array API operations only, accurate to float64 rounding (≈ 1e-15).

    For |x| < 2.5 the series with positive terms (no cancellation)
        erf(a) = (2/√π) e^{-a²} Σ_n 2^n a^{2n+1} / (1·3·5···(2n+1));
    above, the continued fraction of the complement
        erfc(a) = e^{-a²}/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + 2/(a + ...))))).
    erf(-x) = -erf(x). Slow (≈ 140 elementwise passes): a fallback, not a fast path.
    """
    xp = namespace(x)
    a = xp.abs(x)
    small = a < _ERF_SWITCH
    # series on the small side (a is clamped on the other side so nothing overflows)
    s_a = xp.where(small, a, xp.zeros_like(a))
    a2 = s_a * s_a
    term = s_a
    total = s_a
    for n in range(1, _ERF_SERIES_TERMS):
        term = term * (2.0 * a2) / (2.0 * n + 1.0)
        total = total + term
    erf_small = (2.0 / math.sqrt(math.pi)) * xp.exp(-a2) * total
    # continued fraction on the large side, evaluated from the bottom up
    c_a = xp.where(small, xp.full_like(a, _ERF_SWITCH), a)
    f = c_a
    for k in range(_ERF_CF_TERMS, 0, -1):
        f = c_a + (0.5 * k) / f
    erfc_large = xp.exp(-c_a * c_a) / (math.sqrt(math.pi) * f)
    out = xp.where(small, erf_small, 1.0 - erfc_large)
    out = xp.where(x < 0, -out, out)
    return xp.where(xp.isnan(x), x, out)                   # NaN stays NaN
