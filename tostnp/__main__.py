"""Command line: ``python -m tostnp <command> --help``.

Each command lives in its own module, which provides ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# command -> (module, one-line help)
COMMANDS = {
    "verify": ("tostnp.commands.verify", "check every identity of the derivation numerically (float64)"),
    "train": ("tostnp.commands.train", "train a ToST vision model or language model"),
    "evaluate": ("tostnp.commands.evaluate", "evaluate a saved checkpoint"),
    "sample": ("tostnp.commands.sample", "generate text from a language-model checkpoint"),
    "figures": ("tostnp.commands.figures", "interpretability figures from a vision checkpoint"),
    "convert": ("tostnp.commands.convert",
                "exchange weights with the published PyTorch ToST (.safetensors)"),
    "bench": ("tostnp.commands.bench", "benchmark TSSA against softmax and linear attention"),
    "exercises": ("tostnp.commands.exercises", "exercise notebooks: start, check, build, grade"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tostnp",
        description="tostnp: the Token Statistics Transformer from scratch, derived and verified.")
    sub = parser.add_subparsers(dest="command", metavar="command")
    sub.required = True
    for name, (modname, help_) in COMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).strip(),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return int(args._run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
