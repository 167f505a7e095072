"""Planted bugs for the exercise checkers (instructor-only; not in the student edition).

MUTANTS[exercise] is a list of (label, source, hint): ``source`` is exec'd after the reference
solution of the notebook (so it may wrap the correct function, saved under another name) and
redefines the student's function with one plausible mistake; the checker must reject it with an
AssertionError whose message contains ``hint``. tests/test_exercises.py runs them all in-process
and one per notebook through a real kernel.
"""

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

MUTANTS.update({
    "variational_compression": [
        ("eigenvalues (R_c) instead of the bases",
         "def variational_compression_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(Pi.shape[1]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        lam = np.linalg.eigvalsh(Z.T @ (Pi[:, k:k+1] * Z) / n_k)\n"
         "        t += 0.5 * n_k / n * np.sum(np.log1p(d / eps**2 * np.clip(lam, 0, None)))\n"
         "    return t\n",
         "from eigenvalues"),
        ("statistic over n, not n_k",
         "def variational_compression_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(U.shape[0]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        s = Pi[:, k] @ (Z @ U[k]) ** 2 / n\n"
         "        t += 0.5 * n_k / n * np.sum(np.log1p(d / eps**2 * s))\n"
         "    return t\n",
         "divides by n instead"),
        ("extra 1/n in the scale",
         "def variational_compression_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(U.shape[0]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        s = Pi[:, k] @ (Z @ U[k]) ** 2 / n_k\n"
         "        t += 0.5 * n_k / n * np.sum(np.log1p(d / (n * eps**2) * s))\n"
         "    return t\n",
         "has no 1/n"),
        ("forgot the 1/2",
         "_ok = variational_compression_mine\n"
         "def variational_compression_mine(Z, Pi, U, eps):\n    return 2 * _ok(Z, Pi, U, eps)\n",
         "a factor 1/2 is missing"),
        ("projects on the rows of U_k (U_k^T Z^T)",
         "def variational_compression_mine(Z, Pi, U, eps):\n"
         "    n, d = Z.shape\n"
         "    t = 0.0\n"
         "    for k in range(U.shape[0]):\n"
         "        n_k = Pi[:, k].sum()\n"
         "        s = Pi[:, k] @ (Z @ U[k].T) ** 2 / n_k\n"
         "        t += 0.5 * n_k / n * np.sum(np.log1p(d / eps**2 * s))\n"
         "    return t\n",
         "variational_compression raised ValueError"),
    ],
    "tight_basis": [
        ("eigenvectors of the unweighted Z^T Z",
         "def tight_basis_mine(Z, Pi):\n"
         "    V = np.linalg.eigh(Z.T @ Z)[1]\n"
         "    return np.stack([V] * Pi.shape[1])\n",
         "is not diagonal"),
        ("eigenvectors as rows",
         "_ok = tight_basis_mine\n"
         "def tight_basis_mine(Z, Pi):\n    return np.transpose(_ok(Z, Pi), (0, 2, 1))\n",
         "is not diagonal"),
        ("the identity",
         "def tight_basis_mine(Z, Pi):\n"
         "    return np.stack([np.eye(Z.shape[1])] * Pi.shape[1])\n",
         "is not diagonal"),
        ("Cholesky factor, not orthonormal",
         "def tight_basis_mine(Z, Pi):\n"
         "    return np.stack([np.linalg.cholesky(Z.T @ (Pi[:, k:k+1] * Z))"
         " for k in range(Pi.shape[1])])\n",
         "not orthonormal"),
        ("one basis for all groups (K axis dropped)",
         "_ok = tight_basis_mine\n"
         "def tight_basis_mine(Z, Pi):\n    return _ok(Z, Pi)[0]\n",
         "must have shape (K, d, p)"),
    ],
    "bound_counterexample": [
        ("p = d: the bound holds",
         "def counterexample_mine():\n"
         "    Z = np.array([[1.0, 0.0], [0.0, 1.0]])\n"
         "    return Z, np.ones((2, 1)), np.eye(2)[None], 1.0\n",
         "the point is p < d"),
        ("all energy along the kept direction",
         "def counterexample_mine():\n"
         "    Z = np.array([[1.0, 0.0], [-1.0, 0.0]])\n"
         "    return Z, np.ones((2, 1)), np.array([[[1.0], [0.0]]]), 1.0\n",
         "the bound holds for your example"),
        ("a basis vector of length 2",
         "def counterexample_mine():\n"
         "    Z = np.array([[1.0, 0.0], [0.0, 1.0]])\n"
         "    return Z, np.ones((2, 1)), np.array([[[2.0], [0.0]]]), 1.0\n",
         "not orthonormal"),
        ("memberships that do not sum to 1",
         "def counterexample_mine():\n"
         "    Z = np.array([[1.0, 0.0], [0.0, 1.0]])\n"
         "    return Z, np.full((2, 1), 0.5), np.array([[[1.0], [0.0]]]), 1.0\n",
         "rows that sum to 1"),
        ("U without the group axis",
         "def counterexample_mine():\n"
         "    Z = np.array([[1.0, 0.0], [0.0, 1.0]])\n"
         "    return Z, np.ones((2, 1)), np.array([[1.0], [0.0]]), 1.0\n",
         "shapes"),
    ],
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
    "tssa_memberships": [
        ("softmax over tokens",
         "def tssa_memberships_mine(w, temp, num_heads):\n"
         "    B, N, C = w.shape; h = num_heads; p = C // h\n"
         "    q = ((w / np.sqrt((w**2).sum(1, keepdims=True))) ** 2).reshape(B, N, h, p).sum(-1)"
         " * temp[:, 0]\n"
         "    e = np.exp(q - q.max(1, keepdims=True)); Pi = e / e.sum(1, keepdims=True)\n"
         "    return Pi.transpose(0, 2, 1)\n",
         "softmax runs over the wrong axis"),
        ("normalised along the features",
         "def tssa_memberships_mine(w, temp, num_heads):\n"
         "    B, N, C = w.shape; h = num_heads; p = C // h\n"
         "    q = ((w / np.sqrt((w**2).sum(2, keepdims=True))) ** 2).reshape(B, N, h, p).sum(-1)"
         " * temp[:, 0]\n"
         "    e = np.exp(q - q.max(-1, keepdims=True)); Pi = e / e.sum(-1, keepdims=True)\n"
         "    return Pi.transpose(0, 2, 1)\n",
         "TOKEN axis"),
        ("no temperature",
         "_ok = tssa_memberships_mine\n"
         "def tssa_memberships_mine(w, temp, num_heads):\n"
         "    return _ok(w, np.ones_like(temp), num_heads)\n",
         "temperatures are not applied"),
        ("(B, N, h) order",
         "_ok = tssa_memberships_mine\n"
         "def tssa_memberships_mine(w, temp, num_heads):\n"
         "    return _ok(w, temp, num_heads).transpose(0, 2, 1)\n",
         "axes are in the wrong order"),
        ("heads interleaved (reshape to (B, N, p, h))",
         "def tssa_memberships_mine(w, temp, num_heads):\n"
         "    B, N, C = w.shape; h = num_heads; p = C // h\n"
         "    q = ((w / np.sqrt((w**2).sum(1, keepdims=True))) ** 2).reshape(B, N, p, h).sum(2)"
         " * temp[:, 0]\n"
         "    e = np.exp(q - q.max(-1, keepdims=True)); Pi = e / e.sum(-1, keepdims=True)\n"
         "    return Pi.transpose(0, 2, 1)\n",
         "Pi for"),
    ],
    "tssa_forward": [
        ("m of the normalised w",
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    B, N, C = x.shape; h = num_heads; p = C // h\n"
         "    w = x @ params['W_u'] + params.get('b_u', 0.0)\n"
         "    Pi = np.transpose(tssa_memberships_mine(w, params['temp'], h), (0, 2, 1))\n"
         "    v = (w / np.maximum(np.sqrt((w**2).sum(1, keepdims=True)), 1e-12)).reshape(B, N, h, p)\n"
         "    m = np.einsum('bnk,bnki->bki', Pi, v**2) / (Pi.sum(1)[..., None] + 1e-8)\n"
         "    out = -w.reshape(B, N, h, p) * Pi[..., None] / (1 + m[:, None])\n"
         "    return out.reshape(B, N, C) @ params['W_o'] + params.get('b_o', 0.0)\n",
         "moment of the raw w"),
        ("no minus sign",
         "_ok = tssa_forward_mine\n"
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    y = _ok(x, params, num_heads); b = params.get('b_o', 0.0)\n"
         "    return -(y - b) + b\n",
         "sign of the layer's output"),
        ("drops b_o",
         "_ok = tssa_forward_mine\n"
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    return _ok(x, params, num_heads) - params.get('b_o', 0.0)\n",
         "output bias b_o is missing"),
        ("softmax over tokens",
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    B, N, C = x.shape; h = num_heads; p = C // h\n"
         "    w = x @ params['W_u'] + params.get('b_u', 0.0)\n"
         "    q = ((w / np.maximum(np.sqrt((w**2).sum(1, keepdims=True)), 1e-12)) ** 2)"
         ".reshape(B, N, h, p).sum(-1) * params['temp'][:, 0]\n"
         "    e = np.exp(q - q.max(1, keepdims=True)); Pi = e / e.sum(1, keepdims=True)\n"
         "    wh = w.reshape(B, N, h, p)\n"
         "    m = np.einsum('bnk,bnki->bki', Pi, wh**2) / (Pi.sum(1)[..., None] + 1e-8)\n"
         "    out = -wh * Pi[..., None] / (1 + m[:, None])\n"
         "    return out.reshape(B, N, C) @ params['W_o'] + params.get('b_o', 0.0)\n",
         "softmax runs over the heads"),
        ("W_o transposed",
         "_ok = tssa_forward_mine\n"
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    return _ok(x, dict(params, W_o=params['W_o'].T), num_heads)\n",
         "y for"),
        ("float32",
         "_ok = tssa_forward_mine\n"
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    return _ok(x.astype(np.float32), {k: v.astype(np.float32) for k, v in params.items()},"
         " num_heads)\n",
         "float32"),
        ("calls tostnp.nn.tssa_forward",
         "import tostnp.nn as nn\n"
         "def tssa_forward_mine(x, params, num_heads):\n"
         "    return nn.tssa_forward(x, params, num_heads)[0]\n",
         "without calling the tostnp code"),
    ],
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
})

_ATT = ("def softmax_attention_mine(Q, K, V):\n"
        "    S = {S}\n"
        "    A = np.exp(S - S.max(axis={ax}, keepdims=True))\n"
        "    return (A / A.sum(axis={ax}, keepdims=True)) @ V\n")
_SC = ("def attention_scaling_mine():\n"
       "    Ns = {N}\n"
       "    secs = [1e-9 * n**{a} for n in Ns]\n"
       "    return {{'N': Ns, 'seconds': secs, 'slope': {slope}}}\n")

MUTANTS.update({
    "softmax_attention": [
        ("softmax over the keys' axis 0", _ATT.format(S="Q @ K.T / np.sqrt(Q.shape[1])", ax=0),
         "wrong axis"),
        ("no 1/sqrt(d)", _ATT.format(S="Q @ K.T", ax=1), "not scaled by 1/sqrt(d)"),
        ("1/d", _ATT.format(S="Q @ K.T / Q.shape[1]", ax=1), "scaled by 1/d"),
        ("no max shift: overflow",
         "def softmax_attention_mine(Q, K, V):\n"
         "    A = np.exp(Q @ K.T / np.sqrt(Q.shape[1]))\n"
         "    return (A / A.sum(axis=1, keepdims=True)) @ V\n",
         "NaN or inf"),
        ("K Q^T", _ATT.format(S="K @ Q.T / np.sqrt(Q.shape[1])", ax=1), "the wrong way round"),
        ("uses tostnp's softmax core", "import array_api_compat.numpy as _xp\n"
         "from tostnp.nn import attention as _att\n"
         "def softmax_attention_mine(Q, K, V):\n"
         "    return _att._softmax_core_forward(_xp, Q[None, None] / np.sqrt(Q.shape[1]),"
         " K[None, None], V[None, None], False)[0][0, 0]\n",
         "without calling the tostnp code"),
    ],
    "loglog_slope": [
        ("linear fit", "def loglog_slope_mine(Ns, times):\n    return np.polyfit(Ns, times, 1)[0]\n",
         "log-log coordinates"),
        ("end points", "def loglog_slope_mine(Ns, times):\n"
         "    return np.log(times[-1] / times[0]) / np.log(Ns[-1] / Ns[0])\n", "two end points"),
        ("semi-log", "def loglog_slope_mine(Ns, times):\n"
         "    return np.polyfit(Ns, np.log(times), 1)[0]\n", "semi-log"),
        ("intercept", "def loglog_slope_mine(Ns, times):\n"
         "    return np.polyfit(np.log(Ns), np.log(times), 1)[1]\n", "intercept"),
        ("axes swapped", "def loglog_slope_mine(Ns, times):\n"
         "    return np.polyfit(np.log(times), np.log(Ns), 1)[0]\n", "axes are swapped"),
    ],
    "attention_scaling": [
        ("slope typed in, not fitted", _SC.format(N=[256, 512, 1024, 2048], a=2.2, slope=2.0),
         "not the least-squares slope"),
        ("three sizes only", _SC.format(N=[256, 512, 1024], a=2, slope=2.0), "length >= 4"),
        ("range too small", _SC.format(N=[500, 600, 700, 800], a=2, slope="float(np.polyfit("
                                       "np.log(Ns), np.log(secs), 1)[0])"), "factor 8"),
        ("linear-looking data (overhead-dominated sizes)",
         _SC.format(N=[8, 16, 32, 64, 128], a=1, slope="float(np.polyfit(np.log(Ns), "
                    "np.log(secs), 1)[0])"), "N large enough"),
        ("wrong keys", "def attention_scaling_mine():\n    return {'sizes': [1], 'times': [1]}\n",
         'keys "N"'),
    ],
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
         "    from tostnp.exercises.images import digits_config\n"
         "    return vision_init(digits_config(), RNG(seed), xp, dtype=xp.float32)\n",
         "below 0.85"),
        ("NaN in the params", "def train_digits_mine(steps, seed):\n"
         "    import array_api_compat.numpy as xp\n"
         "    from tostnp.backend import RNG\n"
         "    from tostnp.models import vision_init\n"
         "    from tostnp.exercises.images import digits_config\n"
         "    p = vision_init(digits_config(), RNG(seed), xp, dtype=xp.float32)\n"
         "    p['head.W'] = p['head.W'] * np.nan\n    return p\n", "NaN or inf"),
        ("a key dropped", "def train_digits_mine(steps, seed):\n"
         "    import array_api_compat.numpy as xp\n"
         "    from tostnp.backend import RNG\n"
         "    from tostnp.models import vision_init\n"
         "    from tostnp.exercises.images import digits_config\n"
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
    "prefix_statistics": [
        ("suffix sums", "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    r = lambda a: np.flip(np.cumsum(np.flip(a, 1), 1), 1)\n"
         "    return r(w**2), r(np.repeat(Pi, p, -1) * w**2), r(Pi)\n", "suffix sums"),
        ("exclusive", "_ok = prefix_statistics_mine\n"
         "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    S1, S2, S3 = _ok(w, Pi, num_heads)\n"
         "    return S1 - w**2, S2 - np.repeat(Pi, p, -1) * w**2, S3 - Pi\n", "include itself"),
        ("whole-sequence sums", "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    f = lambda a: np.broadcast_to(a.sum(1, keepdims=True), a.shape)\n"
         "    return f(w**2), f(np.repeat(Pi, p, -1) * w**2), f(Pi)\n", "whole sequence"),
        ("cumsum over features", "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    return np.cumsum(w**2, -1), np.cumsum(np.repeat(Pi, p, -1) * w**2, -1),"
         " np.cumsum(Pi, -1)\n", "wrong axis"),
        ("heads tiled", "_ok = prefix_statistics_mine\n"
         "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    S1, _, S3 = _ok(w, Pi, num_heads)\n"
         "    return S1, np.cumsum(np.tile(Pi, (1, 1, p)) * w**2, 1), S3\n", "its own head"),
    ],
    "causal_tssa_forward": [
        ("non-causal statistics", "import tostnp.nn as _nn\n"
         "def causal_tssa_forward_mine(x, params, num_heads):\n"
         "    B, T, C = x.shape; h = num_heads; p = C // h\n"
         "    w = x @ params['W_u'] + params['b_u']\n"
         "    S1 = np.maximum((w**2).sum(1, keepdims=True), 1e-24)\n"
         "    q = (w**2 / S1).reshape(B, T, h, p).sum(-1) * params['temp'][:, 0]\n"
         "    e = np.exp(q - q.max(-1, keepdims=True)); Pi = e / e.sum(-1, keepdims=True)\n"
         "    Pc = np.repeat(Pi, p, -1)\n"
         "    m = (Pc * w**2).sum(1, keepdims=True) / (np.repeat(Pi.sum(1, keepdims=True), p, -1)"
         " + 1e-8)\n"
         "    return (-w * Pc / (1 + m)) @ params['W_o'] + params['b_o']\n", "sees the future"),
        ("no denom_bias", "_ok = causal_tssa_forward_mine\n"
         "def causal_tssa_forward_mine(x, params, num_heads):\n"
         "    return _ok(x, dict(params, denom_bias=0 * params['denom_bias']), num_heads)\n",
         "denom_bias is not added"),
        ("bias not times p", "_ok = causal_tssa_forward_mine\n"
         "def causal_tssa_forward_mine(x, params, num_heads):\n"
         "    p = x.shape[-1] // num_heads\n"
         "    return _ok(x, dict(params, denom_bias=params['denom_bias'] / p), num_heads)\n",
         "y for"),
        ("sign", "_ok = causal_tssa_forward_mine\n"
         "def causal_tssa_forward_mine(x, params, num_heads):\n"
         "    return 2 * params['b_o'] - _ok(x, params, num_heads)\n", "y for"),
        ("calls tostnp", "import tostnp.nn as nn\n"
         "def causal_tssa_forward_mine(x, params, num_heads):\n"
         "    return nn.tssa_forward(x, params, num_heads, causal=True)[0]\n",
         "without calling the tostnp code"),
    ],
    "decode_step": [
        ("output before the update", "def decode_step_mine(state, x_t, params, num_heads, t):\n"
         "    B, C = x_t.shape; h = num_heads; p = C // h\n"
         "    w = x_t @ params['W_u'] + params['b_u']\n"
         "    q = (w**2 / np.maximum(state['S1'], 1e-12)).reshape(B, h, p).sum(-1)"
         " + p * params['denom_bias'][:, t, 0]\n"
         "    l = q * params['temp'][:, 0]; e = np.exp(l - l.max(-1, keepdims=True))\n"
         "    Pi = e / e.sum(-1, keepdims=True); Pc = np.repeat(Pi, p, -1)\n"
         "    m = state['S2'] / (np.repeat(state['S3'], p, -1) + 1e-8)\n"
         "    y = (-w * Pc / (1 + m)) @ params['W_o'] + params['b_o']\n"
         "    return y, {'S1': state['S1'] + w**2, 'S2': state['S2'] + Pc * w**2,"
         " 'S3': state['S3'] + Pi, 't': t + 1}\n", "must see itself"),
        ("state mutated in place", "_ok = decode_step_mine\n"
         "def decode_step_mine(state, x_t, params, num_heads, t):\n"
         "    y, new = _ok(state, x_t, params, num_heads, t)\n"
         "    state['S1'][...] = new['S1']\n    return y, new\n", "was modified"),
        ("t not advanced", "_ok = decode_step_mine\n"
         "def decode_step_mine(state, x_t, params, num_heads, t):\n"
         "    y, new = _ok(state, x_t, params, num_heads, t)\n"
         "    return y, dict(new, t=t)\n", "state's t"),
        ("returns y only", "_ok = decode_step_mine\n"
         "def decode_step_mine(state, x_t, params, num_heads, t):\n"
         "    return _ok(state, x_t, params, num_heads, t)[0]\n", "return a pair"),
        ("forgets S3", "_ok = decode_step_mine\n"
         "def decode_step_mine(state, x_t, params, num_heads, t):\n"
         "    y, new = _ok(state, x_t, params, num_heads, t)\n"
         "    return y, dict(new, S3=state['S3'])\n", "y at token"),
    ],
    "xp_coding_rate": [
        ("np.linalg on device arrays", "def xp_coding_rate_mine(Z, eps):\n"
         "    n, d = Z.shape\n"
         "    return 0.5 * np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z.T @ Z)[1]\n",
         "namespace of the input"),
        ("eye without device", "import array_api_compat\n"
         "def xp_coding_rate_mine(Z, eps):\n"
         "    xp = array_api_compat.array_namespace(Z); n, d = Z.shape\n"
         "    G = xp.eye(d, dtype=Z.dtype) + d / (n * eps**2) * (xp.matrix_transpose(Z) @ Z)\n"
         "    return 0.5 * xp.linalg.slogdet(G)[1]\n", "device"),
        ("float() to the host", "_ok = xp_coding_rate_mine\n"
         "def xp_coding_rate_mine(Z, eps):\n    return float(_ok(Z, eps))\n",
         "xp_coding_rate"),
        ("forgot the 1/2", "_ok = xp_coding_rate_mine\n"
         "def xp_coding_rate_mine(Z, eps):\n    return 2 * _ok(Z, eps)\n", "factor 1/2"),
    ],
    "xp_softmax": [
        ("np.exp", "def xp_softmax_mine(l):\n"
         "    e = np.exp(l - l.max(axis=-1, keepdims=True))\n"
         "    return e / e.sum(axis=-1, keepdims=True)\n", "namespace of the input"),
        ("no shift: overflow", "import array_api_compat\n"
         "def xp_softmax_mine(l):\n"
         "    xp = array_api_compat.array_namespace(l); e = xp.exp(l)\n"
         "    return e / xp.sum(e, axis=-1, keepdims=True)\n", "NaN or inf"),
        ("first axis", "import array_api_compat\n"
         "def xp_softmax_mine(l):\n"
         "    xp = array_api_compat.array_namespace(l)\n"
         "    e = xp.exp(l - xp.max(l, axis=0, keepdims=True))\n"
         "    return e / xp.sum(e, axis=0, keepdims=True)\n", "wrong axis"),
        ("returns a NumPy array", "_ok = xp_softmax_mine\n"
         "def xp_softmax_mine(l):\n"
         "    from tostnp.backend import to_host\n    return to_host(_ok(l))\n",
         "stay on the device"),
    ],
})

_MSSA = ("def mssa_mine(Z, U, beta):\n"
         "    out = np.zeros_like(Z)\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; S = P @ P.T\n"
         "        A = np.exp(S - S.max(axis={ax}, keepdims=True)); A = A / A.sum(axis={ax},"
         " keepdims=True)\n"
         "        out += {b} * {body}\n"
         "    return out\n")
MUTANTS.update({
    "mssa": [
        ("softmax over columns", _MSSA.format(ax=0, b="beta", body="A @ P @ U[k].T"), "wrong axis"),
        ("no softmax", _MSSA.format(ax=1, b="beta", body="S @ P @ U[k].T"), "row-wise softmax"),
        ("not mapped back", _MSSA.format(ax=1, b="beta", body="A @ Z"), "mapped back"),
        ("no beta", _MSSA.format(ax=1, b="1.0", body="A @ P @ U[k].T"), "divided by beta"),
        ("no max shift", "def mssa_mine(Z, U, beta):\n"
         "    out = np.zeros_like(Z)\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; A = np.exp(P @ P.T)\n"
         "        out += beta * (A / A.sum(1, keepdims=True)) @ P @ U[k].T\n"
         "    return out * 1.000001\n", "MSSA for"),
    ],
    "series_error": [
        ("one-term series", "def series_error_mine(Z, U, beta):\n"
         "    n = Z.shape[0]; ex = 0; ap = 0\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]\n"
         "        ex = ex + np.linalg.solve(np.eye(n) + beta * P @ P.T, P) @ U[k].T\n"
         "        ap = ap + P @ U[k].T\n"
         "    return float(np.linalg.norm(ex - ap) / np.linalg.norm(ex))\n", "ONE-term"),
        ("relative to the approximation", "def series_error_mine(Z, U, beta):\n"
         "    n = Z.shape[0]; ex = 0; ap = 0\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; G = P @ P.T\n"
         "        ex = ex + np.linalg.solve(np.eye(n) + beta * G, P) @ U[k].T\n"
         "        ap = ap + (P - beta * G @ P) @ U[k].T\n"
         "    return float(np.linalg.norm(ex - ap) / np.linalg.norm(ap))\n", "divide by the exact"),
        ("absolute error", "def series_error_mine(Z, U, beta):\n"
         "    n = Z.shape[0]; ex = 0; ap = 0\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; G = P @ P.T\n"
         "        ex = ex + np.linalg.solve(np.eye(n) + beta * G, P) @ U[k].T\n"
         "        ap = ap + (P - beta * G @ P) @ U[k].T\n"
         "    return float(np.linalg.norm(ex - ap))\n", "the error at beta"),
        ("sign of the series term", "def series_error_mine(Z, U, beta):\n"
         "    n = Z.shape[0]; ex = 0; ap = 0\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; G = P @ P.T\n"
         "        ex = ex + np.linalg.solve(np.eye(n) + beta * G, P) @ U[k].T\n"
         "        ap = ap + (P + beta * G @ P) @ U[k].T\n"
         "    return float(np.linalg.norm(ex - ap) / np.linalg.norm(ex))\n", "the error at beta"),
    ],
})
