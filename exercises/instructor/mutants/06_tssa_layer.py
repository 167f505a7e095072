"""Planted bugs for the checkers of exercises/06_tssa_layer.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
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
}
