"""Conceptual diagrams of the book, drawn by code so that they are rebuilt with the book and the
slides (`.ci/build-slides`). Each function returns a matplotlib Figure; nothing is read from
disk. The geometry panels compute with tostnp itself (memberships, TSSA steps), so a picture
cannot drift from the operator it shows.

    attention_vs_tssa()     data flow and cost of softmax attention beside TSSA   (chapters 1, 5, 6)
    mcr2_geometry()         subspaces, soft memberships, expand R / compress R_c  (chapters 2, 4, 5)
    unrolled_optimisation() a layer as one gradient step on an objective          (chapters 3, 5, 8)
    causal_state()          prefix statistics and the O(1) decoder state           (chapters 6, 10)
    training_pipeline()     data -> model -> loss -> backward -> AdamW -> checkpoint (chapters 7, 9)
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Ellipse, FancyArrowPatch, FancyBboxPatch

__all__ = ["attention_vs_tssa", "mcr2_geometry", "unrolled_optimisation", "causal_state",
           "training_pipeline", "ALL"]

_BLUE, _ORANGE, _GREEN, _RED, _GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"


def _box(ax, x, y, w, h, text, color="#e8eef7", edge=_BLUE, size=12, weight="normal"):
    """A rounded box centred at (x, y) with centred text; returns its (left, right, bottom, top)."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.04",
                                facecolor=color, edgecolor=edge, linewidth=1.2))
    ax.text(x, y, text, ha="center", va="center", fontsize=size, weight=weight)
    return x - w / 2, x + w / 2, y - h / 2, y + h / 2


def _arrow(ax, p, q, text=None, color="black", size=11, offset=(0.0, 0.04), style="-|>"):
    ax.add_patch(FancyArrowPatch(p, q, arrowstyle=style, mutation_scale=12, color=color,
                                 linewidth=1.2, shrinkA=2, shrinkB=2))
    if text:
        ax.text((p[0] + q[0]) / 2 + offset[0], (p[1] + q[1]) / 2 + offset[1], text,
                ha="center", va="bottom", fontsize=size, color=color)


def _blank(ax, xlim=(0, 1), ylim=(0, 1)):
    ax.set_xlim(*xlim); ax.set_ylim(*ylim); ax.set_axis_off()


def attention_vs_tssa():
    """Softmax attention (one weight per pair of tokens) beside TSSA (p statistics per head)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    # --- attention
    ax = axes[0]; _blank(ax)
    ax.set_title("softmax attention:\nevery pair of tokens", fontsize=14)
    _box(ax, 0.1, 0.5, 0.17, 0.34, "tokens\n$X$\n$N\\times C$", size=12)
    _box(ax, 0.38, 0.84, 0.24, 0.16, "$Q = XW_q$\n$K = XW_k$", size=12)
    _box(ax, 0.38, 0.24, 0.24, 0.1, "$V = XW_v$", size=12)
    rng = np.random.default_rng(0)
    A = rng.random((8, 8)) ** 3
    A /= A.sum(axis=1, keepdims=True)
    ax.imshow(A, extent=(0.56, 0.8, 0.36, 0.62), cmap="Blues", aspect="auto", zorder=2)
    ax.text(0.68, 0.64, "$A$: $N\\times N$\nper head", ha="center", va="bottom", fontsize=12)
    _box(ax, 0.92, 0.5, 0.13, 0.2, "$AV$,\n$W_o$", color="#fdebd3", edge=_ORANGE, size=12)
    _arrow(ax, (0.19, 0.6), (0.26, 0.8)); _arrow(ax, (0.19, 0.4), (0.26, 0.25))
    _arrow(ax, (0.5, 0.8), (0.6, 0.63)); _arrow(ax, (0.8, 0.5), (0.855, 0.5))
    _arrow(ax, (0.5, 0.25), (0.88, 0.4))
    ax.text(0.5, -0.04, "time $O(N^2C + NC^2)$\nmemory $O(N^2)$ if $A$ is stored", ha="center",
            fontsize=12, color=_RED, weight="bold")
    # --- TSSA
    ax = axes[1]; _blank(ax)
    ax.set_title("TSSA:\nstatistics of the whole set", fontsize=14)
    _box(ax, 0.1, 0.5, 0.17, 0.34, "tokens\n$X$\n$N\\times C$", size=12)
    _box(ax, 0.36, 0.5, 0.18, 0.16, "$w = XW_u$", size=12)
    _box(ax, 0.66, 0.84, 0.3, 0.2, "per head $k$: $\\Pi$ and\n$m_k = \\sum_j \\Pi_{jk} w_{jk}^2 / n_k$",
         color="#e3f3e3", edge=_GREEN, size=12)
    _box(ax, 0.66, 0.2, 0.3, 0.16, "each token:\n$-\\Pi_{jk}\\,w_{jk} / (1 + m_k)$", size=12,
         color="#e3f3e3", edge=_GREEN)
    _box(ax, 0.93, 0.5, 0.11, 0.16, "$W_o$", color="#fdebd3", edge=_ORANGE, size=12)
    _arrow(ax, (0.19, 0.5), (0.27, 0.5))
    _arrow(ax, (0.42, 0.58), (0.51, 0.76)); ax.text(0.4, 0.7, "sum over\ntokens", ha="right", fontsize=11)
    _arrow(ax, (0.66, 0.74), (0.66, 0.28)); ax.text(0.68, 0.5, "$h\\times p$\nnumbers", ha="left", fontsize=11)
    _arrow(ax, (0.42, 0.42), (0.51, 0.24)); _arrow(ax, (0.81, 0.24), (0.9, 0.42))
    ax.text(0.5, -0.04, "time $O(NC^2)$, memory $O(NC)$\nno $N\\times N$ object", ha="center",
            fontsize=12, color=_GREEN, weight="bold")
    fig.tight_layout()
    return fig


def mcr2_geometry(seed=0):
    """Tokens near K = 3 lines in R^2, coloured by their soft memberships (tostnp.membership);
    right: the whole set's ellipse (R, to expand) and each group's (R_c, to compress)."""
    import tostnp
    rng = np.random.default_rng(seed)
    K, n_per = 3, 40
    angles = np.array([10.0, 70.0, 135.0]) * np.pi / 180
    U = np.stack([np.array([[np.cos(a)], [np.sin(a)]]) for a in angles])        # (K, 2, 1)
    Z = np.concatenate([rng.standard_normal((n_per, 1)) * 1.6 @ U[k].T
                        + 0.18 * rng.standard_normal((n_per, 2)) for k in range(K)])  # (n, 2)
    Pi = tostnp.membership(Z, U, 0.15)                                          # (n, K)
    colours = np.array([[0.12, 0.47, 0.71], [1.0, 0.5, 0.05], [0.17, 0.63, 0.17]])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    ax = axes[0]
    for k in range(K):
        u = U[k, :, 0]
        ax.plot([-4 * u[0], 4 * u[0]], [-4 * u[1], 4 * u[1]], color=colours[k], lw=1.5,
                label=f"subspace $U_{k + 1}$")
    ax.scatter(Z[:, 0], Z[:, 1], c=np.clip(Pi @ colours, 0, 1), s=18, edgecolor="k", linewidth=0.3)
    ax.set_title("tokens, subspaces and soft memberships $\\Pi$\n(colour = mix of the groups' colours)",
                 fontsize=12)
    ax.set_aspect("equal"); ax.set_xlim(-4, 4); ax.set_ylim(-4, 4); ax.legend(loc="lower left", fontsize=11)
    ax.set_xlabel("$z_1$"); ax.set_ylabel("$z_2$")
    ax = axes[1]
    ax.scatter(Z[:, 0], Z[:, 1], c=np.clip(Pi @ colours, 0, 1), s=10, alpha=0.6)

    def ellipse(M, colour, lw, ls, label):
        lam, V = np.linalg.eigh(M)
        ang = np.degrees(np.arctan2(V[1, -1], V[0, -1]))
        ax.add_patch(Ellipse((0, 0), 4 * np.sqrt(lam[-1]), 4 * np.sqrt(max(lam[0], 1e-6)), angle=ang,
                             fill=False, color=colour, lw=lw, ls=ls, label=label))

    ellipse(Z.T @ Z / len(Z), "black", 2.0, "--", "whole set: $R$ (expand)")
    for k in range(K):
        w = Pi[:, k]
        ellipse(Z.T @ (w[:, None] * Z) / w.sum(), colours[k], 1.5, "-",
                "each group: $R_c$ (compress)" if k == 0 else None)
    ax.set_aspect("equal"); ax.set_xlim(-4, 4); ax.set_ylim(-4, 4)
    ax.set_title("MCR$^2$: $\\Delta R = R - R_c$\ncoding rate ~ log-volume of each 2-sd ellipse", fontsize=12)
    ax.legend(loc="lower left", fontsize=11); ax.set_xlabel("$z_1$")
    fig.tight_layout()
    return fig


def unrolled_optimisation():
    """Left: a network as unrolled steps Z^{l+1} = Z^l - tau grad R(Z^l | U^l). Right: the same
    steps on a 2-D objective, each arrow one layer."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1.25, 1]})
    ax = axes[0]; _blank(ax)
    ax.set_title("a layer is one gradient step", fontsize=13)
    xs = [0.08, 0.36, 0.64, 0.92]
    for i, x in enumerate(xs):
        ax.text(x, 0.72, f"$Z^{{{i}}}$" if i < 3 else "$Z^{L}$", ha="center", fontsize=13)
    for i in range(3):
        x = (xs[i] + xs[i + 1]) / 2
        lab = f"layer {i + 1}" if i < 2 else "layer $L$"
        _box(ax, x, 0.45, 0.2, 0.22, f"{lab}\n$Z - \\tau\\nabla R_c^{{var}}$\n$(Z\\mid U^{{{i + 1 if i < 2 else 'L'}}})$",
             size=11, color="#e3f3e3", edge=_GREEN)
        _arrow(ax, (xs[i] + 0.03, 0.7), (x - 0.05, 0.57)); _arrow(ax, (x + 0.05, 0.57), (xs[i + 1] - 0.03, 0.7))
    ax.text(0.5, 0.16, "weights $U^{\\ell}$ = the bases of step $\\ell$ (learned)\n"
            "residual connection = the \"$Z +$\" of the step; depth = number of iterations",
            ha="center", fontsize=11)
    ax = axes[1]
    A = np.array([[1.6, 0.5], [0.5, 0.7]])
    g = np.linspace(-2.2, 2.2, 200)
    X, Y = np.meshgrid(g, g)
    F = 0.5 * (A[0, 0] * X**2 + 2 * A[0, 1] * X * Y + A[1, 1] * Y**2)
    ax.contourf(X, Y, F, levels=12, cmap="Greys", alpha=0.35)
    cs = ax.contour(X, Y, F, levels=12, colors="grey", linewidths=0.6)
    ax.clabel(cs, cs.levels[::3], fontsize=10)
    z = np.array([-1.9, 1.8]); pts = [z]
    for _ in range(6):
        z = z - 0.45 * A @ z; pts.append(z)
    pts = np.array(pts)
    ax.plot(pts[:, 0], pts[:, 1], "o-", color=_GREEN)
    for i, (a, b) in enumerate(pts[:4]):
        ax.annotate(f"$Z^{{{i}}}$", (a, b), textcoords="offset points", xytext=(6, 4), fontsize=11)
    ax.set_title("the same steps on an objective (contours)", fontsize=12)
    ax.set_xlabel("token coordinate 1"); ax.set_ylabel("token coordinate 2"); ax.set_aspect("equal")
    fig.tight_layout()
    return fig


def causal_state():
    """Prefix sums S^1, S^2, S^3 carried from token to token (a fixed-size state), against a
    key/value cache that grows with the context."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [1.4, 1]})
    ax = axes[0]; _blank(ax)
    ax.set_title("causal TSSA: token $t$ sees its prefix through sums", fontsize=13)
    T = 5
    for t in range(T):
        x = 0.1 + 0.19 * t
        _box(ax, x, 0.82, 0.12, 0.12, f"$w_{t}$" if t < T - 1 else "$w_t$", size=10)
        _box(ax, x, 0.45, 0.13, 0.2, f"$S^1, S^2, S^3$\nafter {t if t < T - 1 else 't'}", size=10,
             color="#e3f3e3", edge=_GREEN)
        _arrow(ax, (x, 0.76), (x, 0.56), "+" if t else "", offset=(0.02, -0.02))
        _box(ax, x, 0.12, 0.12, 0.1, f"out$_{t}$" if t < T - 1 else "out$_t$", size=11, color="#fdebd3",
             edge=_ORANGE)
        _arrow(ax, (x, 0.35), (x, 0.17))
        if t < T - 1:
            _arrow(ax, (x + 0.065, 0.45), (x + 0.125, 0.45), color=_GREEN, style="-|>")
    ax.text(0.5, 0.63, "state: $S^1, S^2$ ($h\\times p$ each), $S^3$ ($h$): the same size at every $t$",
            ha="center", fontsize=11, color=_GREEN)
    ax = axes[1]
    t = np.array([64, 256, 1024, 4096, 16384])
    C, L, h, p = 256, 4, 4, 64
    kv = 2 * L * t * C * 4                        # bytes: keys and values of every past token, float32
    state = L * (2 * h * p + h) * 4 * np.ones_like(t)   # S^1, S^2 (h x p each) and S^3 (h), float32
    ax.loglog(t, kv / 2**20, "s--", label="key/value cache (grows with $t$)")
    ax.loglog(t, state / 2**20, "o-", color=_GREEN, label="TSSA decoder state (fixed)")
    ax.set_xlabel("context $t$ (tokens)"); ax.set_ylabel("state per sequence (MiB)")
    ax.set_title(f"decoder state, width {C}, {L} layers, {h} heads", fontsize=12)
    ax.legend(fontsize=11)
    fig.tight_layout()
    return fig


def training_pipeline():
    """What one training run does, from data to checkpoint (tostnp.train.loop)."""
    fig, ax = plt.subplots(figsize=(11, 5))
    _blank(ax)
    ax.set_title("a training run (tostnp.train.loop): one step, and what survives a kill", fontsize=14)
    w, h = 0.19, 0.2
    _box(ax, 0.11, 0.78, w, h, "data\n(digits / text)\nseeded RNG", color="#eeeeee", edge=_GREY, size=12)
    _box(ax, 0.37, 0.78, w, h, "batch\ntoken ids or\n8x8 images", color="#eeeeee", edge=_GREY, size=12)
    _box(ax, 0.63, 0.78, w, h, "forward\nembed, $L$ ToST\nblocks, head", size=12)
    _box(ax, 0.89, 0.78, w, h, "loss\ncross-\nentropy", size=12)
    _box(ax, 0.89, 0.42, w, h, "backward\nhand-written\n(chapter 7)", color="#fdebd3", edge=_ORANGE, size=12)
    _box(ax, 0.63, 0.42, w, h, "clip gradients,\nAdamW, warm-up\n+ cosine lr", color="#fdebd3",
         edge=_ORANGE, size=12)
    _box(ax, 0.3, 0.42, 0.3, h, "checkpoint every 5% and at\nthe end: weights, AdamW\nmoments, data RNG state",
         color="#e3f3e3", edge=_GREEN, size=12)
    for a, b in ((0.205, 0.275), (0.465, 0.535), (0.725, 0.795)):
        _arrow(ax, (a, 0.78), (b, 0.78))
    _arrow(ax, (0.89, 0.68), (0.89, 0.52)); _arrow(ax, (0.795, 0.42), (0.725, 0.42))
    _arrow(ax, (0.63, 0.52), (0.63, 0.68)); ax.text(0.645, 0.6, "next step", fontsize=11, color=_BLUE)
    _arrow(ax, (0.535, 0.42), (0.455, 0.42), color=_GREEN)
    ax.text(0.5, 0.1, "checkpoints written atomically: a killed run resumes bit-identically\n"
            "metrics.jsonl one line per record; a NaN stops the run before the update",
            ha="center", fontsize=12)
    fig.tight_layout()
    return fig


ALL = {"attention_vs_tssa": attention_vs_tssa, "mcr2_geometry": mcr2_geometry,
       "unrolled_optimisation": unrolled_optimisation, "causal_state": causal_state,
       "training_pipeline": training_pipeline}
