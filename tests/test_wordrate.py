"""The word rate of generated text, on hand-made examples counted by hand."""
import pytest

from tostnp.analysis.wordrate import vocabulary, word_rate, words


TRAIN = "The module imports the function __init__; Python's docs say: 3 tokens, caf\u00e9 open."


def test_words_are_runs_of_letters_casefolded():
    # digits, underscore, apostrophe and punctuation split words; case is folded
    assert words("__init__ x2y Don't CAF\u00c9") == ["init", "x", "y", "don", "t", "caf\u00e9"]
    assert words("a bb ccc dddd", min_letters=3) == ["ccc", "dddd"]
    assert vocabulary(TRAIN) == {"module", "imports", "function", "init", "python", "docs",
                                 "tokens", "caf\u00e9", "open"}


def test_word_rate_by_hand():
    known = vocabulary(TRAIN)
    # counted words (>= 4 letters, not the last, possibly cut-off word):
    #   "MODULE" yes, "funktion" no, "Tokens" yes, "init" yes (from __init__), "docs" yes,
    #   "zzzz" no; "the", "of", "a" are too short; "opening" touches the end: not counted
    gen = "MODULE of the funktion: Tokens __init__ a docs zzzz opening"
    r = word_rate(gen, known)
    assert (r["known"], r["words"]) == (4, 6) and r["rate"] == pytest.approx(4 / 6)
    # a final word followed by anything (a space) is complete and counts
    assert word_rate(gen + " ", known)["words"] == 7


def test_word_rate_prompt_and_edge_cases():
    known = vocabulary(TRAIN)
    # a word begun in the prompt and finished by the model counts whole ("func" + "tion")
    assert word_rate("tion is", known, prompt="The func") == {"rate": 1.0, "known": 1, "words": 1}
    # words wholly inside the prompt do not count
    assert word_rate(" is", known, prompt="module ")["words"] == 0
    assert word_rate("", known) == {"rate": 0.0, "known": 0, "words": 0}
    with pytest.raises(ValueError, match="min_letters"):
        word_rate("abc", known, min_letters=0)
