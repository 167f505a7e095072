"""The options of ``train vision`` and ``train lm`` (argparse); their defaults are read from
:mod:`tostnp.train.defaults`, :mod:`tostnp.models.configs` and the dataclasses there.

Every option is a field of exactly one dataclass of :data:`OPTION_CLASSES` (checked in
tests/test_cli_train_options.py), made with :func:`tostnp.models.configs.option`, which says
what ``--resume`` does with it (:mod:`tostnp.cli.train_resume`).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from ..models import configs as C
from ..nn.mixers import MIXERS
from ..train.defaults import (MAX_STEPS, MAX_BATCH, MAX_RATE, TrainConfig, VisionData, LMData,
                              VisionTrainPreset, default_data_config)
from ..models.configs import (SIZE_LIMITS, DEFAULT_PRESET, VisionConfig, LMConfig, option,
                              option_fields)
from ..train.defaults import PROGRESS_SECONDS, EVALUATIONS
from .options import (add_device_argument, add_memory_argument, add_old_spelling, bounded, SEED,
                      THREADS)

__all__ = ["add_arguments", "RunOptions", "OPTION_CLASSES"]


@dataclass(frozen=True)
class RunOptions:
    """The options of ``train`` that are not settings of the model, the optimisation or the
    data: where and how the process runs (applied with ``--resume``), and ``--config``, the
    model preset a new run starts from (refused with ``--resume``: the checkpoint fixed it).
    Their defaults are the parser's (--device's and --max-memory-gb's are shared with the
    other commands, :mod:`tostnp.cli.options`)."""
    out: str = option(resume="apply")
    device: str = option(resume="apply")
    threads: int | None = option(resume="apply")
    no_progress: bool = option(resume="apply")
    progress_seconds: float = option(resume="apply")
    max_memory_gb: float | None = option(resume="apply")
    seeds: str | None = option(resume="apply")
    resume: bool = option(resume="apply")
    overwrite: bool = option(resume="apply")
    config: str | None = option(resume="refuse")


# The dataclasses whose fields are the options of train vision / train lm, each option in one.
OPTION_CLASSES = {"vision": (VisionConfig, TrainConfig, VisionData, VisionTrainPreset,
                             RunOptions),
                  "lm": (LMConfig, TrainConfig, LMData, RunOptions)}

MAX_EVAL_BATCHES = 10_000       # --eval-batches, and the same field read from a checkpoint
_SIZE = {k: bounded(int, 1, v) for k, v in SIZE_LIMITS.items()}
_SCALE = bounded(float, 0.0, 1e3)

def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="model", metavar="{vision,lm}")
    sub.required = True
    v = sub.add_parser("vision", help="image classifier (sklearn digits by default)",
                       description="Train a ToST image classifier; prints the test accuracy and "
                                   "writes the checkpoint and figures to --out.")
    v.add_argument("--config", default=None, choices=sorted(C.VISION_CONFIGS),
                   help=f"model preset [{DEFAULT_PRESET['vision']}]")
    v.add_argument("--data", default=None, choices=["digits", "mnist", "cifar10"],
                   help=f"dataset [{VisionData.data}]; mnist/cifar10 read local files from "
                        f"--data-dir")
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
                        f"0 = none [{VisionData.val_fraction}]")
    v.add_argument("--registers", type=bounded(int, 0, 65536), default=None,
                   help=f"register tokens mixed with the patches, dropped before pooling "
                        f"[{VisionConfig.num_registers}]")
    v.add_argument("--stem", choices=["linear", "conv"], default=None,
                   help="patch stem: one linear map per patch, or the published 3x3 stride-2 "
                        "convolutions with BatchNorm (patch size a power of two) [preset]")
    v.add_argument("--pos", choices=["learned", "fourier"], default=None,
                   help="position encoding: learned table, or the published Fourier features "
                        "[preset]")
    v.add_argument("--gelu", choices=["tanh", "erf"], default=None,
                   help="GELU form (the published models use erf) [preset]")
    v.add_argument("--cab", choices=["published", "cls-only"], default=None,
                   help=f"class-attention block: the published XCiT block or CaiT's "
                        f"[{VisionConfig.cab}]")
    _add_common(v, "vision")

    m = sub.add_parser("lm", help="causal language model (subword tokens by default)",
                       description="Train a causal ToST language model on a text file (default: "
                                   "the Python documentation bundled with Python).")
    m.add_argument("--config", default=None, choices=sorted(C.LM_CONFIGS),
                   help=f"model size preset [{DEFAULT_PRESET['lm']}] (the tokenizer is chosen "
                        f"by --tokenizer; tiny-char is tiny-lm's old name)")
    m.add_argument("--text", default=None, help="UTF-8 text file [Python's bundled docs]")
    m.add_argument("--block-size", type=_SIZE["block_size"], default=None,
                   help="context length T (tokens) [preset]")
    m.add_argument("--tokenizer", choices=["char", "bpe"], default=None,
                   help="char: one token per character; bpe: subword tokens learnt on the "
                        f"training text (see tostnp/data/bpe.py) "
                        f"[{default_data_config('lm').tokenizer}]")
    m.add_argument("--vocab-size", type=bounded(int, 1, 65536), default=None,
                   help="symbols of the bpe tokenizer [preset]")
    m.add_argument("--layer-scale-init", type=_SCALE, default=None,
                   help="LayerScale's initial value [preset]")
    m.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                   help="linear biases and LayerNorm shifts (the published training: --no-bias, "
                        "which also drops tiny-lm's LayerNorm shifts) [preset]")
    m.add_argument("--gelu", choices=["tanh", "erf"], default=None,
                   help="GELU form (the published models use erf) [preset]")
    m.add_argument("--eval-batches", type=bounded(int, 1, MAX_EVAL_BATCHES), default=None,
                   help=f"validation batches per evaluation [{LMData.eval_batches}]")
    m.add_argument("--word-rate-samples", type=bounded(int, 0, 100), default=None,
                   help="samples (prompt 'The ', 1000 characters, seeds 0..N-1) whose word rate "
                        f"is reported at the end; 0 = none [{LMData.word_rate_samples}]")
    _add_common(m, "lm")


def _add_common(p, kind) -> None:
    default_out = f"runs/{kind}"
    p.add_argument("--out", default=default_out, help=f"run directory [{default_out}]")
    add_device_argument(p)
    p.add_argument("--steps", type=bounded(int, 1, MAX_STEPS), default=None,
                   help="optimizer updates (overrides epochs) [preset]")
    p.add_argument("--lr", type=bounded(float, 0.0, MAX_RATE, open_lo=True), default=None,
                   help="peak learning rate [preset]")
    p.add_argument("--min-lr", type=bounded(float, 0.0, MAX_RATE), default=None,
                   help="final learning rate [lr/10]")
    p.add_argument("--warmup-steps", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="linear warm-up updates, at most --steps [preset]")
    p.add_argument("--weight-decay", type=bounded(float, 0.0, MAX_RATE), default=None,
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
                        f"1/h), softmax, flash (softmax in O(N) memory), linear "
                        f"[{VisionConfig.mixer}]")
    p.add_argument("--seed", type=SEED, default=None,
                   help=f"seed for init and data order [{TrainConfig.seed}]")
    p.add_argument("--seeds", default=None, metavar="LIST",
                   help="run once per seed, e.g. 0-4 or 0,2,7: each run in --out/seed-S, then "
                        "mean ± sd over the seeds (printed and written to --out/seeds.json)")
    p.add_argument("--eval-every", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="evaluate every N updates (0 = only at the end) "
                        f"[steps / {EVALUATIONS[kind]}]")
    p.add_argument("--checkpoint-every", type=bounded(int, 0, MAX_STEPS), default=None,
                   help="checkpoint every N updates, and always at the end and on Ctrl-C "
                        "(0 = only then) [every 5%% of the run]")
    p.add_argument("--stop-at", type=bounded(int, 1, MAX_STEPS), default=None,
                   help="stop after N updates (keeping the full schedule) and checkpoint; "
                        "continue later with --resume")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its checkpoint: the model, data and "
                        "training settings come from there, and an option given with a "
                        "different value is refused; applied: " + ", ".join(
                            "--" + dest.replace("_", "-") for cls in OPTION_CLASSES[kind]
                            for dest, (_, what, _) in option_fields(cls).items()
                            if what == "apply" and cls is not RunOptions) +
                        " and how the process runs (--device, --threads, ...)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run already in --out (its checkpoint, metrics, result and "
                        "figures); without it (or --resume) a directory holding a run is "
                        "refused")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar or progress lines")
    p.add_argument("--progress-seconds", type=bounded(float, 0.0, 86400.0), default=None,
                   metavar="S",
                   help="when the output is not a terminal (a pipe, a log file): a line with "
                        "the step, loss, time elapsed and time left every S seconds "
                        f"[{PROGRESS_SECONDS:g}]")
    threads = p.add_argument(
        "--threads", type=THREADS, default=None,
        help="CPU threads [all cores]: BLAS's, the fast path's, and the shards of a batch large "
             "enough (one per thread; another count changes the float rounding, so a resumed "
             "run repeats exactly at the same count)")
    add_old_spelling(p, "--blas-threads", threads)
    add_memory_argument(p)
