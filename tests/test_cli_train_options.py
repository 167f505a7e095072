"""The options of ``train`` and ``--resume``: every option is a field of exactly one option
dataclass (so a new option cannot be left out of the resume rules), and each rule does what it
says (compared options refuse another value, refused options refuse any, applied ones pass)."""
import argparse

import pytest

from tostnp.__main__ import build_parser
from tostnp.cli.train_parse import OPTION_CLASSES
from tostnp.cli.train_resume import check_resume_options
from tostnp.models.configs import get_vision_config, get_lm_config, option_fields
from tostnp.train.defaults import TrainConfig


def _subparser(parser, *names):
    for name in names:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return parser


def _dests(kind) -> set:
    p = _subparser(build_parser(), "train", kind)
    return {a.dest for a in p._actions if a.dest != "help"}


@pytest.mark.parametrize("kind", ["vision", "lm"])
def test_every_option_is_in_exactly_one_class(kind):
    seen = {}
    for cls in OPTION_CLASSES[kind]:
        for dest in option_fields(cls):
            assert dest not in seen, f"--{dest} is a field of {seen[dest]} and {cls.__name__}"
            seen[dest] = cls.__name__
    dests = _dests(kind)
    assert dests - set(seen) == set(), "options in no class (ignored on --resume)"
    assert set(seen) - dests == set(), "fields marked as options that train has not"
    assert {"steps", "width", "heads", "seed", "resume", "threads", "config"} <= dests


class _Other:
    """A given value equal to nothing a checkpoint holds."""

    def __eq__(self, other):
        return False

    __hash__ = None


def _checkpoint(kind):
    cfg = get_vision_config() if kind == "vision" else get_lm_config()
    config = {"task": kind, "data": "digits", "augment_shift": 1, "val_fraction": 0.1,
              "data_dir": None, "tokenizer": {"type": "bpe"}, "text_path": None,
              "eval_batches": 8}
    return config, cfg, TrainConfig()


def _args(kind, **given):
    return argparse.Namespace(**{**{d: None for d in _dests(kind)}, **given})


@pytest.mark.parametrize("kind", ["vision", "lm"])
def test_resume_rules_follow_the_fields(kind):
    config, cfg, tcfg = _checkpoint(kind)
    check_resume_options(_args(kind), kind, config, cfg, tcfg)     # nothing given: fine
    rules = {dest: (rule, path) for cls in OPTION_CLASSES[kind]
             for dest, (_, rule, path) in option_fields(cls).items()}
    assert {r for r, _ in rules.values()} == {"compare", "apply", "refuse"}
    for dest, (rule, path) in rules.items():
        value = "/no/such/run/text.txt" if path else _Other()
        args = _args(kind, **{dest: value})
        if rule == "apply":
            check_resume_options(args, kind, config, cfg, tcfg)
            continue
        with pytest.raises(ValueError) as e:
            check_resume_options(args, kind, config, cfg, tcfg)
        flag = "--" + dest.replace("_", "-")
        assert str(e.value).startswith(flag + " ")
        assert ("differs from the checkpoint's" if rule == "compare"
                else "cannot be given with --resume") in str(e.value)


def test_same_values_as_the_checkpoint_pass():
    config, cfg, tcfg = _checkpoint("vision")
    check_resume_options(_args("vision", width=cfg.width, heads=cfg.num_heads, lr=tcfg.lr,
                               data="digits", augment_shift=1, val_fraction=0.1),
                         "vision", config, cfg, tcfg)
    config, cfg, tcfg = _checkpoint("lm")
    check_resume_options(_args("lm", vocab_size=cfg.vocab_size, tokenizer="bpe",
                               eval_batches=8, bias=cfg.bias), "lm", config, cfg, tcfg)


def test_tiny_char_is_the_old_name_of_tiny_lm():
    from tostnp.io.interchange import check_arch
    from tostnp.models.configs import LMConfig, DEFAULT_PRESET
    assert DEFAULT_PRESET["lm"] == "tiny-lm"
    new, old = get_lm_config("tiny-lm", vocab_size=50), get_lm_config("tiny-char", vocab_size=50)
    assert new == old and new.ln_shift and not new.bias and new.width == LMConfig().width
    args = build_parser().parse_args(["train", "lm", "--config", "tiny-char"])
    assert args.config == "tiny-char"
    for name in ("tiny-lm", "tiny-char"):            # the vocabulary comes from the text
        check_arch("lm", get_lm_config(name, vocab_size=7), name)
