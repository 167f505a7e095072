"""Generate text from a language-model checkpoint with the O(1)-per-token recurrent decoder.

    python -m tostnp sample --checkpoint runs/lm --prompt "The " --length 300 --temperature 0.8

Each layer carries its TSSA prefix statistics, so every new character costs the same time
however long the context is. Each call draws a fresh seed and prints it (on standard error), so
a text can be had again with ``--seed``: the same seed gives the same text. The text goes to
standard output; the sample's word rate (the share of its words of four or more letters that
occur in the training text, see tostnp/analysis/wordrate.py) goes to standard error.
"""
from __future__ import annotations

import secrets
import sys

from .options import (add_device_argument, add_memory_argument, device_namespace, bounded, SEED,
                      check_run_has_data)


def add_arguments(parser) -> None:
    parser.add_argument("--checkpoint", required=True,
                        help="run directory or checkpoint prefix of an LM run")
    parser.add_argument("--prompt", default="\n", help="text to continue [a newline]")
    parser.add_argument("--length", type=bounded(int, 0, 100_000), default=200,
                        help="tokens to generate [200]")
    parser.add_argument("--temperature", type=bounded(float, 0.0, 1e3), default=0.8,
                        help="softmax temperature; 0 (or below 1e-6) = greedy [0.8]")
    parser.add_argument("--top-k", type=bounded(int, 1, 1 << 20), default=None,
                        help="sample from the k most likely [all]")
    parser.add_argument("--seed", type=SEED, default=None,
                        help="sampling seed: the same seed gives the same text [a fresh one, "
                             "printed]")
    parser.add_argument("--text", default=None,
                        help="the training text file, for the word rate [as trained]")
    add_device_argument(parser)
    add_memory_argument(parser)


def run(args) -> int:
    xp = device_namespace(args.device)
    from ..data import tokenizer_from_dict
    from ..io import load_model
    from ..analysis.wordrate import sample_text
    from ..models.memory import check_model_fits
    kind, cfg, params, config = load_model(args.checkpoint, xp=xp)
    if kind != "lm":
        raise ValueError(f"sample needs a language-model checkpoint; this one is {kind!r}")
    check_run_has_data(kind, config, args.checkpoint)
    check_model_fits(kind, cfg, 1, training=False, what=f"sampling from {args.checkpoint}")
    tok = tokenizer_from_dict(config["tokenizer"])
    if not args.prompt:
        raise ValueError("--prompt must contain at least one character")
    tok.encode(args.prompt)                           # every character known?
    seed = secrets.randbelow(2 ** 32) if args.seed is None else args.seed
    import numpy as np
    with np.errstate(over="ignore", invalid="ignore"):   # overflowing weights: one line below
        text = sample_text(params, cfg, tok, args.prompt, args.length,
                           temperature=args.temperature, top_k=args.top_k, seed=seed)
    print(args.prompt + text)
    _word_rate(args, config, tok, text)
    if args.seed is None:
        print(f"seed {seed} (the same text again: --seed {seed})", file=sys.stderr)
    return 0


def _word_rate(args, config, tok, text) -> None:
    from ..analysis.wordrate import vocabulary, word_rate
    from .options import lm_training_text
    try:
        known = vocabulary(lm_training_text(config, tok, args.text))
    except (FileNotFoundError, ValueError, OSError, RuntimeError) as e:
        print(f"(no word rate: {e})", file=sys.stderr)
        return
    r = word_rate(text, known, prompt=args.prompt)
    print(f"word rate {r['rate']:.1%}: {r['known']} of the {r['words']} words of >= 4 letters "
          f"in the generated text occur in the training text", file=sys.stderr)
