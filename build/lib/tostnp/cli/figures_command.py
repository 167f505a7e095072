"""Interpretability figures from a vision checkpoint: memberships and compression by depth.

    python -m tostnp figures --checkpoint runs/vision [--out runs/vision]

Writes memberships.png (the membership Pi of each head of the last block, on the patch grid,
over test images), compression.png and compression.json (R^var_c measured at each layer, trained
vs initial model; the exact definition is in tostnp/analysis/figures.py).
"""
from __future__ import annotations

import os
import sys

from .options import add_device_argument, get_xp_or_exit, POSITIVE_INT


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix of a vision run")
    parser.add_argument("--out", default=None, help="output directory [the checkpoint's]")
    parser.add_argument("--num-images", type=POSITIVE_INT, default=4, help="images in the Pi figure [4]")
    parser.add_argument("--data-dir", default=None, help="where MNIST/CIFAR-10 live")
    add_device_argument(parser)


def run(args) -> int:
    xp = get_xp_or_exit(args.device)
    if xp is None:
        return 2
    from ..analysis.figures import vision_figures
    from ..io.checkpoint import resolve_checkpoint
    try:
        prefix = resolve_checkpoint(args.checkpoint)
        out = os.path.dirname(os.path.abspath(prefix)) if args.out is None else args.out
        paths = vision_figures(prefix, out, xp=xp, num_images=args.num_images,
                               data_dir=args.data_dir)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
