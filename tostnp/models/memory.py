"""What a model config will cost, computed from its sizes before anything is built.

* :func:`param_lower_bound` -- the parameters ``cfg`` declares, counting its matrices and
  tables (blocks, embeddings, position table, registers, head); the small vectors (norms,
  biases) are left out, so it never exceeds the true count. A checkpoint whose config declares
  more than its file holds is refused from this number, before the model is built.
* :func:`estimate_bytes` -- parameters plus the activations of one batch (forward only for
  evaluation and sampling; forward caches, gradients and AdamW's two moments for training).
  An estimate within a small factor, for refusing sizes that cannot fit, not for planning.
  It counts arrays, not the libraries a run loads: where Numba is installed and a TSSA layer is
  large enough for the compiled loops (:mod:`tostnp.backend.compiled`), the process also holds
  Numba and its compiler, a fixed cost of about 130 MB (docs/usage.md).
* :func:`check_model_fits` -- :func:`tostnp.backend.budget.check_memory` of that estimate.
"""
from __future__ import annotations

from ..backend.budget import check_memory

__all__ = ["param_terms", "param_lower_bound", "estimate_bytes", "check_model_fits"]


def _tokens(kind, cfg) -> int:
    if kind == "vision":
        return cfg.block_tokens + (1 if cfg.pool == "cls" else 0)
    return cfg.block_size


def param_terms(kind: str, cfg) -> dict:
    """The terms of :func:`param_lower_bound`: {the config fields that set it: count}."""
    C = cfg.width
    t = {"depth x width^2 x (2 + 2 mlp_ratio)": cfg.depth * C * C * (2 + 2 * cfg.mlp_ratio)}
    if kind == "vision":
        t["width x num_classes"] = C * cfg.num_classes
        t["num_registers x width"] = cfg.num_registers * C
        if cfg.pos == "learned":
            t["(image_size / patch_size)^2 x width (position table)"] = cfg.num_patches * C
        if cfg.stem == "linear":
            t["patch_size^2 x in_chans x width"] = cfg.patch_size ** 2 * cfg.in_chans * C
        if cfg.pool == "cls":
            t["num_cls_blocks x width^2 x (4 + 2 mlp_ratio)"] = \
                cfg.num_cls_blocks * C * C * (4 + 2 * cfg.mlp_ratio)
        return t
    t["vocab_size x width"] = cfg.vocab_size * C
    t["block_size x width (position table)"] = cfg.block_size * C
    if cfg.mixer == "tssa":
        t["depth x num_heads x block_size (denom_bias)"] = \
            cfg.depth * cfg.num_heads * cfg.block_size
    return t


def param_lower_bound(kind: str, cfg) -> int:
    """A lower bound on the parameter count of the model ``cfg`` describes (see above)."""
    return sum(param_terms(kind, cfg).values())


def estimate_bytes(kind: str, cfg, batch: int, *, training: bool, itemsize: int = 4) -> int:
    """Parameters and one batch's activations in bytes (see the module docstring)."""
    P = param_lower_bound(kind, cfg)
    L = _tokens(kind, cfg)
    C, H, h = cfg.width, cfg.width * cfg.mlp_ratio, cfg.num_heads
    # one block's arrays per token, and what each mixer keeps beyond TSSA's: fitted to the peak
    # RSS of LM training at three shapes (tests/test_memory_estimate.py holds them to 10%; the
    # three mixers' terms refitted 2026-11-28 to what a batch of 16 takes beyond one of 8 at
    # the test's shape, under Python 3.11 and 3.13 alike: against a batch of 1, whose peak is the
    # process's start, they had been too low by 6-13%); on
    # NumPy the block folds its LayerNorms' and LayerScales' weights into its products
    # (tostnp/nn/block_fold.py) and keeps no LayerNorm output and no LayerScale input: 4 C
    # fewer than the 13 C fitted before, and its MLP keeps the GELU's slope instead of its input
    # and gate (kernels.gelu_forward_slope): 2 H, not 3 H (the plain path, CuPy's, keeps them all)
    per_token = 9 * C + 2 * H + 12 * h
    per_token += {"softmax": 18 * h * L // 10,         # the (L, L) attention maps
                  "linear": 15 * C // 2,               # the running sums' caches
                  "flash": 7 * C}.get(cfg.mixer, 0)    # q, k, v, out, the row stats and the
    #                                                    backward's blocks
    blocks = cfg.depth if training else 2              # caches kept for the backward pass
    act = batch * L * (per_token * blocks + 6 * C)     # + the embeddings' and the head's
    if kind == "lm":
        act += 3 * batch * L * cfg.vocab_size          # logits, softmax, their gradient
    else:
        act += 2 * batch * cfg.image_size ** 2 * cfg.in_chans * (4 if cfg.stem == "conv" else 1)
    return itemsize * (P * (4 if training else 1) + act)


def check_model_fits(kind: str, cfg, batch: int, *, training: bool, what: str,
                     itemsize: int = 4) -> None:
    """ValueError naming ``what`` when the estimate exceeds the memory available."""
    need = estimate_bytes(kind, cfg, batch, training=training, itemsize=itemsize)
    check_memory(need, f"{what} ({'training' if training else 'running'} a {kind} model of "
                       f"at least {param_lower_bound(kind, cfg):,} parameters on batches of "
                       f"{batch})")
