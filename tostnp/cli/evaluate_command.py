"""Evaluate a saved checkpoint: test accuracy (vision) or validation loss and bits/char (LM).

    python -m tostnp evaluate --checkpoint runs/vision                # its best checkpoint
    python -m tostnp evaluate --checkpoint runs/vision --which last   # its last
    python -m tostnp evaluate --checkpoint runs/lm --batches 50

A run directory is read at its best checkpoint (best.npz: the evaluation with the lowest
validation loss) unless ``--which last``. The data are those the checkpoint was trained on
(recorded in it); ``--data-dir`` / ``--text`` override their location. The figures are those
``train`` prints for the same checkpoint: the same validation split and test set (vision), the
same validation windows (LM: the run's ``--eval-batches`` unless ``--batches`` says otherwise).
"""
from __future__ import annotations

import json
import math
import os

from .options import (add_device_argument, add_memory_argument, device_namespace, bounded,
                      check_run_has_data, add_which_argument, run_checkpoint)


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix (…/checkpoint)")
    add_which_argument(parser)
    add_device_argument(parser)
    parser.add_argument("--data-dir", default=None, help="vision: where MNIST/CIFAR-10 live")
    parser.add_argument("--text", default=None, help="LM: the text file [as trained]")
    parser.add_argument("--batches", type=bounded(int, 1, 10_000), default=None,
                        help="LM: validation batches to average [as in training: the run's "
                             "--eval-batches]")
    parser.add_argument("--word-rate-samples", type=bounded(int, 0, 100), default=3,
                        help="LM: samples (prompt 'The ', 1000 characters, seeds 0..N-1) for the "
                             "word rate; 0 = none [3]")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_memory_argument(parser)


def run(args) -> int:
    xp = device_namespace(args.device)
    from .. import backend
    from ..io import read_model_checkpoint, resolve_checkpoint
    from ..data import load_vision_data, load_lm_text, tokenizer_from_dict
    from ..train.tasks import VisionTask, LMTask
    from ..models.configs import dataclass_from_dict
    from ..models.memory import check_model_fits
    from ..train.defaults import TrainConfig, LMData
    path = resolve_checkpoint(run_checkpoint(args.checkpoint, args.which))      # a prefix
    kind, cfg, host, config, _, state = read_model_checkpoint(path)
    params = {k: backend.from_host(xp, v, dtype=xp.float32) for k, v in host.items()}
    check_run_has_data(kind, config, args.checkpoint)
    train = config.get("train", {})
    tcfg = dataclass_from_dict(TrainConfig, {k: v for k, v in train.items() if k in
                                             ("batch_size", "seed")} if isinstance(train, dict)
                               else train, f"{args.checkpoint}: field 'train'")
    bs = tcfg.batch_size if kind == "lm" else 500        # VisionTask evaluates 500 at a time
    check_model_fits(kind, cfg, bs, training=False, what=f"evaluating {args.checkpoint}")
    if kind == "vision":
        data = load_vision_data(config.get("data", "digits"),
                                config.get("data_dir") if args.data_dir is None else args.data_dir)
        val, val_fraction = None, config.get("val_fraction", 0.0)
        if val_fraction:  # the run's validation set, held out of its training images
            from ..data import split_validation
            val = split_validation(data[0], data[1], val_fraction,
                                   seed=tcfg.seed)[2:]
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
        trained = config.get("eval_batches", LMData.eval_batches)
        if isinstance(trained, bool) or not isinstance(trained, int) or trained < 1:
            raise ValueError(f"{path}: 'eval_batches' must be an int >= 1, got {trained!r}")
        batches = trained if args.batches is None else args.batches
        task = LMTask(cfg, train_ids, val_ids, tok, batch_size=bs, eval_batches=batches,
                      xp=xp, seed=tcfg.seed)
        res = task.evaluate(params)
        res["unigram_bpc"] = task.unigram["bits"]
        same = ("the windows training evaluated" if batches == trained else
                f"training evaluated the first {trained}, so its figure differs; "
                f"--batches {trained} gives it")
        text = (f"validation loss {res['val_loss']:.4f} nats/token = {res['val_bpc']:.3f} bits/char "
                f"over {batches} batches of {bs} x {cfg.block_size} ({same}; "
                f"unigram baseline {res['unigram_bpc']:.3f} bits/char)")
        n_wr = args.word_rate_samples
        if n_wr > 0:
            from ..analysis.wordrate import lm_word_rate
            wr = lm_word_rate(params, cfg, tok, tok.decode(train_ids), seeds=range(n_wr))
            res["word_rate"] = wr["rate"]
            text += (f"; word rate {wr['rate']:.1%} ({wr['known']} of the {wr['words']} words "
                     f"of >= 4 letters in {n_wr} samples, prompt {wr['prompt']!r}, 1000 "
                     f"characters, seeds 0-{n_wr - 1}, occur in the training text)")
    step = state.get("step")
    if isinstance(step, int) and not isinstance(step, bool):
        res["step"] = step
        fallback = args.which is None and os.path.isdir(args.checkpoint) \
            and os.path.basename(path) == "checkpoint"
        text = (f"{path}.npz, step {step}"
                + (" (the run kept no best.npz: its last)" if fallback else "") + f": {text}")
    print(json.dumps(res) if args.json else text)
    return 0 if all(math.isfinite(v) for v in res.values()) else 1
