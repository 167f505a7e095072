r"""BatchNorm2d: per-channel normalisation over (batch, rows, cols), with running statistics.

Channels-last input x (B, H, W, C); m = B·H·W values per channel.

Training mode normalises with the statistics of the batch itself,

    mu = mean(x),  var = mean((x - mu)^2)  (biased),  xhat = (x - mu) / sqrt(var + eps),

and returns, besides y = gamma xhat + beta, the updated running statistics

    running_mean <- (1 - momentum) running_mean + momentum mu
    running_var  <- (1 - momentum) running_var  + momentum var m/(m - 1)   (unbiased)
    num_batches_tracked <- num_batches_tracked + 1

(PyTorch's conventions, momentum 0.1, eps 1e-5). Evaluation mode normalises with the running
statistics instead: xhat = (x - running_mean) / sqrt(running_var + eps).

The running statistics are model *state*, not parameters: they are saved in checkpoints and
carried through export/import, but they have no gradient, the optimizer never updates them and
weight decay never touches them. :func:`is_state` names them (by their leaf names).

Backward of training mode (the batch statistics depend on x), with g = dy gamma and means over
the m values of a channel:  dx = (g - mean(g) - xhat mean(g xhat)) / sqrt(var + eps).
Backward of evaluation mode: dx = g / sqrt(running_var + eps).
"""
from __future__ import annotations

from .. import backend
from ..backend.validate import check_array
from .params import STATE_LEAVES, is_state, check_param  # noqa: F401  (re-exported)

__all__ = ["batch_norm2d_forward", "batch_norm2d_backward", "STATE_LEAVES", "is_state"]


def _channel_sum(xp, a):
    """(B, H, W, C) -> (C,)."""
    return xp.sum(xp.reshape(a, (-1, a.shape[-1])), axis=0)


def batch_norm2d_forward(x, gamma, beta, state: dict, *, train: bool, eps: float = 1e-5,
                         momentum: float = 0.1):
    """x: (B, H, W, C); gamma, beta: (C,); state {"running_mean": (C,), "running_var": (C,),
    "num_batches_tracked": ()} -> (y (B, H, W, C), cache).

    In training mode ``cache["state"]`` holds the updated state (new arrays; ``state`` is not
    modified); in evaluation mode it is None.
    """
    xp = check_array(x, "x", ndim=4, shape_desc="(B, H, W, C)")
    C = x.shape[-1]
    check_param(gamma, "gamma", (C,), x.dtype)
    check_param(beta, "beta", (C,), x.dtype)
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict of running statistics, got {type(state).__name__}")
    check_param(state.get("running_mean"), "running_mean", (C,), x.dtype)
    check_param(state.get("running_var"), "running_var", (C,), x.dtype)
    eps, momentum = float(eps), float(momentum)
    m = x.shape[0] * x.shape[1] * x.shape[2]
    if train:
        if m < 2:
            raise ValueError(f"batch_norm2d in training mode needs more than one value per "
                             f"channel, got x of shape {tuple(x.shape)}")
        mu = _channel_sum(xp, x) / m                                # (C,)
        xc = x - mu                                                 # (B, H, W, C)
        var = _channel_sum(xp, xc * xc) / m                         # (C,) biased
        rstd = 1.0 / xp.sqrt(var + eps)                             # (C,)
        new = {"running_mean": (1.0 - momentum) * state["running_mean"] + momentum * mu,
               "running_var": (1.0 - momentum) * state["running_var"]
               + (momentum * m / (m - 1)) * var}
        if state.get("num_batches_tracked") is not None:
            new["num_batches_tracked"] = state["num_batches_tracked"] + 1.0
    else:
        xc = x - state["running_mean"]
        rstd = 1.0 / xp.sqrt(state["running_var"] + eps)            # (C,)
        new = None
    xhat = xc * rstd                                                # (B, H, W, C)
    y = xhat * gamma + beta
    return y, {"xhat": xhat, "rstd": rstd, "gamma": gamma, "train": bool(train), "state": new}


def batch_norm2d_backward(dy, cache):
    """dy: (B, H, W, C) -> dx (B, H, W, C), {"gamma": (C,), "beta": (C,)}."""
    xp = backend.namespace(dy)
    xhat, rstd, gamma = cache["xhat"], cache["rstd"], cache["gamma"]
    g = dy * gamma                                                  # (B, H, W, C)
    if cache["train"]:
        m = dy.shape[0] * dy.shape[1] * dy.shape[2]
        dx = (g - _channel_sum(xp, g) / m - xhat * (_channel_sum(xp, g * xhat) / m)) * rstd
    else:
        dx = g * rstd
    return dx, {"gamma": _channel_sum(xp, dy * xhat), "beta": _channel_sum(xp, dy)}
