"""The exercises in the browser: the book's links into the JupyterLite site, the site's
notebooks (their install cell), and the checks of .ci/pyodide.py that make a third-party copy of
Pyodide's wheels safe to use (offline). The site itself is built by .ci/build-lite and its
notebooks run in a real Pyodide runtime by `.ci/pyodide.py run` in CI."""
import hashlib
import importlib.util
import io
import json
import zipfile
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
pyo = _load("ci_pyodide", ROOT / ".ci" / "pyodide.py")


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


# ---------------------------------------------------------------------------------------------
# .ci/pyodide.py: the transport is trusted for nothing
# ---------------------------------------------------------------------------------------------
def _transport(files: dict) -> zipfile.ZipFile:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(pyo.TRANSPORT_DIR + name, data)
    return zipfile.ZipFile(io.BytesIO(buf.getvalue()))


def _lock(**wheels) -> dict:
    return {"info": {"version": pyo.PYODIDE_VERSION},
            "packages": {n: {"file_name": f, "sha256": hashlib.sha256(d).hexdigest(),
                             "depends": deps} for n, (f, d, deps) in wheels.items()}}


def test_pyodide_wheels_are_checked_against_the_lock():
    good, other = b"the wheel the release built", b"a wheel with one byte changed!"
    lock = _lock(numpy=("numpy-2.0.2-x.whl", good, []), micropip=("micropip-0.9-x.whl", b"m", []))
    got = pyo.verified_wheels(lock, ["numpy"], _transport({"numpy-2.0.2-x.whl": good}))
    assert got == {"numpy-2.0.2-x.whl": good}
    with pytest.raises(pyo.Refused, match="refusing") as info:          # tampered
        pyo.verified_wheels(lock, ["numpy"], _transport({"numpy-2.0.2-x.whl": other}))
    assert hashlib.sha256(good).hexdigest() in str(info.value)
    with pytest.raises(pyo.Refused, match="has no micropip"):            # absent
        pyo.verified_wheels(lock, ["numpy", "micropip"], _transport({"numpy-2.0.2-x.whl": good}))
    lock["packages"]["numpy"]["file_name"] = "../numpy.whl"               # a path, not a name
    with pytest.raises(pyo.Refused, match="odd file"):
        pyo.verified_wheels(lock, ["numpy"], _transport({"../numpy.whl": good}))


def test_pyodide_tarball_and_dependency_closure():
    with pytest.raises(pyo.Refused, match="refusing"):
        pyo.check_tarball(b"not npm's tarball")
    lock = _lock(**{"scikit-learn": ("s.whl", b"s", ["scipy", "joblib"]),
                    "scipy": ("sp.whl", b"p", ["numpy", "openblas"]), "numpy": ("n.whl", b"n", []),
                    "openblas": ("o.zip", b"o", []), "joblib": ("j.whl", b"j", []),
                    "pandas": ("pd.whl", b"d", ["numpy"])})
    assert pyo.closure(lock, ["scikit-learn"]) == ["joblib", "numpy", "openblas", "scikit-learn",
                                                   "scipy"]
    with pytest.raises(pyo.Refused, match="not a package"):
        pyo.closure(lock, ["tostnp"])


def test_pyodide_cached_release_verifies(tmp_path):
    """The cached downloads (when `.ci/pyodide.py fetch` has run here): every wheel the run uses
    has the npm lock's sha256, and the runtime folder holds exactly the runtime and those."""
    cache = pyo.cache_dir()
    if not (cache / pyo.NPM_TARBALL).is_file() or not (cache / pyo.TRANSPORT_WHEEL).is_file():
        pytest.skip("no Pyodide cache here (python .ci/pyodide.py fetch)")
    lock = pyo.build_runtime(cache, pyo.lite.PYODIDE + ["micropip"], tmp_path / "rt")
    names = sorted(p.name for p in (tmp_path / "rt").iterdir())
    wheels = sorted(set(names) - set(pyo.RUNTIME_FILES))
    assert {"numpy", "scipy", "scikit-learn", "matplotlib", "micropip"} <= {
        n for n, e in lock["packages"].items() if e["file_name"] in wheels}
    for w in wheels:
        entry = next(e for e in lock["packages"].values() if e["file_name"] == w)
        assert hashlib.sha256((tmp_path / "rt" / w).read_bytes()).hexdigest() == entry["sha256"]
    assert json.loads((tmp_path / "rt" / "pyodide-lock.json").read_text())["info"]["version"] \
        == "0.27.7"


def test_pyodide_judge_wants_pass_and_caught_bugs():
    spec = {"cells": ["a", "check_x(f)"], "checks": [1],
            "mutants": [{"exercise": "x", "label": "b1", "hint": "sign"},
                        {"exercise": "attention_scaling",
                         "label": "linear-looking data (overhead-dominated sizes)",
                         "hint": "N large enough"}]}
    ok_cell = {"error": None, "out": "", "seconds": 0.1}
    caught = {"error": {"type": "Fail", "message": "x: the sign is flipped", "assertion": True,
                        "trace": ""}, "seconds": 0.1}
    other = {"error": {"type": "Fail", "message": "report them, not made-up ones",
                       "assertion": True, "trace": ""}, "seconds": 0.1}
    passed = {"cells": [ok_cell, dict(ok_cell, out="x: PASS")], "mutants": [caught, other]}
    assert pyo.judge(spec, passed) == ([], 1)
    no_pass = dict(passed, cells=[ok_cell, ok_cell])
    assert "printed no PASS" in pyo.judge(spec, no_pass)[0][0]
    missed = dict(passed, mutants=[ok_cell, other])
    assert "passed it" in pyo.judge(spec, missed)[0][0]
    wrong = dict(passed, mutants=[dict(caught, error=dict(caught["error"], type="TypeError",
                                                          assertion=False)), other])
    assert "expected an AssertionError" in pyo.judge(spec, wrong)[0][0]
    short = dict(passed, mutants=[caught])
    assert "1 of 2 planted bugs ran" in pyo.judge(spec, short)[0][0]
