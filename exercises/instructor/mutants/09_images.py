"""Planted bugs for the checkers of exercises/09_images.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "patchify": [
        ("column-major grid", "def patchify_mine(images, P):\n"
         "    B, H, W, C = images.shape\n"
         "    a = images.reshape(B, H // P, P, W // P, P, C).transpose(0, 3, 1, 2, 4, 5)\n"
         "    return a.reshape(B, -1, P * P * C)\n", "column by column"),
        ("(col, row) inside", "def patchify_mine(images, P):\n"
         "    B, H, W, C = images.shape\n"
         "    a = images.reshape(B, H // P, P, W // P, P, C).transpose(0, 1, 3, 4, 2, 5)\n"
         "    return a.reshape(B, -1, P * P * C)\n", "(row, column, channel)"),
        ("channel first inside", "def patchify_mine(images, P):\n"
         "    B, H, W, C = images.shape\n"
         "    a = images.reshape(B, H // P, P, W // P, P, C).transpose(0, 1, 3, 5, 2, 4)\n"
         "    return a.reshape(B, -1, P * P * C)\n", "fastest-varying"),
        ("plain reshape", "def patchify_mine(images, P):\n"
         "    B, H, W, C = images.shape\n    return images.reshape(B, -1, P * P * C)\n",
         "does not cut patches"),
    ],
    "adam_step": [
        ("no bias correction", "def adam_step_mine(p, g, m, v, t, lr, b1, b2, eps):\n"
         "    m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g\n"
         "    return p - lr * m / (np.sqrt(v) + eps), m, v\n", "bias correction"),
        ("no sqrt", "def adam_step_mine(p, g, m, v, t, lr, b1, b2, eps):\n"
         "    m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g\n"
         "    return p - lr * (m / (1 - b1**t)) / (v / (1 - b2**t) + eps), m, v\n",
         "square root"),
        ("ascent", "_ok = adam_step_mine\n"
         "def adam_step_mine(p, g, m, v, t, lr, b1, b2, eps):\n"
         "    return _ok(p, -g, -m, v, t, lr, b1, b2, eps)[0], *_ok(p, g, m, v, t, lr, b1, b2,"
         " eps)[1:]\n", "against the gradient"),
        ("v of g, not g^2", "def adam_step_mine(p, g, m, v, t, lr, b1, b2, eps):\n"
         "    m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g\n"
         "    return p - lr * m / (np.sqrt(np.abs(v)) + eps), m, v\n", "squared gradient"),
        ("t + 1 in the correction", "_ok = adam_step_mine\n"
         "def adam_step_mine(p, g, m, v, t, lr, b1, b2, eps):\n"
         "    return _ok(p, g, m, v, t + 1, lr, b1, b2, eps)\n", "t counts steps from 1"),
    ],
    "digits_training": [
        ("returns the untrained params",
         "def train_digits_mine(steps, seed):\n"
         "    import array_api_compat.numpy as xp\n"
         "    from tostnp.backend import RNG\n"
         "    from tostnp.models import vision_init\n"
         "    from tostnp.exercises import digits_config\n"
         "    return vision_init(digits_config(), RNG(seed), xp, dtype=xp.float32)\n",
         "below 0.85"),
        ("NaN in the params", "def train_digits_mine(steps, seed):\n"
         "    import array_api_compat.numpy as xp\n"
         "    from tostnp.backend import RNG\n"
         "    from tostnp.models import vision_init\n"
         "    from tostnp.exercises import digits_config\n"
         "    p = vision_init(digits_config(), RNG(seed), xp, dtype=xp.float32)\n"
         "    p['head.W'] = p['head.W'] * np.nan\n    return p\n", "NaN or inf"),
        ("a key dropped", "def train_digits_mine(steps, seed):\n"
         "    import array_api_compat.numpy as xp\n"
         "    from tostnp.backend import RNG\n"
         "    from tostnp.models import vision_init\n"
         "    from tostnp.exercises import digits_config\n"
         "    p = vision_init(digits_config(), RNG(seed), xp, dtype=xp.float32)\n"
         "    p.pop(sorted(p)[0])\n    return p\n", "keys differ"),
        ("returns the loss", "def train_digits_mine(steps, seed):\n    return 0.1\n",
         "return the trained parameters"),
    ],
    "membership_maps": [
        ("transposed maps", "import matplotlib.pyplot as plt\n"
         "def membership_maps_mine(Pi, grid):\n"
         "    fig, axes = plt.subplots(1, Pi.shape[0], squeeze=False)\n"
         "    for k, ax in enumerate(axes[0]):\n"
         "        ax.imshow(Pi[k].reshape(grid, grid).T, vmin=0, vmax=1)\n"
         "    return fig\n", "row by row"),
        ("own colour scale per head", "import matplotlib.pyplot as plt\n"
         "def membership_maps_mine(Pi, grid):\n"
         "    fig, axes = plt.subplots(1, Pi.shape[0], squeeze=False)\n"
         "    for k, ax in enumerate(axes[0]):\n"
         "        ax.imshow(Pi[k].reshape(grid, grid))\n"
         "    return fig\n", "share one scale"),
        ("one argmax panel", "import matplotlib.pyplot as plt\n"
         "def membership_maps_mine(Pi, grid):\n"
         "    fig, ax = plt.subplots()\n"
         "    ax.imshow(Pi.argmax(0).reshape(grid, grid))\n"
         "    return fig\n", "one per head"),
        ("forgot return", "import matplotlib.pyplot as plt\n"
         "def membership_maps_mine(Pi, grid):\n"
         "    fig, ax = plt.subplots()\n", "return the matplotlib Figure"),
        ("plots the heads of a token instead", "import matplotlib.pyplot as plt\n"
         "def membership_maps_mine(Pi, grid):\n"
         "    fig, axes = plt.subplots(1, Pi.shape[0], squeeze=False)\n"
         "    for k, ax in enumerate(axes[0]):\n"
         "        ax.imshow(np.resize(Pi[:, k], (grid, grid)), vmin=0, vmax=1)\n"
         "    return fig\n", "the image of head"),
    ],
}
