"""ToST models built from :mod:`tostnp.nn`: an image classifier and a causal language model.

* :mod:`tostnp.models.configs` -- dataclass configs and named presets
  ("tiny-digits", "T", "S"; "tiny-char", "base").
* :mod:`tostnp.models.vision`  -- patch embedding, ToST blocks, class-attention pooling, head.
* :mod:`tostnp.models.lm`      -- causal ToST LM with a tied head and an O(1)-per-token sampler.

Parameters are always ONE flat dict with dotted names ("blocks.0.tssa.W_u").
:func:`load_model` rebuilds a model from a checkpoint written by the training loop.
"""
from __future__ import annotations

from .. import backend
from ..checkpoint import load_checkpoint, resolve_checkpoint
from .configs import (VisionConfig, LMConfig, VISION_CONFIGS, LM_CONFIGS, get_vision_config,
                      get_lm_config, config_from_dict)
from .vision import vision_init, vision_forward, vision_backward, vision_loss_and_grads, \
    vision_predict
from .lm import lm_init, lm_forward, lm_backward, lm_loss_and_grads, lm_generate
from ..params import num_params

__all__ = ["VisionConfig", "LMConfig", "VISION_CONFIGS", "LM_CONFIGS", "get_vision_config",
           "get_lm_config", "vision_init", "vision_forward", "vision_backward",
           "vision_loss_and_grads", "vision_predict", "lm_init", "lm_forward", "lm_backward",
           "lm_loss_and_grads", "lm_generate", "num_params", "load_model", "resolve_checkpoint",
           "config_from_dict"]


def load_model(path: str, xp=None, device=None, dtype=None):
    """Load a training checkpoint -> (kind "vision"|"lm", cfg, params, config dict).

    xp: namespace (default NumPy); dtype default float32 (float64 for checks). The parameters
    include the model state (BatchNorm running statistics); :func:`vision_forward` and
    :func:`lm_forward` compute the logits in evaluation mode by default. ``config`` is everything the training
    run stored (model and train configs, data name, tokenizer, ...).
    """
    prefix = resolve_checkpoint(path)
    host, config, _, _ = load_checkpoint(prefix)
    xp = backend.get_xp("cpu") if xp is None else xp
    dtype = xp.float32 if dtype is None else dtype
    kind, cfg = config_from_dict(config)
    params = {k: backend.from_host(xp, v, dtype=dtype, device=device) for k, v in host.items()}
    return kind, cfg, params, config
