"""Planted bugs for the checkers of exercises/10_causal_language.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

MUTANTS = {
    "prefix_statistics": [
        ("a T x T mask", "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    M = np.tril(np.ones((w.shape[1], w.shape[1])))\n"
         "    return (np.einsum('ts,bsc->btc', M, w**2),\n"
         "            np.einsum('ts,bsc->btc', M, np.repeat(Pi, p, -1) * w**2),\n"
         "            np.einsum('ts,bsh->bth', M, Pi))\n", "O(T) memory"),
        ("a loop over t", "def prefix_statistics_mine(w, Pi, num_heads):\n"
         "    p = w.shape[-1] // num_heads\n"
         "    X = [w**2, np.repeat(Pi, p, -1) * w**2, Pi]\n"
         "    out = [np.zeros_like(x) for x in X]\n"
         "    for t in range(w.shape[1]):\n"
         "        for o, x in zip(out, X):\n"
         "            o[:, t] = x[:, t] + (o[:, t - 1] if t else 0)\n"
         "    return tuple(out)\n", "a Python loop over t"),
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
}
