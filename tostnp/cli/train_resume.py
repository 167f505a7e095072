"""``train ... --resume``: the checkpoint's settings read back (validated), and the options given
with ``--resume`` checked against them."""
from __future__ import annotations

import os
from dataclasses import replace

from .options import check_run_has_data
from .train_common import given

__all__ = ["load_resume_config", "checkpoint_field"]


def checkpoint_field(config, key, typ, out):
    """The entry ``key`` of the checkpoint config read from ``out``, checked to be a ``typ`` (an
    int: >= 0)."""
    v = config.get(key)
    if isinstance(v, bool) or not isinstance(v, typ) or (typ is int and v < 0):
        raise ValueError(f"checkpoint in {out}: {key!r} must be a {typ.__name__}"
                         f"{' >= 0' if typ is int else ''}, got {v!r}")
    return v


# --resume: options compared with the checkpoint (option -> its value in the checkpoint, from
# (config dict, model cfg, TrainConfig)); a given value that differs is refused.
_FROM_CHECKPOINT = {
    "steps": lambda c, m, t: t.steps, "lr": lambda c, m, t: t.lr,
    "min_lr": lambda c, m, t: t.min_lr, "warmup_steps": lambda c, m, t: t.warmup_steps,
    "weight_decay": lambda c, m, t: t.weight_decay, "batch_size": lambda c, m, t: t.batch_size,
    "eval_every": lambda c, m, t: t.eval_every, "seed": lambda c, m, t: t.seed,
    "width": lambda c, m, t: m.width, "depth": lambda c, m, t: m.depth,
    "heads": lambda c, m, t: m.num_heads, "mixer": lambda c, m, t: m.mixer,
    "gelu": lambda c, m, t: m.gelu, "layer_scale_init": lambda c, m, t: m.layer_scale_init,
    # vision
    "data": lambda c, m, t: c.get("data"), "augment_shift": lambda c, m, t: c.get("augment_shift"),
    "val_fraction": lambda c, m, t: c.get("val_fraction", 0.0),
    "pool": lambda c, m, t: m.pool, "patch_size": lambda c, m, t: m.patch_size,
    "registers": lambda c, m, t: m.num_registers, "stem": lambda c, m, t: m.stem,
    "pos": lambda c, m, t: m.pos, "cab": lambda c, m, t: m.cab,
    # lm
    "block_size": lambda c, m, t: m.block_size, "bias": lambda c, m, t: m.bias,
    "vocab_size": lambda c, m, t: m.vocab_size,
    "tokenizer": lambda c, m, t: (c.get("tokenizer") or {}).get("type"),
    "eval_batches": lambda c, m, t: c.get("eval_batches", 8),
    "text": lambda c, m, t: c.get("text_path"),
}
_NOT_WITH_RESUME = ("config", "epochs")        # fixed by the checkpoint; nothing to compare


def _check_resume_options(args, config, cfg, tcfg) -> None:
    for dest in _NOT_WITH_RESUME:
        if getattr(args, dest, None) is not None:
            raise ValueError(f"--{dest.replace('_', '-')} cannot be given with --resume: the "
                             f"run's model and schedule come from its checkpoint (start a new "
                             f"run with --overwrite to change them)")
    for dest, get in _FROM_CHECKPOINT.items():
        given = getattr(args, dest, None)
        if given is None:
            continue
        if dest == "text":
            given = os.path.abspath(given)
        have = get(config, cfg, tcfg)
        if given != have:
            raise ValueError(f"--{dest.replace('_', '-')} {getattr(args, dest)} differs from "
                             f"the checkpoint's {have!r}: --resume continues with the "
                             f"checkpoint's settings (leave the option out, or start a new run "
                             f"with --overwrite)")


def load_resume_config(args, kind):
    """(config dict, TrainConfig, model cfg) of the checkpoint in --out, all validated, and
    the options given checked against them."""
    from ..io import read_model_checkpoint
    from ..models.configs import dataclass_from_dict
    from ..train.loop import TrainConfig
    prefix = os.path.join(args.out, "checkpoint")
    if not os.path.isfile(prefix + ".npz"):
        raise FileNotFoundError(f"--resume: no checkpoint in {args.out}")
    _, cfg, _, config, _, _ = read_model_checkpoint(prefix, expect_kind=kind)
    check_run_has_data(kind, config, args.out)       # imported weights need --like data
    known = {"steps", "batch_size", "lr", "min_lr", "warmup_steps", "weight_decay", "beta1",
             "beta2", "grad_clip", "eval_every", "log_every", "checkpoint_every", "seed"}
    train = config.get("train")
    if not isinstance(train, dict):
        raise ValueError(f"checkpoint {prefix}.npz has no training settings ('train')")
    tcfg = dataclass_from_dict(TrainConfig, {k: v for k, v in train.items() if k in known},
                               f"checkpoint {prefix}.npz: train config")
    _check_resume_options(args, config, cfg, tcfg)
    tcfg = replace(tcfg, stop_at=args.stop_at,
                   checkpoint_every=given(args.checkpoint_every, tcfg.checkpoint_every))
    return config, tcfg.validate(), cfg
