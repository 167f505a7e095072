"""Planted bugs for the checkers of exercises/02_coding_rate.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "coding_rate": [
        ("forgot the 1/2",
         "_ok = coding_rate_mine\n"
         "def coding_rate_mine(Z, eps):\n    return 2 * _ok(Z, eps)\n",
         "a factor 1/2 is missing"),
        ("log base 2",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    s, ld = np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z.T @ Z)\n"
         "    return 0.5 * ld / np.log(2)\n",
         "base 2"),
        ("eps instead of eps^2",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    return 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps) * Z.T @ Z)[1]\n",
         "has eps where the formula has eps^2"),
        ("missing 1/n",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    return 0.5 * np.linalg.slogdet(np.eye(d) + d / eps**2 * Z.T @ Z)[1]\n",
         "lacks the 1/n"),
        ("log(det) overflows",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    return 0.5 * np.log(np.linalg.det(np.eye(d) + d / (n * eps**2) * Z.T @ Z))\n",
         "NaN or inf"),
        ("float32",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    Z = Z.astype(np.float32)\n"
         "    return float(0.5 * np.linalg.slogdet(np.eye(d, dtype=np.float32)"
         " + np.float32(d / (n * eps**2)) * Z.T @ Z)[1])\n",
         "float32"),
        ("Z Z^T with the wrong identity size",
         "def coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    return 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z @ Z.T)[1]\n",
         "coding_rate raised ValueError"),
        ("calls tostnp",
         "import tostnp\n"
         "def coding_rate_mine(Z, eps):\n    return float(tostnp.coding_rate(Z, eps))\n",
         "without calling the tostnp code"),
    ],
    "compression": [
        ("n instead of n_k in the scale",
         "def compression_mine(Z, Pi, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(Pi.shape[1]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        S = Z.T @ (Pi[:, k:k+1] * Z)\n"
         "        t += 0.5 * n_k / n * np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * S)[1]\n"
         "    return t\n",
         "own size n_k"),
        ("no weight n_k/n",
         "def compression_mine(Z, Pi, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(Pi.shape[1]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        S = Z.T @ (Pi[:, k:k+1] * Z)\n"
         "        t += 0.5 * np.linalg.slogdet(np.eye(d) + d / (n_k * eps**2) * S)[1]\n"
         "    return t\n",
         "weight n_k/n"),
        ("Pi squared",
         "def compression_mine(Z, Pi, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(Pi.shape[1]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        S = (Pi[:, k:k+1] * Z).T @ (Pi[:, k:k+1] * Z)\n"
         "        t += 0.5 * n_k / n * np.linalg.slogdet(np.eye(d) + d / (n_k * eps**2) * S)[1]\n"
         "    return t\n",
         "applied twice"),
        ("sums over groups on the wrong axis (Pi.T)",
         "def compression_mine(Z, Pi, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(Pi.shape[1]):\n"
         "        n_k = Pi[k].sum()\n"
         "        S = Z.T @ (Pi[:, k:k+1] * Z)\n"
         "        t += 0.5 * n_k / n * np.linalg.slogdet(np.eye(d) + d / (n_k * eps**2) * S)[1]\n"
         "    return t\n",
         "R_c(Z, Pi)"),
        ("forgot the 1/2",
         "_ok = compression_mine\n"
         "def compression_mine(Z, Pi, eps):\n    return 2 * _ok(Z, Pi, eps)\n",
         "a factor 1/2 is missing"),
    ],
    "coding_rate_grad": [
        ("finite differences, step relative to Z",
         "def coding_rate_grad_mine(Z, eps):\n"
         "    g = np.zeros_like(Z)\n"
         "    for i in np.ndindex(Z.shape):\n"
         "        h = 1e-5 * max(1.0, abs(Z[i]))\n"
         "        a, b = Z.copy(), Z.copy()\n"
         "        a[i] += h\n"
         "        b[i] -= h\n"
         "        g[i] = (coding_rate_mine(a, eps) - coding_rate_mine(b, eps)) / (2 * h)\n"
         "    return g\n",
         "finite differences"),
        ("forgot the 1/2 cancels the 2 (half)",
         "_ok = coding_rate_grad_mine\n"
         "def coding_rate_grad_mine(Z, eps):\n    return 0.5 * _ok(Z, eps)\n",
         "half the reference"),
        ("sign",
         "_ok = coding_rate_grad_mine\n"
         "def coding_rate_grad_mine(Z, eps):\n    return -_ok(Z, eps)\n",
         "sign is flipped"),
        ("returns the (d, n) transpose",
         "_ok = coding_rate_grad_mine\n"
         "def coding_rate_grad_mine(Z, eps):\n    return _ok(Z, eps).T\n",
         "transposed"),
        ("X^-1 on the wrong side: Z^T Z vs Z Z^T",
         "def coding_rate_grad_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    a = d / (n * eps**2)\n"
         "    return a * Z @ (np.eye(d) + a * Z.T @ Z)\n",
         "grad R(Z)"),
        ("uses autograd",
         "import autograd, autograd.numpy as anp\n"
         "def coding_rate_grad_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    f = lambda Z: 0.5 * anp.linalg.slogdet(anp.eye(d) + d / (n * eps**2) * Z.T @ Z)[1]\n"
         "    return autograd.grad(f)(Z)\n",
         "autograd"),
    ],
    "max_rate_design": [
        ("random Gaussian, rescaled",
         "def max_rate_design_mine(n, d, eps):\n"
         "    Z = np.random.default_rng(1).standard_normal((n, d))\n"
         "    return Z * np.sqrt(n / np.sum(Z**2))\n",
         "spread"),
        ("all energy in one direction",
         "def max_rate_design_mine(n, d, eps):\n"
         "    Z = np.zeros((n, d)); Z[:, 0] = 1.0\n"
         "    return Z\n",
         "spread"),
        ("wrong energy",
         "def max_rate_design_mine(n, d, eps):\n"
         "    Q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((n, d)))\n"
         "    return Q\n",
         "rescale"),
        ("transposed shape",
         "_ok = max_rate_design_mine\n"
         "def max_rate_design_mine(n, d, eps):\n    return _ok(n, d, eps).T\n",
         "shape (n, d)"),
    ],
}
