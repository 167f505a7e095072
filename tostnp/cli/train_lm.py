"""``train lm``: one run of the causal language model (a new run or ``--resume``)."""
from __future__ import annotations

import os

from ..models import configs as C
from ..models.configs import DEFAULT_PRESET
from ..train.defaults import TrainConfig, LMData, default_train_config, default_data_config
from .train_common import (given, options_of, check_fits, say, train_and_report, say_best,
                           finish)
from .train_resume import load_resume_config, checkpoint_field
from .train_parse import MAX_EVAL_BATCHES

__all__ = ["run_lm"]


def run_lm(args, xp):
    from ..data import tokenizer_from_dict
    from ..data import load_lm_text
    from ..train.tasks import LMTask
    from ..models.lm import describe
    from ..analysis.wordrate import lm_word_rate
    if args.resume:
        config, tcfg, cfg = load_resume_config(args, "lm")
        text_path = config.get("text_path")
        if text_path is not None and not isinstance(text_path, str):
            raise ValueError(f"checkpoint in {args.out}: 'text_path' must be a string or null")
        tok = tokenizer_from_dict(checkpoint_field(config, "tokenizer", dict, args.out))
        eval_batches = config.get("eval_batches", LMData.eval_batches)
        if isinstance(eval_batches, bool) or not isinstance(eval_batches, int) \
                or not 1 <= eval_batches <= MAX_EVAL_BATCHES:
            raise ValueError(f"checkpoint in {args.out}: 'eval_batches' must be an int in "
                             f"[1, {MAX_EVAL_BATCHES:,}] (as --eval-batches), got "
                             f"{str(eval_batches)[:40]}")
    else:
        text_path, tok = (os.path.abspath(args.text) if args.text else None), None
    dc = default_data_config("lm", args.config, **options_of(args, LMData))
    try:
        train_ids, val_ids, tok = load_lm_text(text_path, tokenizer=tok, kind=dc.tokenizer,
                                               vocab_size=dc.vocab_size)
    except RuntimeError as e:              # the default corpus missing from this Python
        raise ValueError(str(e)) from None
    if not args.resume:
        cfg = C.get_lm_config(given(args.config, DEFAULT_PRESET["lm"]),
                              **options_of(args, C.LMConfig, vocab_size=tok.vocab_size,
                                           ln_bias=args.bias))      # --bias: the shifts too
        tcfg = default_train_config("lm", args.config, **options_of(args, TrainConfig))
        eval_batches = dc.eval_batches
    check_fits("lm", cfg, tcfg, args)
    name = "Python docs (default corpus)" if text_path is None else os.path.basename(text_path)
    task = LMTask(cfg, train_ids, val_ids, tok, batch_size=tcfg.batch_size, seed=tcfg.seed,
                  eval_batches=eval_batches, xp=xp, text_name=name,
                  extra_meta={"text_path": text_path})
    n_tr, n_va = (int(tok.token_lengths[i].sum()) for i in (train_ids, val_ids))
    per = "" if n_tr == len(train_ids) else \
        f" = {len(train_ids):,} / {len(val_ids):,} tokens ({n_tr / len(train_ids):.2f} per token)"
    text = (f"text: {name}, {n_tr:,} train / {n_va:,} val characters{per}; tokenizer "
            f"{tok.to_dict()['type']}, {tok.vocab_size} symbols; unigram baseline "
            f"{task.unigram['bits']:.3f} bits/char; {tcfg.steps} steps of "
            f"{tcfg.batch_size} x {cfg.block_size} tokens")
    e, params, cpu, wall, best = train_and_report(args, task, tcfg, lambda p: describe(cfg, p),
                                                  text)
    if e is None:
        return 0, None
    result = {"val_loss": e["val_loss"], "val_bpc": e["val_bpc"], "steps": tcfg.steps,
              "train_cpu_s": round(cpu, 2), "train_wall_s": round(wall, 2)}
    say(args, f"validation loss {e['val_loss']:.4f} nats/token = {e['val_bpc']:.3f} bits/char "
               f"(unigram baseline {task.unigram['bits']:.3f} bits/char); "
               f"training {cpu:.1f} s CPU time, {wall:.1f} s wall time")
    if best is not None:
        result["best"] = {k: best[k] for k in ("step", "val_loss", "val_bpc")}
        say_best(args, best, tcfg.steps, f"validation loss {best['val_loss']:.4f} nats/token = "
                                         f"{best['val_bpc']:.3f} bits/char")
    n_wr = dc.word_rate_samples
    if n_wr > 0:
        wr = lm_word_rate(params, cfg, tok, tok.decode(train_ids), seeds=range(n_wr))
        result.update(word_rate=wr["rate"], word_rate_counts=[wr["known"], wr["words"]])
        say(args, f"word rate {wr['rate']:.1%}: {wr['known']} of the {wr['words']} words of "
                   f">= 4 letters in {n_wr} samples (prompt {wr['prompt']!r}, 1000 characters, "
                   f"seeds 0-{n_wr - 1}) occur in the training text")
    finish(args, "lm", tcfg.seed, result)
    from .options import how_to_run
    say(args, f"run directory: {args.out}; sample with: "
               + how_to_run("sample", "--checkpoint", args.out, "--prompt", "The "))
    return 0, result
