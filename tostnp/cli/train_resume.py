"""``train ... --resume``: the checkpoint's settings read back (validated), and the options given
with ``--resume`` checked against them. What is checked follows from the fields of the option
dataclasses (:data:`tostnp.cli.train_parse.OPTION_CLASSES`): each option's field says whether
``--resume`` compares, applies or refuses it; nothing is listed here by hand."""
from __future__ import annotations

import os
from dataclasses import fields, replace

from ..models.configs import option_fields
from ..train.defaults import TrainConfig, LMData
from .options import check_run_has_data
from .train_common import given
from .train_parse import OPTION_CLASSES

__all__ = ["load_resume_config", "check_resume_options", "checkpoint_field"]


def checkpoint_field(config, key, typ, out):
    """The entry ``key`` of the checkpoint config read from ``out``, checked to be a ``typ`` (an
    int: >= 0)."""
    v = config.get(key)
    if isinstance(v, bool) or not isinstance(v, typ) or (typ is int and v < 0):
        raise ValueError(f"checkpoint in {out}: {key!r} must be a {typ.__name__}"
                         f"{' >= 0' if typ is int else ''}, got {v!r}")
    return v


# Where the checkpoint config keeps the data settings not stored under the option's own name
# (an option found nowhere compares with None, so it is refused, never silently ignored).
_STORED = {"text": lambda c, m: c.get("text_path"),
           "tokenizer": lambda c, m: (c.get("tokenizer") or {}).get("type"),
           "vocab_size": lambda c, m: m.vocab_size,         # the tokenizer's symbols: the model's
           "val_fraction": lambda c, m: c.get("val_fraction", 0.0),    # runs before the split
           "eval_batches": lambda c, m: c.get("eval_batches", LMData.eval_batches)}


def _options(kind, what):
    """(option, field name, compared as a path, dataclass) of the options of ``train kind``
    whose resume rule is ``what`` (from the fields of :data:`OPTION_CLASSES`)."""
    return [(dest, name, path, cls) for cls in OPTION_CLASSES[kind]
            for dest, (name, rule, path) in option_fields(cls).items() if rule == what]


def _stored(cls, name, config, cfg, tcfg):
    """The checkpoint's value of field ``name`` of dataclass ``cls``."""
    if cls is TrainConfig:
        return getattr(tcfg, name)
    if cls is type(cfg):                        # the model's config
        return getattr(cfg, name)
    return _STORED[name](config, cfg) if name in _STORED else config.get(name)


def check_resume_options(args, kind, config, cfg, tcfg) -> None:
    """The options given with --resume: one that chooses what the checkpoint fixed is refused;
    one compared with the checkpoint (the model's, the optimisation's and the data settings) is
    refused when its value differs; the others are applied by the run."""
    for dest, *_ in _options(kind, "refuse"):
        if getattr(args, dest, None) is not None:
            raise ValueError(f"--{dest.replace('_', '-')} cannot be given with --resume: the "
                             f"run's model and schedule come from its checkpoint (start a new "
                             f"run with --overwrite to change them)")
    for dest, name, path, cls in _options(kind, "compare"):
        given = getattr(args, dest, None)
        if given is None:
            continue
        if path:
            given = os.path.abspath(given)
        have = _stored(cls, name, config, cfg, tcfg)
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
    prefix = os.path.join(args.out, "checkpoint")
    if not os.path.isfile(prefix + ".npz"):
        raise FileNotFoundError(f"--resume: no checkpoint in {args.out}")
    _, cfg, _, config, _, _ = read_model_checkpoint(prefix, expect_kind=kind)
    check_run_has_data(kind, config, args.out)       # imported weights need --like data
    known = {f.name for f in fields(TrainConfig)} - {"stop_at"}   # stop_at: this call's own
    train = config.get("train")
    if not isinstance(train, dict):
        raise ValueError(f"checkpoint {prefix}.npz has no training settings ('train')")
    tcfg = dataclass_from_dict(TrainConfig, {k: v for k, v in train.items() if k in known},
                               f"checkpoint {prefix}.npz: train config")
    check_resume_options(args, kind, config, cfg, tcfg)
    tcfg = replace(tcfg, stop_at=args.stop_at,
                   checkpoint_every=given(args.checkpoint_every, tcfg.checkpoint_every))
    return config, tcfg.validate(), cfg
