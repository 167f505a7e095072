"""What a grading child can import: the stand-in ``tostnp`` built for each notebook
(tostnp.exercises.grading.build_sandbox), listed module by module, holds nothing of the code
under study under another name (a private plain-path function, the fast-path switch, another
layer's backward), and the 8.1/8.2 forgeries that went through those doors score 0."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jupytext")

from tostnp.exercises import grading  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402

STEMS = [p.stem for p in nbk.notebooks()]
# the modules each child may import, written out by hand (a notebook not named: none but the
# stand-in tostnp.exercises); a prefix ending in "." stands for a whole folder
CAN_IMPORT = {
    "08_tost_block": {"tostnp.backend.", "tostnp.nn", "tostnp.nn.params", "tostnp.nn.layers",
                      "tostnp.nn.loss",
                      "tostnp.nn.tssa", "tostnp.nn.tssa_heads", "tostnp.nn.tssa_causal"},
    "09_images": {"tostnp.backend.", "tostnp.nn.", "tostnp.models.", "tostnp.data."},
}
# the code under study, by what its functions are called: any function of the stand-in package
# whose name holds one of these must raise when called
UNDER_STUDY = {"08_tost_block": ("layer_norm", "batch_norm", "gelu", "mlp", "block",
                                 "layer_scale", "_ln"),
               "09_images": ("adam",)}


def _modules(pkg: Path) -> list[str]:
    out = []
    for f in sorted(pkg.rglob("*.py")):
        parts = f.relative_to(pkg.parent).with_suffix("").parts
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def _raises_only(fn) -> bool:
    return len(fn.body) == 1 and isinstance(fn.body[0], ast.Raise)


@pytest.mark.parametrize("stem", STEMS)
def test_what_each_notebooks_child_can_import(stem, tmp_path):
    grading.build_sandbox(stem, tmp_path)
    pkg = tmp_path / "pkgs" / "tostnp"
    mods = _modules(pkg)
    allowed = CAN_IMPORT.get(stem, set()) | {"tostnp", "tostnp.exercises"}
    extra = [m for m in mods if m not in allowed
             and not any(a.endswith(".") and (m + ".").startswith(a) for a in allowed)]
    assert extra == [], f"{stem}'s child can import {extra}"
    open_doors = []
    for f in pkg.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    any(w in node.name for w in UNDER_STUDY.get(stem, ())) and \
                    not _raises_only(node):
                open_doors.append(f"{f.relative_to(pkg.parent)}:{node.name}")
    # the parameter shape tables (tostnp.nn.params *_spec) compute nothing
    assert [d for d in open_doors if not d.endswith("_spec")] == [], open_doors


def test_the_tost_block_child_reaches_no_layer_norm(tmp_path):
    """Imported for real, as the child imports it: every door named in the issue is shut, and
    what 8.3 may use (TSSA) still runs."""
    grading.build_sandbox("08_tost_block", tmp_path)
    probe = """
import numpy as np, tostnp.nn as nn, tostnp.backend as backend
import tostnp.nn.layers as L, tostnp.backend.kernels as K
x, g, b = np.ones((2, 4)), np.ones(4), np.zeros(4)
backend.set_fast(False)
shut = []
for f, a in [(L._layer_norm_forward, (x, g, b, 1e-6)), (L.layer_norm_forward, (x, g, b)),
             (K.layer_norm_forward, (x, g, b, 1e-6)), (L.mlp_forward, (x, {})),
             (L.gelu_forward, (x,)), (K.gelu_forward, (x,)), (K.gelu_forward_slope, (x,))]:
    try:
        f(*a)
    except RuntimeError as e:
        shut.append("not available while grading" in str(e))
for m in ("tostnp.nn.batchnorm", "tostnp.nn.block", "tostnp.nn.mixers", "tostnp.models"):
    try:
        __import__(m)
    except ImportError:
        shut.append(True)
y = nn.tssa_forward(np.ones((1, 3, 8)), nn.tssa_init(backend.RNG(0), np, 8, 2, dtype=np.float64), 2)[0]
print(len(shut), all(shut), y.shape == (1, 3, 8))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tmp_path / "pkgs")
    r = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["11", "True", "True"], r.stdout


FORGERIES = {
    "private_forward": ("layer_norm", """
import tostnp.backend as backend
import tostnp.nn.layers as L
backend.set_fast(False)


def layer_norm_mine(x, gamma, beta, eps):
    return L._layer_norm_forward(x, gamma, beta, eps)[0]
"""),
    "batchnorm_backward": ("layer_norm_backward", """
import numpy as np
from tostnp.nn.batchnorm import batch_norm2d_backward


def layer_norm_backward_mine(dy, x, gamma, beta, eps):
    C = x.shape[-1]
    X = np.swapaxes(x.reshape(-1, C), 0, 1)[None, None]          # LN's axis as BN's batch
    mu, var = X.mean((0, 1, 2), keepdims=True), X.var((0, 1, 2), keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    D = np.swapaxes((dy * gamma).reshape(-1, C), 0, 1)[None, None]
    dx, _ = batch_norm2d_backward(D, {"xhat": (X - mu) * rstd, "rstd": rstd,
                                      "gamma": np.ones(1), "train": True})
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    dxr = np.swapaxes(dx[0, 0], 0, 1).reshape(x.shape)
    return dxr, (dy * xhat).reshape(-1, C).sum(0), dy.reshape(-1, C).sum(0)
"""),
}


@pytest.mark.parametrize("label", sorted(FORGERIES))
def test_delegation_forgeries_are_right_against_the_package_but_score_zero_graded(label):
    """Each forgery is a real one (against the real package it gives the reference solution's
    answer) and scores 0 through the grader."""
    import numpy as np
    from tostnp import backend
    ex, src = FORGERIES[label]
    stem = "08_tost_block"
    ns: dict = {}
    ref: dict = {}
    for sec in nbk.solution_sections(stem).values():
        exec(sec, ref)
    rng = np.random.default_rng(0)
    x, g, b, dy = (rng.standard_normal(s) for s in ((3, 5), (5,), (5,), (3, 5)))
    args = (x, g, b, 1e-3) if ex == "layer_norm" else (dy, x, g, b, 1e-3)
    try:
        exec(src, ns)
        got = ns[f"{ex}_mine"](*args)
    finally:
        backend.set_fast(True)
    want = ref[f"{ex}_mine"](*args)
    for a, w in zip(got if isinstance(got, tuple) else [got], want if isinstance(want, tuple)
                    else [want]):
        np.testing.assert_allclose(a, w, rtol=1e-10, atol=1e-12)
    sections = dict(nbk.solution_sections(stem))
    sections[ex] = src
    nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), sections)
    res = grading.run_submission(nb, stem, hidden=True, cell_timeout=60.0)
    assert res["exercises"][ex]["score"] == 0, res["exercises"][ex]
