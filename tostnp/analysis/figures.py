"""Interpretability figures for a trained ToST vision model (``python -m tostnp figures``).

1. ``memberships.png`` -- the membership Pi of every head of the LAST ToST block, reshaped to
   the patch grid and overlaid on a few test images; the last column colours each patch by the
   head that claims it (argmax_k Pi). Pi is a softmax over heads, one distribution per token
   (book: eq-layer-pi), so the heads partition the image softly.

2. ``compression.png`` -- the variational compression term R^var_c measured at each layer
   (book: eq-Rvar) with the layer's OWN subspaces and memberships, for the trained model and for
   the same architecture at initialisation. Exactly what is measured, at layer l (input x_l):

       Z_l   = LN1_l(x_l)                                   the TSSA layer's input   (B, N, C)
       U_l   = W_u of layer l split into h head blocks       U_k = W_u[:, k p:(k+1) p] (C, p),
               with the bias b_u appended as a last row and a 1 appended to every token, so
               that z U_k = w_k exactly as inside the layer
       Pi_l  = the layer's memberships (B, N, h) (held fixed, as in the gradient step)
       f(x)  = log(1 + x)  (eps^2 = d: the layer absorbs d/eps^2 into its weights)

   and two values per layer, averaged over a batch of test images:
       "TSSA input":  R^var_c(Z_l, Pi_l | U_l)
       "TSSA output": R^var_c(LN1_l(x_l + gamma1 * TSSA_l(Z_l)), Pi_l | U_l) -- the same
                      objective after the layer's TSSA residual update (re-normalised by the
                      same LN1, so the two are on the same scale).
   The output value below the input value means the layer's TSSA step lowered the objective it
   was derived from. Compare the two values WITHIN a layer only: each layer measures R^var_c
   with its own U_l and Pi_l, so values at different layers are not comparable (book:
   08_tost_block.md), and the lines joining the layers guide the eye, not a trend. (The paper
   reports a fall with depth for its ImageNet models; this figure cannot show that.)

3. ``curves.png`` -- training and evaluation loss (and accuracy) against step
   (:func:`tostnp.train.curves.plot_metrics`, written by the training loop).

Every file is written atomically by :mod:`tostnp.io.atomic`.
"""
from __future__ import annotations

import os

import numpy as np

from .. import backend
from ..io.atomic import atomic_savefig, atomic_write_text
from ..nn import layers as L
from ..nn import tssa as T
from ..nn.params import sub
from ..math.variational import variational_compression

__all__ = ["layer_statistics", "vision_figures", "plot_memberships", "plot_compression",
           "memberships_figure", "compression_figure"]


def layer_statistics(params: dict, cfg, images) -> list:
    """Per ToST block l: {"Pi" (B, h, N), "R_in" (B,), "R_out" (B,)} (see the module docstring).

    images: (B, H, W, Cin) on the model's device -> list of dicts of arrays (same namespace).
    """
    from ..models.vision import vision_forward
    if cfg.mixer != "tssa":
        raise ValueError(f"layer statistics need TSSA blocks; this model's mixer is {cfg.mixer!r}")
    xp = backend.namespace(images)
    _, cache = vision_forward(images, params, cfg)
    h, C = cfg.num_heads, cfg.width
    p = C // h
    out = []
    for l, x in enumerate(cache["tokens_in"]):                        # x: (B, N, C)
        bp = sub(params, f"blocks.{l}")
        Z, _ = L.layer_norm_forward(x, bp["ln1.gamma"], bp["ln1.beta"], cfg.ln_eps)
        y, tc = T.tssa_forward(Z, sub(bp, "tssa"), h, causal=False)  # (B, N, C)
        Pi = tc["Pi"]                                                 # (B, h, N)
        x_mid = x + y * bp["ls1.gamma"]
        Z_out, _ = L.layer_norm_forward(x_mid, bp["ln1.gamma"], bp["ln1.beta"], cfg.ln_eps)
        W_u = bp["tssa.W_u"]
        b_u = bp.get("tssa.b_u", xp.zeros((C,), dtype=W_u.dtype, device=backend.device_of(W_u)))
        Wb = xp.concat([W_u, xp.reshape(b_u, (1, C))], axis=0)        # (C+1, C)
        U = xp.permute_dims(xp.reshape(Wb, (C + 1, h, p)), (1, 0, 2))  # (h, C+1, p)
        Pi_rows = xp.permute_dims(Pi, (0, 2, 1))                      # (B, N, h)
        eps = float(C + 1) ** 0.5                                     # d / eps^2 = 1

        def with_one(Zt):
            one = xp.ones(tuple(Zt.shape[:-1]) + (1,), dtype=Zt.dtype,
                          device=backend.device_of(Zt))
            return xp.concat([Zt, one], axis=-1)                      # (B, N, C+1)
        out.append({"Pi": Pi,
                    "R_in": variational_compression(with_one(Z), Pi_rows, U, eps),
                    "R_out": variational_compression(with_one(Z_out), Pi_rows, U, eps)})
    return out


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _caption(fig, text: str, width: int) -> None:
    """How to read the figure, in small type under it (inside the PNG, laid out with it)."""
    import textwrap
    fig.supxlabel("\n".join(textwrap.wrap("How to read: " + text, width)), fontsize=7,
                  ha="left", x=0.01, linespacing=1.3)


def memberships_figure(images_host, Pi_host, grid: int, title: str = ""):
    """The figure of :func:`plot_memberships` (a matplotlib Figure; the caller closes it)."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    n, h = Pi_host.shape[0], Pi_host.shape[1]
    heads = ListedColormap([plt.get_cmap("tab10" if h <= 10 else "tab20")(k % 20)
                            for k in range(h)], name="heads")       # one colour per head
    fig, axes = plt.subplots(n, h + 2, figsize=(1.7 * (h + 2) + 1.6, 1.8 * n + 1.5),
                             squeeze=False, layout="constrained")
    for i in range(n):
        img = images_host[i]
        shown = img[..., 0] if img.shape[-1] == 1 else img
        cmap = "gray" if img.shape[-1] == 1 else None
        Hh, Ww = shown.shape[:2]
        ext = (-0.5, Ww - 0.5, Hh - 0.5, -0.5)
        axes[i, 0].imshow(shown, cmap=cmap)
        for k in range(h):
            a = axes[i, k + 1]
            a.imshow(shown, cmap=cmap)
            pi_image = a.imshow(Pi_host[i, k].reshape(grid, grid), cmap="magma", alpha=0.6,
                                vmin=0, vmax=1, extent=ext, interpolation="nearest")
            if i == 0:
                a.set_title(f"head {k}: Π_{k}", fontsize=9)
        seg = Pi_host[i].argmax(axis=0).reshape(grid, grid)
        # solid colours (exactly one per head, as in the legend), the image as an outline
        axes[i, h + 1].imshow(seg, cmap=heads, vmin=-0.5, vmax=h - 0.5, extent=ext,
                              interpolation="nearest")
        gray = shown if shown.ndim == 2 else shown.mean(axis=-1)
        if gray.max() > gray.min():
            axes[i, h + 1].contour(gray, levels=[(gray.min() + gray.max()) / 2], colors="white",
                                   linewidths=1.0)
        if i == 0:
            axes[i, 0].set_title("input", fontsize=9)
            axes[i, h + 1].set_title("argmax head", fontsize=9)
    for a in axes.ravel():
        a.set_xticks([]); a.set_yticks([])
    fig.colorbar(pi_image, ax=axes[:, 1:h + 1], shrink=0.8, location="bottom", aspect=40,
                 label="membership Π_k of a patch (over the heads, a patch's Π sum to 1)")
    axes[0, h + 1].legend(handles=[Patch(color=heads(k), label=f"head {k}") for k in range(h)],
                          title="argmax", fontsize=7, title_fontsize=7, loc="upper left",
                          bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    fig.suptitle(title or "TSSA memberships Π (last block) on the patch grid", fontsize=10)
    _caption(fig, "one test image per row. In the head columns, the brighter a patch, the more "
                  "of it that head claims (Π is a softmax over the heads, so the heads share "
                  "each patch). The last column colours each patch by the head with the largest "
                  "share (legend), the white line outlining the image. Heads that claim "
                  "different parts of the image have specialised; with few patches per image "
                  "(digits: a 4x4 grid) the split can only be coarse.",
             width=int(17 * (1.7 * (h + 2) + 1.6)))
    return fig


def plot_memberships(images_host, Pi_host, grid: int, path: str, title: str = "") -> str:
    """images_host (n, H, W, Cin) in [0, 1]; Pi_host (n, h, N) with N = grid^2 -> PNG path."""
    return _save(memberships_figure(images_host, Pi_host, grid, title), path)


def compression_figure(curves: dict, title: str = ""):
    """The figure of :func:`plot_compression` (a matplotlib Figure; the caller closes it)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.8, 4.8), layout="constrained")
    for (label, (r_in, r_out)), color in zip(curves.items(), ("C0", "C1", "C2", "C3")):
        layers = np.arange(1, len(r_in) + 1)
        ls = "-" if "trained" in label else "--"
        ax.plot(layers, r_in, ls, marker="o", color=color, label=f"{label}: TSSA input")
        ax.plot(layers, r_out, ls, marker="v", color=color, alpha=0.6,
                label=f"{label}: after TSSA update")
    ax.set_xlabel("layer"); ax.set_ylabel("R^var_c (nats, mean over images)")
    ax.set_xticks(np.arange(1, len(r_in) + 1))
    ax.grid(alpha=0.3); ax.legend(fontsize=7)
    ax.set_title(title or "R^var_c before/after each layer's TSSA update\n"
                 "(each layer in its own coordinates: compare within a layer, not across)",
                 fontsize=9)
    _caption(fig, "within one layer, a triangle (after the layer's TSSA update) below its "
                  "circle (the layer's input) means the update lowered R^var_c, the objective "
                  "the TSSA step descends; that is the layer doing what it was derived to do. "
                  "Solid: the trained model; dashed: the same model at initialisation. A trained "
                  "model need not lower it in every layer (its weights are trained for the "
                  "loss), and values are not comparable across layers.", width=100)
    return fig


def plot_compression(curves: dict, path: str, title: str = "") -> str:
    """curves: {label: (R_in (depth,), R_out (depth,))} host arrays -> PNG path."""
    return _save(compression_figure(curves, title), path)


def _save(fig, path: str) -> str:
    plt = _pyplot()
    try:
        atomic_savefig(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def vision_figures(checkpoint: str, out_dir: str, *, xp=None, num_images: int = 4,
                   num_stat_images: int = 256, data_dir=None) -> list:
    """Both figures for a vision checkpoint -> [memberships.png, compression.png] paths.

    Uses the test images of the dataset the checkpoint was trained on. Also writes the
    measured per-layer values to ``compression.json`` next to the figure.
    """
    import json
    from ..io import load_model
    from ..data import load_vision_data
    from ..models.vision import vision_init
    xp = backend.get_xp("cpu") if xp is None else xp
    kind, cfg, params, config = load_model(checkpoint, xp=xp)
    if config.get("data", "") is None:
        from ..backend.runtime import how_to_run
        raise ValueError(f"{checkpoint} holds imported weights without a dataset; import again "
                         f"with '{how_to_run('convert', 'FILE', 'DIR', '--like', 'RUN')}'")
    if kind != "vision":
        raise ValueError(f"figures need a vision checkpoint; {checkpoint!r} is a {kind!r} model")
    from ..models.memory import check_model_fits
    check_model_fits(kind, cfg, max(num_images, num_stat_images), training=False,
                     what=f"the figures of {checkpoint}")
    _, _, X_test, y_test = load_vision_data(config.get("data", "digits"),
                                           data_dir or config.get("data_dir"))
    os.makedirs(out_dir, exist_ok=True)
    # images: one per class first (varied), then the first num_stat_images for the statistics
    pick = [int(np.flatnonzero(y_test == c)[0]) for c in np.unique(y_test)[:num_images]]
    imgs = backend.from_host(xp, X_test[pick], dtype=xp.float32)
    stats = layer_statistics(params, cfg, imgs)
    Pi_last = backend.to_host(stats[-1]["Pi"])[:, :, :cfg.num_patches]   # registers dropped
    p1 = plot_memberships(X_test[pick], Pi_last, cfg.grid, os.path.join(out_dir,
                                                                          "memberships.png"))
    batch = backend.from_host(xp, X_test[:num_stat_images], dtype=xp.float32)
    init = vision_init(cfg, backend.RNG(int(config.get("train", {}).get("seed", 0))), xp)
    curves, record = {}, {}
    for label, pr in (("trained", params), ("at init", init)):
        st = layer_statistics(pr, cfg, batch)
        r_in = np.array([float(xp.mean(s["R_in"])) for s in st])
        r_out = np.array([float(xp.mean(s["R_out"])) for s in st])
        curves[label] = (r_in, r_out)
        record[label] = {"R_in": r_in.tolist(), "R_out": r_out.tolist()}
    p2 = plot_compression(curves, os.path.join(out_dir, "compression.png"))
    atomic_write_text(os.path.join(out_dir, "compression.json"),
                      json.dumps({"measured": "mean over test images of R^var_c at each layer; "
                                  "see tostnp/analysis/figures.py", **record}, indent=1))
    return [p1, p2]
