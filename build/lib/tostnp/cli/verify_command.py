"""``python -m tostnp verify``: every identity of the derivation checked numerically in float64
against independent references (:mod:`tostnp.analysis.verify`); prints a PASS/FAIL table and exits
with status 1 when any row fails (2 when autograd is missing)."""
from __future__ import annotations

import numpy as np

from ..analysis import verify
from ..analysis.verify import checks
from .options import NONNEG_INT, POSITIVE_INT

__all__ = ["add_arguments", "run"]


def add_arguments(parser):
    parser.add_argument("--seed", type=NONNEG_INT, default=0, help="seed of the random test data (default 0)")
    parser.add_argument("--draws", type=POSITIVE_INT, default=20,
                        help="random orthogonal bases U tried for the bound R_c <= R^var_c (default 20)")


def run(args) -> int:
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        print("tostnp verify needs autograd (pip install autograd)")
        return 2
    rng = np.random.default_rng(args.seed)
    rows = list(checks(rng, args.draws, autograd, anp))
    width = max(len(r[0]) for r in rows)
    print(f"tostnp verify: float64, seed {args.seed}, eps {verify.EPS}, shapes (B, n, d, K) {verify.SHAPES}")
    print(f"{'identity':<{width}}  {'value':>10}  {'criterion':<16}  result")
    for name, value, crit, ok in rows:
        print(f"{name:<{width}}  {value:>10.2e}  {crit:<16}  {'PASS' if ok else 'FAIL'}")
    failed = sum(not r[3] for r in rows)
    print(f"{len(rows) - failed} of {len(rows)} identities PASS" + (f", {failed} FAIL" if failed else ""))
    return 1 if failed else 0
