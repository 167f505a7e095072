"""Every training default in one place: the optimisation settings (:class:`TrainConfig`), the
per-preset values (:data:`VISION_TRAIN_PRESETS`, :data:`LM_TRAIN_PRESET`), the data settings of
``train vision`` and ``train lm`` (:class:`VisionData`, :class:`LMData`), and the rules that turn
them into one run's settings: :func:`default_train_config` and :func:`default_data_config`.

``python -m tostnp train``, ``bench --train``, the experiments and ``benchmarks/`` start from
these functions; the CLI's ``--help`` reads its defaults from here. The model presets are in
:mod:`tostnp.models.configs`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..models.configs import DEFAULT_PRESET, option

__all__ = ["TrainConfig", "MAX_STEPS", "MAX_BATCH", "PROGRESS_SECONDS", "EVALUATIONS",
           "VisionTrainPreset", "LMTrainPreset", "VISION_TRAIN_PRESETS", "LM_TRAIN_PRESET",
           "get_vision_train_preset", "VisionData", "LMData", "default_train_config",
           "default_data_config", "given"]

# Upper limits (a checkpoint's settings or an option must not run away): a billion updates and
# a million examples per batch; the memory estimate (tostnp.models.memory) bounds the batch more.
MAX_STEPS = 10 ** 9
MAX_BATCH = 1 << 20
MAX_RATE = 10.0          # lr, min_lr, weight_decay: the CLI's bound, and a checkpoint's

# Evaluations over a run by default (eval_every = steps // EVALUATIONS[kind]): enough points on
# the curves to see when the validation loss turned, and to keep the best checkpoint near its
# low. A digits evaluation (136 images, forward only) costs well under one training step; an LM
# evaluation (8 batches of 32 x 64 tokens) 4 to 7 steps (measured under shared load), so the
# LM's 1,000 steps get 10 of them (4-7% more time), not 20.
EVALUATIONS = {"vision": 20, "lm": 10}

# Seconds between the progress lines of a run whose output is not a terminal (on a terminal:
# a bar); ``train --progress-seconds``.
PROGRESS_SECONDS = 15.0


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults as published for ToST: AdamW betas (0.9, 0.95), cosine to
    max_lr / 10, clip 1.0).

    steps: total optimizer updates (the schedule's length); stop_at: stop early after this many
    updates, saving a checkpoint (for resuming; None = run to ``steps``); eval_every / log_every:
    in updates (0 = only at the end); checkpoint_every: in updates (0 = only at the end).
    Fields made with :func:`tostnp.models.configs.option` are set by options of ``train``.
    """
    steps: int = option(1000)
    batch_size: int = option(64)
    lr: float = option(1e-3)
    min_lr: float | None = option(None)
    warmup_steps: int = option(100)
    weight_decay: float = option(0.05)
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = option(200)
    log_every: int = 10
    checkpoint_every: int | None = option(None, resume="apply")
    seed: int = option(0)
    stop_at: int | None = option(None, resume="apply")

    def validate(self) -> "TrainConfig":
        def integer(f, lo, none_ok=False):
            v = getattr(self, f)
            if v is None and none_ok:
                return
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{f} must be an int >= {lo}, got {v!r}")

        def real(f, lo, strict, none_ok=False, hi=math.inf):
            v = getattr(self, f)
            if v is None and none_ok:
                return
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
                and (v > lo if strict else v >= lo) and v <= hi
            if not ok:
                raise ValueError(f"{f} must be a finite number {'>' if strict else '>='} {lo}"
                                 + (f" and <= {hi}" if hi < math.inf else "")
                                 + f", got {str(v)[:40]}")
        for f in ("steps", "batch_size"):
            integer(f, 1)
        for f, hi in (("steps", MAX_STEPS), ("batch_size", MAX_BATCH), ("seed", 2 ** 63 - 1)):
            if getattr(self, f) > hi:
                raise ValueError(f"{f} must be at most {hi:,}, got {getattr(self, f)!r}")
        for f in ("warmup_steps", "eval_every", "log_every", "seed"):
            integer(f, 0)
        integer("checkpoint_every", 0, none_ok=True)
        integer("stop_at", 1, none_ok=True)
        if not self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps={self.steps}], "
                             f"got {self.warmup_steps}")
        real("lr", 0.0, True, hi=MAX_RATE)
        real("min_lr", 0.0, False, none_ok=True, hi=MAX_RATE)
        real("weight_decay", 0.0, False, hi=MAX_RATE)
        real("grad_clip", 0.0, True)
        for f in ("beta1", "beta2"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1:
                raise ValueError(f"{f} must be in [0, 1), got {v!r}")
        return self

    @property
    def checkpoint_interval(self) -> int:
        """Updates between checkpoints (0: only at the end)."""
        if self.checkpoint_every is None:
            return max(self.steps // 20, 1)
        return self.checkpoint_every

    @property
    def final_lr(self) -> float:
        return self.lr / 10 if self.min_lr is None else self.min_lr


# --------------------------------------------------------------------------------------------
# per-preset values (every field has a CLI flag)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VisionTrainPreset:
    """Training settings for a vision preset, in epochs (turned into steps by
    :func:`default_train_config`).

    epochs, batch_size, lr (peak), warmup_epochs, weight_decay (AdamW), augment_shift (random
    translation by up to this many pixels; 0 = none). ``--epochs`` replaces epochs (and is
    refused with ``--resume``); the options of the others are those of :class:`TrainConfig` and
    :class:`VisionData`.
    """
    epochs: int = option(100, resume="refuse")
    batch_size: int = 128
    lr: float = 1e-3
    warmup_epochs: int = 5
    weight_decay: float = 0.05
    augment_shift: int = 0


@dataclass(frozen=True)
class LMTrainPreset:
    """Training settings for the language model, in optimizer steps; tokenizer "char" or "bpe"
    (with vocab_size symbols, see tostnp/data/bpe.py).

    The default is BPE with 512 symbols (merges learnt on the training text; ~2.5 characters
    per token on the default corpus), chosen on the validation text: on the same model and
    budget it reaches a lower validation bits/char and a far higher word rate than one token
    per character (docs/results/lm.json against docs/results/lm-char.json, three seeds each;
    book/10_causal_language.md reads both), because each 64-token context spans ~160
    characters and whole words are single symbols.
    """
    steps: int = 1000
    batch_size: int = 32
    lr: float = 2e-3
    warmup_steps: int = 50
    weight_decay: float = 0.1
    tokenizer: str = "bpe"
    vocab_size: int | None = 512


VISION_TRAIN_PRESETS = {
    # epochs chosen on the validation split held out of the training images, never the test
    # split (the figures: docs/tuning.md)
    "tiny-digits": VisionTrainPreset(epochs=160, batch_size=64, lr=3e-3, warmup_epochs=1,
                                     weight_decay=0.1, augment_shift=1),
    "tiny-mnist": VisionTrainPreset(epochs=10, batch_size=128, lr=1e-3, warmup_epochs=1,
                                    weight_decay=0.05, augment_shift=2),
    "tiny-cifar": VisionTrainPreset(epochs=30, batch_size=128, lr=1e-3, warmup_epochs=2,
                                    weight_decay=0.05, augment_shift=4),
}

LM_TRAIN_PRESET = LMTrainPreset()


def get_vision_train_preset(name: str) -> VisionTrainPreset:
    """The training preset of model preset ``name`` (the dataclass defaults for the others)."""
    return VISION_TRAIN_PRESETS.get(name, VisionTrainPreset())


# --------------------------------------------------------------------------------------------
# data settings of a run
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VisionData:
    """What ``train vision`` trains on: the dataset (``data_dir`` for the files of mnist and
    cifar10), the share of each class of the training images held out for validation, and the
    augmentation (``augment_shift``: the preset's unless given). Each field is an option of
    ``train vision``; ``--data-dir`` (where the files are now) is applied on ``--resume``."""
    augment_shift: int = option()
    data: str = option("digits")
    data_dir: str | None = option(None, resume="apply")
    val_fraction: float = option(0.1)


@dataclass(frozen=True)
class LMData:
    """What ``train lm`` trains on: the text (None: Python's bundled docs), the tokenizer and its
    symbols (the preset's unless given), the validation batches per evaluation, and the samples
    whose word rate is reported at the end. Each field is an option of ``train lm``;
    ``--word-rate-samples`` (a report at the end) is applied on ``--resume``."""
    tokenizer: str = option()
    vocab_size: int | None = option()
    text: str | None = option(None, path=True)
    eval_batches: int = option(8)
    word_rate_samples: int = option(3, resume="apply")


def given(value, default):
    """An option's value when given, else ``default`` (0 included: it is validated, never
    silently replaced)."""
    return default if value is None else value


def default_data_config(kind: str, preset: str | None = None, **options):
    """The data settings of ``train KIND --config PRESET``: :class:`VisionData` or
    :class:`LMData`, with the fields in ``options`` that are not None replacing the defaults."""
    preset = given(preset, DEFAULT_PRESET[kind])
    if kind == "vision":
        d = VisionData(augment_shift=get_vision_train_preset(preset).augment_shift)
    else:
        d = LMData(tokenizer=LM_TRAIN_PRESET.tokenizer, vocab_size=LM_TRAIN_PRESET.vocab_size)
    return replace(d, **{k: v for k, v in options.items() if v is not None})


def default_train_config(kind: str, preset: str | None = None, *, n_train: int | None = None,
                         epochs: int | None = None, **options) -> TrainConfig:
    """The :class:`TrainConfig` of ``train KIND --config PRESET`` (validated); the
    :class:`TrainConfig` fields in ``options`` that are not None replace the defaults (the
    options given), and ``epochs`` replaces the vision preset's.

    vision (needs ``n_train``, the training images after the validation split): batch_size the
    preset's, at most n_train; steps = epochs x (n_train // batch_size) updates; warmup_steps =
    warmup_epochs of them, at most steps; eval_every steps // 20; log_every a quarter
    epoch.
    lm: steps, batch_size and warmup_steps (at most steps) from :data:`LM_TRAIN_PRESET`;
    eval_every steps // 10; log_every :class:`TrainConfig`'s.
    """
    preset = given(preset, DEFAULT_PRESET[kind])
    options = {k: v for k, v in options.items() if v is not None}
    if kind == "vision":
        if n_train is None:
            raise ValueError("default_train_config('vision', ...) needs n_train")
        d = get_vision_train_preset(preset)
        if options.get("batch_size", 0) > n_train:
            raise ValueError(f"--batch-size {options['batch_size']} is more than the {n_train} "
                             f"training images")
        bs = min(options.pop("batch_size", d.batch_size), n_train)
        spe = n_train // bs
        epochs = given(epochs, d.epochs)
        steps = options.pop("steps", epochs * spe)
        if steps > MAX_STEPS:
            raise ValueError(f"--epochs {epochs} makes {steps:,} updates, more than the "
                             f"{MAX_STEPS:,} allowed")
        base = dict(steps=steps, batch_size=bs, warmup_steps=min(d.warmup_epochs * spe, steps),
                    eval_every=max(steps // EVALUATIONS[kind], 1), log_every=max(spe // 4, 1))
    else:
        d = LM_TRAIN_PRESET
        steps = options.pop("steps", d.steps)
        base = dict(steps=steps, batch_size=d.batch_size,
                    warmup_steps=min(d.warmup_steps, steps),
                    eval_every=max(steps // EVALUATIONS[kind], 1))
    if options.get("warmup_steps", 0) > steps:
        raise ValueError(f"--warmup-steps {options['warmup_steps']} is more than the run's "
                         f"{steps} updates")
    return TrainConfig(**{**base, "lr": d.lr, "weight_decay": d.weight_decay,
                          **options}).validate()
