"""The word rate of generated text: how much of a language model's sample is real words.

Bits per character say how well a model predicts; the word rate says what a reader sees. It is

    word rate = (# words of >= 4 letters in the sample that also occur in the training text)
                / (# words of >= 4 letters in the sample)

counted over occurrences (a word written twice counts twice), with these definitions:

* a **word** is a maximal run of letters (``str.isalpha`` characters, Unicode included): digits,
  ``_``, punctuation and white space separate words, so ``__init__`` holds the word ``init``
  and ``don't`` the words ``don`` and ``t``;
* words are compared **case-insensitively** (``str.casefold``);
* the sample is the **generated continuation**: a word counts if it ends inside the
  continuation (a word begun in the prompt and finished by the model counts whole), except a
  word touching the continuation's last character, which the length limit may have cut off.

Short words are left out because a model that writes ``the of a in`` has learnt little;
``>= 4`` letters is where random letter strings stop being real words by chance.
"""
from __future__ import annotations

import re

__all__ = ["WORD_RE", "words", "vocabulary", "word_rate", "sample_text", "lm_word_rate"]

WORD_RE = re.compile(r"[^\W\d_]+")  # letters only: not (non-word | digit | underscore)


def words(text: str, min_letters: int = 1) -> list[str]:
    """The casefolded words of ``text`` with at least ``min_letters`` letters, in order."""
    return [w.casefold() for w in WORD_RE.findall(text) if len(w) >= min_letters]


def vocabulary(text: str, min_letters: int = 4) -> frozenset:
    """The set of casefolded words of ``text`` with at least ``min_letters`` letters."""
    return frozenset(words(text, min_letters))


def word_rate(generated: str, known, *, prompt: str = "", min_letters: int = 4) -> dict:
    """Word rate of ``generated`` (the continuation of ``prompt``) against the set ``known``.

    Returns ``{"rate", "known", "words"}``: the fraction, the number of counted words found in
    ``known`` and the number of counted words (rate is 0.0 when no word counts).
    """
    if min_letters < 1:
        raise ValueError(f"min_letters must be >= 1, got {min_letters}")
    text = prompt + generated
    start, end = len(prompt), len(text)
    counted = [m.group().casefold() for m in WORD_RE.finditer(text)
               if start < m.end() < end and len(m.group()) >= min_letters]
    hits = sum(w in known for w in counted)
    return {"rate": hits / len(counted) if counted else 0.0, "known": hits,
            "words": len(counted)}


def lm_word_rate(params, cfg, tokenizer, train_text: str, *, prompt: str | None = None,
                 length: int = 1000, seeds=(0, 1, 2), temperature: float = 0.8) -> dict:
    """Word rate of ``len(seeds)`` samples of ``length`` characters from a language model.

    Each sample continues ``prompt`` with :func:`tostnp.models.lm.lm_generate` (the sampling
    seed is the seed); the counts of all samples are pooled. ``prompt=None`` is "The ", or the
    first character of ``train_text`` when the tokenizer cannot encode "The ". Returns
    ``{"rate", "known", "words", "prompt", "samples"}`` (samples: the continuations).
    """
    if prompt is None:
        prompt = "The " if set("The ") <= set(train_text) else train_text[:1]
    known = vocabulary(train_text)
    hits = total = 0
    samples = []
    for seed in seeds:
        text = sample_text(params, cfg, tokenizer, prompt, length, seed=int(seed),
                           temperature=temperature)
        r = word_rate(text, known, prompt=prompt)
        hits, total = hits + r["known"], total + r["words"]
        samples.append(text)
    return {"rate": hits / total if total else 0.0, "known": hits, "words": total,
            "prompt": prompt, "samples": samples}


def sample_text(params, cfg, tokenizer, prompt: str, length: int, *, seed: int = 0,
                temperature: float = 0.8, top_k=None) -> str:
    """The first ``length`` characters a language model writes after ``prompt`` (seeded).

    Tokens are drawn with :func:`tostnp.models.lm.lm_generate` until they spell ``length``
    characters (a subword token spells one or more); one random draw per token, so a longer
    draw with the same seed starts with the same text.
    """
    from .. import backend
    from ..models.lm import lm_generate
    xp = backend.namespace(params["wte"])
    ids = backend.from_host(xp, tokenizer.encode(prompt)[None, :], dtype=xp.int64,
                            device=backend.device_of(params["wte"]))
    mean_len = float(tokenizer.token_lengths.mean()) if length else 1.0
    n_tok = length if mean_len <= 1.0 else -(-length // 2)   # most subword tokens spell >= 2
    while True:
        out = backend.to_host(lm_generate(params, cfg, ids, n_tok, temperature=temperature,
                                          top_k=top_k, seed=seed))[0]
        text = tokenizer.decode(out[ids.shape[1]:])
        if len(text) >= length or n_tok >= length:
            return text[:length]
        n_tok = length                                          # every token spells >= 1
