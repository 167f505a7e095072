#!/usr/bin/env python3
"""The exercises in the browser (JupyterLite + the Pyodide kernel): the notebooks of the site.

    python .ci/lite.py notebooks OUT_DIR          # exercises/NN_*.md -> OUT_DIR/NN_*.ipynb

``notebooks`` writes each exercise notebook with a first cell that installs what it needs in the
browser: the Pyodide packages it uses (numpy always; matplotlib, scikit-learn where used) with
``%pip install``, and -- with ``--no-deps``, from the site's own ``pypi/`` folder -- the wheels of
tostnp, autograd, array-api-compat, threadpoolctl and array-api-strict (tostnp's other
dependencies, safetensors among them, have no Pyodide build and are not needed by the exercises).
``.ci/pyodide.py run`` executes the site's notebooks in a real Pyodide runtime (Node.js,
offline); it reads the install cells with :func:`check_install_cell`.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE_WHEELS = ["tostnp", "autograd", "array-api-compat", "threadpoolctl", "array-api-strict"]
# the Pyodide packages a notebook's install cell may name (.ci/pyodide.py carries them offline)
PYODIDE = ["numpy", "matplotlib", "scikit-learn"]
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


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "notebooks":
        for p in write_notebooks(Path(argv[1])):
            print(f"lite: {p}")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
