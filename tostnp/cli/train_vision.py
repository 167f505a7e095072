"""``train vision``: one run of the image classifier (a new run or ``--resume``)."""
from __future__ import annotations

import os

from ..models import configs as C
from ..models.configs import DEFAULT_PRESET
from ..train.defaults import TrainConfig, VisionData, default_train_config, default_data_config
from .train_common import (given, options_of, check_fits, say, train_and_report, say_best,
                           finish)
from .train_resume import load_resume_config, checkpoint_field

__all__ = ["run_vision"]


def run_vision(args, xp):
    from ..data import split_validation
    from ..data import load_vision_data
    from ..train.tasks import VisionTask
    from ..models.vision import describe
    if args.resume:
        config, tcfg, cfg = load_resume_config(args, "vision")
        data_name = checkpoint_field(config, "data", str, args.out)
        data_dir = config.get("data_dir")
        if data_dir is not None and not isinstance(data_dir, str):
            raise ValueError(f"checkpoint in {args.out}: 'data_dir' must be a string or null")
        shift = checkpoint_field(config, "augment_shift", int, args.out)
        val_fraction = config.get("val_fraction", 0.0)
    else:
        preset = given(args.config, DEFAULT_PRESET["vision"])
        cfg = C.get_vision_config(preset, **options_of(args, C.VisionConfig))
        dc = default_data_config("vision", preset, **options_of(args, VisionData))
        data_name, shift, val_fraction = dc.data, dc.augment_shift, dc.val_fraction
    if args.data_dir:                        # where the data live now: applied with --resume
        data_dir = os.path.abspath(args.data_dir)
    elif not args.resume:
        data_dir = None
    seed = tcfg.seed if args.resume else given(args.seed, TrainConfig.seed)
    data = load_vision_data(data_name, data_dir)
    val = None
    if val_fraction > 0:
        X_fit, y_fit, X_val, y_val = split_validation(data[0], data[1], val_fraction,
                                                      seed=seed)
        data, val = (X_fit, y_fit, data[2], data[3]), (X_val, y_val)
    if not args.resume:
        tcfg = default_train_config("vision", preset, n_train=len(data[0]), epochs=args.epochs,
                                    **options_of(args, TrainConfig, seed=seed))
    check_fits("vision", cfg, tcfg, args)
    task = VisionTask(cfg, data, batch_size=tcfg.batch_size, seed=tcfg.seed, augment_shift=shift,
                      xp=xp, data_name=data_name, val=val,
                      extra_meta={"data_dir": data_dir, "val_fraction": val_fraction})
    n_val = 0 if val is None else len(val[1])
    e, params, cpu, wall, best = train_and_report(
        args, task, tcfg, lambda p: describe(cfg, p),
        f"data: {data_name}, {len(data[0])} train / {n_val} validation (held out of the "
        f"training images) / {len(data[2])} test images; {tcfg.steps} steps of batch "
        f"{tcfg.batch_size} ({tcfg.steps / task.steps_per_epoch:.1f} epochs), lr {tcfg.lr}")
    if e is None:
        return 0, None
    result = dict(task.evaluate_test(params), steps=tcfg.steps,
                  train_cpu_s=round(cpu, 2), train_wall_s=round(wall, 2))
    if val is not None:
        result.update(val_loss=e["val_loss"], val_acc=e["val_acc"])
        say(args, f"validation accuracy: {result['val_acc']:.4f} ({n_val} images)")
    say(args, f"test accuracy: {result['test_acc']:.4f} (test loss {result['test_loss']:.4f}, "
               f"{len(data[2])} images); training {cpu:.1f} s CPU time, {wall:.1f} s wall time")
    if best is not None:
        result["best"] = _best_figures(args, task, best, result, xp)
        b = result["best"]
        say_best(args, best, tcfg.steps, f"validation accuracy {b['val_acc']:.4f}, test accuracy "
                                         f"{b['test_acc']:.4f} (test loss {b['test_loss']:.4f})")
    finish(args, "vision", tcfg.seed, result)
    if cfg.mixer == "tssa":                # the figures read TSSA's memberships
        from ..analysis.figures import vision_figures
        paths = vision_figures(os.path.join(args.out, "checkpoint"), args.out, xp=xp)
        say(args, "figures: " + ", ".join(paths))
    say(args, f"run directory: {args.out} (checkpoint.npz + .json, best.npz + .json, "
               f"metrics.jsonl, result.json, curves.png)")
    return 0, result


def _best_figures(args, task, best, result, xp) -> dict:
    """The best checkpoint's validation figures (from training) and its test figures, from the
    file as ``evaluate`` reads it."""
    figures = {k: best[k] for k in ("step", "val_loss", "val_acc")}
    if best["step"] == result["steps"]:                 # the last: measured above
        return {**figures, "test_loss": result["test_loss"], "test_acc": result["test_acc"]}
    from ..io import load_model
    _, _, params, _ = load_model(os.path.join(args.out, "best"), xp=xp)
    return {**figures, **task.evaluate_test(params)}
