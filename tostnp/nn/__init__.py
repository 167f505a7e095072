"""Layers with hand-derived backward passes, one contract for all (CS231n style):

    out, cache = xxx_forward(x, ...)
    dx, grads  = xxx_backward(dout, cache)

Shapes: B batch, N tokens, C width, h heads, p = C / h head width.
"""
from .layers import *      # noqa: F401,F403  linear, layer_norm, gelu, mlp, dropout, embedding, ...
from .loss import *        # noqa: F401,F403  softmax cross-entropy (also in layers' names)
from .attention import *   # noqa: F401,F403  softmax and linear attention baselines
from .flash import *       # noqa: F401,F403  memory-efficient exact softmax attention
from .class_attention import *  # noqa: F401,F403  class attention and its block (CLS pooling)
from .tssa import *        # noqa: F401,F403  the TSSA layer, causal TSSA, recurrent decoder
from .block import *       # noqa: F401,F403  the ToST block
