"""Interpretability figures from a vision checkpoint: memberships and compression by depth.

    python -m tostnp figures --checkpoint runs/vision [--out runs/vision]

Writes memberships.png (the membership Pi of each head of the last block, on the patch grid,
over test images), compression.png and compression.json (R^var_c measured at each layer, trained
vs initial model; the exact definition is in tostnp/analysis/figures.py).
"""
from __future__ import annotations

import os
import sys

from .options import add_device_argument, add_memory_argument, device_namespace, bounded


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix of a vision run")
    parser.add_argument("--out", default=None,
                        help="output directory [the checkpoint's; while a training holds it, "
                             "a folder '<run>-figures' beside it]")
    parser.add_argument("--num-images", type=bounded(int, 1, 64), default=4,
                        help="images in the Pi figure [4]")
    parser.add_argument("--data-dir", default=None, help="where MNIST/CIFAR-10 live")
    add_device_argument(parser)
    add_memory_argument(parser)


def run(args) -> int:
    xp = device_namespace(args.device)
    from ..analysis.figures import vision_figures
    from ..io.atomic import clean_stale_temporaries
    from ..io.checkpoint import resolve_checkpoint
    from ..io.runlock import RunDirectoryInUse, held_by
    prefix = resolve_checkpoint(args.checkpoint)
    run_dir = os.path.dirname(os.path.abspath(prefix))
    out = run_dir if args.out is None else args.out
    holder = held_by(out) if os.path.isdir(out) else None
    if holder is not None:             # never write into a folder another process writes
        if args.out is not None:
            raise RunDirectoryInUse(f"{out} is in use by {holder}; choose another --out")
        out = run_dir.rstrip(os.sep) + "-figures"
        print(f"note: {run_dir} is being written by {holder}; the figures go to {out}",
              file=sys.stderr)
    return _write(args, xp, vision_figures, clean_stale_temporaries, prefix, out)


def _write(args, xp, vision_figures, clean_stale_temporaries, prefix, out) -> int:
    clean_stale_temporaries(out)           # e.g. 0-byte figure temporaries of a killed run
    paths = vision_figures(prefix, out, xp=xp, num_images=args.num_images,
                           data_dir=args.data_dir)
    for p in paths:
        print(p)
    return 0
