"""The training curves: loss (and accuracy) against step, drawn by the training loop into
``curves.png`` (written atomically, :mod:`tostnp.io.atomic`)."""
from __future__ import annotations

from ..io.atomic import atomic_savefig

__all__ = ["plot_metrics"]


def plot_metrics(records: list, path: str, title: str = "") -> None:
    """Training loss (and evaluation loss / accuracy when present) against step -> PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tr = [r for r in records if r["kind"] == "train"]
    ev = [r for r in records if r["kind"] == "eval"]
    acc_keys = [k for k in (ev[0] if ev else {}) if k.endswith("acc")]
    ncols = 2 if acc_keys else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 3.8), squeeze=False)
    ax = axes[0, 0]
    ax.plot([r["step"] for r in tr], [r["loss"] for r in tr], lw=1, label="train loss (batch)")
    for k in (ev[0] if ev else {}):
        if k.endswith("loss"):
            ax.plot([r["step"] for r in ev], [r[k] for r in ev], "o-", ms=3, label=k)
    ax.set_xlabel("step"); ax.set_ylabel("cross-entropy (nats)"); ax.set_yscale("log")
    ax.legend(); ax.grid(alpha=0.3)
    if acc_keys:
        ax = axes[0, 1]
        for k in acc_keys:
            ax.plot([r["step"] for r in ev], [r[k] for r in ev], "o-", ms=3, label=k)
        ax.set_xlabel("step"); ax.set_ylabel("accuracy"); ax.legend(); ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=110)
    plt.close(fig)
