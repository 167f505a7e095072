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
