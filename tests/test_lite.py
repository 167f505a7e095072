"""The exercises in the browser: the book's links into the JupyterLite site and the site's
notebooks (their install cell). The site itself is built and its notebooks run under Pyodide's
limits by .ci/build-lite and `.ci/lite.py mimic` in CI."""
import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


lite_link = _load("lite_link", ROOT / "book" / "_ext" / "lite_link.py")
lite = _load("ci_lite", ROOT / ".ci" / "lite.py")


def test_every_exercise_page_links_to_its_notebook_relatively():
    pages = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9][0-9]_*.md"))
    assert pages
    for stem in pages:
        href = lite_link.lite_href(f"exercises/{stem}")
        assert href == f"../lite/notebooks/index.html?path={stem}.ipynb"
    assert lite_link.lite_href("book/02_coding_rate") is None
    assert lite_link.lite_href("exercises/README") is None


def test_site_notebooks_open_with_an_install_cell(tmp_path):
    pytest.importorskip("jupytext")
    import nbformat
    written = lite.write_notebooks(tmp_path)
    stems = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9][0-9]_*.md"))
    assert [p.stem for p in written] == stems
    for p in written:
        nb = nbformat.read(str(p), as_version=4)
        first = nb.cells[0]
        assert lite.INSTALL_TAG in first.metadata["tags"]
        pips = re.findall(r"^%pip install .*$", first.source, flags=re.M)
        assert len(pips) == 2 and "--no-deps" in pips[1]
        assert "safetensors" not in first.source              # no Pyodide build: not needed
        assert "tostnp" in pips[1].split() and "numpy" in pips[0].split()
        assert nb.metadata["kernelspec"]["name"] == "python"  # the Pyodide kernel's name
        code = "\n".join(c.source for c in nb.cells[1:] if c.cell_type == "code")
        if "matplotlib" in code:
            assert "matplotlib" in pips[0].split()
