"""The sandbox a grading child sees: the ``tostnp`` stand-in package built for a notebook, the
modules it may not import, the interpreter's site folders, and where the real package lives."""
from __future__ import annotations

import ast
import os
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2]            # tostnp/

# modules no grading child may import (derivations are by hand; references are the grader's)
BLOCKED_MODULES = ("autograd", "jax", "torch", "tensorflow", "sympy", "tostnp.exercises._reference",
                   "tostnp.math.objective", "tostnp.math.variational")

# notebooks whose exercises use package code: which parts of tostnp the child gets, which are
# left out, and which functions are emptied (they raise when called) because an exercise of the
# notebook asks the student to write them. Every other notebook gets no package code at all.
# "keep" lists modules, not folders, where a folder holds the code under study under other names
# (8.1/8.2: a private plain-path LayerNorm, BatchNorm's backward, GELU and the MLP beside it);
# "only" keeps just the named functions of a module (every other one raises when called), for a
# module that the kept code imports for a helper; tests/test_exercises_sandbox_imports.py lists
# what each notebook's child can import.
SANDBOX_PACKAGE = {
    "08_tost_block": {       # TSSA stays (8.3 may call it); nothing of LayerNorm, GELU, the MLP
        "keep": ["tostnp.backend", "tostnp.nn.params", "tostnp.nn.layers", "tostnp.nn.loss",
                 "tostnp.nn.tssa", "tostnp.nn.tssa_heads", "tostnp.nn.tssa_causal"],
        "drop": [],
        "empty": {"tostnp.backend.kernels": ["layer_norm_forward", "layer_norm_backward",
                                             "gelu_forward", "gelu_backward",
                                             "gelu_forward_slope", "gelu_slope_backward"]},
        "only": {"tostnp.nn.layers": ["sum_leading"], "tostnp.nn.loss": []},
        "init": {"tostnp.nn": ["tssa"]},
    },
    "09_images": {
        "keep": ["tostnp.backend", "tostnp.nn", "tostnp.models", "tostnp.data"],
        "drop": [],
        "empty": {"tostnp.backend.kernels": ["adamw_update", "adamw_update_flat"]},
        "only": {},
        "init": {},
    },
}
# notebooks graded in more than one child: each phase checks some exercises, with its own
# package. Notebook 09's training exercise needs the model code, and the model code holds a patch
# extraction and LayerNorm, so 9.1, 9.2 and 9.4 are checked in a child without any package code.
PHASES = {"09_images": [(("patchify", "adam_step", "membership_maps"), None),
                        (("digits_training",), "notebook")]}
PRELOAD = {"09_images": ["matplotlib.pyplot", "threadpoolctl"], "01_attention_cost": ["threadpoolctl"],
           "11_gpu": ["array_api_strict", "array_api_compat"]}


def _empty_functions(src: str, names, where: str, *, keep=None) -> str:
    """``src`` with the functions ``names`` (or, given ``keep``, every top-level function not in
    ``keep``) raising when called."""
    tree = ast.parse(src)
    funcs = (ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = ([n for n in tree.body if isinstance(n, funcs) and n.name not in keep]
             if keep is not None else
             [n for n in ast.walk(tree) if isinstance(n, funcs) and n.name in names])
    for node in nodes:
        msg = (f"tostnp.{where}.{node.name} is not available while grading: the exercise "
               "asks you to write it")
        node.body = [ast.Raise(exc=ast.Call(func=ast.Name("RuntimeError", ast.Load()),
                                            args=[ast.Constant(msg)], keywords=[]), cause=None)]
        node.decorator_list = []
    return ast.unparse(ast.fix_missing_locations(tree))


def _stub_exercises() -> str:
    from .. import __all__ as names
    checks = [n for n in names if n.startswith("check_")]
    lines = ['"""Stand-ins while grading: the checks run in the grading process, not here."""',
             "", "", "def _not_here(*args, **kwargs):", "    return None", ""]
    lines += [f"{n} = _not_here" for n in checks]
    lines += ["", "", "def digits_config():",
              "    from tostnp.models import get_vision_config",
              "    return get_vision_config('tiny-digits', width=32, depth=1, num_heads=4, "
              "pool='mean')", ""]
    return "\n".join(lines)


def build_sandbox(stem: str, dest: Path) -> None:
    """Write ``dest/pkgs/tostnp``: the package a child of notebook ``stem`` may import."""
    pkg = dest / "pkgs" / "tostnp"
    (pkg / "exercises").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""tostnp, as a grading child sees it."""\n')
    (pkg / "exercises" / "__init__.py").write_text(_stub_exercises())
    spec = SANDBOX_PACKAGE.get(stem)
    if not spec:
        return
    for name in spec["keep"]:
        src = _source(name)
        dst = pkg / src.relative_to(PACKAGE)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(src, dst)
    for name in spec["drop"]:
        (pkg / _source(name).relative_to(PACKAGE)).unlink(missing_ok=True)
    for name, funcs in spec["empty"].items():
        f = pkg / _source(name).relative_to(PACKAGE)
        f.write_text(_empty_functions(f.read_text(encoding="utf-8"), set(funcs), name[7:]))
    for name, funcs in spec["only"].items():
        f = pkg / _source(name).relative_to(PACKAGE)
        f.write_text(_empty_functions(f.read_text(encoding="utf-8"), (), name[7:], keep=set(funcs)))
    for name, subs in spec["init"].items():
        (pkg / _source(name).relative_to(PACKAGE) / "__init__.py").write_text(
            "".join(f"from .{m} import *  # noqa\n" for m in subs))


def _source(module: str) -> Path:
    """The file (or, for a package, the folder) of a tostnp module, found without importing it."""
    import importlib.util
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"SANDBOX_PACKAGE names {module}, which does not exist")
    origin = Path(spec.origin).resolve()
    return origin.parent if spec.submodule_search_locations else origin


def site_dirs() -> list[str]:
    """The site-packages folders of this interpreter: the child starts without ``site`` (-S, so
    no .pth file runs: an editable install's import hook would reach the real tostnp) and puts
    these on its path itself. Resolved: a folder reached through a link (a venv whose
    site-packages is another's) is bound into the sandbox where it really is."""
    import site
    dirs = [os.path.realpath(d) for d in list(site.getsitepackages())
            + [site.getusersitepackages()]]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


def real_package_dirs() -> set[Path]:
    """Every folder a real ``tostnp`` could be imported from: this one, a copy installed in
    site-packages, the target of an editable install. A child may read none of them."""
    import glob
    out = {PACKAGE}
    for sp in site_dirs():
        if os.path.isdir(os.path.join(sp, "tostnp")):
            out.add(Path(sp, "tostnp").resolve())
        for f in glob.glob(os.path.join(sp, "__editable___tostnp*finder.py")):
            try:
                tree = ast.parse(Path(f).read_text(encoding="utf-8"))
            except (OSError, SyntaxError):
                continue
            for node in tree.body:
                targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                           if isinstance(node, ast.AnnAssign) and node.value is not None else [])
                if any(getattr(t, "id", "") == "MAPPING" for t in targets):
                    try:
                        mapping = ast.literal_eval(node.value)
                    except ValueError:
                        continue
                    out |= {Path(v).resolve() for v in mapping.values()}
    return out
