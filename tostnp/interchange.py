"""Weight interchange with the published PyTorch ToST models, through ``.safetensors`` files.

The published vision models (``tost_cab_*``, on XCiT) and language models (``tost_lang``, on
nanoGPT) save a PyTorch ``state_dict``. This module maps it to tostnp's flat parameter dict and
back, with the ``safetensors`` library's NumPy API: no torch, and never a pickle.

Conventions that differ (and how each tensor is mapped):

* ``Linear.weight`` is (out, in) there and (in, out) here: transposed both ways.
* ``Conv2d.weight`` (out, in, kh, kw) <-> tostnp's (kh, kw, in, out) (``tostnp.nn.conv``);
  the 1x1 position projection (C, 64, 1, 1) <-> ``pos.W`` (64, C).
* The class-attention ``qkv`` (3C, C) is tostnp's ``W_q`` (C, C) and ``W_kv`` (C, 2C) side by side.
* BatchNorm ``num_batches_tracked`` is int64 there and a float count here (exact below 2^24 in
  float32); the running statistics are model state (``tostnp.nn.batchnorm``).
* The LM head is tied to ``transformer.wte.weight``; an export writes both names (the published
  ``state_dict`` has both); an import accepts either one or both (then they must be equal).

Everything is checked before anything is written: names (missing and unexpected ones are
named), shapes (name, expected, found), dtypes, finite values, the safetensors header itself.
A wrapped name (``_orig_mod.`` from ``torch.compile``, ``module.`` from DDP) is unwrapped.

Main entry points: :func:`published_layout` (names, shapes, dtypes in the published order),
:func:`infer_config` (the architecture from names and shapes), :func:`to_published`,
:func:`from_published`, :func:`read_safetensors`, :func:`write_safetensors`.
"""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from .nn.stem import stem_channels

__all__ = ["InterchangeError", "published_layout", "infer_config", "to_published",
           "from_published", "read_safetensors", "write_safetensors", "strip_wrappers",
           "describe_config", "check_arch", "TORCH_TO_SAFETENSORS", "MAX_HEADER_BYTES"]

# A real header is a few kB (about 100 bytes per tensor); anything this large is refused unread.
MAX_HEADER_BYTES = 8 << 20
_WRAPPERS = ("_orig_mod.", "module.")
_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}

TORCH_TO_SAFETENSORS = """\
  import torch, safetensors.torch
  sd = torch.load("{src}", map_location="cpu", weights_only=True)
  sd = sd.get("model", sd)            # training checkpoints keep the weights under "model"
  safetensors.torch.save_file({{k: v.detach().clone().contiguous() for k, v in sd.items()}},
                              "{dst}")"""


class InterchangeError(ValueError):
    """A file or model that cannot be converted; the message is one line naming the problem."""


# ---------------------------------------------------------------------------------------------
# the published layout: (published name, shape, dtype, tostnp keys, kind of mapping)
# ---------------------------------------------------------------------------------------------
# kind: "id" same array; "T" transpose of a matrix; "conv" (out,in,kh,kw) <-> (kh,kw,in,out);
# "1x1" (C,64,1,1) <-> (64,C); "count" int64 () <-> float (); "qkv" W_q|W_kv; "qkv_b" b_q|b_kv.

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
        E += [(f"{pre}.gamma1", (C,), "float32", [f"{o}.ls1.gamma"], "id"),
              (f"{pre}.gamma2", (C,), "float32", [f"{o}.ls2.gamma"], "id"),
              (f"{pre}.norm1.weight", (C,), "float32", [f"{o}.ln1.gamma"], "id"),
              (f"{pre}.norm1.bias", (C,), "float32", [f"{o}.ln1.beta"], "id"),
              (f"{pre}.attn.temp", (h, 1), "float32", [f"{o}.tssa.temp"], "id"),
              (f"{pre}.attn.qkv.weight", (C, C), "float32", [f"{o}.tssa.W_u"], "T"),
              (f"{pre}.attn.qkv.bias", (C,), "float32", [f"{o}.tssa.b_u"], "id"),
              (f"{pre}.attn.to_out.0.weight", (C, C), "float32", [f"{o}.tssa.W_o"], "T"),
              (f"{pre}.attn.to_out.0.bias", (C,), "float32", [f"{o}.tssa.b_o"], "id")]
        E += _mlp_entries(pre, o, C, H, "norm2", "fc1", "fc2", bias=True)
    for j in range(cfg.num_cls_blocks):
        pre, o = f"cls_attn_blocks.{j}", f"cab.{j}"
        E += [(f"{pre}.gamma1", (C,), "float32", [f"{o}.ls1.gamma"], "id"),
              (f"{pre}.gamma2", (C,), "float32", [f"{o}.ls2.gamma"], "id"),
              (f"{pre}.norm1.weight", (C,), "float32", [f"{o}.norm1.gamma"], "id"),
              (f"{pre}.norm1.bias", (C,), "float32", [f"{o}.norm1.beta"], "id"),
              (f"{pre}.attn.qkv.weight", (3 * C, C), "float32",
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


def infer_config(shapes: dict, *, image_size: int = 224):
    """-> (kind "vision" | "lm", config) from {unwrapped name: shape} of a published state dict.

    Vision: width from ``cls_token``, depth and class-attention blocks by counting, heads from
    ``attn.temp``, patch size 2^(stem stages), input channels from the first conv, classes from
    ``head``; the image size is not stored in the weights (Fourier positions work at any size).
    LM: vocabulary and width from ``wte``, block size from ``wpe``, depth, heads from ``temp``,
    bias from ``ln_f.bias``.
    """
    from .models.configs import VisionConfig, LMConfig
    if "transformer.wte.weight" in shapes or "lm_head.weight" in shapes:
        emb = "transformer.wte.weight" if "transformer.wte.weight" in shapes else "lm_head.weight"
        V, C = _need(shapes, emb, 2)
        T = _need(shapes, "transformer.wpe.weight", 2)[0]
        depth = _count(shapes, "transformer.h.")
        if depth == 0:
            raise InterchangeError("missing tensor 'transformer.h.0.attn.temp' (no TSSA blocks)")
        h = _need(shapes, "transformer.h.0.attn.temp", 2)[0]
        if h < 1 or C % h:
            raise InterchangeError(f"'transformer.h.0.attn.temp' gives {h} heads, which do not "
                                   f"divide the width {C}")
        bias = "transformer.ln_f.bias" in shapes
        cfg = LMConfig(vocab_size=V, block_size=T, width=C, depth=depth, num_heads=h,
                       mlp_ratio=_ratio(shapes, "transformer.h.0.mlp.c_fc.weight", C),
                       bias=bias, gelu="erf")
        return "lm", cfg.validate()
    if "cls_token" in shapes:
        C = _need(shapes, "cls_token", 3)[2]
        depth = _count(shapes, "blocks.")
        if depth == 0:
            raise InterchangeError("missing tensor 'blocks.0.attn.temp' (no TSSA blocks)")
        h = _need(shapes, "blocks.0.attn.temp", 2)[0]
        if h < 1 or C % h:
            raise InterchangeError(f"'blocks.0.attn.temp' gives {h} heads, which do not divide "
                                   f"the width {C}")
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
    from .models.configs import VISION_CONFIGS, LM_CONFIGS
    table = VISION_CONFIGS if kind == "vision" else LM_CONFIGS
    if arch not in table:
        raise InterchangeError(f"--arch {arch!r} is not a {kind} preset; choose one of "
                               f"{sorted(table)}")
    want = table[arch]
    bad = [f"{f} {getattr(cfg, f)} (file) vs {getattr(want, f)} ({arch})"
           for f in _ARCH_FIELDS[kind] if f != "vocab_size" or arch != "tiny-char"
           if getattr(cfg, f) != getattr(want, f)]
    if bad:
        raise InterchangeError(f"the file's architecture does not match --arch {arch}: "
                               + "; ".join(bad))


# ---------------------------------------------------------------------------------------------
# tostnp <-> published
# ---------------------------------------------------------------------------------------------
def _to_pub(kind, arrays, dtype):
    if kind == "id":
        return arrays[0].astype(dtype, copy=False)
    if kind == "T":
        return arrays[0].T.astype(dtype, copy=False)
    if kind == "conv":
        return arrays[0].transpose(3, 2, 0, 1).astype(dtype, copy=False)
    if kind == "1x1":
        return arrays[0].T[:, :, None, None].astype(dtype, copy=False)
    if kind == "count":
        v = float(arrays[0])
        if not (v >= 0 and v == math.floor(v)):
            raise InterchangeError(f"a BatchNorm batch count must be a whole number >= 0, got {v}")
        return np.asarray(int(v), dtype=np.int64)
    if kind == "qkv":
        return np.concatenate(arrays, axis=1).T.astype(dtype, copy=False)
    if kind == "qkv_b":
        return np.concatenate(arrays, axis=0).astype(dtype, copy=False)
    raise AssertionError(kind)


def _from_pub(kind, a, C):
    if kind == "id":
        return [a]
    if kind == "T":
        return [a.T]
    if kind == "conv":
        return [a.transpose(2, 3, 1, 0)]
    if kind == "1x1":
        return [a[:, :, 0, 0].T]
    if kind == "count":
        return [a.astype(np.float64)]
    if kind == "qkv":
        w = a.T                                                     # (C, 3C) = [W_q | W_kv]
        return [w[:, :C], w[:, C:]]
    if kind == "qkv_b":
        return [a[:C], a[C:]]
    raise AssertionError(kind)


def to_published(kind: str, cfg, params: dict, dtype=np.float32) -> dict:
    """tostnp parameters (host arrays) -> {published name: array}, in the published order.

    Float tensors are written in ``dtype`` (float32 as published), the BatchNorm counts as int64.
    """
    from .backend import to_host
    if kind == "vision":
        need = {"stem": "conv", "pos": "fourier", "pool": "cls", "cab": "published"}
        bad = [f"{k}={getattr(cfg, k)!r} (needs {v!r})" for k, v in need.items()
               if getattr(cfg, k) != v]
        if bad:
            raise InterchangeError("only models of the published form can be exported: "
                                   + ", ".join(bad))
    elif cfg.ln_shift != cfg.bias:
        raise InterchangeError(f"the published LM has LayerNorm shifts and linear biases both "
                               f"(bias=True) or neither (bias=False); this model has "
                               f"bias={cfg.bias}, LayerNorm shifts={cfg.ln_shift}")
    out = {}
    used = set()
    for name, shape, dt, keys, how in _entries(kind, cfg):
        missing = [k for k in keys if k not in params]
        if missing:
            raise InterchangeError(f"the model has no parameter {missing[0]!r} (for {name!r})")
        a = _to_pub(how, [to_host(params[k]) for k in keys], dtype)
        if tuple(a.shape) != shape:
            raise InterchangeError(f"parameter for {name!r} has shape {tuple(a.shape)} after "
                                   f"mapping, expected {shape}")
        out[name] = a
        used.update(keys)
    extra = sorted(set(params) - used)
    if extra:
        raise InterchangeError(f"the model has parameters the published layout does not hold: "
                               f"{', '.join(extra[:5])}")
    return out


def from_published(tensors: dict, *, image_size: int = 224, cfg=None):
    """{name: host array} in the published layout -> (kind, cfg, tostnp params as host arrays).

    Names may be wrapped (``_orig_mod.``, ``module.``). Every check of the module docstring runs
    before any conversion; the arrays come back in float64 or float32 as stored (the caller
    casts). ``cfg``: the architecture if already known (else inferred).
    """
    names = strip_wrappers(tensors)
    shapes = {n: tuple(tensors[f].shape) for n, f in names.items()}
    dtypes = {n: np.dtype(tensors[f].dtype) for n, f in names.items()}
    kind, cfg = (infer_config(shapes, image_size=image_size) if cfg is None
                 else (("vision" if hasattr(cfg, "patch_size") else "lm"), cfg))
    check_layout(kind, cfg, shapes, dtypes)
    if kind == "lm":
        a, b = names.get("transformer.wte.weight"), names.get("lm_head.weight")
        if a is not None and b is not None and not np.array_equal(tensors[a], tensors[b]):
            raise InterchangeError("'lm_head.weight' differs from 'transformer.wte.weight'; "
                                   "tostnp's head is tied to the token embedding")
    for n, f in names.items():
        if dtypes[n].kind == "f" and not np.all(np.isfinite(tensors[f])):
            raise InterchangeError(f"tensor {n!r} contains NaN or Inf")
    params = {}
    for name, shape, dt, keys, how in _entries(kind, cfg):
        if name not in names:                                       # the other tied LM name
            continue
        for k, a in zip(keys, _from_pub(how, tensors[names[name]], cfg.width)):
            params[k] = a            # a view: callers make it row-major (see convert)
    return kind, cfg, params


def check_layout(kind: str, cfg, shapes: dict, dtypes: dict) -> None:
    """Names, shapes and dtypes against :func:`published_layout` (InterchangeError naming the
    first difference). The LM may hold one of its two tied names."""
    layout = published_layout(kind, cfg)
    want = {n: (s, d) for n, s, d in layout}
    unexpected = [n for n in shapes if n not in want]
    if unexpected:
        raise InterchangeError(f"unexpected tensor {unexpected[0]!r} (not in the published "
                               f"{kind} layout for {describe_config(kind, cfg)})")
    tied = {"transformer.wte.weight", "lm_head.weight"}
    for n, (s, d) in want.items():
        if n not in shapes:
            if kind == "lm" and n in tied and (tied - {n}) & set(shapes):
                continue
            raise InterchangeError(f"missing tensor {n!r} (expected shape {s})")
        if tuple(shapes[n]) != tuple(s):
            raise InterchangeError(f"tensor {n!r} has shape {tuple(shapes[n])}, expected {s}")
        got = dtypes[n]
        ok = got == np.int64 if d == "int64" else got in (np.float32, np.float64)
        if not ok:
            raise InterchangeError(f"tensor {n!r} has dtype {got}, expected {d}"
                                   + ("" if d == "int64" else " (or float64)"))


# ---------------------------------------------------------------------------------------------
# safetensors files
# ---------------------------------------------------------------------------------------------
def read_header(path: str) -> dict:
    """The safetensors JSON header of ``path`` (checked: size, JSON, entries), nothing else read."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise InterchangeError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            (n,) = struct.unpack("<Q", head)
            if 8 + n > size:
                raise InterchangeError(f"{path}: not a safetensors file (its header length {n} "
                                       f"runs past the end of the {size}-byte file)")
            if n > MAX_HEADER_BYTES:
                raise InterchangeError(f"{path}: safetensors header of {n} bytes is larger than "
                                       f"the {MAX_HEADER_BYTES} allowed; refused unread")
            raw = f.read(n)
    except OSError as e:
        raise InterchangeError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InterchangeError(f"{path}: not a safetensors file (the header is not JSON)") from None
    if not isinstance(header, dict):
        raise InterchangeError(f"{path}: not a safetensors file (the header is not a JSON object)")
    data_len = size - 8 - n
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if not (isinstance(e, dict) and isinstance(e.get("shape"), list)
                and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
                and isinstance(e.get("dtype"), str)):
            raise InterchangeError(f"{path}: not a safetensors file (bad entry for {name!r})")
        if e["dtype"] not in _ST_DTYPES:
            raise InterchangeError(f"tensor {name!r} has dtype {e['dtype']}, expected F32 "
                                   f"(float32), F64 or I64 (BatchNorm counts)")
        a, b = e["data_offsets"]
        count = math.prod(int(s) for s in e["shape"])
        if not (0 <= a <= b <= data_len
                and b - a == count * np.dtype(_ST_DTYPES[e["dtype"]]).itemsize):
            raise InterchangeError(f"{path}: not a safetensors file (tensor {name!r} does not fit "
                                   f"its data range)")
    return header


def read_safetensors(path: str, *, image_size: int = 224):
    """-> (kind, cfg, params (host arrays), metadata dict) for a published-layout file.

    Names, shapes and dtypes are checked from the header before any tensor is read.
    """
    header = read_header(path)
    meta = header.get("__metadata__") or {}
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    names = strip_wrappers(entries)
    shapes = {n: tuple(int(s) for s in entries[f]["shape"]) for n, f in names.items()}
    dtypes = {n: np.dtype(_ST_DTYPES[entries[f]["dtype"]]) for n, f in names.items()}
    kind, cfg = infer_config(shapes, image_size=image_size)
    check_layout(kind, cfg, shapes, dtypes)
    from safetensors import safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            tensors = {k: f.get_tensor(k) for k in entries}
    except Exception as e:  # the library's own format errors
        raise InterchangeError(f"{path}: not a readable safetensors file ({e})") from None
    kind, cfg, params = from_published(tensors, cfg=cfg)
    return kind, cfg, params, dict(meta)


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``tensors`` (name -> host array) atomically (temporary file, fsync, rename)."""
    from safetensors.numpy import save
    from .io import atomic_write_bytes
    data = save({k: np.asarray(v, order="C") for k, v in tensors.items()},
                metadata={str(k): str(v) for k, v in (metadata or {}).items()})
    atomic_write_bytes(path, data)
