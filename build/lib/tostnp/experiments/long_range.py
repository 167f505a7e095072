"""long-range: ListOps-style nested operators over digits, length 512, one setting for all.

Task (:func:`tostnp.data.synthetic.listops_task`): expressions of 256..512 tokens such as
``[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]``, padded to 512; the label is the value (10
classes). The sequence classifier (:mod:`tostnp.models.seqcls`, tokens one-hot) is trained with
ONE hyper-parameter set, fixed before any run and shared by every mixer (the reviewers objected
to the paper's per-task tuning on the Long Range Arena). The majority-class rate of the test
set is reported as the baseline. ``flash`` equals ``softmax`` as a function and is not retrained.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .common import train_run, fmt, savefig

NAME = "long-range"
QUESTION = ("ListOps-style long-range task (length 512) with one hyper-parameter set for every "
            "mixer: test accuracy.")
FULL = dict(mixers=["tssa", "tssa-uniform", "softmax", "linear"], max_len=512, n_train=1200,
            n_test=300, steps=300, batch_size=16, lr=1e-3, warmup_steps=20, weight_decay=0.05,
            model=dict(width=32, depth=2, num_heads=4, mlp_ratio=2))
QUICK = dict(FULL, mixers=["tssa", "linear"], max_len=32, n_train=48, n_test=32, steps=3,
             batch_size=8, warmup_steps=1, model=dict(width=8, depth=1, num_heads=2,
                                                      mlp_ratio=2))


@lru_cache(maxsize=4)
def _data(max_len, seed, n_train, n_test):
    from ..data.synthetic import listops_task
    X, y, _ = listops_task(n_train, max_len, seed=30_000 + seed)
    Xt, yt, _ = listops_task(n_test, max_len, seed=40_000 + seed)
    return X, y, Xt, yt


def run(rec, s, seeds):
    from ..models.configs import SeqConfig
    from ..train.tasks import SeqTask
    from ..data.synthetic import LISTOPS_VOCAB
    from ..train.loop import TrainConfig
    majority = []
    for seed in seeds:
        yt = _data(s["max_len"], seed, s["n_train"], s["n_test"])[3]
        majority.append(float(np.bincount(yt, minlength=10).max() / len(yt)))
    rec.data["majority_class_acc"] = majority
    for mixer in s["mixers"]:
        cfg = SeqConfig(in_dim=LISTOPS_VOCAB, max_len=s["max_len"], num_classes=10, mixer=mixer,
                        **s["model"])

        def one(seed, cfg=cfg):
            data = _data(s["max_len"], seed, s["n_train"], s["n_test"])
            task = SeqTask(cfg, data, batch_size=s["batch_size"], seed=seed,
                           one_hot_vocab=LISTOPS_VOCAB, data_name="listops")
            tcfg = TrainConfig(steps=s["steps"], batch_size=task.batch_size, lr=s["lr"],
                               warmup_steps=s["warmup_steps"], weight_decay=s["weight_decay"],
                               eval_every=0, log_every=s["steps"], seed=seed).validate()
            r = train_run(task, tcfg)
            return {"test_acc": r["final"]["test_acc"], "test_loss": r["final"]["test_loss"],
                    "wall_s": r["wall_s"], "cpu_s": r["cpu_s"]}
        rec.condition(one, seeds, desc=f"{NAME} {mixer}", mixer=mixer)


def table(data) -> str:
    rows = ["| mixer | test accuracy (%) | test loss | train CPU time (s) |", "|---|---|---|---|"]
    for e in data["results"]:
        rows.append(f"| {e['mixer']} | {fmt(e, 'test_acc', 100, 1)} | {fmt(e, 'test_loss')} | "
                    f"{fmt(e, 'cpu_s', 1, 1)} |")
    maj = data.get("majority_class_acc", [])
    if maj:
        rows.append(f"| majority class | {100 * float(np.mean(maj)):.1f} | | |")
    return "\n".join(rows)


def plot(data, path):
    import matplotlib.pyplot as plt
    res = data["results"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    names = [e["mixer"] for e in res]
    ax.bar(names, [100 * e["mean"]["test_acc"] for e in res],
           yerr=[100 * e["std"]["test_acc"] for e in res], capsize=3,
           color=["C0", "C9", "C1", "C3"][:len(res)])
    maj = data.get("majority_class_acc", [])
    if maj:
        ax.axhline(100 * float(np.mean(maj)), color="gray", ls=":", label="majority class")
        ax.legend(fontsize=8)
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3, axis="y")
    ax.set_title(f"{NAME}: ListOps-style, N = {data['settings']['max_len']}, one setting for "
                 f"all\n(mean ± sd, seeds {data['seeds']})", fontsize=9)
    fig.tight_layout()
    return savefig(fig, path)
