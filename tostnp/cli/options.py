"""Helpers shared by the CLI commands: device selection with a clear error, validated option types."""
from __future__ import annotations

import argparse
import math
import os

from .. import backend
from ..backend.runtime import LAUNCHER_ENV, how_to_run  # noqa: F401  (the CLI's hints)


def add_device_argument(parser) -> None:
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                        help="cpu (NumPy) or gpu (CuPy; needs a CUDA GPU) [cpu]")


def device_namespace(device: str):
    """The array namespace for ``--device``; ValueError (``error: ...``, exit 2) without a GPU."""
    try:
        return backend.get_xp(device)
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def lm_training_text(config: dict, tokenizer, text_path: str | None = None) -> str:
    """The training part of the text an LM checkpoint was trained on (for the word rate).

    ``text_path`` overrides the recorded path (None: as recorded; the default corpus if none).
    """
    from ..data import load_lm_text
    train_ids, _, _ = load_lm_text(config.get("text_path") if text_path is None else text_path, tokenizer=tokenizer)
    return tokenizer.decode(train_ids)


# ---------------------------------------------------------------------------------------------
# option types: argparse reports a failure as "error: argument --x: <message>" (exit 2)
# ---------------------------------------------------------------------------------------------
def bounded(kind, lo, hi, *, open_lo: bool = False, open_hi: bool = False):
    """The argparse type of every numeric option: an int (``kind=int``) or a finite float
    (``kind=float``; NaN and inf refused) in [lo, hi] -- ``open_lo``/``open_hi`` exclude the
    ends. The upper bound keeps any value from allocating or running without limit."""
    what = "an integer" if kind is int else "a finite number"
    rng = f"{'(' if open_lo else '['}{lo:,}, {hi:,}{')' if open_hi else ']'}" if kind is int \
        else f"{'(' if open_lo else '['}{lo:g}, {hi:g}{')' if open_hi else ']'}"
    want = f"{what} in {rng}"

    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        ok = (kind is int or math.isfinite(v)) and (v > lo if open_lo else v >= lo) \
            and (v < hi if open_hi else v <= hi)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
        return v
    parse.__name__ = want
    return parse


# Bounds shared by several commands (each far above what this package's presets use).
SEED = bounded(int, 0, 2 ** 32 - 1)
THREADS = bounded(int, 1, 1024)


def add_old_spelling(parser, old: str, action) -> None:
    """``old``: a former spelling of the option ``action`` (what ``add_argument`` returned),
    still accepted and hidden from ``--help``, so every option has one spelling in the help of
    every command (checked in tests/test_option_spelling.py)."""
    parser.add_argument(old, dest=action.dest, type=action.type, nargs=action.nargs,
                        metavar=action.metavar, default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def add_memory_argument(parser) -> None:
    """``--max-memory-gb``: the memory budget sizes are checked against (see
    :mod:`tostnp.io.limits`); ``main`` applies it around the command."""
    parser.add_argument("--max-memory-gb", type=bounded(float, 0.0, 1e6, open_lo=True),
                        default=None,
                        help="memory (GB) tostnp may plan to use; sizes that need more are "
                             "refused before anything is allocated [what the system reports "
                             "available]")


def add_which_argument(parser) -> None:
    """``--which best|last``: which checkpoint of a run directory (see :func:`run_checkpoint`)."""
    parser.add_argument("--which", choices=["best", "last"], default=None,
                        help="with a run directory: best.npz (the evaluation with the lowest "
                             "validation loss) or checkpoint.npz (the last) [best; the last "
                             "when the run kept none]")


def run_checkpoint(path: str, which: str | None) -> str:
    """The checkpoint ``--checkpoint PATH --which WHICH`` names: in a run directory its best
    checkpoint (``which`` None or "best"; None falls back to the last when the run kept no best:
    no validation set, or stopped before its first evaluation) or its last ("last"); any other
    path as given."""
    if not os.path.isdir(path):
        if which is not None:
            raise ValueError(f"--which picks a checkpoint of a run directory; {path!r} is not "
                             f"one (give the directory, or leave --which out)")
        return path
    best, last = os.path.join(path, "best"), os.path.join(path, "checkpoint")
    if which == "last":
        return last
    if os.path.isfile(best + ".npz"):
        return best
    if which == "best":
        raise FileNotFoundError(f"no best checkpoint in {path} (kept when the run evaluates on "
                                f"a validation set); --which last reads the last")
    return last


def check_run_has_data(kind: str, config: dict, path: str) -> None:
    """ValueError when a run holds weights but no dataset/tokenizer: what ``tostnp convert``
    writes for a file trained elsewhere, unless ``--like RUN`` supplied them."""
    key = "data" if kind == "vision" else "tokenizer"
    if config.get(key, "") is None:
        what = "dataset" if kind == "vision" else "tokenizer"
        raise ValueError(f"{path} holds imported weights without a {what}; import again with "
                         f"'{how_to_run('convert', 'FILE', 'DIR', '--like', 'RUN')}' to take the {what} "
                         f"from a tostnp run (the Python API load_model works as is)")


def load_1min() -> float | None:
    """The 1-minute load average recorded with a run; None where there is none (Windows)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None
