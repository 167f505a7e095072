"""Planted bugs for the checkers of exercises/05_gradient_tssa.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "variational_compression_grad": [
        ("forgot the 1/n",
         "_ok = variational_compression_grad_mine\n"
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n"
         "    return Z.shape[0] * _ok(Z, Pi, U, eps)\n",
         "it is n times the reference"),
        ("no Diag(pi_k)",
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape; c = d / eps**2; g = np.zeros_like(Z)\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; pi = Pi[:, k:k+1]\n"
         "        s = np.sum(pi * P**2, axis=0) / pi.sum()\n"
         "        g += (P * (c / (1 + c * s))) @ U[k].T\n"
         "    return g / n\n",
         "Diag(pi_k) is missing"),
        ("statistic over n",
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape; c = d / eps**2; g = np.zeros_like(Z)\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; pi = Pi[:, k:k+1]\n"
         "        s = np.sum(pi * P**2, axis=0) / n\n"
         "        g += pi * (P * (c / (1 + c * s))) @ U[k].T\n"
         "    return g / n\n",
         "divides by n instead"),
        ("sign",
         "_ok = variational_compression_grad_mine\n"
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n    return -_ok(Z, Pi, U, eps)\n",
         "sign is flipped"),
        ("forgot d/eps^2 in f'",
         "_ok = variational_compression_grad_mine\n"
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n"
         "    return _ok(Z, Pi, U, eps) / (Z.shape[1] / eps**2)\n",
         "divided by d/eps^2"),
        ("autograd",
         "import autograd, autograd.numpy as anp\n"
         "def variational_compression_grad_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape\n"
         "    def R(Z):\n"
         "        t = 0.0\n"
         "        for k in range(U.shape[0]):\n"
         "            n_k = anp.sum(Pi[:, k])\n"
         "            s = anp.dot(Pi[:, k], anp.dot(Z, U[k]) ** 2) / n_k\n"
         "            t = t + 0.5 * n_k / n * anp.sum(anp.log1p(d / eps**2 * s))\n"
         "        return t\n"
         "    return autograd.grad(R)(Z)\n",
         "autograd"),
    ],
    "membership": [
        ("softmax over tokens",
         "def membership_mine(Z, U, eta):\n"
         "    E = np.stack([np.sum((Z @ U[k]) ** 2, axis=1) for k in range(U.shape[0])], axis=1)\n"
         "    L = E / (2 * eta); e = np.exp(L - L.max(axis=0, keepdims=True))\n"
         "    return e / e.sum(axis=0, keepdims=True)\n",
         "wrong axis"),
        ("eta instead of 2 eta",
         "def membership_mine(Z, U, eta):\n"
         "    E = np.stack([np.sum((Z @ U[k]) ** 2, axis=1) for k in range(U.shape[0])], axis=1)\n"
         "    L = E / eta; e = np.exp(L - L.max(axis=1, keepdims=True))\n"
         "    return e / e.sum(axis=1, keepdims=True)\n",
         "temperature"),
        ("norm, not squared norm",
         "def membership_mine(Z, U, eta):\n"
         "    E = np.stack([np.linalg.norm(Z @ U[k], axis=1) for k in range(U.shape[0])], axis=1)\n"
         "    L = E / (2 * eta); e = np.exp(L - L.max(axis=1, keepdims=True))\n"
         "    return e / e.sum(axis=1, keepdims=True)\n",
         "squared norm"),
        ("no max shift: overflow",
         "def membership_mine(Z, U, eta):\n"
         "    E = np.stack([np.sum((Z @ U[k]) ** 2, axis=1) for k in range(U.shape[0])], axis=1)\n"
         "    e = np.exp(E / (2 * eta))\n"
         "    return e / e.sum(axis=1, keepdims=True)\n",
         "NaN or inf"),
        ("transposed (K, n)",
         "_ok = membership_mine\n"
         "def membership_mine(Z, U, eta):\n    return _ok(Z, U, eta).T\n",
         "transposed"),
    ],
    "tssa_step": [
        ("ascent",
         "def tssa_step_mine(Z, Pi, U, eps, tau):\n"
         "    return Z + tau * variational_compression_grad_mine(Z, Pi, U, eps)\n",
         "goes up the gradient"),
        ("returns the update",
         "def tssa_step_mine(Z, Pi, U, eps, tau):\n"
         "    return -tau * variational_compression_grad_mine(Z, Pi, U, eps)\n",
         "you returned the update"),
        ("tau/n",
         "def tssa_step_mine(Z, Pi, U, eps, tau):\n"
         "    return Z - tau / Z.shape[0] * variational_compression_grad_mine(Z, Pi, U, eps)\n",
         "divided by n once too often"),
        ("step ignores tau",
         "def tssa_step_mine(Z, Pi, U, eps, tau):\n"
         "    return Z - variational_compression_grad_mine(Z, Pi, U, eps)\n",
         "Z+ for"),
        ("calls tostnp.tssa_step",
         "import tostnp\n"
         "def tssa_step_mine(Z, Pi, U, eps, tau):\n    return tostnp.tssa_step(Z, Pi, U, eps, tau)\n",
         "without calling the tostnp code"),
    ],
}
