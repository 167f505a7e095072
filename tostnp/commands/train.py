"""Train a ToST model: ``train vision`` (digits by default) or ``train lm`` (character level).

Examples::

    python -m tostnp train vision                          # digits, a minute or two on a CPU
    python -m tostnp train vision --data mnist --data-dir ~/data/mnist --config tiny-mnist
    python -m tostnp train lm                              # default corpus: Python's docs
    python -m tostnp train vision --out runs/digits --resume   # continue a stopped run

Every run directory gets metrics.jsonl, curves.png and checkpoint.{npz,json}; a vision run also
gets the interpretability figures (memberships.png, compression.png). ``--resume`` takes the
model and training settings from the checkpoint and continues bit-identically.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

from .. import backend
from ..models import configs as C
from ._common import add_device_argument, get_xp_or_exit

def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="model", metavar="{vision,lm}")
    sub.required = True
    v = sub.add_parser("vision", help="image classifier (sklearn digits by default)",
                       description="Train a ToST image classifier; prints the test accuracy and "
                                   "writes the checkpoint and figures to --out.")
    v.add_argument("--config", default="tiny-digits", choices=sorted(C.VISION_CONFIGS),
                   help="model preset [tiny-digits]")
    v.add_argument("--data", default="digits", choices=["digits", "mnist", "cifar10"],
                   help="dataset [digits]; mnist/cifar10 read local files from --data-dir")
    v.add_argument("--data-dir", default=None, help="directory with the MNIST/CIFAR-10 files")
    v.add_argument("--epochs", type=int, default=None, help="training epochs (preset default)")
    v.add_argument("--augment-shift", type=int, default=None,
                   help="random translation by up to this many pixels (preset default)")
    v.add_argument("--pool", choices=["cls", "mean"], default=None,
                   help="class-attention (cls) or mean pooling")
    v.add_argument("--patch-size", type=int, default=None)
    v.add_argument("--layer-scale-init", type=float, default=None)
    _add_common(v, "runs/vision")
    v.set_defaults(_train=_run_vision)

    m = sub.add_parser("lm", help="character-level causal language model",
                       description="Train a causal ToST language model on a text file (default: "
                                   "the Python documentation bundled with Python).")
    m.add_argument("--config", default="tiny-char", choices=sorted(C.LM_CONFIGS),
                   help="model preset [tiny-char]")
    m.add_argument("--text", default=None, help="UTF-8 text file [Python's bundled docs]")
    m.add_argument("--block-size", type=int, default=None, help="context length T")
    m.add_argument("--layer-scale-init", type=float, default=None)
    m.add_argument("--eval-batches", type=int, default=8,
                   help="validation batches per evaluation [8]")
    _add_common(m, "runs/lm")
    m.set_defaults(_train=_run_lm)


def _add_common(p, default_out) -> None:
    p.add_argument("--out", default=default_out, help=f"run directory [{default_out}]")
    add_device_argument(p)
    p.add_argument("--steps", type=int, default=None, help="optimizer updates (overrides epochs)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=None, help="final learning rate [lr/10]")
    p.add_argument("--warmup-steps", type=int, default=None)
    p.add_argument("--weight-decay", type=float, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--width", type=int, default=None, help="model width C")
    p.add_argument("--depth", type=int, default=None, help="number of ToST blocks")
    p.add_argument("--heads", type=int, default=None, help="number of heads h")
    p.add_argument("--seed", type=int, default=0, help="seed for init and data order [0]")
    p.add_argument("--eval-every", type=int, default=None, help="evaluate every N updates")
    p.add_argument("--checkpoint-every", type=int, default=0,
                   help="also checkpoint every N updates (always at the end) [0]")
    p.add_argument("--stop-at", type=int, default=None,
                   help="stop after N updates (keeping the full schedule) and checkpoint; "
                        "continue later with --resume")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint (settings from there)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--blas-threads", type=int, default=1,
                   help="BLAS threads for the CPU run [1]: the tiny models' matrices are too "
                        "small for more to pay off, and on a busy machine extra BLAS threads "
                        "spin and slow every matmul down; 0 = BLAS default")


def run(args) -> int:
    xp = get_xp_or_exit(args.device)
    if xp is None:
        return 2
    if args.blas_threads and args.blas_threads > 0:
        from threadpoolctl import threadpool_limits  # a dependency of scikit-learn
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            return args._train(args, xp)
    return args._train(args, xp)


def _load_resume_config(args):
    from ..checkpoint import load_checkpoint
    from ..train import train_config_from_dict
    prefix = os.path.join(args.out, "checkpoint")
    if not os.path.isfile(prefix + ".json"):
        print(f"error: --resume: no checkpoint in {args.out}", file=sys.stderr)
        return None
    _, config, _, _ = load_checkpoint(prefix)
    tcfg = replace(train_config_from_dict(config["train"]), stop_at=args.stop_at)
    return config, tcfg


def _train(task, tcfg, args, params0):
    """Run the training loop -> (the last evaluation record, or None when the run stopped
    early, and the wall time); says how to continue a stopped run."""
    from ..train import train
    t0 = time.perf_counter()
    res = train(task, tcfg, args.out, resume=args.resume, progress=not args.no_progress,
                init_params=params0)
    wall = time.perf_counter() - t0
    evals = [r for r in res["metrics"] if r["kind"] == "eval"]
    if res["step"] == tcfg.steps and evals:
        return evals[-1], wall
    print(f"stopped at step {res['step']} of {tcfg.steps} after {wall:.1f} s; continue with "
          f"--out {args.out} --resume")
    return None, wall


def _run_vision(args, xp) -> int:
    from ..data import load_vision_data
    from ..tasks import VisionTask
    from ..models.vision import describe
    from ..train import TrainConfig
    if args.resume:
        got = _load_resume_config(args)
        if got is None:
            return 2
        config, tcfg = got
        cfg = C.config_from_dict(config)[1]
        data_name, data_dir = config["data"], config.get("data_dir")
        shift = config["augment_shift"]
    else:
        d = C.get_vision_train_preset(args.config)
        cfg = C.get_vision_config(args.config, width=args.width, depth=args.depth,
                                  num_heads=args.heads, pool=args.pool,
                                  patch_size=args.patch_size,
                                  layer_scale_init=args.layer_scale_init)
        data_name = args.data
        data_dir = os.path.abspath(args.data_dir) if args.data_dir else None
        shift = d.augment_shift if args.augment_shift is None else args.augment_shift
    try:
        data = load_vision_data(data_name, data_dir)
    except (FileNotFoundError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.resume:
        bs = min(args.batch_size or d.batch_size, len(data[0]))
        spe = len(data[0]) // bs
        epochs = args.epochs or d.epochs
        steps = args.steps or epochs * spe
        warm = args.warmup_steps if args.warmup_steps is not None else \
            min(d.warmup_epochs * spe, steps)
        tcfg = TrainConfig(steps=steps, batch_size=bs, lr=args.lr or d.lr, min_lr=args.min_lr,
                           warmup_steps=min(warm, steps),
                           weight_decay=d.weight_decay if args.weight_decay is None
                           else args.weight_decay,
                           eval_every=args.eval_every if args.eval_every is not None else
                           max(steps // 5, 1),
                           log_every=max(spe // 4, 1), checkpoint_every=args.checkpoint_every,
                           seed=args.seed, stop_at=args.stop_at).validate()
    task = VisionTask(cfg, data, batch_size=tcfg.batch_size, seed=tcfg.seed, augment_shift=shift,
                      xp=xp, data_name=data_name, extra_meta={"data_dir": data_dir})
    params0 = task.init_params(backend.RNG(tcfg.seed))     # printed, then trained from
    print(describe(cfg, params0))
    print(f"data: {data_name}, {len(data[0])} train / {len(data[2])} test images; "
          f"{tcfg.steps} steps of batch {tcfg.batch_size} "
          f"({tcfg.steps / task.steps_per_epoch:.1f} epochs), lr {tcfg.lr}")
    e, wall = _train(task, tcfg, args, params0)
    if e is not None:
        print(f"test accuracy: {e['test_acc']:.4f} (test loss {e['test_loss']:.4f}); "
              f"training wall time {wall:.1f} s")
        from ..figures import vision_figures
        paths = vision_figures(os.path.join(args.out, "checkpoint"), args.out, xp=xp)
        print("figures: " + ", ".join(paths))
    print(f"run directory: {args.out} (checkpoint.npz/.json, metrics.jsonl, curves.png)")
    return 0


def _run_lm(args, xp) -> int:
    from ..data import CharTokenizer, load_lm_text
    from ..tasks import LMTask
    from ..models.lm import describe
    from ..train import TrainConfig
    if args.resume:
        got = _load_resume_config(args)
        if got is None:
            return 2
        config, tcfg = got
        cfg = C.config_from_dict(config)[1]
        text_path = config.get("text_path")
        tok = CharTokenizer.from_dict(config["tokenizer"])
        eval_batches = config.get("eval_batches", 8)
    else:
        text_path, tok = (os.path.abspath(args.text) if args.text else None), None
    try:
        train_ids, val_ids, tok = load_lm_text(text_path, tokenizer=tok)
    except (FileNotFoundError, ValueError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.resume:
        cfg = C.get_lm_config(args.config, vocab_size=tok.vocab_size, width=args.width,
                              depth=args.depth, num_heads=args.heads,
                              block_size=args.block_size,
                              layer_scale_init=args.layer_scale_init)
        d = C.LM_TRAIN_PRESET
        steps = args.steps or d.steps
        tcfg = TrainConfig(steps=steps, batch_size=args.batch_size or d.batch_size,
                           lr=args.lr or d.lr, min_lr=args.min_lr,
                           warmup_steps=min(args.warmup_steps if args.warmup_steps is not None
                                            else d.warmup_steps, steps),
                           weight_decay=d.weight_decay if args.weight_decay is None
                           else args.weight_decay,
                           eval_every=args.eval_every if args.eval_every is not None
                           else min(d.eval_every, steps),
                           log_every=10, checkpoint_every=args.checkpoint_every,
                           seed=args.seed, stop_at=args.stop_at).validate()
        eval_batches = args.eval_batches
    name = "Python docs (default corpus)" if text_path is None else os.path.basename(text_path)
    task = LMTask(cfg, train_ids, val_ids, tok, batch_size=tcfg.batch_size, seed=tcfg.seed,
                  eval_batches=eval_batches, xp=xp, text_name=name,
                  extra_meta={"text_path": text_path})
    params0 = task.init_params(backend.RNG(tcfg.seed))     # printed, then trained from
    print(describe(cfg, params0))
    print(f"text: {name}, {len(train_ids):,} train / {len(val_ids):,} val characters; "
          f"unigram baseline {task.unigram['nats']:.3f} nats = {task.unigram['bits']:.3f} "
          f"bits/char; {tcfg.steps} steps of {tcfg.batch_size} x {cfg.block_size}")
    e, wall = _train(task, tcfg, args, params0)
    if e is not None:
        print(f"validation loss {e['val_loss']:.4f} nats = {e['val_bpc']:.3f} bits/char "
              f"(unigram baseline {task.unigram['bits']:.3f} bits/char); "
              f"training wall time {wall:.1f} s")
    print(f"run directory: {args.out}; sample with: python -m tostnp sample --checkpoint "
          f"{args.out} --prompt 'The '")
    return 0
