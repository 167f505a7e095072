"""Synthetic sequence-classification tasks, deterministic for a seed (host NumPy arrays).

* :func:`needle_task` -- one rare outlier token anywhere in a long sequence decides the label.
  Every other token is one of ``NEEDLE_CODES`` fixed unit vectors ("words") that live in the
  first d - 2 coordinates; the needle is ``norm * e_{d-2}`` (label 0) or ``norm * e_{d-1}``
  (label 1) at a uniformly random position. The needle is thus the only token with any weight
  in its direction: the low-variance, rare direction a compression-based mixer might squash.
* :func:`listops_task` -- nested list operations over digits in the spirit of ListOps
  (Nangia & Bowman 2018; the Long Range Arena's version, Tay et al. 2021): expressions such as
  ``[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]`` whose value (a digit) is the label. Operators:
  MAX, MIN, MED (the lower median: the ((k - 1) // 2)-th smallest of k arguments) and SM (sum
  mod 10). Sequences are padded to ``max_len`` with PAD.

Both return ``(X, y)``; the needle's X are float32 features (n, N, d), ListOps' are token ids
(n, max_len) int64 (the models take them one-hot, see :func:`one_hot`).
"""
from __future__ import annotations

import numpy as np

__all__ = ["NEEDLE_DIM", "NEEDLE_CODES", "needle_codebook", "needle_task",
           "LISTOPS_TOKENS", "LISTOPS_VOCAB", "PAD", "listops_task", "listops_tokens_to_text",
           "one_hot"]

NEEDLE_DIM = 16
NEEDLE_CODES = 8
_CODEBOOK_SEED = 1234          # the "words" are part of the task, the same for every seed


def needle_codebook(d: int = NEEDLE_DIM, codes: int = NEEDLE_CODES) -> np.ndarray:
    """(codes, d) float32 unit vectors with zeros in the last two (needle) coordinates."""
    g = np.random.default_rng(_CODEBOOK_SEED)
    book = np.zeros((codes, d))
    book[:, :d - 2] = g.standard_normal((codes, d - 2))
    return (book / np.linalg.norm(book, axis=1, keepdims=True)).astype(np.float32)


def needle_task(n: int, length: int, norm: float, seed: int, d: int = NEEDLE_DIM):
    """n sequences of ``length`` tokens -> X (n, length, d) float32, y (n,) int64, pos (n,).

    Token t of sequence i is a random codebook vector, except t = pos[i], which is the needle
    ``norm * e_{d - 2 + y[i]}``.
    """
    if n < 1 or length < 1 or not norm > 0:
        raise ValueError(f"needle_task: need n >= 1, length >= 1 and norm > 0, got n={n}, "
                         f"length={length}, norm={norm}")
    g = np.random.default_rng(seed)
    book = needle_codebook(d)
    X = book[g.integers(0, len(book), size=(n, length))]            # (n, N, d)
    y = g.integers(0, 2, size=n).astype(np.int64)
    pos = g.integers(0, length, size=n).astype(np.int64)
    X[np.arange(n), pos] = 0.0
    X[np.arange(n), pos, d - 2 + y] = norm
    return X, y, pos


# ------------------------------------------------------------------------------------------
# ListOps
# ------------------------------------------------------------------------------------------
LISTOPS_TOKENS = [str(i) for i in range(10)] + ["[MAX", "[MIN", "[MED", "[SM", "]", "PAD"]
LISTOPS_VOCAB = len(LISTOPS_TOKENS)                                  # 16
PAD = LISTOPS_TOKENS.index("PAD")
_OPS = {10: max, 11: min, 12: lambda a: sorted(a)[(len(a) - 1) // 2], 13: lambda a: sum(a) % 10}
_CLOSE = LISTOPS_TOKENS.index("]")


class _TooLong(Exception):
    pass


def _expression(g, depth: int, max_depth: int, p_op: float, max_args: int, budget: list):
    """A random expression -> (token ids, value); raises _TooLong once it exceeds the budget."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLong
    if depth >= max_depth or g.random() >= p_op:
        v = int(g.integers(0, 10))
        return [v], v
    op = int(g.integers(10, 14))
    toks, vals = [op], []
    for _ in range(int(g.integers(2, max_args + 1))):
        t, v = _expression(g, depth + 1, max_depth, p_op, max_args, budget)
        toks += t
        vals.append(v)
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLong
    return toks + [_CLOSE], _OPS[op](vals)


def listops_task(n: int, max_len: int, seed: int, min_len: int | None = None,
                 max_depth: int = 10, max_args: int = 5):
    """n expressions of min_len..max_len tokens (default min_len = max_len // 2), padded.

    -> X (n, max_len) int64 token ids (PAD after the expression), y (n,) int64 values 0..9,
    lengths (n,). The tree: an operator (probability p_op, fixed by the target length) with
    2..max_args arguments, or a digit; expressions outside the length range are redrawn.
    """
    min_len = max_len // 2 if min_len is None else min_len
    if not 1 <= min_len <= max_len:
        raise ValueError(f"listops_task: need 1 <= min_len <= max_len, got {min_len}, {max_len}")
    g = np.random.default_rng(seed)
    # close to the critical branching rate (1 / mean arguments) the trees get large; a
    # deeper cap and a rate just above it reach long sequences without too many redraws
    p_op = min(0.9, 1.0 / ((2 + max_args) / 2) + 0.06)
    X = np.full((n, max_len), PAD, dtype=np.int64)
    y = np.zeros(n, dtype=np.int64)
    lengths = np.zeros(n, dtype=np.int64)
    i = 0
    while i < n:
        try:
            toks, v = _expression(g, 0, max_depth, p_op, max_args, [max_len])
        except _TooLong:              # abandoned as soon as it outgrows max_len
            continue
        if len(toks) < min_len or toks[0] < 10:
            continue
        X[i, :len(toks)] = toks
        y[i], lengths[i] = v, len(toks)
        i += 1
    return X, y, lengths


def listops_tokens_to_text(ids) -> str:
    """Token ids -> the expression as text (PAD dropped)."""
    return " ".join(LISTOPS_TOKENS[int(t)] for t in ids if int(t) != PAD)


def one_hot(ids: np.ndarray, vocab: int) -> np.ndarray:
    """(...,) int ids -> (..., vocab) float32 one-hot features."""
    return np.eye(vocab, dtype=np.float32)[np.asarray(ids)]
