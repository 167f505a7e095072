"""ToST models built from :mod:`tostnp.nn`: an image classifier and a causal language model.

* :mod:`tostnp.models.configs` -- dataclass configs and named presets
  ("tiny-digits", "T", "S"; "tiny-lm", "base").
* :mod:`tostnp.models.vision`  -- patch embedding, ToST blocks, class-attention pooling, head.
* :mod:`tostnp.models.lm`      -- causal ToST LM with a tied head and an O(1)-per-token sampler.

Parameters are always ONE flat dict with dotted names ("blocks.0.tssa.W_u").
:func:`tostnp.io.load_model` rebuilds a model from a checkpoint written by the training loop.
"""
from __future__ import annotations

from .configs import (VisionConfig, LMConfig, VISION_CONFIGS, LM_CONFIGS, get_vision_config,
                      get_lm_config, config_from_dict)
from .vision import vision_init, vision_forward, vision_backward, vision_loss_and_grads, \
    vision_predict
from .lm import lm_init, lm_forward, lm_backward, lm_loss_and_grads, lm_generate
from ..nn.params import num_params

__all__ = ["VisionConfig", "LMConfig", "VISION_CONFIGS", "LM_CONFIGS", "get_vision_config",
           "get_lm_config", "vision_init", "vision_forward", "vision_backward",
           "vision_loss_and_grads", "vision_predict", "lm_init", "lm_forward", "lm_backward",
           "lm_loss_and_grads", "lm_generate", "num_params", "config_from_dict"]
