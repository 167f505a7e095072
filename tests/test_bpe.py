"""The BPE tokenizer: merges counted by hand, exact round trips, bits per character."""
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tostnp import backend
from tostnp.data.bpe import BPETokenizer, CHUNK_RE
from tostnp.data import tokenizer_from_dict, unigram_bits_per_char


def test_merges_by_hand():
    # chunks "abab ", "abab ", "ab"; ids: ' '=0 a=1 b=2
    # counts: (a,b) 2*2+1 = 5 -> "ab"=3; then (ab,ab) 2 and (ab,' ') 2 tie -> smaller ids
    # (3,0) -> "ab "=4; then (ab, "ab ") 2 -> "abab "=5
    tok = BPETokenizer.train("abab abab ab", vocab_size=6)
    assert tok.merges == [(1, 2), (3, 0), (3, 4)]
    assert tok.tokens == [" ", "a", "b", "ab", "ab ", "abab "]
    assert tok.encode("abab ab").tolist() == [5, 3]
    assert tok.encode("ba").tolist() == [2, 1]
    assert tok.token_lengths.tolist() == [1, 1, 1, 2, 3, 5]
    # no pair occurs twice any more: training stops below the requested size
    assert BPETokenizer.train("abab abab ab", vocab_size=50).vocab_size == 6


def test_chunks_keep_the_space_after_a_word():
    assert CHUNK_RE.findall("The  dict_x(3)\n  ok.") == \
        ["The ", " ", "dict", "_", "x", "(", "3", ")", "\n  ", "ok", "."]
    tok = BPETokenizer.train("The cat. The dog. The end. " * 5, vocab_size=30)
    # a prompt ending in a space is cut as the training text is
    assert tok.decode(tok.encode("The ")) == "The " and len(tok.encode("The ")) == 1


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="ab c_1.\n\u00e9\u2211", min_size=1, max_size=60))
def test_round_trip_and_chunks_spell_the_text(text):
    assert "".join(CHUNK_RE.findall(text)) == text
    tok = BPETokenizer.train(text + " ab ab", vocab_size=40)
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and tok.decode(ids) == text
    assert int(tok.token_lengths[ids].sum()) == len(text)


def test_dict_round_trip_and_errors():
    tok = BPETokenizer.train("hello hello world world", vocab_size=20, alphabet="!")
    again = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert isinstance(again, BPETokenizer) and again.tokens == tok.tokens
    assert again.encode("hello world!").tolist() == tok.encode("hello world!").tolist()
    with pytest.raises(ValueError, match="not in the tokenizer"):
        tok.encode("hello?")
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train("abc", vocab_size=2)
    with pytest.raises(ValueError, match="unknown symbol"):
        BPETokenizer("ab", [(0, 5)])
    with pytest.raises(ValueError, match="not a BPETokenizer"):
        BPETokenizer.from_dict({"type": "bpe", "chars": "ab"})
    with pytest.raises(ValueError, match="ids must lie"):
        tok.decode([tok.vocab_size])


def test_unigram_baseline_is_per_character():
    tok = BPETokenizer.train("aa b aa b aa", vocab_size=5)       # "aa" is one token
    tr, va = tok.encode("aa b aa b"), tok.encode("aa b")
    out = unigram_bits_per_char(tr, va, tok.vocab_size, tok.token_lengths)
    counts = np.bincount(tr, minlength=tok.vocab_size) + 1.0
    p = counts / counts.sum()
    expected = -sum(math.log(p[i]) for i in va) / len("aa b")    # nats per CHARACTER
    assert out["nats"] == pytest.approx(expected)


def test_lm_bits_per_character_with_subword_tokens():
    """val_bpc = summed token loss / characters spelled, against a float64 log-softmax."""
    from tostnp.models import get_lm_config
    from tostnp.models.lm import lm_forward
    from tostnp.train.tasks import LMTask
    from tostnp.data import sample_lm_batch
    text = "the quick brown fox jumps over the lazy dog. " * 30
    tok = BPETokenizer.train(text, vocab_size=40)
    ids = tok.encode(text)
    cfg = get_lm_config("tiny-char", vocab_size=tok.vocab_size, block_size=8, width=8,
                        depth=1, num_heads=2, mlp_ratio=2)
    task = LMTask(cfg, ids[:200], ids[200:], tok, batch_size=3, seed=1, eval_batches=2)
    params = task.init_params(backend.RNG(0))
    got = task.evaluate(params)
    rng = backend.RNG(10_000 + 1)                  # the task's fixed validation windows
    nll = chars = 0.0
    for _ in range(2):
        x, y = sample_lm_batch(ids[200:], 3, 8, rng)
        logits = np.asarray(lm_forward(x, params, cfg)[0], dtype=np.float64)
        logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll -= np.take_along_axis(logp, y[..., None], -1).sum()
        chars += sum(len(tok.decode(row)) for row in y)
    assert got["val_bpc"] == pytest.approx(nll / chars / math.log(2), rel=1e-5)
    assert got["val_loss"] == pytest.approx(nll / y.size / 2, rel=1e-5)
