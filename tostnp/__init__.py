"""tostnp: the Token Statistics Transformer (ToST) from scratch on NumPy/CuPy, derived and verified.

Tokens are rows: arrays of shape (..., n, d). The core objective (book/02_coding_rate.md to book/05_gradient_tssa.md):

* :func:`coding_rate`                   R(Z)
* :func:`compression`                   R_c(Z, Pi)
* :func:`rate_reduction`                Delta R = R - R_c
* :func:`variational_compression`       R^var_c(Z, Pi | U)
* :func:`variational_compression_grad`  its closed-form gradient in Z (Pi fixed)
* :func:`tssa_step`                     Z - tau * grad R^var_c (TSSA as a gradient step)
* :func:`membership`                    Pi = softmax_k ||U_k^T z_j||^2 / (2 eta)

Layers with hand-derived backward passes live in :mod:`tostnp.nn`.
"""
from ._startup import quiet_interrupts as _quiet
_quiet()                 # first: Ctrl-C while the CLI starts is one line, not a traceback
from . import backend  # noqa: F401  (first: tostnp.backend.openblas acts before NumPy loads)
from .math.objective import coding_rate, compression, rate_reduction
from .math.variational import (variational_compression, variational_compression_grad, tssa_step,
                          membership)

__version__ = "0.1.0"

__all__ = ["coding_rate", "compression", "rate_reduction", "variational_compression",
           "variational_compression_grad", "tssa_step", "membership"]
