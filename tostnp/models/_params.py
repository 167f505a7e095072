"""Flat parameter dicts with dotted names ("blocks.0.tssa.W_u"): helpers to view and merge them."""
from __future__ import annotations

__all__ = ["sub", "prefixed", "accumulate", "num_params"]


def sub(params: dict, prefix: str) -> dict:
    """The entries of ``params`` under ``prefix + "."``, with the prefix removed (no copies)."""
    p = prefix + "."
    return {k[len(p):]: v for k, v in params.items() if k.startswith(p)}


def prefixed(grads: dict, prefix: str) -> dict:
    """``grads`` with every key renamed to ``prefix + "." + key``."""
    return {f"{prefix}.{k}": v for k, v in grads.items()}


def accumulate(total: dict, grads: dict) -> dict:
    """Add ``grads`` into ``total`` key by key (sum where a parameter is used twice)."""
    for k, g in grads.items():
        total[k] = total[k] + g if k in total else g
    return total


def num_params(params: dict) -> int:
    n = 0
    for v in params.values():
        size = 1
        for s in v.shape:
            size *= int(s)
        n += size
    return n
