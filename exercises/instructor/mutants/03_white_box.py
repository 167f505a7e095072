"""Planted bugs for the checkers of exercises/03_white_box.md (instructor-only; the format is
described in exercises/instructor/mutants/README.md)."""

_MSSA = ("def mssa_mine(Z, U, beta):\n"
         "    out = np.zeros_like(Z)\n"
         "    for k in range(U.shape[0]):\n"
         "        P = Z @ U[k]; S = P @ P.T\n"
         "        A = np.exp(S - S.max(axis={ax}, keepdims=True)); A = A / A.sum(axis={ax},"
         " keepdims=True)\n"
         "        out += {b} * {body}\n"
         "    return out\n")

MUTANTS = {
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
}
