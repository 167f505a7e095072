"""One spelling per option: across every command's --help, no option is shown under two
spellings (``--max-mem-gb`` beside ``--max-memory-gb``), and one option never lists two long
names; the old spellings still parse, hidden, to the same setting."""
import argparse

import pytest

from tostnp.__main__ import build_parser


def _parsers(parser, path=()):
    """(command path, parser) for the main parser and every sub-command, depth first."""
    yield path, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from _parsers(sub, path + (name,))


def _shown():
    """Every long option string shown in a --help: {option: {command, ...}}, and the actions
    that show several."""
    shown, several = {}, []
    for path, p in _parsers(build_parser()):
        for a in p._actions:
            if a.help == argparse.SUPPRESS:
                continue
            longs = [o for o in a.option_strings if o.startswith("--")]
            # --x / --no-x of a BooleanOptionalAction are one option, not two spellings
            names = {o[len("--no-"):] if o.startswith("--no-") and "--" + o[5:] in longs
                     else o[2:] for o in longs}
            if len(names) > 1:
                several.append((" ".join(path), longs))
            for o in longs:
                shown.setdefault(o, set()).add(" ".join(path))
    return shown, several


def _same_words(a: str, b: str) -> bool:
    """Two spellings of one name: as many words, each word of one a prefix of the other's
    (mem / memory, dir / directory)."""
    wa, wb = a.lstrip("-").split("-"), b.lstrip("-").split("-")
    return a != b and len(wa) == len(wb) and all(x.startswith(y) or y.startswith(x)
                                                  for x, y in zip(wa, wb))


def test_same_words_finds_the_known_pair():
    assert _same_words("--max-mem-gb", "--max-memory-gb")
    assert _same_words("--seed", "--seeds")      # hence the plurals allowed below
    assert not _same_words("--batch-size", "--batch")
    assert not _same_words("--max-memory-gb", "--max-memory-gb")


def test_every_option_has_one_spelling_across_commands():
    shown, several = _shown()
    assert "--max-memory-gb" in shown and {"bench", "train vision", "evaluate",
                                           "sample"} <= shown["--max-memory-gb"]
    assert several == [], f"options shown under two long names: {several}"
    known_plural = {("--seed", "--seeds"), ("--batch", "--batches")}   # one seed / a list
    pairs = [(a, b) for a in shown for b in shown
             if a < b and _same_words(a, b) and (a, b) not in known_plural]
    assert pairs == [], f"two spellings of one option: {pairs}"


@pytest.mark.parametrize("argv, dest, value", [
    (["bench", "--max-mem-gb", "2"], "max_mem_gb", 2.0),
    (["bench", "--max-memory-gb", "2"], "max_mem_gb", 2.0),
    (["train", "vision", "--blas-threads", "3"], "threads", 3),
    (["experiment", "needle", "--blas-threads", "2"], "blas_threads", 2),
])
def test_old_spellings_still_parse_to_the_same_setting(argv, dest, value):
    assert getattr(build_parser().parse_args(argv), dest) == value


def test_old_spellings_are_hidden(capsys):
    for argv, old in ((["bench"], "--max-mem-gb"), (["train", "vision"], "--blas-threads")):
        with pytest.raises(SystemExit):
            build_parser().parse_args(argv + ["--help"])
        assert old not in capsys.readouterr().out
