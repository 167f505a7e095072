"""The figures explain themselves: memberships.png has a colour bar for Π and a legend with one
colour per head for its argmax panel (a discrete colormap of exactly h colours), compression.png
and curves.png say how to read them, and the curves mark every validation point and the best.
Checked on the matplotlib figure objects."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tostnp.analysis.figures import memberships_figure, compression_figure  # noqa: E402
from tostnp.train.curves import curves_figure  # noqa: E402


def _caption(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts)


@pytest.fixture
def close():
    yield
    plt.close("all")


@pytest.mark.parametrize("h", [2, 4, 6])
def test_memberships_have_a_colour_bar_and_one_legend_colour_per_head(h, close):
    rng = np.random.default_rng(0)
    n, grid = 3, 4
    images = rng.random((n, 8, 8, 1))
    logits = rng.normal(size=(n, h, grid * grid)) * 3
    Pi = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)       # softmax over heads
    fig = memberships_figure(images, Pi, grid)
    bars = [im.colorbar for ax in fig.axes for im in ax.images if im.colorbar is not None]
    assert len(bars) == 1 and "Π" in bars[0].ax.get_xlabel() + bars[0].ax.get_ylabel()
    assert bars[0].mappable.norm.vmin == 0 and bars[0].mappable.norm.vmax == 1
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1
    labels = [t.get_text() for t in legends[0].get_texts()]
    assert labels == [f"head {k}" for k in range(h)]
    # the argmax panels: a discrete colormap of h colours, the legend's colours, every value
    # shown one of them (the argmax written here, not read from the figure code)
    colours = [tuple(p.get_facecolor()) for p in legends[0].get_patches()]
    assert len(set(colours)) == h
    seg_axes = [ax for ax in fig.axes if ax.get_title() == "argmax head"]
    assert len(seg_axes) == 1
    for i in range(n):
        seg = fig.axes[i * (h + 2) + h + 1].images[0]
        assert seg.cmap.N == h
        np.testing.assert_array_equal(np.asarray(seg.get_array()),
                                      Pi[i].argmax(axis=0).reshape(grid, grid))
        shown = {tuple(seg.cmap(seg.norm(k))) for k in range(h)}
        assert shown == set(colours)
    titles = [ax.get_title() for ax in fig.axes]
    assert "input" in titles and all(f"head {k}: Π_{k}" in titles for k in range(h))
    assert fig._suptitle.get_text() and "How to read" in _caption(fig)


def test_compression_says_how_to_read_it(close):
    curves = {"trained": (np.array([3.0, 2.5]), np.array([2.9, 2.4])),
              "at init": (np.array([3.1, 3.2]), np.array([3.15, 3.1]))}
    fig = compression_figure(curves)
    ax = fig.axes[0]
    assert ax.get_title() and ax.get_xlabel() == "layer" and ax.get_legend() is not None
    text = _caption(fig)
    assert "How to read" in text and "below" in text and "within one layer" in text


def _records(n_eval=20, turn=12):
    """A run of 200 steps: the validation loss falls until evaluation ``turn``, then rises."""
    recs = [{"step": s, "kind": "train", "loss": 2.0 / s ** 0.3} for s in range(1, 201, 5)]
    for i in range(1, n_eval + 1):
        v = 1.0 - 0.05 * min(i, turn) + 0.03 * max(i - turn, 0)
        recs.append({"step": 10 * i, "kind": "eval", "val_loss": v, "val_acc": 1 - v / 2})
    return recs


def test_curves_mark_every_validation_point_and_the_best(close):
    recs = _records()
    fig = curves_figure(recs, title="ToST on digits")
    loss_ax, acc_ax = fig.axes[:2]
    assert loss_ax.get_title() == "loss" and acc_ax.get_title() == "accuracy"
    val = [ln for ln in loss_ax.get_lines() if ln.get_label().startswith("val_loss")]
    assert len(val) == 1 and val[0].get_marker() == "o" and len(val[0].get_xdata()) == 20
    stars = [ln for ax in (loss_ax, acc_ax) for ln in ax.get_lines() if ln.get_marker() == "*"]
    assert len(stars) == 2 and all(list(s.get_xdata()) == [120] for s in stars)  # the 12th
    assert "best.npz" in stars[0].get_label()
    assert loss_ax.get_legend() is not None and acc_ax.get_legend() is not None
    assert fig._suptitle.get_text() == "ToST on digits"
    text = _caption(fig)
    assert "How to read" in text and "overfitting" in text and "best.npz" in text


def test_curves_without_a_validation_set_star_nothing(close):
    recs = [r if r["kind"] == "train" else {"step": r["step"], "kind": "eval",
                                            "test_loss": r["val_loss"]}
            for r in _records(5)]
    fig = curves_figure(recs)
    assert not [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "*"]
    assert "best.npz" not in _caption(fig)
