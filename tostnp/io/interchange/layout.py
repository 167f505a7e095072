"""The published layout for :mod:`tostnp.io.interchange`: every published tensor name with its
shape, dtype and tostnp keys, and the architecture inferred back from names and shapes."""
from __future__ import annotations

from ...nn.stem import stem_channels

__all__ = ["InterchangeError", "published_layout", "infer_config", "strip_wrappers",
           "describe_config", "check_arch"]

_WRAPPERS = ("_orig_mod.", "module.")


class InterchangeError(ValueError):
    """A file or model that cannot be converted; the message is one line naming the problem."""


# ---------------------------------------------------------------------------------------------
# the published layout: (published name, shape, dtype, tostnp keys, kind of mapping)
# ---------------------------------------------------------------------------------------------
# kind: "id" same array; "T" transpose of a matrix; "conv" (out,in,kh,kw) <-> (kh,kw,in,out);
# "1x1" (C,64,1,1) <-> (64,C); "count" int64 () <-> float (); "qkv" W_q|W_kv; "qkv_b" b_q|b_kv.

def _residual_entries(pre, o, C, norm1) -> list:
    """A published vision block's two LayerScale gammas and first LayerNorm (ours: ls1, ls2 and
    ``norm1``)."""
    return [(f"{pre}.gamma1", (C,), "float32", [f"{o}.ls1.gamma"], "id"),
            (f"{pre}.gamma2", (C,), "float32", [f"{o}.ls2.gamma"], "id"),
            (f"{pre}.norm1.weight", (C,), "float32", [f"{o}.{norm1}.gamma"], "id"),
            (f"{pre}.norm1.bias", (C,), "float32", [f"{o}.{norm1}.beta"], "id")]


def _vision_entries(cfg) -> list:
    C, H = cfg.width, cfg.mlp_ratio * cfg.width
    h = cfg.num_heads
    E = [("cls_token", (1, 1, C), "float32", ["cls_token"], "id")]
    ch = stem_channels(cfg.in_chans, C, cfg.patch_size)
    for s, (ci, co) in enumerate(zip(ch[:-1], ch[1:])):
        pre, ours = f"patch_embed.proj.{2 * s}", f"stem.{s}"
        E += [(f"{pre}.0.weight", (co, ci, 3, 3), "float32", [f"{ours}.conv.W"], "conv"),
              (f"{pre}.1.weight", (co,), "float32", [f"{ours}.bn.gamma"], "id"),
              (f"{pre}.1.bias", (co,), "float32", [f"{ours}.bn.beta"], "id"),
              (f"{pre}.1.running_mean", (co,), "float32", [f"{ours}.bn.running_mean"], "id"),
              (f"{pre}.1.running_var", (co,), "float32", [f"{ours}.bn.running_var"], "id"),
              (f"{pre}.1.num_batches_tracked", (), "int64", [f"{ours}.bn.num_batches_tracked"],
               "count")]
    for i in range(cfg.depth):
        pre, o = f"blocks.{i}", f"blocks.{i}"
        E += _residual_entries(pre, o, C, "ln1")
        E += [(f"{pre}.attn.temp", (h, 1), "float32", [f"{o}.tssa.temp"], "id"),
              (f"{pre}.attn.qkv.weight", (C, C), "float32", [f"{o}.tssa.W_u"], "T"),
              (f"{pre}.attn.qkv.bias", (C,), "float32", [f"{o}.tssa.b_u"], "id"),
              (f"{pre}.attn.to_out.0.weight", (C, C), "float32", [f"{o}.tssa.W_o"], "T"),
              (f"{pre}.attn.to_out.0.bias", (C,), "float32", [f"{o}.tssa.b_o"], "id")]
        E += _mlp_entries(pre, o, C, H, "norm2", "fc1", "fc2", bias=True)
    for j in range(cfg.num_cls_blocks):
        pre, o = f"cls_attn_blocks.{j}", f"cab.{j}"
        E += _residual_entries(pre, o, C, "norm1")
        E += [(f"{pre}.attn.qkv.weight", (3 * C, C), "float32",
               [f"{o}.attn.W_q", f"{o}.attn.W_kv"], "qkv"),
              (f"{pre}.attn.qkv.bias", (3 * C,), "float32",
               [f"{o}.attn.b_q", f"{o}.attn.b_kv"], "qkv_b"),
              (f"{pre}.attn.proj.weight", (C, C), "float32", [f"{o}.attn.W_o"], "T"),
              (f"{pre}.attn.proj.bias", (C,), "float32", [f"{o}.attn.b_o"], "id")]
        E += _mlp_entries(pre, o, C, H, "norm2", "fc1", "fc2", bias=True, ours_norm="norm2")
    E += [("norm.weight", (C,), "float32", ["norm.gamma"], "id"),
          ("norm.bias", (C,), "float32", ["norm.beta"], "id"),
          ("head.weight", (cfg.num_classes, C), "float32", ["head.W"], "T"),
          ("head.bias", (cfg.num_classes,), "float32", ["head.b"], "id"),
          ("pos_embeder.token_projection.weight", (C, 64, 1, 1), "float32", ["pos.W"], "1x1"),
          ("pos_embeder.token_projection.bias", (C,), "float32", ["pos.b"], "id")]
    return E


def _mlp_entries(pre, o, C, H, norm, fc1, fc2, *, bias, ours_norm="ln2", ln_bias=None):
    ln_bias = bias if ln_bias is None else ln_bias
    E = [(f"{pre}.{norm}.weight", (C,), "float32", [f"{o}.{ours_norm}.gamma"], "id")]
    if ln_bias:
        E.append((f"{pre}.{norm}.bias", (C,), "float32", [f"{o}.{ours_norm}.beta"], "id"))
    E.append((f"{pre}.mlp.{fc1}.weight", (H, C), "float32", [f"{o}.mlp.W1"], "T"))
    if bias:
        E.append((f"{pre}.mlp.{fc1}.bias", (H,), "float32", [f"{o}.mlp.b1"], "id"))
    E.append((f"{pre}.mlp.{fc2}.weight", (C, H), "float32", [f"{o}.mlp.W2"], "T"))
    if bias:
        E.append((f"{pre}.mlp.{fc2}.bias", (C,), "float32", [f"{o}.mlp.b2"], "id"))
    return E


def _lm_entries(cfg) -> list:
    C, H, h, T = cfg.width, cfg.mlp_ratio * cfg.width, cfg.num_heads, cfg.block_size
    b = cfg.bias
    E = [("transformer.wte.weight", (cfg.vocab_size, C), "float32", ["wte"], "id"),
         ("transformer.wpe.weight", (T, C), "float32", ["wpe"], "id")]
    for i in range(cfg.depth):
        pre, o = f"transformer.h.{i}", f"blocks.{i}"
        E += [(f"{pre}.gamma1", (C,), "float32", [f"{o}.ls1.gamma"], "id"),
              (f"{pre}.gamma2", (C,), "float32", [f"{o}.ls2.gamma"], "id"),
              (f"{pre}.ln_1.weight", (C,), "float32", [f"{o}.ln1.gamma"], "id")]
        if b:
            E.append((f"{pre}.ln_1.bias", (C,), "float32", [f"{o}.ln1.beta"], "id"))
        E += [(f"{pre}.attn.temp", (h, 1), "float32", [f"{o}.tssa.temp"], "id"),
              (f"{pre}.attn.denom_bias", (h, T, 1), "float32", [f"{o}.tssa.denom_bias"], "id"),
              (f"{pre}.attn.c_attn.weight", (C, C), "float32", [f"{o}.tssa.W_u"], "T")]
        if b:
            E.append((f"{pre}.attn.c_attn.bias", (C,), "float32", [f"{o}.tssa.b_u"], "id"))
        E.append((f"{pre}.attn.c_proj.weight", (C, C), "float32", [f"{o}.tssa.W_o"], "T"))
        if b:
            E.append((f"{pre}.attn.c_proj.bias", (C,), "float32", [f"{o}.tssa.b_o"], "id"))
        E += _mlp_entries(pre, o, C, H, "ln_2", "c_fc", "c_proj", bias=b)
    E.append(("transformer.ln_f.weight", (C,), "float32", ["ln_f.gamma"], "id"))
    if b:
        E.append(("transformer.ln_f.bias", (C,), "float32", ["ln_f.beta"], "id"))
    E.append(("lm_head.weight", (cfg.vocab_size, C), "float32", ["wte"], "id"))
    return E


def _entries(kind, cfg):
    return _vision_entries(cfg) if kind == "vision" else _lm_entries(cfg)


def published_layout(kind: str, cfg) -> list:
    """[(name, shape, dtype), ...] of the published ``state_dict`` for ``cfg``, in its order."""
    return [(n, tuple(s), d) for n, s, d, _, _ in _entries(kind, cfg)]


# ---------------------------------------------------------------------------------------------
# the architecture from names and shapes
# ---------------------------------------------------------------------------------------------
def strip_wrappers(names) -> dict:
    """{unwrapped name: name in the file} with leading ``_orig_mod.`` / ``module.`` removed."""
    out = {}
    for n in names:
        m = n
        while m.startswith(_WRAPPERS):
            m = m[len("_orig_mod."):] if m.startswith("_orig_mod.") else m[len("module."):]
        if m in out:
            raise InterchangeError(f"tensor {m!r} appears twice (as {out[m]!r} and {n!r})")
        out[m] = n
    return out


def _count(shapes, prefix):
    """1 + the largest i among names ``prefix + "{i}." + ...`` (0 if none): counting by the
    highest index, so that a block with a tensor missing is reported as missing that tensor."""
    n = 0
    for name in shapes:
        if name.startswith(prefix):
            i = name[len(prefix):].split(".", 1)[0]
            if i.isdigit():
                n = max(n, int(i) + 1)
    return n


def _need(shapes, name, ndim):
    if name not in shapes:
        raise InterchangeError(f"missing tensor {name!r}")
    s = shapes[name]
    if len(s) != ndim:
        raise InterchangeError(f"tensor {name!r} has shape {tuple(s)}, expected {ndim} dimensions")
    return s


def _ratio(shapes, name, C):
    H = _need(shapes, name, 2)[0]
    if H % C:
        raise InterchangeError(f"tensor {name!r} has shape {tuple(shapes[name])}: its hidden width "
                               f"{H} is not a multiple of the width {C}")
    return H // C


def _blocks(shapes, prefix, C):
    """(depth, heads) of the TSSA blocks under ``prefix``: depth by counting, heads from the
    first block's ``attn.temp``, which must divide the width C."""
    depth = _count(shapes, prefix)
    temp = f"{prefix}0.attn.temp"
    if depth == 0:
        raise InterchangeError(f"missing tensor '{temp}' (no TSSA blocks)")
    h = _need(shapes, temp, 2)[0]
    if h < 1 or C % h:
        raise InterchangeError(f"'{temp}' gives {h} heads, which do not divide the width {C}")
    return depth, h


def infer_config(shapes: dict, *, image_size: int = 224):
    """-> (kind "vision" | "lm", config) from {unwrapped name: shape} of a published state dict.

    Vision: width from ``cls_token``, depth and class-attention blocks by counting, heads from
    ``attn.temp``, patch size 2^(stem stages), input channels from the first conv, classes from
    ``head``; the image size is not stored in the weights (Fourier positions work at any size).
    LM: vocabulary and width from ``wte``, block size from ``wpe``, depth, heads from ``temp``,
    bias from ``ln_f.bias``.
    """
    from ...models.configs import VisionConfig, LMConfig
    if "transformer.wte.weight" in shapes or "lm_head.weight" in shapes:
        emb = "transformer.wte.weight" if "transformer.wte.weight" in shapes else "lm_head.weight"
        V, C = _need(shapes, emb, 2)
        T = _need(shapes, "transformer.wpe.weight", 2)[0]
        depth, h = _blocks(shapes, "transformer.h.", C)
        bias = "transformer.ln_f.bias" in shapes
        cfg = LMConfig(vocab_size=V, block_size=T, width=C, depth=depth, num_heads=h,
                       mlp_ratio=_ratio(shapes, "transformer.h.0.mlp.c_fc.weight", C),
                       bias=bias, gelu="erf")
        return "lm", cfg.validate()
    if "cls_token" in shapes:
        C = _need(shapes, "cls_token", 3)[2]
        depth, h = _blocks(shapes, "blocks.", C)
        stages = (_count(shapes, "patch_embed.proj.") + 1) // 2    # indices 0, 2, 4, ...
        if stages == 0:
            raise InterchangeError("missing tensor 'patch_embed.proj.0.0.weight' (the "
                                   "convolutional stem)")
        in_chans = _need(shapes, "patch_embed.proj.0.0.weight", 4)[1]
        K = _need(shapes, "head.weight", 2)[0]
        P = 2 ** stages
        if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < P \
                or image_size % P:
            raise InterchangeError(f"--image-size must be a positive multiple of the patch size "
                                   f"{P}, got {image_size!r}")
        cfg = VisionConfig(image_size=image_size, in_chans=in_chans, patch_size=P,
                           num_classes=K, width=C, depth=depth, num_heads=h,
                           mlp_ratio=_ratio(shapes, "blocks.0.mlp.fc1.weight", C), pool="cls",
                           num_cls_blocks=_count(shapes, "cls_attn_blocks."),
                           layer_scale_init=1.0, ln_eps=1e-6, init_std=0.02, stem="conv",
                           pos="fourier", gelu="erf", cab="published")
        try:
            stem_channels(in_chans, C, P)
        except ValueError as e:
            raise InterchangeError(str(e)) from None
        return "vision", cfg.validate()
    raise InterchangeError("not a published ToST state dict: it has neither 'cls_token' "
                           "(vision) nor 'transformer.wte.weight' (language model)")


_ARCH_FIELDS = {"vision": ("in_chans", "patch_size", "num_classes", "width", "depth",
                           "num_heads", "mlp_ratio", "num_cls_blocks"),
                "lm": ("vocab_size", "block_size", "width", "depth", "num_heads", "mlp_ratio",
                       "bias")}


def describe_config(kind: str, cfg) -> str:
    """One line naming the architecture (what ``convert`` prints)."""
    return f"{kind}: " + ", ".join(f"{f}={getattr(cfg, f)}" for f in _ARCH_FIELDS[kind])


def check_arch(kind: str, cfg, arch: str) -> None:
    """InterchangeError unless ``cfg`` has the architecture of the preset ``arch``."""
    from ...models.configs import VISION_CONFIGS, LM_CONFIGS, PRESET_ALIASES
    table = VISION_CONFIGS if kind == "vision" else LM_CONFIGS
    if arch not in table:
        raise InterchangeError(f"--arch {arch!r} is not a {kind} preset; choose one of "
                               f"{sorted(table)}")
    want = table[arch]
    bad = [f"{f} {getattr(cfg, f)} (file) vs {getattr(want, f)} ({arch})"
           for f in _ARCH_FIELDS[kind]
           if f != "vocab_size" or PRESET_ALIASES.get(arch, arch) != "tiny-lm"  # from the text
           if getattr(cfg, f) != getattr(want, f)]
    if bad:
        raise InterchangeError(f"the file's architecture does not match --arch {arch}: "
                               + "; ".join(bad))
