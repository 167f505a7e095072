"""Helpers shared by the CLI commands: device selection with a clear error, validated option types."""
from __future__ import annotations

import argparse
import math
import os
import shlex
import shutil
import sys

from .. import backend


LAUNCHER_ENV = "TOSTNP_LAUNCHER"   # set by run.py to the way it was started ("python3 run.py")


def how_to_run(*args: str) -> str:
    """The command line that runs tostnp ``args`` the way this process was started.

    ``python3 run.py ...`` under the quick-start launcher (it sets ``TOSTNP_LAUNCHER``);
    ``tostnp ...`` from the console script of an installed wheel; otherwise this Python
    ``-m tostnp`` -- by its name when the shell finds this very interpreter under that name
    (``python3``), else by its path (``.venv/bin/python``), so that the line works as printed.
    Every command the CLI prints as advice is built here.
    """
    prefix = os.environ.get(LAUNCHER_ENV, "").strip()
    if not prefix:
        argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        if os.path.splitext(argv0)[0] in ("tostnp", "tostnp-script"):
            prefix = "tostnp"
        else:
            prefix = f"{_python_name()} -m tostnp"
    return " ".join([prefix, *(shlex.quote(str(a)) for a in args if str(a))])


def _python_name() -> str:
    exe = sys.executable or "python3"
    real = os.path.realpath(exe)
    for name in ("python3", "python", os.path.basename(exe)):
        found = shutil.which(name)
        if found and os.path.realpath(found) == real and os.path.abspath(found) == os.path.abspath(exe):
            return name
    try:
        rel = os.path.relpath(exe)
    except ValueError:                      # another drive (Windows)
        return shlex.quote(exe)
    return shlex.quote(rel if not rel.startswith("..") else exe)


def add_device_argument(parser) -> None:
    parser.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                        help="cpu (NumPy) or gpu (CuPy; needs a CUDA GPU) [cpu]")


def get_xp_or_exit(device: str):
    """The namespace for ``device``, or None after printing the reason (caller returns 2)."""
    try:
        return backend.get_xp(device)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return None


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
def int_at_least(lo: int):
    """An argparse type: an integer >= lo (so 0 or -1 is refused where it makes no sense)."""
    def parse(text):
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}")
        return v
    parse.__name__ = f"int >= {lo}"
    return parse


def finite_float(lo: float | None = None, *, strict: bool = False):
    """An argparse type: a finite float (NaN and inf refused), optionally > lo or >= lo."""
    rel = ">" if strict else ">="
    want = "a finite number" + ("" if lo is None else f" {rel} {lo:g}")

    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}") from None
        if not math.isfinite(v) or (lo is not None and (v <= lo if strict else v < lo)):
            raise argparse.ArgumentTypeError(f"must be {want}, got {text!r}")
        return v
    parse.__name__ = want
    return parse


POSITIVE_INT = int_at_least(1)
NONNEG_INT = int_at_least(0)
POSITIVE_FLOAT = finite_float(0.0, strict=True)
NONNEG_FLOAT = finite_float(0.0)


def check_run_has_data(kind: str, config: dict, path: str) -> None:
    """ValueError when a run holds weights but no dataset/tokenizer: what ``tostnp convert``
    writes for a file trained elsewhere, unless ``--like RUN`` supplied them."""
    key = "data" if kind == "vision" else "tokenizer"
    if config.get(key, "") is None:
        what = "dataset" if kind == "vision" else "tokenizer"
        raise ValueError(f"{path} holds imported weights without a {what}; import again with "
                         f"'{how_to_run('convert', 'FILE', 'DIR', '--like', 'RUN')}' to take the {what} "
                         f"from a tostnp run (the Python API load_model works as is)")
