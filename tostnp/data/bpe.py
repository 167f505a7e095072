"""Byte-pair encoding over characters: a small subword tokenizer learnt from the training text.

BPE (Sennrich, Haddow and Birch, 2016; the tokenizer family of GPT-2) starts from single
characters and repeatedly merges the most frequent pair of adjacent symbols into a new symbol,
until the vocabulary has ``vocab_size`` symbols. Frequent words become one token, rare words a
few pieces, and any text written in the training characters can still be encoded.

    tok = BPETokenizer.train(text, vocab_size=512)
    ids = tok.encode("The dict type")        # (n,) int64, n <= number of characters
    tok.decode(ids) == "The dict type"       # exact round trip

Merges never cross the boundaries of *chunks*: the text is first cut into words with their
trailing space, numbers, runs of punctuation, and runs of white space (:data:`CHUNK_RE`).
Keeping the space at the END of a word means a prompt that ends in a space ("The ") is cut
exactly as the same words are in the training text.

A language model on these tokens is still measured in bits per CHARACTER: the loss summed over
the tokens, divided by the number of characters they spell (:attr:`BPETokenizer.token_lengths`).
"""
from __future__ import annotations

import collections
import re

import numpy as np

__all__ = ["CHUNK_RE", "BPETokenizer", "decode_ids"]


def decode_ids(ids, tokens) -> str:
    """The text of token ``ids`` (any iterable of ints): the concatenation of ``tokens[i]``;
    ValueError for an id outside [0, len(tokens)). Both tokenizers decode through here."""
    ids = np.asarray(ids).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= len(tokens)):
        raise ValueError(f"ids must lie in [0, {len(tokens)}), got range "
                         f"[{ids.min()}, {ids.max()}]")
    return "".join(tokens[int(i)] for i in ids)

# letters (+ one trailing space) | digits (+ space) | punctuation or "_" (+ space) | white space.
# Every character falls in exactly one class, so the chunks spell the text exactly.
CHUNK_RE = re.compile(r"[^\W\d_]+ ?|\d+ ?|(?:[^\w\s]|_)+ ?|\s+")


MAX_MERGES = 1 << 20            # far above any vocabulary tostnp trains (--vocab-size)
MAX_SPELLED = 1 << 26           # characters spelled by all symbols together (~0.25 GB as str)


def _checked_merges(merges, n_chars: int) -> list:
    """``merges`` as (a, b) int pairs, each naming earlier symbols, and the strings they spell
    bounded before any is built (31 doubling merges would spell 2**31 characters)."""
    if not isinstance(merges, (list, tuple)) or len(merges) > MAX_MERGES:
        raise ValueError(f"BPETokenizer merges must be a list of at most {MAX_MERGES:,} pairs")
    lengths = [1] * n_chars
    total = n_chars
    out = []
    for r, pair in enumerate(merges):
        ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair)
        if not ok or not all(0 <= int(v) < len(lengths) for v in pair):
            raise ValueError(f"merge {r} refers to an unknown symbol: it must be two ids of "
                             f"earlier symbols (0..{len(lengths) - 1}), got {str(pair)[:80]}")
        a, b = int(pair[0]), int(pair[1])
        lengths.append(lengths[a] + lengths[b])
        total += lengths[-1]
        if total > MAX_SPELLED:
            raise ValueError(f"BPETokenizer merges spell more than {MAX_SPELLED:,} characters "
                             f"in all (merge {r} spells {lengths[-1]:,}); refused before "
                             f"building them")
        out.append((a, b))
    return out


class BPETokenizer:
    """Subword tokenizer: ``chars`` (the base symbols, sorted) and ``merges`` (pairs of ids).

    Symbol ids: ``0 .. len(chars)-1`` are the characters, ``len(chars) + r`` is the symbol made
    by merge ``r``. ``encode(str) -> (n,) int64``, ``decode(ids) -> str``, ``to_dict()`` /
    ``from_dict(d)`` round-trip through JSON; :meth:`train` learns the merges.
    """

    def __init__(self, chars: str, merges):
        if not isinstance(chars, str) or not chars or "".join(sorted(set(chars))) != chars:
            raise ValueError("BPETokenizer chars must be a non-empty, sorted str without repeats")
        self.chars = chars
        self.merges = _checked_merges(merges, len(chars))
        self.tokens = list(chars)                      # id -> the string it spells
        for a, b in self.merges:
            self.tokens.append(self.tokens[a] + self.tokens[b])
        self.rank = {pair: r for r, pair in enumerate(self.merges)}
        self.stoi = {c: i for i, c in enumerate(chars)}
        self.token_lengths = np.array([len(t) for t in self.tokens], dtype=np.int64)  # (V,)
        self._cache: dict[str, list[int]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    # --- learning the merges -------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, vocab_size: int, alphabet: str = "") -> "BPETokenizer":
        """Learn merges on ``text`` until ``vocab_size`` symbols (or no pair repeats).

        The base symbols are the characters of ``text`` and ``alphabet`` (pass the characters
        of a validation text, which must be encodable but must not shape the merges). Pair
        counts are kept up to date incrementally: a merge only touches the chunks that hold
        the merged pair. Ties go to the pair with the smaller ids (deterministic).
        """
        if not isinstance(text, str) or not text:
            raise ValueError("BPETokenizer.train needs a non-empty str")
        chars = "".join(sorted(set(text) | set(alphabet)))
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or \
                vocab_size < len(chars):
            raise ValueError(f"vocab_size must be an int >= the {len(chars)} characters of the "
                             f"text, got {vocab_size!r}")
        stoi = {c: i for i, c in enumerate(chars)}
        chunk_counts = collections.Counter(CHUNK_RE.findall(text))
        words = [[stoi[c] for c in w] for w in chunk_counts]
        freq = list(chunk_counts.values())
        pairs: collections.Counter = collections.Counter()
        where = collections.defaultdict(set)           # pair -> chunks that (may) hold it
        for i, w in enumerate(words):
            for p in zip(w, w[1:]):
                pairs[p] += freq[i]
                where[p].add(i)
        merges = []
        while len(chars) + len(merges) < vocab_size:
            best = max(pairs.items(), key=lambda kv: (kv[1], -kv[0][0], -kv[0][1]),
                       default=None)
            if best is None or best[1] < 2:
                break
            (a, b), new = best[0], len(chars) + len(merges)
            merges.append((a, b))
            for i in where.pop((a, b)):
                w = words[i]
                for p in zip(w, w[1:]):                # take the chunk's pairs out ...
                    pairs[p] -= freq[i]
                w = _merge(w, a, b, new)
                words[i] = w
                for p in zip(w, w[1:]):                # ... and put the new ones back
                    pairs[p] += freq[i]
                    where[p].add(i)
            for p in [p for p, n in pairs.items() if n <= 0]:
                del pairs[p]
        return cls(chars, merges)

    # --- encoding ----------------------------------------------------------------------------
    def _encode_chunk(self, chunk: str) -> list[int]:
        ids = self._cache.get(chunk)
        if ids is None:
            ids = [self.stoi[c] for c in chunk]
            while len(ids) > 1:                        # apply the earliest-learnt merge first
                r = min((self.rank.get(p, len(self.merges)) for p in zip(ids, ids[1:])))
                if r == len(self.merges):
                    break
                a, b = self.merges[r]
                ids = _merge(ids, a, b, len(self.chars) + r)
            self._cache[chunk] = ids
        return ids

    def encode(self, text: str) -> np.ndarray:
        """(n,) int64 ids; raises ValueError on a character outside the vocabulary."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        bad = set(text) - set(self.chars)
        if bad:
            raise ValueError(f"character {min(bad)!r} is not in the tokenizer's vocabulary "
                             f"({len(self.chars)} characters)")
        out: list[int] = []
        for chunk in CHUNK_RE.findall(text):
            out.extend(self._encode_chunk(chunk))
        return np.array(out, dtype=np.int64)

    def decode(self, ids) -> str:
        """ids: any iterable of ints (list, host array) -> str."""
        return decode_ids(ids, self.tokens)

    def to_dict(self) -> dict:
        return {"type": "bpe", "chars": self.chars, "merges": [list(m) for m in self.merges]}

    @classmethod
    def from_dict(cls, d: dict) -> "BPETokenizer":
        if not isinstance(d, dict) or d.get("type") != "bpe" or \
                not isinstance(d.get("chars"), str) or not isinstance(d.get("merges"), list):
            raise ValueError("not a BPETokenizer dict (need {'type': 'bpe', 'chars': str, "
                             "'merges': [[a, b], ...]})")
        return cls(d["chars"], d["merges"])


def _merge(ids: list[int], a: int, b: int, new: int) -> list[int]:
    """Replace every non-overlapping (a, b) in ``ids``, left to right, by ``new``."""
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
