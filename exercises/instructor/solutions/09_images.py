"""Reference solutions of exercises/09_images.md, one section per cell tagged ex-<name>."""
# %% ex-patchify
import numpy as np


def patchify_mine(images, P):
    """(B, H, W, Cin) -> (B, N, P*P*Cin): split both image axes, bring the grid axes first."""
    B, H, W, Cin = images.shape
    a = images.reshape(B, H // P, P, W // P, P, Cin).transpose(0, 1, 3, 2, 4, 5)
    return a.reshape(B, (H // P) * (W // P), P * P * Cin)


# %% ex-adam_step
import numpy as np


def adam_step_mine(p, g, m, v, t, lr, beta1, beta2, eps):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    return p - lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps), m, v


# %% ex-digits_training
import numpy as np
import array_api_compat.numpy as xp
from threadpoolctl import threadpool_limits
from tostnp.backend import RNG
from tostnp.data import load_digits_split
from tostnp.models import vision_init, vision_loss_and_grads
from tostnp.exercises import digits_config


def train_digits_mine(steps, seed):
    X, y, _, _ = load_digits_split(seed=0)
    cfg = digits_config()
    params = vision_init(cfg, RNG(seed), xp, dtype=xp.float32)
    m = {k: np.zeros_like(a) for k, a in params.items()}
    v = {k: np.zeros_like(a) for k, a in params.items()}
    rng = np.random.default_rng(seed)
    with threadpool_limits(limits=1):
        for t in range(1, steps + 1):
            idx = rng.integers(0, len(X), size=32)
            _, grads, _ = vision_loss_and_grads(params, X[idx], y[idx], cfg)
            for k in params:
                params[k], m[k], v[k] = adam_step_mine(params[k], grads[k], m[k], v[k], t,
                                                       1e-2, 0.9, 0.99, 1e-8)
    return params


# %% ex-membership_maps
import numpy as np
import matplotlib.pyplot as plt


def membership_maps_mine(Pi, grid):
    h = Pi.shape[0]
    fig, axes = plt.subplots(1, h, figsize=(2 * h, 2), squeeze=False)
    for k, ax in enumerate(axes[0]):
        ax.imshow(Pi[k].reshape(grid, grid), vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"head {k}")
        ax.set_xticks([]); ax.set_yticks([])
    return fig
