"""Planted bugs for the checkers of exercises/04_variational.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
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
}
