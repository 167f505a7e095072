"""Exchange weights with the published PyTorch ToST models (``.safetensors``, no torch, no pickle).

    python -m tostnp convert runs/vision model.safetensors        # tostnp run -> published layout
    python -m tostnp convert model.safetensors runs/imported      # published layout -> tostnp run

Export: a run directory (or checkpoint prefix) becomes a ``.safetensors`` file that the published
model loads with ``model.load_state_dict(safetensors.torch.load_file(path), strict=True)``
(the LM's tied head is written under both of its names). The tostnp run's settings ride along in
the file's metadata, so a file that comes back unchanged restores them.

Import: the architecture is read from the tensor names and shapes (depth, width, heads from
``temp``, patch size from the stem's depth, classes, vocabulary, block size, bias) and printed;
``--arch NAME`` insists on a preset; ``--image-size`` sets the vision input size (the weights do
not fix it: the Fourier positions work at any size). The run directory it writes is accepted by
``evaluate``, ``figures``, ``sample`` and ``train --resume`` (which then starts a fresh schedule
and a fresh AdamW from the imported weights). ``--like RUN`` takes the data, tokenizer and
training settings from an existing run (for a file trained elsewhere, whose metadata is gone).

Bad input -- a missing or unexpected tensor, a wrong shape or dtype, NaN/Inf, a file that is not
safetensors -- is one line and exit status 2, and nothing is written. PyTorch pickles
(``.pth``/``.pt``) are never opened: the message shows the lines of PyTorch that convert one.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from ..io.runlock import run_lock
from .options import add_memory_argument, bounded

PICKLE_SUFFIXES = (".pth", ".pt", ".bin", ".ckpt", ".pkl", ".pickle", ".tar")


def add_arguments(parser) -> None:
    parser.add_argument("src", help="a run directory / checkpoint, or a .safetensors file")
    parser.add_argument("dst", help="a .safetensors file (export) or a new run directory (import)")
    parser.add_argument("--arch", default=None,
                        help="insist that the architecture is this preset (T, S, base, ...)")
    parser.add_argument("--image-size", type=bounded(int, 1, 4096), default=None,
                        help="import: side of the (square) input images [224, or the size "
                             "recorded in the file]")
    parser.add_argument("--like", default=None,
                        help="import: take data, tokenizer and training settings from this run")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="export: float dtype written [float32, as published]")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the file (export) or the checkpoint in the run directory "
                             "(import) that is already there; without it nothing is replaced")
    add_memory_argument(parser)


def _is_pickle(path: str) -> bool:
    """By name, or -- for a file not named .safetensors -- by its first bytes."""
    if path.lower().endswith(PICKLE_SUFFIXES):
        return True
    if path.endswith(".safetensors"):
        return False                    # parsed as safetensors; a pickle fails its header check
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:2] == b"PK" or head[:1] == b"\x80"     # torch.save zip, or a bare pickle


def run(args) -> int:
    src = args.src
    if os.path.isfile(src) and src.endswith(".npz") and _is_tostnp_checkpoint(src):
        return _export(args)            # RUN/checkpoint.npz: a tostnp checkpoint, not a pickle
    if os.path.isfile(src) and _is_pickle(src):
        return _refuse_pickle(src)
    if src.endswith(".safetensors") or (os.path.isfile(src) and
                                        not src.endswith((".json", ".npz"))):
        return _import(args)
    return _export(args)


def _is_tostnp_checkpoint(path: str) -> bool:
    """A zip whose members are tostnp's (``__meta__.npy``, ``params/...``): checked by name
    in the zip directory, nothing is unpickled."""
    import zipfile
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return "__meta__.npy" in names or any(n.startswith("params/") for n in names)


def _refuse_pickle(src: str) -> int:
    from ..io.interchange import TORCH_TO_SAFETENSORS
    out = os.path.splitext(src)[0] + ".safetensors"
    print(f"error: {src} is a PyTorch pickle; tostnp never unpickles files (a pickle can run "
          f"code). Turn it into safetensors with PyTorch first:\n"
          + TORCH_TO_SAFETENSORS.format(src=src, dst=out), file=sys.stderr)
    return 2


# ---------------------------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------------------------
def _export(args) -> int:
    import numpy as np
    from ..io.checkpoint import load_checkpoint
    from ..io.interchange import (to_published, write_safetensors, describe_config, check_arch,
                               InterchangeError)
    from ..io import resolve_checkpoint
    from ..models import config_from_dict
    from ..nn.params import num_params
    if not args.dst.endswith(".safetensors"):
        raise InterchangeError(f"export writes a .safetensors file; got destination {args.dst!r}")
    if os.path.exists(args.dst) and not args.overwrite:
        raise InterchangeError(f"{args.dst} already exists; choose another name, or replace it "
                               f"with --overwrite")
    prefix = resolve_checkpoint(args.src)
    host, config, _, _ = load_checkpoint(prefix)
    kind, cfg = config_from_dict(config)
    if args.arch:
        check_arch(kind, cfg, args.arch)
    tensors = to_published(kind, cfg, host, dtype=np.dtype(args.dtype))
    print(describe_config(kind, cfg))
    if cfg.gelu != "erf":
        print("note: this model uses the tanh GELU; the published models use the exact (erf) "
              "form, so their logits will differ slightly (up to ~1e-3)", file=sys.stderr)
    if kind == "vision" and cfg.patch_size not in (8, 16):
        print(f"note: the published code builds its stem for patch sizes 8 and 16 only; this "
              f"model has {cfg.patch_size}", file=sys.stderr)
    meta = {"format": "pt", "tostnp": json.dumps(config, sort_keys=True)}
    write_safetensors(args.dst, tensors, meta)
    print(f"wrote {args.dst}: {len(tensors)} tensors, {num_params(host):,} parameters "
          f"(+ BatchNorm state), {args.dtype}")
    return 0


# ---------------------------------------------------------------------------------------------
# import
# ---------------------------------------------------------------------------------------------
def _import(args) -> int:
    from ..io.interchange import InterchangeError
    src, dst = args.src, args.dst
    if not os.path.isfile(src):
        raise FileNotFoundError(f"{src} does not exist")
    if dst.endswith((".safetensors", ".npz", ".json")):
        raise InterchangeError(f"import writes a run directory; got destination {dst!r}")
    with run_lock(dst, "convert"):
        return _import_locked(args)


def _import_locked(args) -> int:
    import numpy as np
    from .. import backend
    from ..io.checkpoint import save_checkpoint, load_checkpoint
    from ..io.interchange import (read_safetensors, describe_config, check_arch, InterchangeError)
    from ..io.limits import loads_json
    from ..io import resolve_checkpoint
    from ..models import config_from_dict
    from ..models.configs import dataclass_from_dict
    from ..train.optim import AdamW
    from ..models import num_params
    from ..train.loop import TrainConfig
    src, dst = args.src, args.dst
    there = [f for f in ("checkpoint.npz", "checkpoint.json")
             if os.path.exists(os.path.join(dst, f))]
    if there and not args.overwrite:
        raise InterchangeError(f"{dst} already holds a checkpoint ({', '.join(there)}); choose "
                               f"a new run directory, or replace it with --overwrite")
    like = None
    if args.like:
        _, like, _, _ = load_checkpoint(resolve_checkpoint(args.like))
    saved = None
    image_size = args.image_size
    kind, cfg, host, meta = read_safetensors(src, image_size=image_size or 224)
    if "tostnp" in meta:
        try:
            saved = loads_json(meta["tostnp"].encode("utf-8"),
                               f"{src}: field '__metadata__.tostnp'")
            saved_kind, saved_cfg = config_from_dict(saved)
        except (ValueError, TypeError, KeyError) as e:
            saved = None                                # foreign or damaged metadata: ignore it
            print(f"note: ignored the file's tostnp settings (__metadata__ 'tostnp': "
                  f"{str(e)[:200]})", file=sys.stderr)
    base = like or saved
    if base is not None:
        base_kind, base_cfg = config_from_dict(base)
        if base_kind != kind:
            raise InterchangeError(f"the file holds a {kind} model but the settings taken from "
                                   f"{'--like' if like else 'its metadata'} are for {base_kind}")
        # settings the weights do not fix (GELU form, eps, image size, init) come from there
        keep = {f.name: getattr(base_cfg, f.name) for f in dataclasses.fields(base_cfg)
                if f.name in ("gelu", "ln_eps", "layer_scale_init", "init_std", "image_size")}
        if image_size is not None:
            keep["image_size"] = image_size
        if kind == "lm" and getattr(base_cfg, "vocab_size", None) != cfg.vocab_size and like:
            raise InterchangeError(f"--like {args.like}: its tokenizer has "
                                   f"{base_cfg.vocab_size} symbols, the file's vocabulary "
                                   f"{cfg.vocab_size}")
        cfg = dataclasses.replace(cfg, **keep).validate()
    if args.arch:
        check_arch(kind, cfg, args.arch)
    print(describe_config(kind, cfg))
    xp = backend.get_xp("cpu")
    # row-major copies, like every tostnp array (BLAS may round a transposed view differently,
    # and bit-exact round trips need the same rounding)
    params = {}
    for k, v in host.items():
        with np.errstate(over="ignore"):
            a = np.asarray(v, dtype=np.float32, order="C")
        if not np.all(np.isfinite(a)):   # finite in float64, beyond float32's range
            raise InterchangeError(f"{src}: weights {k!r} hold values beyond float32's range "
                                   f"(largest |x| = {float(np.max(np.abs(v))):.3g}); tostnp "
                                   f"trains in float32, so this model cannot be imported")
        params[k] = backend.from_host(xp, a)
    config = dict(base) if base is not None else _bare_config(kind)
    config["task"] = kind
    config["model"] = dataclasses.asdict(cfg)
    config["imported_from"] = os.path.abspath(src)
    train = config.get("train", {})
    tcfg = dataclass_from_dict(
        TrainConfig, {k: v for k, v in train.items()
                      if k in {f.name for f in dataclasses.fields(TrainConfig)}}
        if isinstance(train, dict) else train, "settings field 'train'")
    config["train"] = dataclasses.asdict(tcfg)
    # A fresh optimizer (zero moments, step 0): the published checkpoints do not carry AdamW's.
    opt = AdamW(params, lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    od = opt.state_dict()
    save_checkpoint(os.path.join(dst, "checkpoint"), params, config,
                    extra_arrays={f"opt.{k}": v for k, v in od["arrays"].items()},
                    state={"step": 0, "opt_step": 0, "data_state": None})
    print(f"wrote run directory {dst}: {num_params(params):,} parameters; "
          + ("evaluate, figures and train --resume use the settings of "
             + ("--like " + args.like if like else "the file's metadata") if base is not None
             else "no data or tokenizer recorded: use --like RUN to take them from a tostnp run"))
    return 0


def _bare_config(kind: str) -> dict:
    """Settings for a file trained elsewhere, with nothing to say about its data."""
    if kind == "vision":
        return {"data": None, "augment_shift": 0, "data_dir": None}
    return {"tokenizer": None, "text_path": None, "eval_batches": 8}
