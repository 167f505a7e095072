"""Train a ToST model: ``train vision`` (digits by default) or ``train lm`` (subword tokens,
BPE, by default; ``--tokenizer char`` for one token per character).

Examples::

    python -m tostnp train vision                          # digits, a minute or two on a CPU
    python -m tostnp train vision --data mnist --data-dir ~/data/mnist --config tiny-mnist
    python -m tostnp train lm                              # default corpus: Python's docs
    python -m tostnp train vision --out runs/digits --resume   # continue a stopped run

Every run directory gets metrics.jsonl, curves.png and checkpoint.{npz,json}; a vision run also
gets the interpretability figures (memberships.png, compression.png). ``--resume`` takes the
model and training settings from the checkpoint and continues bit-identically (at the same
``--threads``: a batch large enough runs in one shard per thread, :mod:`tostnp.train.shards`);
an option given with it that differs from the checkpoint is refused (``--stop-at``, ``--checkpoint-every``,
``--data-dir``, ``--device`` and ``--threads`` are applied). A directory that already holds a
run needs ``--resume`` or ``--overwrite``, and one process at a time writes a run directory
(:mod:`tostnp.io.runlock`). Sizes are checked against the memory available before anything is
built (:mod:`tostnp.models.memory`; ``--max-memory-gb`` sets the limit).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from .. import backend
from ..models import configs as C
from ..train.seeds import parse_seeds
from ..nn.mixers import MIXERS
from ..train.loop import MAX_STEPS, MAX_BATCH
from ..models.configs import SIZE_LIMITS
from ..io.runlock import run_lock
from .train_seeds import train_over_seeds
from .options import (add_device_argument, add_memory_argument, device_namespace, bounded, SEED,
                      THREADS, check_run_has_data)

# The files of a run directory: what --overwrite replaces and what makes a directory "a run".
RUN_FILES = ("checkpoint.npz", "checkpoint.json", "metrics.jsonl", "result.json", "curves.png",
             "memberships.png", "compression.png", "compression.json")
_SIZE = {k: bounded(int, 1, v) for k, v in SIZE_LIMITS.items()}
_SCALE = bounded(float, 0.0, 1e3)

def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="model", metavar="{vision,lm}")
    sub.required = True
    v = sub.add_parser("vision", help="image classifier (sklearn digits by default)",
                       description="Train a ToST image classifier; prints the test accuracy and "
                                   "writes the checkpoint and figures to --out.")
    v.add_argument("--config", default=None, choices=sorted(C.VISION_CONFIGS),
                   help="model preset [tiny-digits]")
    v.add_argument("--data", default=None, choices=["digits", "mnist", "cifar10"],
                   help="dataset [digits]; mnist/cifar10 read local files from --data-dir")
    v.add_argument("--data-dir", default=None, help="directory with the MNIST/CIFAR-10 files")
    v.add_argument("--epochs", type=bounded(int, 1, 100_000), default=None,
                   help="training epochs [preset]")
    v.add_argument("--augment-shift", type=bounded(int, 0, 64), default=None,
                   help="random translation by up to this many pixels [preset]")
    v.add_argument("--pool", choices=["cls", "mean"], default=None,
                   help="class-attention (cls) or mean pooling [preset]")
    v.add_argument("--patch-size", type=_SIZE["patch_size"], default=None,
                   help="side of a square patch [preset]")
    v.add_argument("--layer-scale-init", type=_SCALE, default=None,
                   help="LayerScale's initial value [preset]")
    v.add_argument("--val-fraction", type=bounded(float, 0.0, 1.0, open_hi=True), default=None,
                   help="share of each class of the training images held out as the validation "
                        "set (evaluated during training; the test set only at the end); "
                        "0 = none [0.1]")
    v.add_argument("--registers", type=bounded(int, 0, 65536), default=None,
                   help="register tokens mixed with the patches, dropped before pooling [0]")
    v.add_argument("--stem", choices=["linear", "conv"], default=None,
                   help="patch stem: one linear map per patch, or the published 3x3 stride-2 "
                        "convolutions with BatchNorm (patch size a power of two) [preset]")
    v.add_argument("--pos", choices=["learned", "fourier"], default=None,
                   help="position encoding: learned table, or the published Fourier features "
                        "[preset]")
    v.add_argument("--gelu", choices=["tanh", "erf"], default=None,
                   help="GELU form (the published models use erf) [preset]")
    v.add_argument("--cab", choices=["published", "cls-only"], default=None,
                   help="class-attention block: the published XCiT block or CaiT's [published]")
    _add_common(v, "runs/vision")
    v.set_defaults(_train=_vision)

    m = sub.add_parser("lm", help="causal language model (subword tokens by default)",
                       description="Train a causal ToST language model on a text file (default: "
                                   "the Python documentation bundled with Python).")
    m.add_argument("--config", default=None, choices=sorted(C.LM_CONFIGS),
                   help="model size preset [tiny-char] (the name is historical: the tokenizer is "
                        "chosen by --tokenizer, bpe by default)")
    m.add_argument("--text", default=None, help="UTF-8 text file [Python's bundled docs]")
    m.add_argument("--block-size", type=_SIZE["block_size"], default=None,
                   help="context length T (tokens) [preset]")
    m.add_argument("--tokenizer", choices=["char", "bpe"], default=None,
                   help="char: one token per character; bpe: subword tokens learnt on the "
                        "training text (see tostnp/data/bpe.py) [bpe]")
    m.add_argument("--vocab-size", type=bounded(int, 1, 65536), default=None,
                   help="symbols of the bpe tokenizer [preset]")
    m.add_argument("--layer-scale-init", type=_SCALE, default=None,
                   help="LayerScale's initial value [preset]")
    m.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                   help="linear biases and LayerNorm shifts (the published training: --no-bias, "
                        "which also drops tiny-char's LayerNorm shifts) [preset]")
    m.add_argument("--gelu", choices=["tanh", "erf"], default=None,
                   help="GELU form (the published models use erf) [preset]")
    m.add_argument("--eval-batches", type=bounded(int, 1, 10_000), default=None,
                   help="validation batches per evaluation [8]")
    m.add_argument("--word-rate-samples", type=bounded(int, 0, 100), default=3,
                   help="samples (prompt 'The ', 1000 characters, seeds 0..N-1) whose word rate "
                        "is reported at the end; 0 = none [3]")
    _add_common(m, "runs/lm")
    m.set_defaults(_train=_lm)


def _add_common(p, default_out) -> None:
    p.add_argument("--out", default=default_out, help=f"run directory [{default_out}]")
    add_device_argument(p)
    p.add_argument("--steps", type=bounded(int, 1, MAX_STEPS), default=None,
                   help="optimizer updates (overrides epochs) [preset]")
    p.add_argument("--lr", type=bounded(float, 0.0, 10.0, open_lo=True), default=None,
                   help="peak learning rate [preset]")
    p.add_argument("--min-lr", type=bounded(float, 0.0, 10.0), default=None,
                   help="final learning rate [lr/10]")
    p.add_argument("--warmup-steps", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="linear warm-up updates, at most --steps [preset]")
    p.add_argument("--weight-decay", type=bounded(float, 0.0, 10.0), default=None,
                   help="AdamW's weight decay [preset]")
    p.add_argument("--batch-size", type=bounded(int, 1, MAX_BATCH), default=None,
                   help="examples per update (checked against the memory available) [preset]")
    p.add_argument("--width", type=_SIZE["width"], default=None, help="model width C [preset]")
    p.add_argument("--depth", type=_SIZE["depth"], default=None,
                   help="number of ToST blocks [preset]")
    p.add_argument("--heads", type=_SIZE["num_heads"], default=None,
                   help="number of heads h [preset]")
    p.add_argument("--mixer", default=None, choices=list(MIXERS),
                   help="token mixer of every block: tssa (ToST), tssa-uniform (Pi fixed to "
                        "1/h), softmax, flash (softmax in O(N) memory), linear [tssa]")
    p.add_argument("--seed", type=SEED, default=None, help="seed for init and data order [0]")
    p.add_argument("--seeds", default=None, metavar="LIST",
                   help="run once per seed, e.g. 0-4 or 0,2,7: each run in --out/seed-S, then "
                        "mean ± sd over the seeds (printed and written to --out/seeds.json)")
    p.add_argument("--eval-every", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="evaluate every N updates [preset]")
    p.add_argument("--checkpoint-every", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="checkpoint every N updates, and always at the end and on Ctrl-C "
                        "(0 = only then) [every 5%% of the run]")
    p.add_argument("--stop-at", type=bounded(int, 1, MAX_STEPS), default=None,
                   help="stop after N updates (keeping the full schedule) and checkpoint; "
                        "continue later with --resume")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint: the model, data and "
                        "training settings come from there, and an option given with a "
                        "different value is refused; applied: --stop-at, --checkpoint-every, "
                        "--data-dir, --device, --threads, --no-progress" +
                        (", --word-rate-samples" if default_out == "runs/lm" else ""))
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --out (its checkpoint, metrics, result and "
                        "figures); without it (or --resume) a directory holding a run is "
                        "refused")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--threads", "--blas-threads", dest="threads", type=THREADS, default=None,
                   help="CPU threads [all cores]: BLAS's, the fast path's, and the shards of "
                        "a batch large enough (one per thread; another count changes the float "
                        "rounding, so a resumed run repeats exactly at the same count); "
                        "--blas-threads is the old name")
    add_memory_argument(p)


def run(args) -> int:
    xp = device_namespace(args.device)
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it: "
                         "give one of them")
    seeds = None
    if args.seeds is not None:
        try:
            seeds = parse_seeds(args.seeds)
        except ValueError as e:
            raise ValueError(f"--seeds: {e}") from None
    kind = "vision" if args._train is _vision else "lm"
    job = (lambda: train_over_seeds(args, xp, seeds, kind, run_one)) if seeds else \
        (lambda: run_one(args, xp)[0])
    n = backend.cpu_cores() if args.threads is None else args.threads
    # freed activations stay in the process for the next step instead of being unmapped and
    # faulted in (zeroed by the kernel) again: measured in `python -m tostnp bench --train`
    backend.keep_freed_memory()
    with backend.threads(n):
        return job()


def _given(value, default):
    """The option's value when given (0 included: it is validated, never silently replaced)."""
    return default if value is None else value


def _new_train_config(args, preset, *, steps, batch_size, warmup_steps, eval_every, log_every,
                      seed):
    """The TrainConfig of a new run (validated): the options given on the command line, the
    preset's lr and weight decay, and the task's defaults for the warmup and the evaluation
    period (``warmup_steps``, ``eval_every``: used where the option is not given)."""
    from ..train.loop import TrainConfig
    if args.warmup_steps is not None and args.warmup_steps > steps:
        raise ValueError(f"--warmup-steps {args.warmup_steps} is more than the run's "
                         f"{steps} updates")
    return TrainConfig(steps=steps, batch_size=batch_size, lr=_given(args.lr, preset.lr),
                       min_lr=args.min_lr, warmup_steps=_given(args.warmup_steps, warmup_steps),
                       weight_decay=_given(args.weight_decay, preset.weight_decay),
                       eval_every=_given(args.eval_every, eval_every), log_every=log_every,
                       checkpoint_every=args.checkpoint_every, seed=seed,
                       stop_at=args.stop_at).validate()


def _field(config, key, typ, out):
    v = config.get(key)
    if isinstance(v, bool) or not isinstance(v, typ) or (typ is int and v < 0):
        raise ValueError(f"checkpoint in {out}: {key!r} must be a {typ.__name__}"
                         f"{' >= 0' if typ is int else ''}, got {v!r}")
    return v


def run_one(args, xp):
    """One run of ``train vision`` or ``train lm`` -> (exit status, result dict or None), holding
    the run directory's lock throughout."""
    kind = "vision" if args._train is _vision else "lm"
    with run_lock(args.out, f"train {kind}"):
        _prepare_out(args)
        return args._train(args, xp)


def _prepare_out(args) -> None:
    """Under the run directory's lock: a directory that holds a run needs --resume (checked
    when the checkpoint is read) or --overwrite (its run files are removed here)."""
    if args.resume:
        return
    found = [f for f in RUN_FILES if os.path.exists(os.path.join(args.out, f))]
    if not found:
        return
    if not args.overwrite:
        raise ValueError(f"{args.out} already holds a run ({', '.join(found)}); continue it "
                         f"with --resume, or replace it with --overwrite")
    for f in found:
        os.unlink(os.path.join(args.out, f))


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


def _load_resume_config(args, kind):
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
                   checkpoint_every=_given(args.checkpoint_every, tcfg.checkpoint_every))
    return config, tcfg.validate(), cfg


def _check_fits(kind, cfg, tcfg, args) -> None:
    from ..models.memory import check_model_fits
    check_model_fits(kind, cfg, tcfg.batch_size, training=True,
                     what=f"training in {args.out}")


def _say(args, text) -> None:
    if not getattr(args, "quiet", False):
        print(text)


def _train(args, task, tcfg, describe, data_line):
    """Say what is trained (``describe(params0)`` of the initial parameters, and
    ``data_line``), then run the training loop from those parameters -> (the last evaluation
    record, or None when the run stopped early; the trained parameters; the process CPU time
    (all its threads) and the wall time of training); says how to continue a stopped run."""
    from ..train.loop import train
    params0 = task.init_params(backend.RNG(tcfg.seed))     # printed, then trained from
    _say(args, describe(params0))
    _say(args, data_line)
    n = task.shards(params0)
    if n > 1:
        _say(args, f"each batch runs in {n} shards, one per CPU thread (--threads; another "
                   f"count changes the float rounding)")
    c0, t0 = time.process_time(), time.perf_counter()
    res = train(task, tcfg, args.out, resume=args.resume, progress=not args.no_progress,
                init_params=params0)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    evals = [r for r in res["metrics"] if r["kind"] == "eval"]
    if res["step"] == tcfg.steps and evals:
        return evals[-1], res["params"], cpu, wall
    from .options import how_to_run
    print(f"stopped at step {res['step']} of {tcfg.steps} after {wall:.1f} s; resume with: "
          + how_to_run("train", args.model, "--out", args.out, "--resume"))
    return None, res["params"], cpu, wall


def _finish(args, kind, seed, result) -> None:
    """Write the run's final numbers to <out>/result.json (atomically)."""
    from ..io.atomic import atomic_write_text
    from .options import load_1min
    result = {"task": kind, "seed": seed, **result, "loadavg_1min_end": load_1min()}
    atomic_write_text(os.path.join(args.out, "result.json"), json.dumps(result, indent=1) + "\n")


def _vision(args, xp):
    from ..data import split_validation
    from ..data import load_vision_data
    from ..train.tasks import VisionTask
    from ..models.vision import describe
    if args.resume:
        config, tcfg, cfg = _load_resume_config(args, "vision")
        data_name = _field(config, "data", str, args.out)
        data_dir = config.get("data_dir")
        if data_dir is not None and not isinstance(data_dir, str):
            raise ValueError(f"checkpoint in {args.out}: 'data_dir' must be a string or null")
        shift = _field(config, "augment_shift", int, args.out)
        val_fraction = config.get("val_fraction", 0.0)
    else:
        preset = _given(args.config, "tiny-digits")
        d = C.get_vision_train_preset(preset)
        cfg = C.get_vision_config(preset, width=args.width, depth=args.depth,
                                  num_heads=args.heads, pool=args.pool,
                                  patch_size=args.patch_size,
                                  layer_scale_init=args.layer_scale_init, mixer=args.mixer,
                                  num_registers=args.registers, stem=args.stem, pos=args.pos,
                                  gelu=args.gelu, cab=args.cab)
        data_name = _given(args.data, "digits")
        shift = d.augment_shift if args.augment_shift is None else args.augment_shift
        val_fraction = _given(args.val_fraction, 0.1)
    if args.data_dir:                        # where the data live now: applied with --resume
        data_dir = os.path.abspath(args.data_dir)
    elif not args.resume:
        data_dir = None
    seed = tcfg.seed if args.resume else _given(args.seed, 0)
    data = load_vision_data(data_name, data_dir)
    val = None
    if val_fraction > 0:
        X_fit, y_fit, X_val, y_val = split_validation(data[0], data[1], val_fraction,
                                                      seed=seed)
        data, val = (X_fit, y_fit, data[2], data[3]), (X_val, y_val)
    if not args.resume:
        n_train = len(data[0])
        if args.batch_size is not None and args.batch_size > n_train:
            raise ValueError(f"--batch-size {args.batch_size} is more than the {n_train} "
                             f"training images")
        bs = min(_given(args.batch_size, d.batch_size), n_train)
        spe = n_train // bs
        epochs = _given(args.epochs, d.epochs)
        steps = _given(args.steps, epochs * spe)
        if steps > MAX_STEPS:
            raise ValueError(f"--epochs {epochs} makes {steps:,} updates, more than the "
                             f"{MAX_STEPS:,} allowed")
        tcfg = _new_train_config(args, d, steps=steps, batch_size=bs,
                                 warmup_steps=min(d.warmup_epochs * spe, steps),
                                 eval_every=max(steps // 5, 1), log_every=max(spe // 4, 1),
                                 seed=seed)
    _check_fits("vision", cfg, tcfg, args)
    task = VisionTask(cfg, data, batch_size=tcfg.batch_size, seed=tcfg.seed, augment_shift=shift,
                      xp=xp, data_name=data_name, val=val,
                      extra_meta={"data_dir": data_dir, "val_fraction": val_fraction})
    n_val = 0 if val is None else len(val[1])
    e, params, cpu, wall = _train(
        args, task, tcfg, lambda p: describe(cfg, p),
        f"data: {data_name}, {len(data[0])} train / {n_val} validation (held out of the "
        f"training images) / {len(data[2])} test images; {tcfg.steps} steps of batch "
        f"{tcfg.batch_size} ({tcfg.steps / task.steps_per_epoch:.1f} epochs), lr {tcfg.lr}")
    if e is None:
        return 0, None
    result = dict(task.evaluate_test(params), steps=tcfg.steps,
                  train_cpu_s=round(cpu, 2), train_wall_s=round(wall, 2))
    if val is not None:
        result.update(val_loss=e["val_loss"], val_acc=e["val_acc"])
        _say(args, f"validation accuracy: {result['val_acc']:.4f} ({n_val} images)")
    _say(args, f"test accuracy: {result['test_acc']:.4f} (test loss {result['test_loss']:.4f}, "
               f"{len(data[2])} images); training {cpu:.1f} s CPU time, {wall:.1f} s wall time")
    _finish(args, "vision", tcfg.seed, result)
    if cfg.mixer == "tssa":                # the figures read TSSA's memberships
        from ..analysis.figures import vision_figures
        paths = vision_figures(os.path.join(args.out, "checkpoint"), args.out, xp=xp)
        _say(args, "figures: " + ", ".join(paths))
    _say(args, f"run directory: {args.out} (checkpoint.npz + .json, metrics.jsonl, result.json, "
               f"curves.png)")
    return 0, result


def _lm(args, xp):
    from ..data import tokenizer_from_dict
    from ..data import load_lm_text
    from ..train.tasks import LMTask
    from ..models.lm import describe
    from ..analysis.wordrate import lm_word_rate
    if args.resume:
        config, tcfg, cfg = _load_resume_config(args, "lm")
        text_path = config.get("text_path")
        if text_path is not None and not isinstance(text_path, str):
            raise ValueError(f"checkpoint in {args.out}: 'text_path' must be a string or null")
        tok = tokenizer_from_dict(_field(config, "tokenizer", dict, args.out))
        eval_batches = config.get("eval_batches", 8)
        if isinstance(eval_batches, bool) or not isinstance(eval_batches, int) \
                or eval_batches < 1:
            raise ValueError(f"checkpoint in {args.out}: 'eval_batches' must be an int >= 1")
    else:
        text_path, tok = (os.path.abspath(args.text) if args.text else None), None
    kind = _given(args.tokenizer, C.LM_TRAIN_PRESET.tokenizer)
    vocab = _given(args.vocab_size, C.LM_TRAIN_PRESET.vocab_size)
    try:
        train_ids, val_ids, tok = load_lm_text(text_path, tokenizer=tok, kind=kind,
                                               vocab_size=vocab)
    except RuntimeError as e:              # the default corpus missing from this Python
        raise ValueError(str(e)) from None
    if not args.resume:
        cfg = C.get_lm_config(_given(args.config, "tiny-char"), vocab_size=tok.vocab_size, width=args.width,
                              depth=args.depth, num_heads=args.heads,
                              block_size=args.block_size,
                              layer_scale_init=args.layer_scale_init, mixer=args.mixer,
                              gelu=args.gelu,
                              **({} if args.bias is None else
                                 {"bias": args.bias, "ln_bias": args.bias}))
        d = C.LM_TRAIN_PRESET
        steps = _given(args.steps, d.steps)
        tcfg = _new_train_config(args, d, steps=steps,
                                 batch_size=_given(args.batch_size, d.batch_size),
                                 warmup_steps=min(d.warmup_steps, steps),
                                 eval_every=min(d.eval_every, steps), log_every=10,
                                 seed=_given(args.seed, 0))
        eval_batches = _given(args.eval_batches, 8)
    _check_fits("lm", cfg, tcfg, args)
    name = "Python docs (default corpus)" if text_path is None else os.path.basename(text_path)
    task = LMTask(cfg, train_ids, val_ids, tok, batch_size=tcfg.batch_size, seed=tcfg.seed,
                  eval_batches=eval_batches, xp=xp, text_name=name,
                  extra_meta={"text_path": text_path})
    n_tr, n_va = (int(tok.token_lengths[i].sum()) for i in (train_ids, val_ids))
    per = "" if n_tr == len(train_ids) else \
        f" = {len(train_ids):,} / {len(val_ids):,} tokens ({n_tr / len(train_ids):.2f} per token)"
    text = (f"text: {name}, {n_tr:,} train / {n_va:,} val characters{per}; tokenizer "
            f"{tok.to_dict()['type']}, {tok.vocab_size} symbols; unigram baseline "
            f"{task.unigram['bits']:.3f} bits/char; {tcfg.steps} steps of "
            f"{tcfg.batch_size} x {cfg.block_size} tokens")
    e, params, cpu, wall = _train(args, task, tcfg, lambda p: describe(cfg, p), text)
    if e is None:
        return 0, None
    result = {"val_loss": e["val_loss"], "val_bpc": e["val_bpc"], "steps": tcfg.steps,
              "train_cpu_s": round(cpu, 2), "train_wall_s": round(wall, 2)}
    _say(args, f"validation loss {e['val_loss']:.4f} nats/token = {e['val_bpc']:.3f} bits/char "
               f"(unigram baseline {task.unigram['bits']:.3f} bits/char); "
               f"training {cpu:.1f} s CPU time, {wall:.1f} s wall time")
    n_wr = args.word_rate_samples
    if n_wr > 0:
        wr = lm_word_rate(params, cfg, tok, tok.decode(train_ids), seeds=range(n_wr))
        result.update(word_rate=wr["rate"], word_rate_counts=[wr["known"], wr["words"]])
        _say(args, f"word rate {wr['rate']:.1%}: {wr['known']} of the {wr['words']} words of "
                   f">= 4 letters in {n_wr} samples (prompt {wr['prompt']!r}, 1000 characters, "
                   f"seeds 0-{n_wr - 1}) occur in the training text")
    _finish(args, "lm", tcfg.seed, result)
    from .options import how_to_run
    _say(args, f"run directory: {args.out}; sample with: "
               + how_to_run("sample", "--checkpoint", args.out, "--prompt", "The "))
    return 0, result
