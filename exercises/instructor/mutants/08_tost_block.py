"""Planted bugs for the checkers of exercises/08_tost_block.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "layer_norm": [
        ("unbiased variance", "def layer_norm_mine(x, gamma, beta, eps):\n"
         "    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, ddof=1, keepdims=True)"
         " + eps) * gamma + beta\n", "biased"),
        ("eps outside the sqrt", "def layer_norm_mine(x, gamma, beta, eps):\n"
         "    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + eps)"
         " * gamma + beta\n", "inside the square root"),
        ("over axis 0", "def layer_norm_mine(x, gamma, beta, eps):\n"
         "    return (x - x.mean(0, keepdims=True)) / np.sqrt(x.var(0, keepdims=True) + eps)"
         " * gamma + beta\n", "wrong axis"),
        ("gamma and beta swapped", "_ok = layer_norm_mine\n"
         "def layer_norm_mine(x, gamma, beta, eps):\n    return _ok(x, beta, gamma, eps)\n",
         "swapped"),
        ("no keepdims", "def layer_norm_mine(x, gamma, beta, eps):\n"
         "    return (x - x.mean(-1)) / np.sqrt(x.var(-1) + eps) * gamma + beta\n",
         "could not be broadcast"),
    ],
    "layer_norm_backward": [
        ("finite differences, step relative to x",
         "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    def fd(f, v):\n"
         "        g = np.zeros_like(v)\n"
         "        for i in np.ndindex(v.shape):\n"
         "            h = 1e-5 * max(1.0, abs(v[i]))\n"
         "            a, b = v.copy(), v.copy()\n"
         "            a[i] += h\n"
         "            b[i] -= h\n"
         "            g[i] = (f(a) - f(b)) / (2 * h)\n"
         "        return g\n"
         "    L = lambda x, g, b: float(np.sum(dy * layer_norm_mine(x, g, b, eps)))\n"
         "    return (fd(lambda v: L(v, gamma, beta), x), fd(lambda v: L(x, v, beta), gamma),\n"
         "            fd(lambda v: L(x, gamma, v), beta))\n",
         "finite differences"),
        ("statistics held fixed", "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    mu = x.mean(-1, keepdims=True); r = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)\n"
         "    C = x.shape[-1]\n"
         "    return dy * gamma * r, (dy * (x - mu) * r).reshape(-1, C).sum(0),"
         " dy.reshape(-1, C).sum(0)\n", "paths are missing"),
        ("dbeta averaged", "_ok = layer_norm_backward_mine\n"
         "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    dx, dg, db = _ok(dy, x, gamma, beta, eps)\n"
         "    return dx, dg, db / np.prod(x.shape[:-1])\n", "the number of tokens"),
        ("dgamma not summed over tokens", "_ok = layer_norm_backward_mine\n"
         "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    dx, dg, db = _ok(dy, x, gamma, beta, eps)\n"
         "    mu = x.mean(-1, keepdims=True)\n"
         "    return dx, dy * (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps), db\n",
         "dgamma"),
        ("dx sign", "_ok = layer_norm_backward_mine\n"
         "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    dx, dg, db = _ok(dy, x, gamma, beta, eps)\n    return -dx, dg, db\n", "sign"),
        ("autograd", "import autograd, autograd.numpy as anp\n_ok = layer_norm_backward_mine\n"
         "def layer_norm_backward_mine(dy, x, gamma, beta, eps):\n"
         "    autograd.grad(lambda a: a * a)(1.0)\n    return _ok(dy, x, gamma, beta, eps)\n",
         "autograd"),
    ],
    "tost_block": [
        ("no first residual", "_ok = tost_block_mine\n"
         "def tost_block_mine(x, params, num_heads):\n"
         "    import tostnp.nn as nn\n"
         "    P = params; t = {k[5:]: v for k, v in P.items() if k.startswith('tssa.')}\n"
         "    a = layer_norm_mine(x, P['ln1.gamma'], P['ln1.beta'], 1e-6)\n"
         "    x1 = P['ls1.gamma'] * nn.tssa_forward(a, t, num_heads)[0]\n"
         "    b = layer_norm_mine(x1, P['ln2.gamma'], P['ln2.beta'], 1e-6)\n"
         "    u = b @ P['mlp.W1'] + P['mlp.b1']\n"
         "    act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))\n"
         "    return x1 + P['ls2.gamma'] * (act @ P['mlp.W2'] + P['mlp.b2'])\n",
         "residual around the attention branch"),
        ("LayerScale missing", "_ok = tost_block_mine\n"
         "def tost_block_mine(x, params, num_heads):\n"
         "    P = dict(params); P['ls1.gamma'] = np.ones_like(P['ls1.gamma'])\n"
         "    P['ls2.gamma'] = np.ones_like(P['ls2.gamma'])\n    return _ok(x, P, num_heads)\n",
         "LayerScale"),
        ("erf GELU", "_ok = tost_block_mine\n"
         "def tost_block_mine(x, params, num_heads):\n"
         "    from scipy.special import erf\n"
         "    import tostnp.nn as nn\n"
         "    P = params; t = {k[5:]: v for k, v in P.items() if k.startswith('tssa.')}\n"
         "    a = layer_norm_mine(x, P['ln1.gamma'], P['ln1.beta'], 1e-6)\n"
         "    x1 = x + P['ls1.gamma'] * nn.tssa_forward(a, t, num_heads)[0]\n"
         "    b = layer_norm_mine(x1, P['ln2.gamma'], P['ln2.beta'], 1e-6)\n"
         "    u = b @ P['mlp.W1'] + P['mlp.b1']\n"
         "    act = 0.5 * u * (1 + erf(u / np.sqrt(2)))\n"
         "    return x1 + P['ls2.gamma'] * (act @ P['mlp.W2'] + P['mlp.b2'])\n", "tanh"),
        ("LN2 of x", "def tost_block_mine(x, params, num_heads):\n"
         "    import tostnp.nn as nn\n"
         "    P = params; t = {k[5:]: v for k, v in P.items() if k.startswith('tssa.')}\n"
         "    a = layer_norm_mine(x, P['ln1.gamma'], P['ln1.beta'], 1e-6)\n"
         "    x1 = x + P['ls1.gamma'] * nn.tssa_forward(a, t, num_heads)[0]\n"
         "    b = layer_norm_mine(x, P['ln2.gamma'], P['ln2.beta'], 1e-6)\n"
         "    u = b @ P['mlp.W1'] + P['mlp.b1']\n"
         "    act = 0.5 * u * (1 + np.tanh(np.sqrt(2 / np.pi) * (u + 0.044715 * u**3)))\n"
         "    return x1 + P['ls2.gamma'] * (act @ P['mlp.W2'] + P['mlp.b2'])\n", "must see x1"),
        ("calls the block", "import tostnp.nn as nn\n"
         "def tost_block_mine(x, params, num_heads):\n"
         "    return nn.tost_block_forward(x, params, num_heads)[0]\n",
         "without calling the tostnp code"),
    ],
}
