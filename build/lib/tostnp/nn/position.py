r"""Fourier position features (XCiT's encoding, used by the published ToST vision models).

On an Hp x Wp grid of patch tokens, row r and column c get the coordinates

    y(r) = 2 pi (r + 1) / (Hp + 1e-6),      x(c) = 2 pi (c + 1) / (Wp + 1e-6),

and a coordinate v the D = 32 features, with t_i = 10000^(2 floor(i/2) / D), i = 0..31,

    [sin(v/t_0), cos(v/t_1), sin(v/t_2), cos(v/t_3), ..., sin(v/t_30), cos(v/t_31)].

Token n = r Wp + c (row-major, the order of the patch stem) gets [features(y(r)), features(x(c))]
(64 numbers, y first). The model maps them to the width C with a learned linear map
(``pos.W`` (64, C), ``pos.b`` (C,), the published 1x1 convolution) and adds the result to the
patch tokens. Nothing here is learned and nothing depends on a table size: any image size works.

The features are computed on the host in float64 (the published code uses a float32 grid; the
two differ by about 1e-7 relative) and then moved to the model's namespace and dtype.
"""
from __future__ import annotations

import math

import numpy as np

from .. import backend

__all__ = ["FOURIER_DIM", "fourier_features"]

FOURIER_DIM = 32          # features per coordinate; 2 * FOURIER_DIM in all


def fourier_features(xp, Hp: int, Wp: int, dtype, device=None, dim: int = FOURIER_DIM):
    """The (Hp * Wp, 2 dim) Fourier features of the token grid (module docstring)."""
    for name, v in (("Hp", Hp), ("Wp", Wp), ("dim", dim)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    i = np.arange(dim)
    t = 10000.0 ** (2 * (i // 2) / dim)                             # (dim,)
    even = (i % 2) == 0

    def feats(v):                                                   # v: (L,) -> (L, dim)
        a = v[:, None] / t[None, :]
        return np.where(even[None, :], np.sin(a), np.cos(a))

    y = 2 * math.pi * np.arange(1, Hp + 1, dtype=np.float64) / (Hp + 1e-6)      # (Hp,)
    x = 2 * math.pi * np.arange(1, Wp + 1, dtype=np.float64) / (Wp + 1e-6)      # (Wp,)
    fy = np.repeat(feats(y), Wp, axis=0)                            # (Hp*Wp, dim): row r
    fx = np.tile(feats(x), (Hp, 1))                                 # (Hp*Wp, dim): col c
    return backend.from_host(xp, np.concatenate([fy, fx], axis=1), dtype=dtype, device=device)
