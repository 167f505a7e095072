"""Train a ToST model: ``train vision`` (digits by default) or ``train lm`` (subword tokens,
BPE, by default; ``--tokenizer char`` for one token per character).

Examples::

    python -m tostnp train vision                          # digits, a minute or two on a CPU
    python -m tostnp train vision --data mnist --data-dir ~/data/mnist --config tiny-mnist
    python -m tostnp train lm                              # default corpus: Python's docs
    python -m tostnp train vision --out runs/digits --resume   # continue a stopped run

Every run directory gets metrics.jsonl, curves.png, checkpoint.{npz,json} (the last) and
best.{npz,json} (the lowest validation loss; what ``evaluate`` reads by default); a vision run
also gets the interpretability figures (memberships.png, compression.png). ``--resume`` takes the
model and training settings from the checkpoint and continues bit-identically (at the same
``--threads``: a batch large enough runs in one shard per thread, :mod:`tostnp.train.shards`);
an option given with it that differs from the checkpoint is refused (those of where and how the
run goes on, such as ``--stop-at``, ``--checkpoint-every``, ``--device`` and ``--threads``, are
applied: ``--resume``'s help lists them). A directory that already holds a run needs
``--resume`` or ``--overwrite``, and one process at a time writes a run directory
(:mod:`tostnp.io.runlock`). Sizes are checked against the memory available before anything is
built (:mod:`tostnp.models.memory`; ``--max-memory-gb`` sets the limit).
"""
# The command in files of one idea: train_parse (the options and their defaults), train_resume
# (--resume), train_vision and train_lm (the two runs), train_common (what the runs share),
# train_seeds (--seeds); here: the job as a whole and the run directory.
from __future__ import annotations

import contextlib
import os
import re
import tempfile

from .. import backend
from ..train.seeds import parse_seeds
from ..io.runlock import run_lock
from .train_seeds import train_over_seeds
from .options import device_namespace
from .train_parse import add_arguments  # noqa: F401  (the command's options)
from .train_vision import run_vision
from .train_lm import run_lm

# The files of a run directory: what --overwrite replaces and what makes a directory "a run".
RUN_FILES = ("checkpoint.npz", "checkpoint.json", "best.npz", "best.json", "metrics.jsonl",
             "result.json", "curves.png", "memberships.png", "compression.png",
             "compression.json")
_RUNS = {"vision": run_vision, "lm": run_lm}


def run(args) -> int:
    xp = device_namespace(args.device)
    if args.resume and args.overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it: "
                         "give one of them")
    seeds = None
    if args.seeds is not None:
        try:
            seeds = parse_seeds(args.seeds)
        except ValueError as e:
            raise ValueError(f"--seeds: {e}") from None
    job = (lambda: train_over_seeds(args, xp, seeds, args.model, run_one)) if seeds else \
        (lambda: run_one(args, xp)[0])
    n = backend.cpu_cores() if args.threads is None else args.threads
    # freed activations stay in the process for the next step instead of being unmapped and
    # faulted in (zeroed by the kernel) again: measured in `python -m tostnp bench --train`
    backend.keep_freed_memory()
    with backend.threads(n):
        return job()


def run_one(args, xp):
    """One run of ``train vision`` or ``train lm`` -> (exit status, result dict or None), holding
    the run directory's lock throughout. With --overwrite the old run is moved aside, not
    deleted, until the new one has saved a checkpoint: a new run refused before that (a bad
    option, data that cannot load, Ctrl-C) puts the old run back as it was."""
    with run_lock(args.out, f"train {args.model}"):
        aside = _prepare_out(args)
        try:
            status = _RUNS[args.model](args, xp)
        except BaseException:
            if aside is not None:
                _settle(args.out, aside)
            raise
        if aside is not None:
            _settle(args.out, aside)
        return status


_ASIDE = re.compile(r"^\.tostnp-replaced-(\d+)-[a-z0-9_]{8}$")


def _prepare_out(args):
    """Under the run directory's lock: a directory that holds a run needs --resume (checked
    when the checkpoint is read) or --overwrite (its run files are moved into a folder of this
    process's, returned). An earlier --overwrite killed before its new run saved anything is
    put back first."""
    _recover_killed_overwrites(args.out)
    if args.resume:
        return None
    found = [f for f in RUN_FILES if os.path.lexists(os.path.join(args.out, f))]
    if not found:
        return None
    if not args.overwrite:
        raise ValueError(f"{args.out} already holds a run ({', '.join(found)}); continue it "
                         f"with --resume, or replace it with --overwrite")
    aside = tempfile.mkdtemp(dir=args.out, prefix=f".tostnp-replaced-{os.getpid()}-")
    for f in found:                   # renames within one directory: atomic, nothing copied
        os.replace(os.path.join(args.out, f), os.path.join(aside, f))
    return aside


def _settle(out, aside) -> None:
    """The new run saved a checkpoint: the old one goes. Otherwise the old one comes back."""
    if os.path.exists(os.path.join(out, "checkpoint.npz")):
        for f in os.listdir(aside):
            if f in RUN_FILES:
                os.unlink(os.path.join(aside, f))
    else:
        for f in os.listdir(aside):
            if f in RUN_FILES:
                os.replace(os.path.join(aside, f), os.path.join(out, f))
    with contextlib.suppress(OSError):
        os.rmdir(aside)


def _recover_killed_overwrites(out) -> None:
    """Folders of --overwrite runs whose process is gone (killed, so :func:`_settle` never
    ran): settled now, by the same rule."""
    from ..io.atomic import writer_gone
    try:
        entries = os.listdir(out)
    except OSError:
        return
    for entry in entries:
        m = _ASIDE.match(entry)
        folder = os.path.join(out, entry)
        if m and writer_gone(int(m.group(1))) and os.path.isdir(folder) \
                and not os.path.islink(folder):
            _settle(out, folder)
