"""Seeded random numbers for every backend (the standard has no random module)."""
from __future__ import annotations

import numpy as np

from .arrays import from_host


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


