"""Planted bugs for the checkers of exercises/01_attention_cost.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

_ATT = ("def softmax_attention_mine(Q, K, V):\n"
        "    S = {S}\n"
        "    A = np.exp(S - S.max(axis={ax}, keepdims=True))\n"
        "    return (A / A.sum(axis={ax}, keepdims=True)) @ V\n")

_SC = ("def attention_scaling_mine():\n"
       "    Ns = {N}\n"
       "    secs = [1e-9 * n**{a} for n in Ns]\n"
       "    return {{'N': Ns, 'seconds': secs, 'slope': {slope}}}\n")

MUTANTS = {
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
        # quadratic "timings" a thousand times faster than any real run (1e-12 n^2 s): a
        # factor the check's band cannot miss on a fast or a loaded machine
        ("made-up timings", _SC.format(N=[256, 512, 1024, 2048], a=2, slope="float(np.polyfit("
                                       "np.log(Ns), np.log(secs), 1)[0])").replace("1e-9", "1e-12"),
         "not made-up ones"),
        ("wrong keys", "def attention_scaling_mine():\n    return {'sizes': [1], 'times': [1]}\n",
         'keys "N"'),
    ],
}
