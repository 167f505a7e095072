"""The training loop, free of model details (minGPT style): AdamW, warm-up + cosine, clipping.

A *task* (see :mod:`tostnp.train.tasks`) knows the model and the data; this loop knows only

    batch = task.next_batch()                       # host data, drawn from task's own RNG
    loss, grads, extra = task.loss_and_grads(params, batch)
    update_step(opt, grads, loss, step, tcfg)    # clip 1.0, lr_schedule(step, ...), AdamW

(:func:`update_step`, the one home of an update: ``bench --train`` and the benchmarks call it),
plus periodic evaluation (``task.evaluate(params)``), metrics as JSON lines in
``<out>/metrics.jsonl``, a loss/accuracy plot ``<out>/curves.png`` and checkpoints
``<out>/checkpoint.npz`` + ``<out>/checkpoint.json`` (see :mod:`tostnp.io.checkpoint`), the last
one, and ``<out>/best.npz`` + ``best.json``: the parameters at the evaluation with the lowest
validation loss so far (written the same way; kept only when the task evaluates on a validation
set, ``val_loss``: never chosen on the test set). The best holds the parameters and the configs,
not the optimizer state: ``--resume`` always continues from the last.

Progress: a tqdm bar on a terminal; when the output is not a terminal (a pipe, a log file), a
line every ``progress_seconds`` (15 s by default) with the step, the loss, the time elapsed and
an estimate of the time left.

Determinism: every random draw (initialisation, data order, augmentation) comes from seeded
:class:`tostnp.backend.RNG` objects; the checkpoint stores the parameters, the AdamW moments and
step, and the task's data state (RNG state, epoch permutation and position). ``resume=True``
therefore continues bit-identically: the losses after resuming equal those of an uninterrupted
run (checked in tests/test_train.py). Metrics lines written after the checkpoint by an
interrupted run are dropped on resume, and an evaluation a signal cut short (the checkpoint
of its update is saved without it) is made when the run resumes.

Nothing lost, nothing silent:

* checkpoints are written every ``checkpoint_every`` updates (by default every 5% of the run)
  and at the end, each one atomically (see :mod:`tostnp.io.checkpoint`);
* SIGINT (Ctrl-C) or SIGTERM: the current update is finished, a checkpoint is saved and
  :class:`TrainingInterrupted` is raised (the CLI prints how to resume and exits 130 / 143);
* a NaN/Inf loss or gradient stops the run *before* the update (:class:`TrainingDiverged`,
  naming the step and the likely causes); the last checkpoint, written from finite weights,
  is left untouched;
* a failed write (disk full, read-only directory) raises :class:`TrainingIOError` in one line;
  the previous checkpoint stays intact;
* ``metrics.jsonl`` gets whole lines (one ``write`` per record, ``O_APPEND``), and
  :func:`read_metrics` drops a torn last line with a warning.
"""
from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict

from .. import backend
from ..io import checkpoint as ckpt
from ..io.atomic import atomic_write_text, clean_stale_temporaries
from ..io.runlock import run_lock
from .shard_workers import close_workers
from .optim import AdamW, lr_schedule, clip_grad_norm, default_no_decay
from .defaults import TrainConfig   # its home: the training defaults; imported from here too
from .defaults import PROGRESS_SECONDS
from .records import read_metrics, MetricsFile, ProgressLines   # noqa: F401  (read_metrics: its API)
from .signals import SignalFlag
from ..nn.params import sub, prefixed

__all__ = ["TrainConfig", "train", "make_optimizer", "update_step", "read_metrics",
           "TrainingInterrupted", "TrainingDiverged", "TrainingIOError"]


class TrainingInterrupted(Exception):
    """SIGINT/SIGTERM during :func:`train`: the step finished and a checkpoint was saved.

    Attributes: step, signum, exit_code (130 for SIGINT, 143 for SIGTERM), out_dir.
    """

    def __init__(self, step: int, signum: int, out_dir: str):
        self.step, self.signum, self.out_dir = step, signum, out_dir
        self.exit_code = 128 + int(signum)
        name = signal.Signals(signum).name
        super().__init__(f"{name} received: stopped after step {step} and saved the checkpoint "
                         f"in {out_dir}")


class TrainingDiverged(FloatingPointError):
    """A NaN/Inf loss or gradient: stopped before the update; the last checkpoint is untouched."""


class TrainingIOError(OSError):
    """Writing the run directory failed (disk full, read-only, ...); earlier checkpoints are intact."""


def _all_finite(params) -> bool:
    xp = None
    for v in params.values():
        xp = xp or backend.namespace(v)
        if not bool(xp.all(xp.isfinite(v))):
            return False
    return True


def _divergence_message(step, loss_f, gnorm, batch, params, records, lr) -> str:
    """Name the step and the likely causes (the --lr hint only where it fits)."""
    causes = []
    if not _all_finite(params):
        causes.append("the weights already hold NaN/Inf")
    bad_data = False
    for part in (batch if isinstance(batch, (tuple, list)) else (batch,)):
        try:
            xp = backend.namespace(part)
            if xp.isdtype(part.dtype, "real floating") and not bool(xp.all(xp.isfinite(part))):
                bad_data = True
        except Exception:  # not an array: nothing to check
            pass
    if bad_data:
        causes.append("the data batch contains NaN/Inf (check the input files)")
    losses = [r["loss"] for r in records if r.get("kind") == "train"]
    rising = len(losses) >= 2 and losses[-1] > 1.5 * min(losses)
    big_grad = math.isinf(gnorm) or (math.isfinite(gnorm) and gnorm > 1e3)
    if not bad_data and (rising or big_grad):
        causes.append(f"the learning rate is too high for this model (lr {lr:.3g} at this step; "
                      f"the loss was rising or the gradient exploding): try a smaller --lr")
    if not causes:
        causes.append("an overflow of float32 (a value beyond 3.4e38) in the forward or "
                      "backward pass, or a custom task returning a non-finite loss")
    return (f"training diverged at step {step}: loss {loss_f}, gradient norm {gnorm}; stopped "
            f"before the update, the last checkpoint is untouched. Likely cause: "
            + "; or ".join(causes))


def _float(x) -> float:
    return float(x)  # 0-d array on any device -> host float (one transfer)


def train(task, tcfg: TrainConfig, out_dir: str, *, resume: bool = False,
          progress: bool = True, plot: bool = True, init_params: dict | None = None,
          progress_seconds: float = PROGRESS_SECONDS) -> dict:
    """Train ``task``'s model; returns {"params", "metrics" (list of records), "step", "best"
    (the evaluation record of best.npz, None when no best was kept)}.

    out_dir receives metrics.jsonl, checkpoint.npz (+ its readable .json), best.npz (+ .json)
    when the task has a validation set, and curves.png. ``progress``: a bar on a terminal, else
    a line every ``progress_seconds`` (see the module docstring). With
    ``resume``, the run continues from ``out_dir/checkpoint.npz`` (same task and config
    expected). ``init_params``: the result of ``task.init_params(backend.RNG(tcfg.seed))`` when
    the caller already made it (it is used as given; default: made here). Raises
    TrainingInterrupted (SIGINT/SIGTERM, after saving), TrainingDiverged (NaN/Inf, before the
    update) or TrainingIOError (a failed write; see the module docstring).
    """
    tcfg.validate()
    backend.keep_freed_memory()   # reuse freed activations: no fresh pages every step
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise TrainingIOError(e.errno, f"cannot create the run directory {out_dir!r}: "
                                       f"{e.strerror or e}") from None
    with run_lock(out_dir, "train"):          # one writer per run directory
        return _train(task, tcfg, out_dir, resume, progress, plot, init_params,
                      progress_seconds)


def _train(task, tcfg, out_dir, resume, progress, plot, init_params, progress_seconds) -> dict:
    ckpt_path = os.path.join(out_dir, "checkpoint")                     # prefix: .npz + .json
    best_path = os.path.join(out_dir, "best")                           # the lowest val_loss
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    xp, device, dtype = task.xp, task.device, task.dtype
    clean_stale_temporaries(out_dir)        # left by a run killed while saving

    if resume:
        if not os.path.exists(ckpt_path + ".npz"):
            raise FileNotFoundError(f"--resume: no checkpoint at {ckpt_path}.npz")
        host, config, extra, state = ckpt.load_checkpoint(ckpt_path)
        start = _check_resume_state(state, tcfg, ckpt_path)
        params = {k: backend.from_host(xp, v, dtype=dtype, device=device)
                  for k, v in host.items()}
        opt = make_optimizer(params, tcfg)
        try:
            opt.load_state_dict({"step": state["opt_step"], "arrays": sub(extra, "opt")})
            if state["data_state"] is not None:  # None: imported weights (tostnp convert),
                task.set_data_state(state["data_state"], sub(extra, "data"))  # fresh data order
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"checkpoint {ckpt_path}.npz cannot be resumed: "
                             f"{e.args[0] if e.args else e}") from None
        records = [r for r in read_metrics(metrics_path) if r["step"] <= start] \
            if os.path.exists(metrics_path) else []
        _write_or_fail(lambda: atomic_write_text(
            metrics_path, "".join(json.dumps(r) + "\n" for r in records)), "metrics.jsonl")
    else:
        params = task.init_params(backend.RNG(tcfg.seed)) if init_params is None \
            else init_params
        opt = make_optimizer(params, tcfg)
        start, records = 0, []
        _write_or_fail(lambda: atomic_write_text(metrics_path, ""), "metrics.jsonl")

    stop = tcfg.steps if tcfg.stop_at is None else min(tcfg.stop_at, tcfg.steps)
    every = tcfg.checkpoint_interval
    bar = lines = None
    if progress:
        from tqdm import tqdm   # not tqdm.auto: it warns on stderr in a notebook without ipywidgets
        # disable=None: a bar on a terminal; when the output is not one, timed lines instead
        bar = tqdm(total=stop, initial=start, desc="train", dynamic_ncols=True, disable=None,
                   mininterval=0.5)
        if bar.disable:
            lines = ProgressLines(start, stop, progress_seconds)
    best = _best_record(records)
    t0 = time.perf_counter()
    saved = start if resume else None                                   # step of the last checkpoint
    mf = _write_or_fail(lambda: MetricsFile(metrics_path), "metrics.jsonl")
    stop_signal = SignalFlag()
    try:
        def log(rec):
            records.append(rec)
            mf.write(rec)

        def evaluate(n):
            """The evaluation of step n, logged, and the best checkpoint kept; None when a
            signal cut it short."""
            nonlocal best
            ev = stop_signal.during(lambda: task.evaluate(params))
            if ev is None:
                return None
            log({"step": n, "kind": "eval", **ev})
            if _better(ev, best) and _all_finite(params):
                save_best(best_path, task, params, n, tcfg, ev)
                best = {"step": n, **ev}
            if bar is not None:
                bar.write(f"step {n}: " + ", ".join(f"{k} {v:.4f}" for k, v in ev.items())
                          + (" (best so far)" if best and best["step"] == n else ""))
                sys.stdout.flush()      # a pipe buffers: show it now
            return ev

        if resume and _eval_due(start, tcfg) and not any(
                r["step"] == start and r["kind"] == "eval" for r in records):
            # the run that saved this checkpoint had its evaluation cut short by a signal
            # (or its metrics.jsonl lost the line): made now, as the uninterrupted run has it
            try:
                evaluate(start)
            except OSError as e:
                raise _io_error(e, start, saved, out_dir) from None
            if stop_signal.signum:
                raise TrainingInterrupted(start, stop_signal.signum, out_dir)
        for step in range(start, stop):
            batch = task.next_batch()
            loss, grads, extra = task.loss_and_grads(params, batch)
            loss_f, gnorm, lr = update_step(
                opt, grads, loss, step, tcfg, explain=lambda loss_f, gnorm, lr: (
                    _divergence_message(step + 1, loss_f, gnorm, batch, params, records, lr)))
            n = step + 1
            try:
                if n % max(tcfg.log_every, 1) == 0 or n == stop or n == 1:
                    rec = {"step": n, "kind": "train", "loss": loss_f, "lr": lr,
                           "grad_norm": gnorm, "time": round(time.perf_counter() - t0, 3)}
                    rec.update({k: _float(v) for k, v in extra.items()})
                    log(rec)
                if _eval_due(n, tcfg):
                    evaluate(n)
                if (every and n % every == 0) or n == stop or stop_signal.signum:
                    if _all_finite(params):  # never replace a good checkpoint by NaN weights
                        save(ckpt_path, task, params, opt, n, tcfg)
                        saved = n
            except OSError as e:
                raise _io_error(e, n, saved, out_dir) from None
            if bar is not None:
                bar.set_postfix(loss=f"{loss_f:.4f}", lr=f"{lr:.2e}")
                bar.update(1)
            if lines is not None:
                lines.tick(n, loss_f)
            if stop_signal.signum and (n < stop or stop_signal.cut_short):
                raise TrainingInterrupted(n, stop_signal.signum, out_dir)
    finally:
        stop_signal.restore()
        mf.close()
        close_workers()             # the step's shard worker processes, if any
        if bar is not None:
            bar.close()
    if plot:
        from .curves import plot_metrics
        try:
            plot_metrics(records, os.path.join(out_dir, "curves.png"), title=task.title)
        except OSError as e:
            raise _io_error(e, stop, saved, out_dir) from None
    return {"params": params, "metrics": records, "step": stop, "start": start, "best": best}


def _best_record(records) -> dict | None:
    """The evaluation record with the lowest validation loss (None: no validation yet)."""
    evals = [r for r in records if r.get("kind") == "eval" and "val_loss" in r]
    if not evals:
        return None
    r = min(evals, key=lambda r: r["val_loss"])
    return {k: v for k, v in r.items() if k != "kind"}


def _better(ev: dict, best: dict | None) -> bool:
    """Is this evaluation a new best? Only a validation loss counts (never the test set's)."""
    v = ev.get("val_loss")
    return v is not None and math.isfinite(v) and (best is None or v < best["val_loss"])


def _eval_due(n: int, tcfg) -> bool:
    """Whether the run evaluates after update ``n``: every ``eval_every`` and at the end."""
    return n > 0 and (bool(tcfg.eval_every and n % tcfg.eval_every == 0) or n == tcfg.steps)


def _check_resume_state(state, tcfg, where) -> int:
    """The checkpoint's training state must be complete and fit the schedule; returns its step."""
    for key in ("step", "opt_step", "data_state"):
        if key not in state:
            raise ValueError(f"checkpoint {where}.npz cannot be resumed: its state has no "
                             f"{key!r} (not written by the training loop)")
    step = state["step"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= tcfg.steps:
        raise ValueError(f"checkpoint {where}.npz: state step must be an int in "
                         f"[0, {tcfg.steps}], got {step!r}")
    if state["data_state"] is not None and not isinstance(state["data_state"], dict):
        raise ValueError(f"checkpoint {where}.npz: data_state must be a JSON object or null")
    if tcfg.stop_at is not None and tcfg.stop_at < step:
        raise ValueError(f"--stop-at {tcfg.stop_at} is before the checkpoint's step {step} "
                         f"(in {where}.npz); give a later step, or leave --stop-at out to run "
                         f"to step {tcfg.steps}")
    return step


def _io_error(e: OSError, step, saved, out_dir) -> "TrainingIOError":
    kept = (f"the checkpoint of step {saved} is intact" if saved is not None
            else "no checkpoint had been written yet")
    return TrainingIOError(e.errno, f"writing to {out_dir!r} failed at step {step}: "
                                    f"{e.strerror or e}; {kept} (free space or choose another "
                                    f"--out, then --resume)")


def _write_or_fail(fn, what):
    try:
        return fn()
    except OSError as e:
        raise TrainingIOError(e.errno, f"cannot write {what}: {e.strerror or e}") from None


def make_optimizer(params, tcfg) -> AdamW:
    """The AdamW of training: ``tcfg``'s lr, betas and weight decay, none on biases, norms and
    embeddings (:func:`tostnp.train.optim.default_no_decay`)."""
    return AdamW(params, lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2),
                 weight_decay=tcfg.weight_decay, no_decay=default_no_decay)


def update_step(opt, grads, loss, step: int, tcfg, explain=None):
    """One optimizer update as training makes it, after the forward and backward pass: the
    gradient clipped to ``tcfg.grad_clip``, the learning rate of update ``step`` (0-based) from
    the warm-up + cosine schedule, the loss to the host and, when the loss or the gradient is
    NaN/Inf, :class:`TrainingDiverged` before anything changes (its message
    ``explain(loss, grad_norm, lr)``); then AdamW. Returns (loss as a float, gradient norm, lr).
    """
    grads, gnorm = clip_grad_norm(grads, tcfg.grad_clip)
    lr = lr_schedule(step, max_lr=tcfg.lr, min_lr=tcfg.final_lr,
                     warmup_steps=tcfg.warmup_steps, total_steps=tcfg.steps)
    loss_f = _float(loss)
    if not math.isfinite(loss_f) or not math.isfinite(gnorm):
        raise TrainingDiverged(explain(loss_f, gnorm, lr) if explain else
                               f"loss {loss_f}, gradient norm {gnorm} at update {step + 1}")
    opt.step(grads, lr=lr)
    return loss_f, gnorm, lr


def _config(task, tcfg) -> dict:
    return {"task": task.kind, "model": asdict(task.cfg), "train": asdict(tcfg), **task.meta()}


def save(path, task, params, opt, step, tcfg) -> None:
    """Checkpoint: parameters, optimizer state, step, the task's data/RNG state, the configs."""
    config = _config(task, tcfg)
    od = opt.state_dict()
    data_json, data_arrays = task.data_state()
    extra = {**prefixed(od["arrays"], "opt"), **prefixed(data_arrays, "data")}
    ckpt.save_checkpoint(path, params, config, extra_arrays=extra,
                         state={"step": step, "opt_step": od["step"], "data_state": data_json})


def save_best(path, task, params, step, tcfg, ev) -> None:
    """The best checkpoint: the parameters and configs (no optimizer or data state: it is for
    ``evaluate``, ``sample`` and ``convert``, never resumed), with the step and its evaluation."""
    ckpt.save_checkpoint(path, params, _config(task, tcfg),
                         state={"step": step, "best_by": "val_loss", "eval": ev})
