"""Model configurations: dataclasses with every default of a model in one place (nanoGPT
``GPTConfig`` style).

Named model presets live in :data:`VISION_CONFIGS` and :data:`LM_CONFIGS` (the ones ``train``
starts from: :data:`DEFAULT_PRESET`); the training settings that go with them are in
:mod:`tostnp.train.defaults`. The CLI starts from a preset and overrides single fields
(``--width``, ``--lr``, ...).
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields, replace

from ..nn.params import check_mixer

__all__ = ["VisionConfig", "LMConfig", "SeqConfig", "VISION_CONFIGS", "LM_CONFIGS", "get_vision_config",
           "get_lm_config", "DEFAULT_PRESET", "PRESET_ALIASES", "config_from_dict", "dataclass_from_dict",
           "option", "option_fields"]

# Upper limits on sizes read from files (a crafted or mistyped checkpoint must not make us
# allocate without bound); every published model is far inside them.
SIZE_LIMITS = {"image_size": 4096, "in_chans": 64, "patch_size": 4096, "num_classes": 1_000_000,
               "width": 16384, "depth": 1024, "num_heads": 1024, "mlp_ratio": 64,
               "num_cls_blocks": 64, "vocab_size": 1_000_000, "block_size": 1_048_576,
               "in_dim": 1_000_000, "max_len": 1_048_576}


def option(default=MISSING, *, dest: str | None = None, resume: str = "compare",
           path: bool = False):
    """A dataclass field that an option of ``python -m tostnp train`` sets: ``dest`` is the
    option's argparse name (the field's own by default); ``resume`` what ``--resume`` does with
    a value given for it: "compare" (refused when it differs from the checkpoint's), "apply"
    (where and how the run goes on: used) or "refuse" (the checkpoint fixed what it chose);
    ``path``: compared as an absolute path."""
    assert resume in ("compare", "apply", "refuse")
    return field(default=default, metadata={"option": dest, "resume": resume, "path": path})


def option_fields(cls) -> dict:
    """{option's argparse name: (field name, "compare" | "apply" | "refuse", compared as a
    path)} of the fields of dataclass ``cls`` made with :func:`option`."""
    return {f.metadata["option"] or f.name: (f.name, f.metadata["resume"], f.metadata["path"])
            for f in fields(cls) if "resume" in f.metadata}


def _check_fields(cfg, int_fields, float_fields) -> None:
    """Types and ranges of the fields (bool is not an int; floats finite; sizes within limits)."""
    for f in int_fields:
        v = getattr(cfg, f)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"{f} must be an int, got {v!r}")
        if not 1 <= v <= SIZE_LIMITS[f]:
            raise ValueError(f"{f} must be in [1, {SIZE_LIMITS[f]:,}], got {v!r}")
    for f, positive in float_fields.items():
        v = getattr(cfg, f)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or (v <= 0 if positive else v < 0):
            raise ValueError(f"{f} must be a finite number {'>' if positive else '>='} 0, "
                             f"got {v!r}")


def _check_model(cfg, int_fields) -> None:
    """What every model config checks: its int fields, the three float fields of the blocks,
    num_heads dividing the width, a known mixer."""
    _check_fields(cfg, int_fields, {"layer_scale_init": False, "ln_eps": True, "init_std": False})
    if cfg.width % cfg.num_heads:
        raise ValueError(f"width ({cfg.width}) must be a multiple of num_heads "
                         f"({cfg.num_heads})")
    check_mixer(cfg.mixer)


@dataclass(frozen=True)
class VisionConfig:
    """A ToST image classifier (see :mod:`tostnp.models.vision`).

    image_size: side of the square input image; in_chans: its channels (channels-last input);
    patch_size: side of a square patch (image_size must be a multiple), N = (image_size/patch)^2;
    width C, depth (ToST blocks), num_heads h (C % h == 0), mlp_ratio (hidden = mlp_ratio * C);
    pool: "cls" (class-attention blocks, the CLS token is the only query -> linear cost) or
    "mean" (mean of the patch tokens); num_cls_blocks: class-attention blocks when pool="cls";
    layer_scale_init: LayerScale gamma init (1.0 for shallow vision models, as published);
    ln_eps: LayerNorm eps (1e-6 for vision); init_std: std of the weight matrices (0.02 as
    published; the tiny digits preset uses 0.1, which trains it in fewer epochs:
    docs/tuning.md).

    The published form (presets "T" and "S"): stem "conv" (3x3 stride-2
    convolutions with BatchNorm, :mod:`tostnp.nn.stem`; patch_size a power of two) instead of
    "linear" (one linear map per patch); pos "fourier" (fixed Fourier features + a learned
    projection, :mod:`tostnp.nn.position`) instead of "learned" (a table of N x C); gelu "erf"
    (exact) instead of "tanh"; cab "published" (XCiT's class-attention block with tokens_norm:
    the patch tokens are re-normalised too) -- "cls-only" is the earlier CaiT-style block that
    updates the class token only.
    mixer: the token mixer of every block (:data:`tostnp.nn.mixers.MIXERS`; "tssa" is ToST, the
    others are baselines in the same model); num_registers: extra learned tokens that go
    through the blocks with the patches and are dropped before pooling (Darcet et al. 2024).
    Fields made with :func:`option` are set by options of ``train vision``.
    """
    image_size: int = 8
    in_chans: int = 1
    patch_size: int = option(2)
    num_classes: int = 10
    width: int = option(64)
    depth: int = option(2)
    num_heads: int = option(4, dest="heads")
    mlp_ratio: int = 2
    pool: str = option("cls")
    num_cls_blocks: int = 1
    layer_scale_init: float = option(1.0)
    ln_eps: float = 1e-6
    init_std: float = 0.1
    stem: str = option("linear")
    pos: str = option("learned")
    gelu: str = option("tanh")
    cab: str = option("published")
    mixer: str = option("tssa")
    num_registers: int = option(0, dest="registers")

    @property
    def num_patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def block_tokens(self) -> int:
        """Tokens of one image in the ToST blocks: its patches and the registers."""
        return self.num_patches + self.num_registers

    def validate(self) -> "VisionConfig":
        _check_model(self, ("image_size", "in_chans", "patch_size", "num_classes", "width",
                            "depth", "num_heads", "mlp_ratio", "num_cls_blocks"))
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size ({self.image_size}) must be a multiple of "
                             f"patch_size ({self.patch_size})")
        for f, choices in (("pool", ("cls", "mean")), ("stem", ("linear", "conv")),
                           ("pos", ("learned", "fourier")), ("gelu", ("tanh", "erf")),
                           ("cab", ("published", "cls-only"))):
            if getattr(self, f) not in choices:
                raise ValueError(f"{f} must be one of {choices}, got {getattr(self, f)!r}")
        if self.stem == "conv":
            from ..nn.params import stem_channels
            stem_channels(self.in_chans, self.width, self.patch_size)   # ValueError if unfit
        if isinstance(self.num_registers, bool) or not isinstance(self.num_registers, int) \
                or self.num_registers < 0:
            raise ValueError(f"num_registers must be an int >= 0, got {self.num_registers!r}")
        return self


@dataclass(frozen=True)
class LMConfig:
    """A causal ToST language model (see :mod:`tostnp.models.lm`).

    vocab_size V, block_size (max context T; the causal TSSA denom_bias has this many rows),
    width C, depth, num_heads h, mlp_ratio; layer_scale_init 1e-5 (as published for LMs);
    ln_eps 1e-5; init_std 0.02 (output projections get init_std / sqrt(2 * depth)).
    bias: linear biases (TSSA and MLP) and LayerNorm shifts, as nanoGPT's ``bias`` (the published
    training uses False); ln_bias: LayerNorm shifts alone, None = same as ``bias`` ("tiny-lm"
    keeps its shifts without linear biases); gelu: "tanh" or "erf" (exact, as published).
    mixer: the causal token mixer of every block (:data:`tostnp.nn.mixers.MIXERS`; "tssa" is
    ToST). Fields made with :func:`option` are set by options of ``train lm`` (``--bias`` sets
    ln_bias too; ``--vocab-size`` is the tokenizer's, :class:`tostnp.train.defaults.LMData`).
    """
    vocab_size: int = 65
    block_size: int = option(64)
    width: int = option(128)
    depth: int = option(4)
    num_heads: int = option(4, dest="heads")
    mlp_ratio: int = 4
    layer_scale_init: float = option(1e-5)
    ln_eps: float = 1e-5
    init_std: float = 0.02
    bias: bool = option(False)
    ln_bias: bool | None = None
    gelu: str = option("tanh")
    mixer: str = option("tssa")

    @property
    def ln_shift(self) -> bool:
        """Whether the LayerNorms have a shift (beta)."""
        return self.bias if self.ln_bias is None else self.ln_bias

    def validate(self) -> "LMConfig":
        _check_model(self, ("vocab_size", "block_size", "width", "depth", "num_heads",
                            "mlp_ratio"))
        if self.gelu not in ("tanh", "erf"):
            raise ValueError(f"gelu must be 'tanh' or 'erf', got {self.gelu!r}")
        for f in ("bias", "ln_bias"):
            v = getattr(self, f)
            if not (isinstance(v, bool) or (f == "ln_bias" and v is None)):
                raise ValueError(f"{f} must be True or False, got {v!r}")
        return self


@dataclass(frozen=True)
class SeqConfig:
    """A sequence classifier (see :mod:`tostnp.models.seqcls`), for the synthetic tasks.

    in_dim d: width of the input features (the vocabulary size for one-hot tokens); max_len:
    the longest sequence (the position table has 1 + max_len rows, the CLS token first);
    num_classes; width C, depth, num_heads h, mlp_ratio; mixer (:data:`tostnp.nn.mixers.MIXERS`);
    layer_scale_init, ln_eps, init_std as in :class:`VisionConfig`.
    """
    in_dim: int = 16
    max_len: int = 512
    num_classes: int = 2
    width: int = 32
    depth: int = 2
    num_heads: int = 4
    mlp_ratio: int = 2
    mixer: str = "tssa"
    layer_scale_init: float = 1.0
    ln_eps: float = 1e-6
    init_std: float = 0.02

    def validate(self) -> "SeqConfig":
        _check_model(self, ("in_dim", "max_len", "num_classes", "width", "depth", "num_heads",
                            "mlp_ratio"))
        return self


VISION_CONFIGS = {
    # CPU: sklearn digits, 8x8x1, patch 2 -> 16 tokens.
    "tiny-digits": VisionConfig(),
    # MNIST 28x28x1, patch 4 -> 49 tokens.
    "tiny-mnist": VisionConfig(image_size=28, patch_size=4, width=96, depth=4, num_heads=4,
                               init_std=0.02),
    # CIFAR-10 32x32x3, patch 4 -> 64 tokens.
    "tiny-cifar": VisionConfig(image_size=32, in_chans=3, patch_size=4, width=128, depth=6,
                               num_heads=4, mlp_ratio=4, init_std=0.02),
    # The published ToST-T/S (tost_cab_*_12_p16, ImageNet 224, patch 16 -> 196 tokens): their
    # parameter counts are 5,769,328 and 22,589,944; for GPU users, not trained here.
    "T": VisionConfig(image_size=224, in_chans=3, patch_size=16, num_classes=1000, width=192,
                      depth=12, num_heads=4, mlp_ratio=4, num_cls_blocks=2, init_std=0.02,
                      stem="conv", pos="fourier", gelu="erf"),
    "S": VisionConfig(image_size=224, in_chans=3, patch_size=16, num_classes=1000, width=384,
                      depth=12, num_heads=8, mlp_ratio=4, num_cls_blocks=2, init_std=0.02,
                      stem="conv", pos="fourier", gelu="erf"),
}

LM_CONFIGS = {
    # CPU-sized model (vocab_size is set from the tokenizer: BPE subwords by default, or
    # characters with --tokenizer char).
    "tiny-lm": LMConfig(ln_bias=True),
    # The published ToST-Base as trained (bias=False, exact GELU; 110,384,016 parameters with
    # the position table; GPT-2 sized, instantiate only): 12 layers, 12 heads, 768 wide.
    "base": LMConfig(vocab_size=50304, block_size=1024, width=768, depth=12, num_heads=12,
                     gelu="erf"),
}


# Old names of presets, kept working (they name the same config object).
PRESET_ALIASES = {"tiny-char": "tiny-lm"}        # it trains on BPE subwords by default
LM_CONFIGS.update({old: LM_CONFIGS[new] for old, new in PRESET_ALIASES.items()})

# The model preset of ``python -m tostnp train vision`` / ``train lm`` without --config.
DEFAULT_PRESET = {"vision": "tiny-digits", "lm": "tiny-lm"}


def _get(table, name, overrides):
    if name not in table:
        raise ValueError(f"unknown config {name!r}; choose one of {sorted(table)}")
    known = {f.name for f in fields(table[name])}
    bad = set(overrides) - known
    if bad:
        raise ValueError(f"unknown config field(s) {sorted(bad)}; fields are {sorted(known)}")
    return replace(table[name], **{k: v for k, v in overrides.items() if v is not None})


def get_vision_config(name: str = DEFAULT_PRESET["vision"], **overrides) -> VisionConfig:
    """Preset ``name`` with fields replaced by the non-None ``overrides``."""
    return _get(VISION_CONFIGS, name, overrides).validate()


def get_lm_config(name: str = DEFAULT_PRESET["lm"], **overrides) -> LMConfig:
    """Preset ``name`` with fields replaced by the non-None ``overrides``."""
    return _get(LM_CONFIGS, name, overrides).validate()


# Fields that checkpoints written before they existed lack, with the form those models had.
_LEGACY = {"vision": {"cab": "cls-only"}, "lm": {"bias": False, "ln_bias": True}}


def config_from_dict(config: dict):
    """A checkpoint's config dict -> (kind "vision" | "lm", validated model config).

    A field missing from an older checkpoint gets the value its model was trained with.
    """
    kind = config.get("task") if isinstance(config, dict) else None
    if kind not in ("vision", "lm"):
        raise ValueError(f"checkpoint config has unknown task {kind!r} (expected 'vision' or 'lm')")
    model = config.get("model")
    if not isinstance(model, dict):
        raise ValueError("checkpoint config has no 'model' settings")
    cls = VisionConfig if kind == "vision" else LMConfig
    known = {f.name for f in fields(cls)}
    bad = sorted(set(model) - known)
    if bad:
        raise ValueError(f"checkpoint model config has unknown field(s) {bad}")
    merged = {**{k: v for k, v in _LEGACY[kind].items()}, **model}
    try:
        return kind, cls(**merged).validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"checkpoint model config: {e}") from None


def dataclass_from_dict(cls, d, where: str = "config"):
    """``cls(**d).validate()`` for a dict read from a file: unknown keys, wrong types and
    out-of-range sizes raise ValueError naming ``where`` and the field (missing keys take the
    defaults)."""
    if not isinstance(d, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    bad = sorted(set(d) - known)
    if bad:
        raise ValueError(f"{where}: unknown field(s) {bad}; fields are {sorted(known)}")
    try:
        return cls(**d).validate()
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: {e}") from None
