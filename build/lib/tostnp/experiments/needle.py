"""needle: a single rare outlier token anywhere in the sequence decides the label.

The reviewers' worry: TSSA compresses tokens towards the dominant directions of each head, so a
rare token whose information lives in a direction nobody else uses might be suppressed, where
pairwise attention would simply look at it. Task (:func:`tostnp.data.synthetic.needle_task`): every
token is one of 8 "word" vectors except one, the needle, ``norm * e_14`` (label 0) or
``norm * e_15`` (label 1) at a random position; the label is read from a CLS token that only
learns about the needle through the token mixer (:mod:`tostnp.models.seqcls`).

Accuracy against the sequence length (at norm 1) and against the needle's norm (at the shortest
length, where every mixer learns the task at norm 1), per mixer; chance is 50%. ``flash`` computes the same function as ``softmax`` (only
its memory differs, see the ``scaling`` experiment), so it is not trained again here.
"""
from __future__ import annotations

from functools import lru_cache

from .common import train_run, fmt, savefig

NAME = "needle"
QUESTION = ("Does TSSA suppress a single rare outlier token that decides the label? Accuracy "
            "against sequence length and against the outlier's norm, per mixer.")
FULL = dict(mixers=["tssa", "tssa-uniform", "softmax", "linear"], lengths=[32, 64, 128, 256],
            base_norm=1.0, norms=[0.25, 4.0], base_length=32, n_train=4096, n_test=512,
            steps=600, batch_size=16, lr=3e-3, warmup_steps=30, weight_decay=0.05,
            model=dict(width=16, depth=1, num_heads=4, mlp_ratio=2))
QUICK = dict(FULL, mixers=["tssa", "softmax"], lengths=[16], norms=[4.0], base_length=16,
             n_train=64, n_test=64, steps=3, batch_size=16, warmup_steps=1,
             model=dict(width=8, depth=1, num_heads=2, mlp_ratio=2))


@lru_cache(maxsize=8)
def _data(length, norm, seed, n_train, n_test):
    from ..data.synthetic import needle_task
    X, y, _ = needle_task(n_train, length, norm, seed=10_000 + seed)
    Xt, yt, _ = needle_task(n_test, length, norm, seed=20_000 + seed)
    return X, y, Xt, yt


def conditions(s):
    out = [(L, s["base_norm"]) for L in s["lengths"]]
    return out + [(s["base_length"], a) for a in s["norms"] if (s["base_length"], a) not in out]


def run(rec, s, seeds):
    from ..models.configs import SeqConfig
    from ..train.tasks import SeqTask
    from ..data.synthetic import NEEDLE_DIM
    from ..train.loop import TrainConfig
    for length, norm in conditions(s):
        for mixer in s["mixers"]:
            cfg = SeqConfig(in_dim=NEEDLE_DIM, max_len=length, num_classes=2, mixer=mixer,
                            **s["model"])

            def one(seed, cfg=cfg, length=length, norm=norm):
                data = _data(length, norm, seed, s["n_train"], s["n_test"])
                task = SeqTask(cfg, data, batch_size=s["batch_size"], seed=seed,
                               data_name="needle")
                tcfg = TrainConfig(steps=s["steps"], batch_size=task.batch_size, lr=s["lr"],
                                   warmup_steps=s["warmup_steps"],
                                   weight_decay=s["weight_decay"], eval_every=0,
                                   log_every=s["steps"], seed=seed).validate()
                r = train_run(task, tcfg)
                return {"test_acc": r["final"]["test_acc"], "wall_s": r["wall_s"],
                        "cpu_s": r["cpu_s"]}
            rec.condition(one, seeds, desc=f"{NAME} N={length} norm={norm} {mixer}",
                          mixer=mixer, length=length, norm=norm)


def table(data) -> str:
    s = data["settings"]
    conds = conditions(s)
    head = "| mixer | " + " | ".join(f"N={L}, norm {a:g}" for L, a in conds) + " |"
    rows = [head, "|---|" + "---|" * len(conds)]
    for m in s["mixers"]:
        cells = []
        for L, a in conds:
            e = [r for r in data["results"] if (r["mixer"], r["length"], r["norm"]) == (m, L, a)]
            cells.append(fmt(e[0], "test_acc", 100, 1) if e else "—")
        rows.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n\ntest accuracy (%), chance 50"


def plot(data, path):
    import matplotlib.pyplot as plt
    s = data["settings"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for m, color in zip(s["mixers"], ["C0", "C9", "C1", "C3"]):
        for ax, key, xs, fixed in ((axes[0], "length", s["lengths"], ("norm", s["base_norm"])),
                                   (axes[1], "norm", sorted(set(s["norms"]) | {s["base_norm"]}),
                                    ("length", s["base_length"]))):
            pts = [(x, r) for x in xs for r in data["results"]
                   if r["mixer"] == m and r[key] == x and r[fixed[0]] == fixed[1]]
            if pts:
                ax.errorbar([p[0] for p in pts], [100 * p[1]["mean"]["test_acc"] for p in pts],
                            yerr=[100 * p[1]["std"]["test_acc"] for p in pts], marker="o",
                            capsize=3, color=color, label=m)
    axes[0].set_xlabel(f"sequence length N (needle norm {s['base_norm']:g})")
    axes[1].set_xlabel(f"needle norm (N = {s['base_length']})")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_ylabel("test accuracy (%)")
        ax.axhline(50, color="gray", ls=":", lw=1)
        ax.set_ylim(40, 102)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{NAME}: one outlier token decides the label (mean ± sd, seeds "
                 f"{data['seeds']})", fontsize=10)
    fig.tight_layout()
    return savefig(fig, path)
