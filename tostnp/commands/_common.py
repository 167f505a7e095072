"""Helpers shared by the CLI commands: device selection with a clear error."""
from __future__ import annotations

import sys

from .. import backend


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
    train_ids, _, _ = load_lm_text(text_path or config.get("text_path"), tokenizer=tokenizer)
    return tokenizer.decode(train_ids)
