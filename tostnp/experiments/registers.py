"""registers: the ToST vision model with 0 and 4 register tokens; the Pi maps side by side.

Vision Transformers develop a few high-norm "artifact" tokens that hold global information
(Darcet et al. 2024); extra learned tokens ("registers", dropped before pooling) give that
information a place of its own. The reviewers asked whether ToST's coarse maps have the same
cause. TSSA has no token-to-token attention; what tokens share are the Pi-weighted second
moments of each head, sum_n Pi_nk w_nc^2. So the measures here are, on the test images, for
the last block:

* ``max_patch_share``: the largest share any single patch token has in those statistics
  (1/N if all tokens weigh the same; an artifact token takes a large share);
* ``register_share``: the share of all register tokens together;
* ``norm_ratio``: max / median norm of the patch tokens leaving the last block;

plus test accuracy, and the Pi maps of the last block for the same images (seed 0).
The "tiny-digits" preset (16 patch tokens on a 4 x 4 grid), trained for 120 epochs
(its training settings otherwise).
"""
from __future__ import annotations

import numpy as np

from .common import digits_settings, train_digits, fmt, markdown_table, savefig

NAME = "registers"
QUESTION = ("Do register tokens change ToST's membership maps and token statistics (the "
            "high-norm-artifact question)? Vision model with 0 and 4 registers.")
FULL = digits_settings(registers=[0, 4], epochs=120, max_steps=None, overrides={},
                       map_images=4)
QUICK = dict(FULL, epochs=1, max_steps=3, overrides=dict(patch_size=2, width=16, depth=1),
             map_images=2)


def _statistics(params, cfg, X):
    """The three measures on images X (host), and the last block's Pi (B, h, N + R)."""
    from .. import backend
    from ..models.vision import vision_forward
    from ..nn.layers import layer_norm_forward
    xp = backend.get_xp("cpu")
    _, cache = vision_forward(backend.from_host(xp, X, dtype=xp.float32), params, cfg)
    i = cfg.depth - 1
    pre = f"blocks.{i}."
    x_in = cache["tokens_in"][i]                                            # (B, N + R, C)
    a, _ = layer_norm_forward(x_in, params[pre + "ln1.gamma"], params[pre + "ln1.beta"],
                              cfg.ln_eps)
    w = np.asarray(a @ params[pre + "tssa.W_u"] + params[pre + "tssa.b_u"])  # (B, N + R, C)
    Pi = np.asarray(cache["blocks"][i]["Pi"])                                # (B, h, N + R)
    B, M, C = w.shape
    h = cfg.num_heads
    head_of = np.arange(C) // (C // h)
    contrib = np.sum(Pi.transpose(0, 2, 1)[:, :, head_of] * w ** 2, axis=-1)   # (B, N + R)
    share = contrib / contrib.sum(axis=1, keepdims=True)
    N = cfg.num_patches
    norms = np.linalg.norm(np.asarray(cache["tokens_out"]), axis=-1)          # (B, N)
    return {"max_patch_share": float(np.mean(share[:, :N].max(axis=1))),
            "register_share": float(np.mean(share[:, N:].sum(axis=1))),
            "norm_ratio": float(np.mean(norms.max(axis=1) / np.median(norms, axis=1)))}, Pi


def run(rec, s, seeds):
    from ..data import load_digits_split
    from ..models import get_vision_config
    data = load_digits_split()
    X_test, y_test = data[2], data[3]
    pick = [int(np.flatnonzero(y_test == c)[0]) for c in range(s["map_images"])]
    rec.data["map_images"] = {"test_index": pick, "images": X_test[pick, :, :, 0].tolist()}
    maps = {}
    for R in s["registers"]:
        cfg = get_vision_config(s["config"], num_registers=R, **s["overrides"])

        def one(seed, cfg=cfg, R=R):
            _, r, _ = train_digits(cfg, data, s, seed)
            stats, _ = _statistics(r["params"], cfg, X_test)
            if seed == seeds[0]:
                _, Pi = _statistics(r["params"], cfg, X_test[pick])
                maps[R] = Pi.tolist()
            return {"test_acc": r["final"]["test_acc"], **stats, "wall_s": r["wall_s"],
                    "cpu_s": r["cpu_s"]}
        rec.condition(one, seeds, desc=f"{NAME} R={R}", registers=R, grid=cfg.grid,
                      num_heads=cfg.num_heads)
    rec.data["pi_maps"] = {str(R): m for R, m in maps.items()}
    rec.data["pi_maps_seed"] = seeds[0]


def table(data) -> str:
    return markdown_table(
        ["registers", "test accuracy (%)", "largest patch share of the statistics (%)",
         "register share (%)", "max / median token norm"],
        [[e["registers"], fmt(e, "test_acc", 100, 1), fmt(e, "max_patch_share", 100, 1),
          fmt(e, "register_share", 100, 1), fmt(e, "norm_ratio", 1, 2)]
         for e in data["results"]])


def plot(data, path):
    import matplotlib.pyplot as plt
    maps = data.get("pi_maps", {})
    imgs = np.asarray(data["map_images"]["images"])
    Rs = [e["registers"] for e in data["results"]]
    grid, h = data["results"][0]["grid"], data["results"][0]["num_heads"]
    n = len(imgs)
    fig, axes = plt.subplots(n, 1 + h * len(Rs), figsize=(1.5 * (1 + h * len(Rs)), 1.6 * n + 0.8),
                             squeeze=False)
    for i in range(n):
        axes[i, 0].imshow(imgs[i], cmap="gray")
        for j, R in enumerate(Rs):
            Pi = np.asarray(maps[str(R)])[i]                                # (h, N + R)
            for k in range(h):
                ax = axes[i, 1 + j * h + k]
                ax.imshow(Pi[k, :grid * grid].reshape(grid, grid), cmap="magma", vmin=0, vmax=1)
                if i == 0:
                    ax.set_title(f"R={R}, head {k}", fontsize=8)
                if R and k == 0:
                    ax.set_xlabel("registers: " + " ".join(f"{v:.2f}" for v in Pi[:, grid * grid:]
                                                             .max(axis=0)), fontsize=6)
    axes[0, 0].set_title("input", fontsize=8)
    for ax in axes.ravel():
        ax.set_xticks([]); ax.set_yticks([])
    acc = ", ".join(f"R={e['registers']}: {100 * e['mean']['test_acc']:.1f}%" for e in
                    data["results"])
    fig.suptitle(f"{NAME}: last-block memberships Pi (seed {data.get('pi_maps_seed')}); "
                 f"test accuracy {acc}", fontsize=9)
    fig.tight_layout()
    return savefig(fig, path)
