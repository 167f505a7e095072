#!/usr/bin/env python3
"""The exercises in the browser (JupyterLite + the Pyodide kernel): the notebooks of the site, and
a check of them under a CPython that keeps Pyodide's limits.

    python .ci/lite.py notebooks OUT_DIR          # exercises/NN_*.md -> OUT_DIR/NN_*.ipynb
    python .ci/lite.py mimic SITE_DIR [NN ...]    # run the site's notebooks, solved, under the limits

``notebooks`` writes each exercise notebook with a first cell that installs what it needs in the
browser: the Pyodide packages it uses (numpy always; matplotlib, scikit-learn where used) with
``%pip install``, and -- with ``--no-deps``, from the site's own ``pypi/`` folder -- the wheels of
tostnp, autograd, array-api-compat, threadpoolctl and array-api-strict (tostnp's other dependencies, safetensors
among them, have no Pyodide build and are not needed by the exercises).

``mimic`` runs every notebook of a built site (``SITE_DIR/files``), with the reference solutions
filled in, each in a fresh CPython process that keeps Pyodide's limits:
  * tostnp and the other site wheels (SITE_WHEELS) are imported from the wheels in
    ``SITE_DIR/pypi`` (zip import: the files the browser gets), never from the source tree;
  * only the standard library, those wheels and the Pyodide packages the notebook's install cell
    names (with their own dependencies) can be imported: anything else -- safetensors, jupytext,
    pytest, tqdm unless named -- raises ImportError, as it would in the browser;
  * starting a thread, a subprocess or a fork raises (Pyodide has none);
  * the install cell's ``%pip`` lines are checked against the site (every wheel it names is there)
    instead of run.
A notebook passes when every cell runs and every check cell printed ``PASS``.
Needs jupytext and the Pyodide packages' CPython builds (the repository's test venv has them).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_WHEELS = ["tostnp", "autograd", "array-api-compat", "threadpoolctl", "array-api-strict"]
# Pyodide packages a notebook may ask for, with the modules they and their dependencies provide
PYODIDE = {
    "numpy": ["numpy"],
    "matplotlib": ["matplotlib", "mpl_toolkits", "contourpy", "cycler", "fontTools",
                   "kiwisolver", "PIL", "pyparsing", "dateutil", "six", "packaging", "pylab"],
    "scikit-learn": ["sklearn", "scipy", "joblib", "threadpoolctl", "cloudpickle"],
}
INSTALL_TAG = "lite-install"


def pyodide_packages(code: str) -> list[str]:
    """The Pyodide packages a notebook's code needs (beyond the site's wheels)."""
    need = ["numpy"]
    if re.search(r"\bmatplotlib\b|tostnp\.exercises\.images|\bplt\.", code):
        need.append("matplotlib")
    if re.search(r"load_digits|sklearn|tostnp\.exercises\.images", code):
        need.append("scikit-learn")
    return need


def install_cell_source(code: str) -> str:
    return ("# In the browser (JupyterLite, Pyodide): install what this notebook needs. Skip this\n"
            "# cell in a local Jupyter, where `python3 run.py exercises start` installed it all.\n"
            f"%pip install -q {' '.join(pyodide_packages(code))}\n"
            f"%pip install -q --no-deps {' '.join(SITE_WHEELS)}")


def write_notebooks(out: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from tostnp.exercises import notebook as nbk
    import nbformat
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for p in nbk.notebooks():
        nb = nbk.read(p)
        nb.metadata.pop("mystnb", None)
        nb.metadata.pop("jupytext", None)
        nb.metadata["kernelspec"] = {"name": "python", "display_name": "Python (Pyodide)",
                                     "language": "python"}
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        cell = nbformat.v4.new_code_cell(install_cell_source(code))
        cell.metadata["tags"] = [INSTALL_TAG]
        nb.cells.insert(0, cell)
        dst = out / f"{p.stem}.ipynb"
        nbformat.write(nb, str(dst))
        written.append(dst)
    return written


# ---------------------------------------------------------------------------------------------
# the mimic: one child process per notebook
# ---------------------------------------------------------------------------------------------
_CHILD = r'''
import builtins, importlib.abc, json, os, subprocess, sys, threading
spec = json.load(open(sys.argv[1]))
sys.path[:0] = spec["wheels"]
# threadpoolctl's Linux scan runs ldconfig in a subprocess (once, cached): run it before the
# limits go on; under Pyodide threadpoolctl takes its own branch (_find_libraries_pyodide)
import threadpoolctl
threadpoolctl.ThreadpoolController()
# Pyodide's limits: no threads, no processes
def _no(*a, **k):
    raise RuntimeError("can't start a new thread or process (Pyodide has none)")
threading.Thread.start = _no
subprocess.Popen.__init__ = _no
os.fork = _no
if hasattr(os, "posix_spawn"):
    os.posix_spawn = _no
# only the standard library, the site's wheels and the named Pyodide packages import
allowed = set(spec["allowed"]) | set(sys.stdlib_module_names)
class _Gate(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top.startswith("_") or top in allowed:
            return None
        raise ModuleNotFoundError(f"No module named {top!r} (not in the browser site)", name=top)
sys.meta_path.insert(0, _Gate())
# the limits hold (a mimic that allowed them would prove nothing)
for probe in (lambda: __import__("safetensors"), lambda: threading.Thread(target=print).start(),
              lambda: subprocess.run(["true"])):
    try:
        probe()
    except (ImportError, RuntimeError):
        pass
    else:
        raise SystemExit("lite mimic: a Pyodide limit is not in force")
os.environ["MPLBACKEND"] = "Agg"
import tostnp
assert tostnp.__file__.startswith(spec["site"]), tostnp.__file__
g = {"__name__": "__main__"}
for i, src in enumerate(spec["cells"]):
    print(f"--- cell {i}", flush=True)
    exec(compile(src, f"<cell {i}>", "exec"), g)
print("MIMIC-DONE", flush=True)
'''


def check_install_cell(src: str, wheels: dict[str, Path]) -> list[str]:
    """The Pyodide packages the install cell names; every site wheel it names exists."""
    lines = [ln.strip() for ln in src.splitlines() if ln.strip().startswith("%pip install")]
    if len(lines) != 2:
        raise SystemExit(f"lite: the install cell should have two %pip lines:\n{src}")
    pyodide = [a for a in lines[0].split()[2:] if not a.startswith("-")]
    site = [a for a in lines[1].split()[2:] if not a.startswith("-")]
    if "--no-deps" not in lines[1]:
        raise SystemExit("lite: the site's wheels must install with --no-deps")
    missing = [n for n in site if n.replace("-", "_") not in wheels]
    unknown = [n for n in pyodide if n not in PYODIDE]
    if missing or unknown:
        raise SystemExit(f"lite: not in the site: {missing}; not a known Pyodide package: {unknown}")
    return pyodide


def mimic(site: Path, only: list[str]) -> int:
    import nbformat
    sys.path.insert(0, str(ROOT))
    from tostnp.exercises import notebook as nbk
    site = site.resolve()
    wheels = {}
    for w in sorted((site / "pypi").glob("*.whl")):
        wheels[w.name.split("-")[0].lower()] = w
    tops = set()
    for w in wheels.values():
        with zipfile.ZipFile(w) as z:
            for n in z.namelist():
                top = n.split("/")[0]
                if "/" not in n and n.endswith(".py"):          # a single-module wheel
                    tops.add(n[:-3])
                elif "/" in n and not top.endswith((".dist-info", ".data")):
                    tops.add(top)
    notebooks = sorted((site / "files").glob("[0-9][0-9]_*.ipynb"))
    if only:
        notebooks = [p for p in notebooks if p.name[:2] in only]
    if not notebooks:
        print("lite mimic: no notebooks found", file=sys.stderr)
        return 1
    failed = 0
    for path in notebooks:
        nb = nbformat.read(str(path), as_version=4)
        first = nb.cells[0]
        if INSTALL_TAG not in first.metadata.get("tags", []):
            print(f"lite mimic: {path.name}: no install cell first", file=sys.stderr)
            failed += 1
            continue
        pyodide = check_install_cell(first.source, wheels)
        sections = nbk.solution_sections(path.stem)
        nbk.fill(nb, sections)
        cells = [c.source for c in nb.cells[1:] if c.cell_type == "code"]
        n_checks = sum(1 for c in nb.cells if c.cell_type == "code"
                       and "check" in c.metadata.get("tags", []))
        allowed = sorted(tops | {m for p in pyodide for m in PYODIDE[p]})
        spec = {"wheels": [str(w) for w in wheels.values()], "allowed": allowed,
                "site": str(site), "cells": cells}
        spec_file = site.parent / f".lite-mimic-{path.stem}.json"
        spec_file.write_text(json.dumps(spec))
        try:
            r = subprocess.run([sys.executable, "-I", "-c", _CHILD, str(spec_file)], cwd=site,
                               capture_output=True, text=True, timeout=900)
        finally:
            spec_file.unlink()
        passes = r.stdout.count("PASS")
        ok = r.returncode == 0 and "MIMIC-DONE" in r.stdout and passes >= n_checks > 0
        print(f"lite mimic: {path.name}: {'ok' if ok else 'FAIL'} "
              f"({passes} PASS lines for {n_checks} check cells; Pyodide packages: "
              f"{', '.join(pyodide)})", flush=True)
        if not ok:
            failed += 1
            print((r.stdout[-1500:] + "\n" + r.stderr[-3000:]).strip(), file=sys.stderr)
    return 1 if failed else 0


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "notebooks":
        for p in write_notebooks(Path(argv[1])):
            print(f"lite: {p}")
        return 0
    if len(argv) >= 2 and argv[0] == "mimic":
        return mimic(Path(argv[1]), argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
