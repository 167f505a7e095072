"""Text for :mod:`tostnp.data`: the default corpus, character and BPE tokenizers (by name or
from a checkpoint), train/validation split, language-model windows and the unigram baseline.
Host NumPy arrays only."""
from __future__ import annotations

import math
import os

import numpy as np

from ..backend import RNG
from .bpe import decode_ids

__all__ = ["load_text", "CharTokenizer", "tokenizer_from_dict", "train_val_split",
           "load_lm_text", "sample_lm_batch", "unigram_bits_per_char"]


# --------------------------------------------------------------------------------------------
# Text
# --------------------------------------------------------------------------------------------
def load_text(path: str | None = None) -> str:
    """A text corpus as one string.

    ``path=None``: the documentation text bundled with the standard library
    (``pydoc_data.topics.topics``; its values joined with newlines in sorted key order) --
    always available offline. Otherwise the UTF-8 file at ``path``.
    """
    if path is None:
        try:
            from pydoc_data.topics import topics
        except ImportError as e:  # some distributions strip it
            raise RuntimeError("the default corpus needs the standard library module "
                               "pydoc_data.topics, which this Python lacks; pass a path to "
                               "a UTF-8 text file instead") from e
        return "\n".join(topics[k] for k in sorted(topics))
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        # an int would be a file descriptor (0: standard input): never read as a text
        raise ValueError(f"text path must be a file name, got {type(path).__name__} "
                         f"{str(path)[:40]}")
    if not os.path.isfile(path):
        if os.path.exists(path):
            raise ValueError(f"text file {path!r} is not a regular file")
        raise FileNotFoundError(f"text file {path!r} does not exist")
    from ..backend.budget import check_memory
    # the str (up to 4 bytes a character), its ids (8 bytes a token) and their copies in the
    # splits and the tokenizer's pass: about 16 bytes for every byte of the file
    check_memory(16 * os.path.getsize(path), f"the text {path}")
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not valid UTF-8 ({e})") from e
    if not text:
        raise ValueError(f"text file {path!r} is empty")
    return text


class CharTokenizer:
    """Character-level tokenizer: the vocabulary is the sorted set of characters of a text.

    ``CharTokenizer(text)``; ``encode(str) -> (n,) int64`` host array of ids,
    ``decode(ids) -> str``; ``to_dict()`` / ``from_dict(d)`` round-trip through JSON.
    """

    def __init__(self, text: str):
        if not isinstance(text, str) or not text:
            raise TypeError("CharTokenizer needs a non-empty str to build its vocabulary")
        self.chars = "".join(sorted(set(text)))
        self._ords = np.array([ord(c) for c in self.chars], dtype=np.int64)  # sorted
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.token_lengths = np.ones(len(self.chars), dtype=np.int64)  # each id is 1 character

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        """(n,) int64 ids; raises ValueError on a character outside the vocabulary."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)
        ids = np.searchsorted(self._ords, codes)
        bad = (ids >= len(self.chars))
        bad[~bad] = self._ords[ids[~bad]] != codes[~bad]
        if bad.any():
            c = chr(int(codes[np.argmax(bad)]))
            raise ValueError(f"character {c!r} is not in the tokenizer's vocabulary "
                             f"({self.vocab_size} characters)")
        return ids

    def decode(self, ids) -> str:
        """ids: any iterable of ints (list, host array) -> str."""
        return decode_ids(ids, self.chars)

    def to_dict(self) -> dict:
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if not isinstance(d, dict) or d.get("type") != "char" or not isinstance(d.get("chars"), str):
            raise ValueError("not a CharTokenizer dict (need {'type': 'char', 'chars': str})")
        tok = cls(d["chars"])
        if tok.chars != d["chars"]:
            raise ValueError("tokenizer 'chars' must be sorted and without repeats")
        return tok


def tokenizer_from_dict(d: dict):
    """A tokenizer from its ``to_dict()``: :class:`CharTokenizer` or :class:`tostnp.data.bpe.BPETokenizer`."""
    if isinstance(d, dict) and d.get("type") == "bpe":
        from .bpe import BPETokenizer
        return BPETokenizer.from_dict(d)
    return CharTokenizer.from_dict(d)


def train_val_split(ids, val_fraction: float = 0.1):
    """Fixed split of a token sequence: the first part trains, the last ``val_fraction`` validates.

    ids: (n,) -> (train_ids (n - n_val,), val_ids (n_val,)), n_val = round(val_fraction * n).
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must be a 1-D sequence of shape (n,), got shape {ids.shape}")
    val_fraction = float(val_fraction)
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * ids.size))
    if n_val == 0 or n_val == ids.size:
        raise ValueError(f"ids of length {ids.size} is too short to split with "
                         f"val_fraction={val_fraction}")
    return ids[:-n_val], ids[-n_val:]


def load_lm_text(path: str | None = None, val_fraction: float = 0.1, tokenizer=None,
                 kind: str = "char", vocab_size: int | None = None):
    """-> (train_ids, val_ids, tokenizer) for the corpus at ``path`` (default corpus if None).

    The last ``val_fraction`` of the characters validate, the rest train. ``tokenizer`` (e.g.
    from a checkpoint) encodes both; otherwise a new one of ``kind`` "char" (every character
    a token) or "bpe" (:class:`tostnp.data.bpe.BPETokenizer` with ``vocab_size`` symbols, its merges
    learnt on the training characters only).
    """
    text = load_text(path)
    n_val = len(train_val_split(np.arange(len(text)), val_fraction)[1])
    train_text, val_text = text[:-n_val], text[-n_val:]
    if tokenizer is not None:
        tok = tokenizer
    elif kind == "char":
        tok = CharTokenizer(text)
    elif kind == "bpe":
        from .bpe import BPETokenizer
        tok = BPETokenizer.train(train_text, vocab_size, alphabet=val_text)
    else:
        raise ValueError(f"tokenizer must be 'char' or 'bpe', got {kind!r}")
    return tok.encode(train_text), tok.encode(val_text), tok


# --------------------------------------------------------------------------------------------
# Language-model batches and baseline (host arrays; deterministic for a given RNG state)
# --------------------------------------------------------------------------------------------
def sample_lm_batch(ids, batch_size: int, block_len: int, rng: RNG):
    """Random windows for next-token prediction.

    ids: (n,) int token sequence -> ``x (B, T)`` and ``y (B, T)`` int64 host arrays with
    ``y[b, t] = ids[s_b + t + 1]`` and ``x[b, t] = ids[s_b + t]``, window starts ``s_b`` drawn
    uniformly from ``[0, n - T - 1]`` with ``rng.integers``.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"ids must have shape (n,), got {ids.shape}")
    for nm, v in (("batch_size", batch_size), ("block_len", block_len)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{nm} must be an int >= 1, got {v!r}")
    if ids.size < block_len + 1:
        raise ValueError(f"ids has {ids.size} tokens; need at least block_len + 1 = "
                         f"{block_len + 1}")
    starts = rng.integers(0, ids.size - block_len, size=batch_size)  # (B,)
    pos = starts[:, None] + np.arange(block_len)[None, :]  # (B, T)
    return ids[pos].astype(np.int64), ids[pos + 1].astype(np.int64)


def unigram_bits_per_char(train_ids, val_ids, vocab_size: int | None = None,
                          token_lengths=None) -> dict:
    """Baseline for a language model: validation cross-entropy under the training unigram.

    p(c) = (count_train(c) + 1) / (n_train + V) (add-one smoothing over V symbols, V =
    ``vocab_size`` or 1 + the largest id seen). Returns ``{"nats": H, "bits": H / ln 2}`` with
    H = -sum over the validation ids of log p(id), divided by the number of characters they
    spell (``token_lengths[id]`` each; 1 for a character tokenizer): nats per character. A
    model that beats this has learnt more than symbol frequencies.
    """
    train_ids = np.asarray(train_ids).reshape(-1)
    val_ids = np.asarray(val_ids).reshape(-1)
    if train_ids.size == 0 or val_ids.size == 0:
        raise ValueError("train_ids and val_ids must be non-empty")
    V = int(max(train_ids.max(), val_ids.max())) + 1 if vocab_size is None else int(vocab_size)
    if min(train_ids.min(), val_ids.min()) < 0 or max(train_ids.max(), val_ids.max()) >= V:
        raise ValueError(f"ids must lie in [0, vocab_size={V})")
    counts = np.bincount(train_ids, minlength=V).astype(np.float64)
    logp = np.log(counts + 1.0) - np.log(train_ids.size + V)
    n_chars = val_ids.size if token_lengths is None else \
        int(np.asarray(token_lengths)[val_ids].sum())
    nats = float(-logp[val_ids].sum() / n_chars)
    return {"nats": nats, "bits": nats / math.log(2.0)}
