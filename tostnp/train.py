"""The training loop, free of model details (minGPT style): AdamW, warm-up + cosine, clipping.

A *task* (see :mod:`tostnp.tasks`) knows the model and the data; this loop knows only

    batch = task.next_batch()                       # host data, drawn from task's own RNG
    loss, grads, extra = task.loss_and_grads(params, batch)
    grads, norm = clip_grad_norm(grads, 1.0)
    opt.step(grads, lr=lr_schedule(step, ...))

plus periodic evaluation (``task.evaluate(params)``), metrics as JSON lines in
``<out>/metrics.jsonl``, a loss/accuracy plot ``<out>/curves.png`` and checkpoints
``<out>/checkpoint.npz`` + ``<out>/checkpoint.json`` (see :mod:`tostnp.checkpoint`).

Determinism: every random draw (initialisation, data order, augmentation) comes from seeded
:class:`tostnp.backend.RNG` objects; the checkpoint stores the parameters, the AdamW moments and
step, and the task's data state (RNG state, epoch permutation and position). ``resume=True``
therefore continues bit-identically: the losses after resuming equal those of an uninterrupted
run (checked in tests/test_train.py). Metrics lines written after the checkpoint by an
interrupted run are dropped on resume.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, asdict, fields, replace

from . import backend
from . import checkpoint as ckpt
from .io import atomic_write_text
from .optim import AdamW, lr_schedule, clip_grad_norm, default_no_decay
from .params import sub, prefixed

__all__ = ["TrainConfig", "train", "read_metrics"]


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (defaults as published for ToST: AdamW betas (0.9, 0.95), cosine to
    max_lr / 10, clip 1.0).

    steps: total optimizer updates (the schedule's length); stop_at: stop early after this many
    updates, saving a checkpoint (for resuming; None = run to ``steps``); eval_every / log_every:
    in updates (0 = only at the end); checkpoint_every: in updates (0 = only at the end).
    """
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    min_lr: float | None = None
    warmup_steps: int = 100
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_every: int = 200
    log_every: int = 10
    checkpoint_every: int = 0
    seed: int = 0
    stop_at: int | None = None

    def validate(self) -> "TrainConfig":
        for f in ("steps", "batch_size"):
            if int(getattr(self, f)) < 1:
                raise ValueError(f"{f} must be >= 1, got {getattr(self, f)}")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps={self.steps}], "
                             f"got {self.warmup_steps}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        return self

    @property
    def final_lr(self) -> float:
        return self.lr / 10 if self.min_lr is None else self.min_lr


def read_metrics(path: str) -> list:
    """The records of a metrics.jsonl file (a list of dicts)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _float(x) -> float:
    return float(x)  # 0-d array on any device -> host float (one transfer)


def train(task, tcfg: TrainConfig, out_dir: str, *, resume: bool = False,
          progress: bool = True, plot: bool = True, init_params: dict | None = None) -> dict:
    """Train ``task``'s model; returns {"params", "metrics" (list of records), "step"}.

    out_dir receives metrics.jsonl, checkpoint.npz and curves.png. With ``resume``, the run
    continues from ``out_dir/checkpoint.npz`` (same task and config expected). ``init_params``:
    the result of ``task.init_params(backend.RNG(tcfg.seed))`` when the caller already made it
    (it is used as given; default: made here).
    """
    tcfg.validate()
    os.makedirs(out_dir, exist_ok=True)
    ckpt_path = os.path.join(out_dir, "checkpoint")                     # prefix: .npz + .json
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    xp, device, dtype = task.xp, task.device, task.dtype

    if resume:
        if not os.path.exists(ckpt_path + ".json"):
            raise FileNotFoundError(f"--resume: no checkpoint at {ckpt_path}.json/.npz")
        host, config, extra, state = ckpt.load_checkpoint(ckpt_path)
        params = {k: backend.from_host(xp, v, dtype=dtype, device=device)
                  for k, v in host.items()}
        opt = _make_opt(params, tcfg)
        opt.load_state_dict({"step": state["opt_step"],
                             "arrays": sub(extra, "opt")})
        start = int(state["step"])
        if state.get("data_state") is not None:  # None: imported weights (tostnp convert),
            task.set_data_state(state["data_state"], sub(extra, "data"))  # fresh data order
        records = [r for r in read_metrics(metrics_path) if r["step"] <= start] \
            if os.path.exists(metrics_path) else []
        atomic_write_text(metrics_path, "".join(json.dumps(r) + "\n" for r in records))
    else:
        params = task.init_params(backend.RNG(tcfg.seed)) if init_params is None \
            else init_params
        opt = _make_opt(params, tcfg)
        start, records = 0, []
        atomic_write_text(metrics_path, "")

    stop = tcfg.steps if tcfg.stop_at is None else min(tcfg.stop_at, tcfg.steps)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        # disable=None: a bar on a terminal, nothing when the output is piped to a file
        bar = tqdm(total=stop, initial=start, desc="train", dynamic_ncols=True, disable=None,
                   mininterval=0.5)
    t0 = time.perf_counter()
    with open(metrics_path, "a") as mf:
        def log(rec):
            records.append(rec)
            mf.write(json.dumps(rec) + "\n")
            mf.flush()

        for step in range(start, stop):
            batch = task.next_batch()
            loss, grads, extra = task.loss_and_grads(params, batch)
            grads, gnorm = clip_grad_norm(grads, tcfg.grad_clip)
            lr = lr_schedule(step, max_lr=tcfg.lr, min_lr=tcfg.final_lr,
                             warmup_steps=tcfg.warmup_steps, total_steps=tcfg.steps)
            loss_f = _float(loss)
            if not math.isfinite(loss_f) or not math.isfinite(gnorm):
                raise FloatingPointError(f"step {step + 1}: loss {loss_f}, grad norm {gnorm}; "
                                         f"try a smaller --lr")
            opt.step(grads, lr=lr)
            n = step + 1
            if n % max(tcfg.log_every, 1) == 0 or n == stop or n == 1:
                rec = {"step": n, "kind": "train", "loss": loss_f, "lr": lr,
                       "grad_norm": gnorm, "time": round(time.perf_counter() - t0, 3)}
                rec.update({k: _float(v) for k, v in extra.items()})
                log(rec)
            if (tcfg.eval_every and n % tcfg.eval_every == 0) or n == tcfg.steps:
                ev = task.evaluate(params)
                log({"step": n, "kind": "eval", **ev})
                if bar is not None:
                    bar.write(f"step {n}: " + ", ".join(f"{k} {v:.4f}" for k, v in ev.items()))
            if (tcfg.checkpoint_every and n % tcfg.checkpoint_every == 0) or n == stop:
                save(ckpt_path, task, params, opt, n, tcfg)
            if bar is not None:
                bar.set_postfix(loss=f"{loss_f:.4f}", lr=f"{lr:.2e}")
                bar.update(1)
    if bar is not None:
        bar.close()
    if plot:
        from .figures import plot_metrics
        plot_metrics(records, os.path.join(out_dir, "curves.png"), title=task.title)
    return {"params": params, "metrics": records, "step": stop}


def _make_opt(params, tcfg):
    return AdamW(params, lr=tcfg.lr, betas=(tcfg.beta1, tcfg.beta2),
                 weight_decay=tcfg.weight_decay, no_decay=default_no_decay)


def save(path, task, params, opt, step, tcfg) -> None:
    """Checkpoint: parameters, optimizer state, step, the task's data/RNG state, the configs."""
    config = {"task": task.kind, "model": asdict(task.cfg), "train": asdict(tcfg), **task.meta()}
    od = opt.state_dict()
    data_json, data_arrays = task.data_state()
    extra = {**prefixed(od["arrays"], "opt"), **prefixed(data_arrays, "data")}
    ckpt.save_checkpoint(path, params, config, extra_arrays=extra,
                         state={"step": step, "opt_step": od["step"], "data_state": data_json})


def train_config_from_dict(d: dict) -> TrainConfig:
    known = {f.name for f in fields(TrainConfig)}
    return replace(TrainConfig(), **{k: v for k, v in d.items() if k in known})
