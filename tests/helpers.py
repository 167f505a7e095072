"""Small helpers shared by the tests (imported as ``from helpers import ...``)."""
import numpy as np


def rel_err(a, b) -> float:
    """Largest absolute difference over the largest magnitude, in float64; shapes must match.

    max |a - b| / max(1e-12, max(|a| + |b|)) -- the symmetric relative error of style.md §8.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(1e-12, float(np.max(np.abs(a) + np.abs(b)))))
