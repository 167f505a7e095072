"""Seeded random numbers for every backend (the standard has no random module)."""
from __future__ import annotations

import numpy as np

from .arrays import from_host


def _check_pcg64_state(state) -> None:
    def ok_int(v, bits):
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < (1 << bits)
    inner = state.get("state") if isinstance(state, dict) else None
    if not (isinstance(state, dict) and state.get("bit_generator") == "PCG64"
            and isinstance(inner, dict) and ok_int(inner.get("state"), 128)
            and ok_int(inner.get("inc"), 128) and state.get("has_uint32") in (0, 1)
            and not isinstance(state.get("has_uint32"), bool)
            and ok_int(state.get("uinteger"), 32)):
        raise ValueError(f"random-number state must be PCG64's (bit_generator 'PCG64', state "
                         f"and inc integers in [0, 2**128), has_uint32 0 or 1, uinteger in "
                         f"[0, 2**32)), got {str(state)[:200]}")


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
        """Restore a state from :meth:`get_state` (read from a file: every field is checked,
        ValueError naming the first that is not what PCG64 keeps)."""
        _check_pcg64_state(state)
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


