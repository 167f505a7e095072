"""Planted bugs for the checkers of exercises/07_backprop_tssa.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "numerical_gradient": [
        ("one-sided difference",
         "def numerical_gradient_mine(f, x, delta=1e-5):\n"
         "    g = np.zeros_like(x); f0 = f(x)\n"
         "    for i in np.ndindex(x.shape):\n"
         "        old = x[i]; x[i] = old + delta; g[i] = (f(x) - f0) / delta; x[i] = old\n"
         "    return g\n",
         "one-sided"),
        ("divides by delta, not 2 delta",
         "_ok = numerical_gradient_mine\n"
         "def numerical_gradient_mine(f, x, delta=1e-5):\n    return 2 * _ok(f, x, delta)\n",
         "a factor 1/2 is missing"),
        ("does not restore x",
         "def numerical_gradient_mine(f, x, delta=1e-5):\n"
         "    g = np.zeros_like(x)\n"
         "    for i in np.ndindex(x.shape):\n"
         "        old = x[i]; x[i] = old + delta; fp = f(x); x[i] = old - delta; fm = f(x)\n"
         "        g[i] = (fp - fm) / (2 * delta)\n"
         "    return g\n",
         "restore each entry"),
        ("perturbs all entries at once",
         "def numerical_gradient_mine(f, x, delta=1e-5):\n"
         "    d = (f(x + delta) - f(x - delta)) / (2 * delta)\n"
         "    return np.full_like(x, d)\n",
         "numerical_gradient"),
        ("flattens the result",
         "_ok = numerical_gradient_mine\n"
         "def numerical_gradient_mine(f, x, delta=1e-5):\n    return _ok(f, x, delta).ravel()\n",
         "shape"),
    ],
    "softmax_heads_backward": [
        ("diagonal only",
         "def softmax_heads_backward_mine(dPi, Pi):\n    return Pi * dPi\n",
         "only the diagonal"),
        ("sum over the first axis",
         "def softmax_heads_backward_mine(dPi, Pi):\n"
         "    return Pi * (dPi - np.sum(Pi * dPi, axis=0, keepdims=True))\n",
         "wrong axis"),
        ("sign",
         "def softmax_heads_backward_mine(dPi, Pi):\n"
         "    return -Pi * (dPi - np.sum(Pi * dPi, axis=-1, keepdims=True))\n",
         "sign is flipped"),
        ("no keepdims",
         "def softmax_heads_backward_mine(dPi, Pi):\n"
         "    return Pi * (dPi - np.sum(Pi * dPi, axis=-1))\n",
         "softmax_heads_backward"),
        ("sum of dPi, not Pi * dPi",
         "def softmax_heads_backward_mine(dPi, Pi):\n"
         "    return Pi * (dPi - np.sum(dPi, axis=-1, keepdims=True))\n",
         "dl for"),
    ],
    "token_norm_backward": [
        ("S treated as a constant",
         "def token_norm_backward_mine(dq, w, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    return 2 * w * np.repeat(dq, p, axis=-1) / np.sum(w**2, axis=1, keepdims=True)\n",
         "path through S1 is missing"),
        ("forgot the 2",
         "_ok = token_norm_backward_mine\n"
         "def token_norm_backward_mine(dq, w, num_heads):\n    return 0.5 * _ok(dq, w, num_heads)\n",
         "half the reference"),
        ("S summed over features",
         "def token_norm_backward_mine(dq, w, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    S = np.sum(w**2, axis=2, keepdims=True); dqc = np.repeat(dq, p, axis=-1)\n"
         "    dS = -np.sum(dqc * w**2, axis=2, keepdims=True) / S**2\n"
         "    return 2 * w * (dqc / S + dS)\n",
         "dw for"),
        ("heads tiled instead of repeated",
         "def token_norm_backward_mine(dq, w, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    S = np.sum(w**2, axis=1, keepdims=True); dqc = np.tile(dq, (1, 1, p))\n"
         "    dS = -np.sum(dqc * w**2, axis=1, keepdims=True) / S**2\n"
         "    return 2 * w * (dqc / S + dS)\n",
         "dw for"),
        ("autograd",
         "import autograd, autograd.numpy as anp\n"
         "def token_norm_backward_mine(dq, w, num_heads):\n"
         "    B, N, C = w.shape; p = C // num_heads\n"
         "    f = lambda w: anp.sum(dq * anp.sum(anp.reshape(w**2 / anp.sum(w**2, axis=1,"
         " keepdims=True), (B, N, num_heads, p)), axis=-1))\n"
         "    return autograd.grad(f)(w)\n",
         "autograd"),
    ],
    "tssa_backward": [
        ("missing the b_u gradient",
         "_ok = tssa_backward_mine\n"
         "def tssa_backward_mine(dy, x, params, num_heads):\n"
         "    dx, g = _ok(dy, x, params, num_heads); g.pop('b_u', None)\n"
         "    return dx, g\n",
         "lacks the key"),
        ("W_o gradient transposed",
         "_ok = tssa_backward_mine\n"
         "def tssa_backward_mine(dy, x, params, num_heads):\n"
         "    dx, g = _ok(dy, x, params, num_heads); g['W_o'] = g['W_o'].T\n"
         "    return dx, g\n",
         "transpose"),
        ("dx sign",
         "_ok = tssa_backward_mine\n"
         "def tssa_backward_mine(dy, x, params, num_heads):\n"
         "    dx, g = _ok(dy, x, params, num_heads)\n"
         "    return -dx, g\n",
         "sign is flipped"),
        ("b_o gradient averaged over tokens",
         "_ok = tssa_backward_mine\n"
         "def tssa_backward_mine(dy, x, params, num_heads):\n"
         "    dx, g = _ok(dy, x, params, num_heads)\n"
         "    if 'b_o' in g: g['b_o'] = g['b_o'] / x.shape[1]\n"
         "    return dx, g\n",
         "divided by N"),
        ("temp gradient without the softmax Jacobian's sum",
         "_sm = softmax_heads_backward_mine\n"
         "softmax_heads_backward_mine = lambda dPi, Pi: Pi * dPi\n"
         "_ok = tssa_backward_mine\n",
         "grads['temp']"),
        ("autograd",
         "import autograd\n"
         "_ok = tssa_backward_mine\n"
         "def tssa_backward_mine(dy, x, params, num_heads):\n"
         "    autograd.grad(lambda a: a * a)(1.0)\n"
         "    return _ok(dy, x, params, num_heads)\n",
         "autograd"),
    ],
}
