"""Evaluate a saved checkpoint: test accuracy (vision) or validation loss and bits/char (LM).

    python -m tostnp evaluate --checkpoint runs/vision
    python -m tostnp evaluate --checkpoint runs/lm --batches 50

The data are those the checkpoint was trained on (recorded in it); ``--data-dir`` / ``--text``
override their location.
"""
from __future__ import annotations

import json
import math
import sys

from ._common import add_device_argument, get_xp_or_exit


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix (…/checkpoint)")
    add_device_argument(parser)
    parser.add_argument("--data-dir", default=None, help="vision: where MNIST/CIFAR-10 live")
    parser.add_argument("--text", default=None, help="LM: the text file (default: as trained)")
    parser.add_argument("--batches", type=int, default=20,
                        help="LM: validation batches to average [20]")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    xp = get_xp_or_exit(args.device)
    if xp is None:
        return 2
    from ..models import load_model
    from ..data import CharTokenizer, load_vision_data, load_lm_text
    from ..tasks import VisionTask, LMTask
    try:
        kind, cfg, params, config = load_model(args.checkpoint, xp=xp)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if kind == "vision":
        data = load_vision_data(config.get("data", "digits"),
                                args.data_dir or config.get("data_dir"))
        task = VisionTask(cfg, data, batch_size=1, xp=xp, data_name=config.get("data", "digits"))
        res = task.evaluate(params)
        res["num_test"] = int(len(data[2]))
        text = (f"test accuracy {res['test_acc']:.4f} ({res['num_test']} images), "
                f"test loss {res['test_loss']:.4f}")
    else:
        tok = CharTokenizer.from_dict(config["tokenizer"])
        train_ids, val_ids, tok = load_lm_text(args.text or config.get("text_path"),
                                               tokenizer=tok)
        bs = int(config["train"]["batch_size"])
        task = LMTask(cfg, train_ids, val_ids, tok, batch_size=bs, eval_batches=args.batches,
                      xp=xp, seed=int(config["train"].get("seed", 0)))
        res = task.evaluate(params)
        res["unigram_bpc"] = task.unigram["bits"]
        text = (f"validation loss {res['val_loss']:.4f} nats = {res['val_bpc']:.3f} bits/char "
                f"over {args.batches} batches of {bs} x {cfg.block_size} "
                f"(unigram baseline {res['unigram_bpc']:.3f} bits/char)")
    print(json.dumps(res) if args.json else text)
    return 0 if all(math.isfinite(v) for v in res.values()) else 1
