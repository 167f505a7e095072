"""The training curves: loss (and accuracy) against step, drawn by the training loop into
``curves.png`` (written atomically, :mod:`tostnp.io.atomic`), with a caption saying how to read
them."""
from __future__ import annotations

import textwrap

from ..io.atomic import atomic_savefig

__all__ = ["plot_metrics", "curves_figure"]


def curves_figure(records: list, title: str = ""):
    """The figure of :func:`plot_metrics` (a matplotlib Figure; the caller closes it).

    Left: the training loss of each logged batch (a line) and the loss of every evaluation (a
    marker per evaluation); right, when there is one, the accuracy of every evaluation. The
    evaluation with the lowest validation loss -- the one ``best.npz`` holds -- is starred.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tr = [r for r in records if r["kind"] == "train"]
    ev = [r for r in records if r["kind"] == "eval"]
    acc_keys = [k for k in (ev[0] if ev else {}) if k.endswith("acc")]
    ncols = 2 if acc_keys else 1
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 4.6), squeeze=False,
                             layout="constrained")
    best = min((r for r in ev if "val_loss" in r), key=lambda r: r["val_loss"], default=None)
    ax = axes[0, 0]
    ax.plot([r["step"] for r in tr], [r["loss"] for r in tr], lw=1, alpha=0.7,
            label="train loss (one batch)")
    for k in (ev[0] if ev else {}):
        if k.endswith("loss"):
            ax.plot([r["step"] for r in ev], [r[k] for r in ev], "o-", ms=4, lw=1.2,
                    label=f"{k} ({len(ev)} evaluations)")
    ax.set_xlabel("step"); ax.set_ylabel("cross-entropy (nats)"); ax.set_yscale("log")
    ax.set_title("loss", fontsize=10)
    if acc_keys:
        ax = axes[0, 1]
        for k in acc_keys:
            ax.plot([r["step"] for r in ev], [r[k] for r in ev], "o-", ms=4, lw=1.2, label=k)
        ax.set_xlabel("step"); ax.set_ylabel("accuracy"); ax.set_title("accuracy", fontsize=10)
    if best is not None:
        for k, ax in zip(["val_loss"] + acc_keys[:1], axes[0]):
            ax.plot([best["step"]], [best[k]], "*", ms=13, color="C3", zorder=5,
                    label=f"best.npz (step {best['step']})")
    for ax in axes[0]:
        ax.legend(fontsize=8); ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    held = "validation set" if best is not None else "held-out set"
    text = (f"How to read: the thin line is the loss of each training batch (noisy; it falls "
            f"as the model fits the training data); the dots are the {held} at each "
            f"evaluation, the figure to trust. A {held} loss that turns up while the training "
            f"loss still falls is overfitting.")
    if best is not None:
        text += (" The star marks the lowest validation loss: the checkpoint best.npz, which "
                 "'evaluate' reads (checkpoint.npz is the last step). A small validation set "
                 "makes the dots noisy, and the star a noisy pick.")
    fig.supxlabel("\n".join(textwrap.wrap(text, 60 * ncols + 30)), fontsize=7, ha="left",
                  x=0.01, linespacing=1.3)
    return fig


def plot_metrics(records: list, path: str, title: str = "") -> None:
    """Training loss (and evaluation loss / accuracy when present) against step -> PNG."""
    fig = curves_figure(records, title)
    import matplotlib.pyplot as plt
    try:
        atomic_savefig(fig, path, dpi=110)
    finally:
        plt.close(fig)
