"""Checkers for exercises/09_images.md: patches, an Adam step, a training loop that reaches a
stated accuracy on digits, and membership maps (a figure whose pixels the checker reads)."""
from __future__ import annotations

import numpy as np

from ._core import FigureData
from ._core import Fail, call_student, case, run_cases, run_specs, say
from ._compare import compare

_FORBID = ("tostnp.nn.layers", "tostnp.train.optim")
TARGET_ACCURACY = 0.85


def check_patchify(fn, hidden=None):
    """fn(images (B, H, W, Cin), P) -> (B, N, P*P*Cin): patches on a row-major grid, each
    flattened in (row, column, channel) order."""
    specs = [(2, 4, 4, 1, 2), (1, 6, 4, 3, 2), (3, 8, 8, 2, 4), (1, 3, 3, 1, 1)]
    hidden_specs = [(1, 6, 9, 1, 3)]

    def one(rng, B, H, W, Cin, P):
        X = rng.standard_normal((B, H, W, Cin))
        want = np.zeros((B, (H // P) * (W // P), P * P * Cin))
        for b in range(B):
            for i in range(H // P):
                for j in range(W // P):
                    want[b, i * (W // P) + j] = [X[b, i * P + r, j * P + c, ch] for r in range(P)
                                                 for c in range(P) for ch in range(Cin)]
        a = X.reshape(B, H // P, P, W // P, P, Cin)
        diag = [("the grid is read column by column: patches go row-major (left to right, "
                 "then down)",
                 lambda: a.transpose(0, 3, 1, 2, 4, 5).reshape(want.shape)),
                ("inside a patch the order is (row, column, channel)",
                 lambda: a.transpose(0, 1, 3, 4, 2, 5).reshape(want.shape)),
                ("the channel must be the fastest-varying index inside a patch",
                 lambda: a.transpose(0, 1, 3, 5, 2, 4).reshape(want.shape)),
                ("a plain reshape does not cut patches: split both image axes first",
                 lambda: X.reshape(want.shape))]
        got = call_student(fn, X.copy(), P, forbidden=_FORBID, what="patchify")
        compare(got, want, f"patches for (B, H, W, Cin) = {(B, H, W, Cin)}, P={P}",
                shape_desc="(B, N, P*P*Cin)", diagnoses=diag)
    return run_specs("patchify", one, specs, hidden_specs, hidden=hidden, seed=71,
                     label=lambda B, H, W, Cin, P: f"{(B, H, W, Cin)}, P={P}")


def check_adam_step(fn, hidden=None):
    """fn(p, g, m, v, t, lr, beta1, beta2, eps) -> (p, m, v): one Adam step (t counts from 1,
    bias-corrected moments, no weight decay). Inputs are not modified."""
    specs = [((5,), 1), ((3, 4), 2), ((2,), 10), ((4, 1), 1000)]
    hidden_specs = [((), 3)]

    def one(rng, shape, t):
        p, g = rng.standard_normal(shape), rng.standard_normal(shape)
        m, v = 0.1 * rng.standard_normal(shape), rng.uniform(0, 0.1, shape)
        lr, b1, b2, eps = 1e-2, 0.9, 0.99, 1e-8
        m2 = b1 * m + (1 - b1) * g
        v2 = b2 * v + (1 - b2) * g * g
        want = p - lr * (m2 / (1 - b1**t)) / (np.sqrt(v2 / (1 - b2**t)) + eps)
        ins = [np.array(a) for a in (p, g, m, v)]
        got = call_student(fn, *[a.copy() for a in ins], t, lr, b1, b2, eps,
                           forbidden=_FORBID, what="adam_step")
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise Fail("return a triple (p, m, v)")
        compare(got[1], m2, f"m for shape {shape}, t={t}")
        compare(got[2], v2, f"v for shape {shape}, t={t}",
                diagnoses=[("v averages the squared gradient", lambda: b2 * v + (1 - b2) * g)])
        diag = [("the moments need the bias correction 1 - beta^t",
                 lambda: p - lr * m2 / (np.sqrt(v2) + eps)),
                ("the step divides by the square root of v",
                 lambda: p - lr * (m2 / (1 - b1**t)) / (v2 / (1 - b2**t) + eps)),
                ("the step goes against the gradient",
                 lambda: p + lr * (m2 / (1 - b1**t)) / (np.sqrt(v2 / (1 - b2**t)) + eps)),
                ("the bias correction uses t - 1: t counts steps from 1",
                 lambda: p - lr * (m2 / (1 - b1**(t + 1))) / (np.sqrt(v2 / (1 - b2**(t + 1)))
                                                             + eps))]
        compare(got[0], want, f"p for shape {shape}, t={t}", diagnoses=diag)
    return run_specs("adam_step", one, specs, hidden_specs, hidden=hidden, seed=72,
                     label=lambda shape, t: f"shape {shape}, t={t}")


def check_digits_training(fn, hidden=None):
    """fn(steps, seed) -> params of the notebook's ToST (``tostnp.models.vision_init`` with the
    config ``digits_config()``) trained on the digits training split; the test split must reach
    the stated accuracy."""
    from tostnp.data import load_digits_split
    from tostnp.models import vision_predict

    def one():
        params = call_student(fn, 150, 0, what="train_digits")   # no profiler: keep it fast
        if not isinstance(params, dict) or not params:
            raise Fail("return the trained parameters: a dict {name: array}")
        want = set(_init_params())
        if set(params) != want:
            raise Fail(f"the parameters' keys differ from vision_init's: missing "
                       f"{sorted(want - set(params))[:3]}, extra {sorted(set(params) - want)[:3]}")
        bad = [k for k, v in params.items() if not np.all(np.isfinite(np.asarray(v)))]
        if bad:
            raise Fail(f"params[{bad[0]!r}] holds NaN or inf: the learning rate is too large, or "
                       "an update divides by zero")
        _, _, X_test, y_test = load_digits_split(seed=0)
        acc = float(np.mean(np.asarray(vision_predict(params, X_test.astype(
            np.asarray(next(iter(params.values()))).dtype), digits_config())) == y_test))
        say(f"  test accuracy {acc:.3f} (target {TARGET_ACCURACY})")
        if acc < TARGET_ACCURACY:
            raise Fail(f"test accuracy {acc:.3f} is below {TARGET_ACCURACY}: does the training "
                       "loss fall? (the sign of the update, the learning rate, every parameter "
                       "written back after each step, fresh minibatches each step)")
    return run_cases("digits_training", [case("150 steps, seed 0", one)], points=2.0)


check_digits_training.points = 2.0


def digits_config():
    """The small ToST the notebook trains: 16 tokens of width 32, one block, mean pooling."""
    from tostnp.models import get_vision_config
    return get_vision_config("tiny-digits", width=32, depth=1, num_heads=4, pool="mean")


def _init_params():
    import array_api_compat.numpy as xp
    from tostnp.backend import RNG
    from tostnp.models import vision_init
    return vision_init(digits_config(), RNG(0), xp, dtype=xp.float32)


def _figure_images(fig, h):
    """[(pixels, (vmin, vmax))] of the figure's images: a matplotlib Figure (checked in the
    notebook) or the FigureData the grading child reads from it."""
    from matplotlib.figure import Figure
    if isinstance(fig, FigureData):
        ims = fig.images
    elif isinstance(fig, Figure):
        ims = [(np.asarray(im.get_array(), dtype=float), im.get_clim())
               for ax in fig.axes for im in ax.get_images()]
    else:
        raise Fail(f"return the matplotlib Figure (got {type(fig).__name__})")
    if len(ims) != h:
        raise Fail(f"the figure shows {len(ims)} image(s); one per head ({h}) "
                   "is expected (imshow in one panel per head)")
    return [(np.asarray(a, dtype=float), (float(lo), float(hi))) for a, (lo, hi) in ims]


# a plot may hold float32 pixels (the exercise allows it): memberships lie in [0, 1], so float32
# rounding leaves a relative error below 6e-8; every planted bug is off by far more
_PLOT_RTOL = 1e-6


def check_membership_maps(fn, hidden=None):
    """fn(Pi, grid) -> a matplotlib Figure with one image per head k showing Pi[k] (N,) on the
    grid x grid patch layout (row-major), all on one colour scale from 0 to 1."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    specs = [(4, 4), (2, 3), (3, 5)]
    hidden_specs = [(1, 2)]

    def one(rng, h, grid):
        Pi = rng.dirichlet(np.ones(h), size=grid * grid).T            # (h, N)
        fig = call_student(fn, Pi.copy(), grid, what="membership_maps")
        try:
            for k, (arr, (lo, hi)) in enumerate(_figure_images(fig, h)):
                compare(arr, Pi[k].reshape(grid, grid), f"the image of head {k} ({h} heads, "
                        f"{grid}x{grid} grid)", shape_desc="(grid, grid)", rtol=_PLOT_RTOL,
                        need_float64=False,
                        diagnoses=[("patches are laid out row by row: reshape in C order",
                                    lambda k=k: Pi[k].reshape(grid, grid, order="F"))])
                if (lo, hi) != (0.0, 1.0):
                    raise Fail(f"head {k}'s colour scale runs from {lo:.3g} to {hi:.3g}: "
                               "memberships are probabilities, so share one scale from 0 "
                               "to 1 across heads (vmin, vmax)")
        finally:
            if isinstance(fig, Figure):
                plt.close(fig)
    return run_specs("membership_maps", one, specs, hidden_specs, hidden=hidden, seed=74,
                     label=lambda h, grid: f"h={h}, grid={grid}")
