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

The package: :mod:`~tostnp.io.interchange.layout` (names, shapes, the inferred architecture),
:mod:`~tostnp.io.interchange.mapping` (the array conversions), :mod:`~tostnp.io.interchange.files`
(safetensors reading and writing).
"""
from __future__ import annotations

from .layout import (InterchangeError, published_layout, infer_config, strip_wrappers,
                     describe_config, check_arch)
from .mapping import to_published, from_published, check_layout
from .files import (read_header, read_safetensors, write_safetensors, TORCH_TO_SAFETENSORS,
                    MAX_HEADER_BYTES)

__all__ = ["InterchangeError", "published_layout", "infer_config", "to_published",
           "from_published", "read_safetensors", "write_safetensors", "strip_wrappers",
           "describe_config", "check_arch", "TORCH_TO_SAFETENSORS", "MAX_HEADER_BYTES"]
