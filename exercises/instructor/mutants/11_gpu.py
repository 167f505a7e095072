"""Planted bugs for the checkers of exercises/11_gpu.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
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
}
