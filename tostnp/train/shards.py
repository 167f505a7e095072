"""Both CPU cores on one training step: the batch split into shards, one shard per thread.

A model's loss is a mean over the items of its batch (images, or the B x T tokens of an LM
batch), and its gradient is the mean of the items' gradients. So a batch of B items cut along
its first axis into shards of B_1, ..., B_n items gives

    loss  = sum_s (B_s / B) loss_s            grads = sum_s (B_s / B) grads_s

where loss_s and grads_s are the shard's own mean loss and gradients: the same numbers as the
whole batch, up to the order in which float sums are added. Each shard runs the model's own
forward and backward with BLAS and the fast path on one thread
(:func:`tostnp.backend.runtime.serial`). On the small models of this project a step's matrices
are too small for BLAS to spread one product well over two cores; two shards of half the batch
each fill one core.

Where the shards run: on Linux, the first in this process and each other in a forked worker
process of its own (:mod:`tostnp.train.shard_workers`: no shared GIL; the first step of a shape
runs its shards one after the other here). Elsewhere (macOS, Windows; or where a fork fails)
each on its own thread of this process: NumPy releases the GIL inside its loops and matrix
products, so the shards' arithmetic runs side by side, but their Python calls take turns.
Both ways give the same numbers, bit for bit.

When it shards (:func:`shard_count`): NumPy with the fast path on, ``--threads`` (or
:func:`tostnp.backend.threads`) above 1, shards whose activations (tokens x width) hold at
least ``tuning.SHARD_MIN_ELEMENTS_FORKED`` numbers in worker processes,
``tuning.SHARD_MIN_ELEMENTS`` on threads, and a model without batch statistics
(BatchNorm's running statistics, the parameters :func:`tostnp.nn.params.is_state` names,
couple the items of a batch and are updated in place).
Otherwise the step is the model's own ``loss_and_grads`` on the whole batch. The shards, and so
the rounding, depend on the thread count: a run repeats exactly with the same ``--threads``;
with another count its numbers differ by float rounding only (``tests/test_shards.py``: the
loss and gradients of a step to 1e-11 in float64, a training run's losses to float32 rounding).

Memory: the shards' activations add up to the whole batch's; each shard holds its own
gradients until they are combined (one more copy of the parameters' size per extra shard);
a worker process also holds its own temporaries and one more copy of the parameters.
"""
from __future__ import annotations

from .. import backend
from ..backend import tuning
from ..backend.runtime import on_shards
from ..nn.params import is_state
from . import shard_workers

__all__ = ["shard_count", "sharded"]


def _bounds(xp, params: dict, rows: int, row_elements: int) -> list[tuple[int, int]]:
    """The shards' row ranges [lo, hi) (one range, the whole batch, when not sharded)."""
    fast = backend.fused(xp)
    if fast is None or any(is_state(k) for k in params):
        return [(0, rows)]
    least = (tuning.SHARD_MIN_ELEMENTS_FORKED if shard_workers.available()
             else tuning.SHARD_MIN_ELEMENTS)
    return fast.shard_bounds(rows, row_elements, least)


def shard_count(xp, params: dict, rows: int, row_elements: int) -> int:
    """How many shards a batch of ``rows`` rows, each with activations of ``row_elements``
    numbers (tokens x width), runs in (1: not sharded; see the module)."""
    return len(_bounds(xp, params, rows, row_elements))


def sharded(fn, params: dict, arrays: tuple, xp, *, row_elements: int):
    """``fn(params, *arrays) -> (loss, grads, out)`` on the whole batch, or on its shards.

    arrays: the batch's arrays, each with the batch on axis 0 (B rows); ``row_elements``: the
    size of one row's activations in the blocks, tokens x width (T x C for an LM window), for
    :func:`shard_count`.
    Returns (loss, grads, out) as ``fn`` on the whole batch would: the loss and gradients
    weighted by the shards' sizes, ``out`` (the logits) concatenated along axis 0 (None if
    ``fn`` returns None).
    """
    B = arrays[0].shape[0]
    bounds = _bounds(xp, params, B, row_elements)
    if len(bounds) <= 1:
        return fn(params, *arrays)
    def threaded():
        return on_shards(lambda lo, hi: fn(params, *(a[lo:hi] for a in arrays)), bounds)
    if shard_workers.available():
        parts = shard_workers.run_sharded(fn, params, arrays, bounds, threaded)
    else:
        parts = threaded()
    weights = [(hi - lo) / B for lo, hi in bounds]
    loss = sum(w * part[0] for w, part in zip(weights, parts))
    grads = {}
    for k in parts[0][1]:            # the same sums as sum(w * g), without its extra copies
        g = weights[0] * parts[0][1][k]
        for w, part in zip(weights[1:], parts[1:]):
            g += w * part[1][k]
        grads[k] = g
    outs = [part[2] for part in parts]
    out = None if outs[0] is None else xp.concat(outs, axis=0)
    return loss, grads, out
