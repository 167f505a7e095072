"""Rebuild a model from a training checkpoint: read and validate before anything is built."""
from __future__ import annotations

import numpy as np

from .. import backend
from ..io.checkpoint import load_checkpoint, resolve_checkpoint
from ..nn.params import check_params
from .configs import config_from_dict
from .vision import vision_init
from .lm import lm_init


def _min_param_count(kind, cfg) -> int:
    """A lower bound on the parameters ``cfg`` declares (the matrices only), from its sizes."""
    C = cfg.width
    per_block = C * C * (2 + 2 * cfg.mlp_ratio)               # W_u, W_o, mlp.W1, mlp.W2
    if kind == "vision":
        return cfg.depth * per_block + C * cfg.num_classes                  # + head
    return cfg.depth * per_block + cfg.vocab_size * C                       # + token embedding


def read_model_checkpoint(path: str, expect_kind: str | None = None):
    """Read and validate a training checkpoint before any model is built.

    Returns (kind, cfg, host params, config dict, extra arrays, state). The JSON is checked
    against its schema (:func:`config_from_dict`: keys, types, size limits) and then against the
    arrays: the sizes it declares must fit the parameters stored (so a crafted depth of 1e9
    is refused before anything is allocated), and the parameter names, shapes and dtypes must
    be exactly those of the model. ValueError / FileNotFoundError name the problem.
    """
    prefix = resolve_checkpoint(path)
    host, config, extra, state = load_checkpoint(prefix)
    where = f"checkpoint {prefix}.npz"
    try:
        kind, cfg = config_from_dict(config)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if expect_kind is not None and kind != expect_kind:
        raise ValueError(f"{where} is a {kind!r} checkpoint, not {expect_kind!r}")
    stored = sum(int(a.size) for a in host.values())
    need = _min_param_count(kind, cfg)
    if need > stored:
        raise ValueError(f"{where}: its model config declares at least {need:,} parameters but "
                         f"the file holds {stored:,} (config and arrays disagree)")
    init = vision_init if kind == "vision" else lm_init
    ref = init(cfg, backend.RNG(0), backend.get_xp("cpu"))    # bounded by the check above
    dtype = next(iter(host.values())).dtype if host else None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"{where}: parameters must be float32 or float64, got {dtype}")
    try:
        check_params(host, {k: (tuple(r.shape), True) for k, r in ref.items()}, dtype, where)
    except TypeError as e:
        raise ValueError(str(e)) from None
    for k, a in host.items():
        if not np.all(np.isfinite(a)):
            raise ValueError(f"{where}: parameter {k!r} holds NaN or Inf")
    return kind, cfg, host, config, extra, state


def load_model(path: str, xp=None, device=None, dtype=None):
    """Load a training checkpoint -> (kind "vision"|"lm", cfg, params, config dict).

    xp: namespace (default NumPy); dtype default float32 (float64 for checks). The parameters
    include the model state (BatchNorm running statistics); :func:`vision_forward` and
    :func:`lm_forward` compute the logits in evaluation mode by default. ``config`` is everything the training
    run stored (model and train configs, data name, tokenizer, ...).
    """
    kind, cfg, host, config, _, _ = read_model_checkpoint(path)
    xp = backend.get_xp("cpu") if xp is None else xp
    dtype = xp.float32 if dtype is None else dtype
    params = {k: backend.from_host(xp, v, dtype=dtype, device=device) for k, v in host.items()}
    return kind, cfg, params, config
