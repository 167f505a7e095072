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

from .options import add_device_argument, get_xp_or_exit, POSITIVE_INT, check_run_has_data


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix (…/checkpoint)")
    add_device_argument(parser)
    parser.add_argument("--data-dir", default=None, help="vision: where MNIST/CIFAR-10 live")
    parser.add_argument("--text", default=None, help="LM: the text file (default: as trained)")
    parser.add_argument("--batches", type=POSITIVE_INT, default=20,
                        help="LM: validation batches to average [20]")
    parser.add_argument("--word-rate-samples", type=int, default=3,
                        help="LM: samples (prompt 'The ', 1000 characters, seeds 0..N-1) for the "
                             "word rate; 0 = none [3]")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    xp = get_xp_or_exit(args.device)
    if xp is None:
        return 2
    from ..models import load_model
    from ..data import load_vision_data, load_lm_text, tokenizer_from_dict
    from ..train.tasks import VisionTask, LMTask
    if args.word_rate_samples < 0:
        print(f"error: --word-rate-samples must be >= 0, got {args.word_rate_samples}",
              file=sys.stderr)
        return 2
    try:
        kind, cfg, params, config = load_model(args.checkpoint, xp=xp)
        check_run_has_data(kind, config, args.checkpoint)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if kind == "vision":
        data = load_vision_data(config.get("data", "digits"),
                                config.get("data_dir") if args.data_dir is None else args.data_dir)
        val, val_fraction = None, config.get("val_fraction", 0.0)
        if val_fraction:  # the run's validation set, held out of its training images
            from ..data import split_validation
            val = split_validation(data[0], data[1], val_fraction,
                                   seed=int(config["train"]["seed"]))[2:]
        task = VisionTask(cfg, data, batch_size=1, xp=xp, data_name=config.get("data", "digits"),
                          val=val)
        res = task.evaluate_test(params)
        res["num_test"] = int(len(data[2]))
        text = (f"test accuracy {res['test_acc']:.4f} ({res['num_test']} images), "
                f"test loss {res['test_loss']:.4f}")
        if val is not None:
            res.update(task.evaluate(params), num_val=int(len(val[1])))
            text = (f"validation accuracy {res['val_acc']:.4f} ({res['num_val']} images); "
                    + text)
    else:
        tok = tokenizer_from_dict(config["tokenizer"])
        train_ids, val_ids, tok = load_lm_text(config.get("text_path") if args.text is None
                                               else args.text,
                                               tokenizer=tok)
        bs = int(config["train"]["batch_size"])
        task = LMTask(cfg, train_ids, val_ids, tok, batch_size=bs, eval_batches=args.batches,
                      xp=xp, seed=int(config["train"].get("seed", 0)))
        res = task.evaluate(params)
        res["unigram_bpc"] = task.unigram["bits"]
        text = (f"validation loss {res['val_loss']:.4f} nats/token = {res['val_bpc']:.3f} bits/char "
                f"over {args.batches} batches of {bs} x {cfg.block_size} "
                f"(unigram baseline {res['unigram_bpc']:.3f} bits/char)")
        n_wr = args.word_rate_samples
        if n_wr > 0:
            from ..analysis.wordrate import lm_word_rate
            wr = lm_word_rate(params, cfg, tok, tok.decode(train_ids), seeds=range(n_wr))
            res["word_rate"] = wr["rate"]
            text += (f"; word rate {wr['rate']:.1%} ({wr['known']} of the {wr['words']} words "
                     f"of >= 4 letters in {n_wr} samples, prompt {wr['prompt']!r}, 1000 "
                     f"characters, seeds 0-{n_wr - 1}, occur in the training text)")
    print(json.dumps(res) if args.json else text)
    return 0 if all(math.isfinite(v) for v in res.values()) else 1
