"""mixers-digits: every token mixer in the digits classifier, everything else identical.

The "tiny-digits" vision model (16 patch tokens, 2 blocks, width 64, 4 heads, class-attention
pooling) with each mixer of :mod:`tostnp.nn.mixers`; same data split, data order, augmentation,
optimiser, schedule and number of steps for all. Reports test accuracy, training wall and CPU
time, time per step and the peak memory of one forward+backward (tracemalloc).

The digits test split is the only held-out split (no hyper-parameter is chosen on it here: the
settings are the preset's, shortened, and the same for every mixer).
"""
from __future__ import annotations

from ..nn.mixers import MIXERS
from .common import digits_settings, train_digits, peak_step_bytes, fmt, markdown_table, savefig

NAME = "mixers-digits"
QUESTION = ("Test accuracy, training time and peak memory of every token mixer in the same "
            "digits classifier (same data order, optimiser and steps).")
FULL = digits_settings(mixers=list(MIXERS), epochs=60, max_steps=None, overrides={})
QUICK = dict(FULL, mixers=["tssa", "flash"], epochs=1, max_steps=3,
             overrides=dict(width=16, depth=1))


def run(rec, s, seeds):
    from ..data import load_digits_split
    from ..models import get_vision_config, num_params
    data = load_digits_split()
    for mixer in s["mixers"]:
        cfg = get_vision_config(s["config"], mixer=mixer, **s["overrides"])

        def one(seed, cfg=cfg):
            task, r, steps = train_digits(cfg, data, s, seed)
            return {"test_acc": r["final"]["test_acc"], "test_loss": r["final"]["test_loss"],
                    "wall_s": r["wall_s"], "cpu_s": r["cpu_s"],
                    "cpu_ms_per_step": 1e3 * r["cpu_s"] / steps, "steps": steps,
                    "peak_mb": peak_step_bytes(task, r["params"]) / 2**20,
                    "params": num_params(r["params"])}
        rec.condition(one, seeds, desc=f"{NAME} {mixer}", mixer=mixer)


def table(data) -> str:
    return markdown_table(
        ["mixer", "parameters", "test accuracy (%)", "train CPU time (s)", "CPU ms / step",
         "peak memory fwd+bwd (MB)"],
        [[e["mixer"], f"{int(e['mean']['params']):,}", fmt(e, "test_acc", 100, 1),
          fmt(e, "cpu_s", 1, 1), fmt(e, "cpu_ms_per_step", 1, 1), fmt(e, "peak_mb", 1, 2)]
         for e in data["results"]])


def plot(data, path):
    import matplotlib.pyplot as plt
    res = data["results"]
    names = [e["mixer"] for e in res]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    for ax, (key, scale, label) in zip(axes, [("test_acc", 100, "test accuracy (%)"),
                                              ("cpu_ms_per_step", 1, "CPU ms per training step"),
                                              ("peak_mb", 1, "peak memory fwd+bwd (MB)")]):
        m = [e["mean"][key] * scale for e in res]
        sd = [e["std"][key] * scale for e in res]
        ax.bar(names, m, yerr=sd, capsize=3, color=["C0", "C9", "C1", "C2", "C3"][:len(res)])
        ax.set_ylabel(label)
        ax.tick_params(axis="x", rotation=30)
        ax.grid(alpha=0.3, axis="y")
        if key == "test_acc":
            ax.set_ylim(max(0, min(m) - 10), 100)
    fig.suptitle(f"{NAME}: mean ± sd over seeds {data['seeds']}")
    fig.tight_layout()
    return savefig(fig, path)
