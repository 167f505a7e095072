"""The training loss: softmax cross-entropy with its hand-derived backward, the contract of
:mod:`tostnp.nn.layers` (``loss, cache = ..._forward(logits, targets)``, ``dlogits, {} =
..._backward(dloss, cache)``). Mean over the tokens whose target is not ``ignore_index``; the
log-softmax subtracts the row max. On NumPy the log-softmax and the backward run as kernels
(:func:`tostnp.backend.kernels.log_softmax`,
:func:`tostnp.backend.kernels.softmax_cross_entropy_backward`), the array-API form beside them.

Shapes: logits (..., V), targets (...), V vocabulary (or classes).
"""
from __future__ import annotations

from .. import backend
from ..backend.validate import check_array

__all__ = ["softmax_cross_entropy_forward", "softmax_cross_entropy_backward"]


def softmax_cross_entropy_forward(logits, targets, ignore_index=None):
    """Mean over non-ignored tokens of -log softmax(logits)[target].

    logits: (..., V) floating; targets: (...) integer in [0, V) (or == ignore_index)
    -> loss: 0-d array of logits' dtype. The log-softmax subtracts the row max (stable).
    Raises ValueError if every target is ignored or a target is outside [0, V).
    """
    xp = check_array(logits, "logits", min_ndim=1, shape_desc="(..., V)")
    check_array(targets, "targets", shape_desc="(...)", floating=False)
    if not xp.isdtype(targets.dtype, "integral"):
        raise TypeError(f"targets must be an integer array, got dtype {targets.dtype}")
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"targets must have shape logits.shape[:-1] = {tuple(logits.shape[:-1])}, "
                         f"got shape {tuple(targets.shape)}")
    V = logits.shape[-1]
    dev = backend.device_of(logits)
    z = xp.reshape(logits, (-1, V))                                # (M, V)
    t = xp.astype(xp.reshape(targets, (-1,)), xp.int64)            # (M,)
    M = t.shape[0]
    if ignore_index is None:
        valid = xp.ones((M,), dtype=xp.bool, device=dev)
    else:
        valid = t != int(ignore_index)                             # (M,)
    count = int(xp.sum(xp.astype(valid, xp.int64))) if M > 0 else 0
    if count == 0:
        raise ValueError("softmax_cross_entropy: every target is ignored (or there are none); "
                         "the mean loss is undefined")
    if bool(xp.any(valid & ((t < 0) | (t >= V)))):
        raise ValueError(f"targets must lie in [0, V) = [0, {V})"
                         + ("" if ignore_index is None else f" or equal ignore_index={ignore_index}"))
    t = xp.where(valid, t, xp.zeros_like(t))                       # (M,) safe index
    fast = backend.fused(xp)
    if fast is not None:                         # NumPy: the same lines in cache-sized pieces
        logp = fast.log_softmax(z)
    else:
        zmax = xp.max(z, axis=-1, keepdims=True)                   # (M, 1)
        logp = z - zmax                                            # (M, V)
        logp -= xp.log(xp.sum(xp.exp(logp), axis=-1, keepdims=True))  # log-softmax
    at = backend.indices(xp.arange(M, device=dev) * V + t)        # (M,) flat positions
    picked = xp.take(xp.reshape(logp, (-1,)), at)                  # (M,)
    w = xp.astype(valid, logits.dtype) * (1.0 / count)             # (M,) weight per token
    loss = -xp.sum(picked * w)                                     # ()
    return loss, (logp, t, w, tuple(logits.shape))


def softmax_cross_entropy_backward(dloss, cache):
    """dloss: scalar (0-d array or number) -> dlogits (..., V), {}.

    dlogits = (softmax(logits) - onehot(target)) * valid / count * dloss.
    """
    logp, t, w, shape = cache
    xp = backend.namespace(logp)
    fast = backend.fused(xp)
    if fast is not None:                         # NumPy: two passes, no (M, V) mask
        return fast.softmax_cross_entropy_backward(logp, t, w, dloss).reshape(shape), {}
    V = logp.shape[-1]
    p = xp.exp(logp)                                               # (M, V) softmax
    hit = xp.reshape(t, (-1, 1)) == xp.reshape(xp.arange(V, device=backend.device_of(logp)), (1, -1))
    g = xp.where(hit, p - 1.0, p)                                  # (M, V)
    g = g * (xp.reshape(w, (-1, 1)) * dloss)
    return xp.reshape(g, shape), {}
