"""A Gradescope autograder for the exercise notebooks: the zip ``exercises build --gradescope``
writes, and what its ``run_autograder`` runs for each submission.

Gradescope's layout (its "Autograder Specifications"): the zip's ``setup.sh`` runs once, as
root, when the image is built, with the zip unpacked in ``/autograder/source``; for each
submission, ``/autograder/run_autograder`` runs in ``/autograder`` with the student's files in
``/autograder/submission``, and must write ``/autograder/results/results.json``: a total
``score`` and one entry per test (``name``, ``score``, ``max_score``, ``status``, ``output``).

Each exercise is one test, graded as ``exercises grade`` grades it (:mod:`.grading`: the
notebook's cells in a sandboxed child, the checks outside it, the hidden cases, inputs drawn
at grading time); its output is the hint of its first failing case. Written answers are marked
by hand (a Gradescope manual question), so they are named in the output and not scored here.
``TOSTNP_AUTOGRADER_ROOT`` replaces ``/autograder`` (to run the autograder on a local copy of
that layout).
"""
from __future__ import annotations

import json
import os
import secrets
import time
import zipfile
from pathlib import Path

from . import notebook as nbk

ROOT_ENV = "TOSTNP_AUTOGRADER_ROOT"
PYTHON_ENV = "TOSTNP_AUTOGRADER_PYTHON"

_SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image.
set -euo pipefail
SRC=/autograder/source
if ! command -v python3.11 >/dev/null && ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  apt-get install -y python3.11 python3.11-venv
fi
for py in python3.13 python3.12 python3.11 python3; do
  if command -v "$py" >/dev/null && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    break
  fi
done
apt-get install -y bubblewrap || true     # the sandbox, where the container allows it
"$py" -m venv /autograder/venv || { apt-get install -y "$py-venv" && "$py" -m venv /autograder/venv; }
/autograder/venv/bin/python -m pip install -q --disable-pip-version-check \\
  -r "$SRC/requirements-exercises.txt"
"""

_RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission: it grades /autograder/submission into
# /autograder/results/results.json (TOSTNP_AUTOGRADER_ROOT replaces /autograder).
set -u
ROOT="${TOSTNP_AUTOGRADER_ROOT:-/autograder}"
PY="${TOSTNP_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
cd "$ROOT/source" || exit 1
PYTHONPATH="$ROOT/source" exec "$PY" -m tostnp.exercises.gradescope %(notebooks)s
"""


def _zip_add(z: zipfile.ZipFile, arcname: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = (0o755 if executable else 0o644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    z.writestr(info, data)


def build_autograder(out: Path, notebooks=None, files=()) -> Path:
    """Write the autograder zip at ``out`` (a ``.zip`` path, else ``out/autograder.zip``):
    ``setup.sh`` and ``run_autograder`` at its root, the tostnp package, the official notebooks
    (the grader compares check cells with them) and ``files`` (the requirements setup.sh
    installs). ``notebooks``: the stems an assignment covers (all when None); one not handed in
    scores 0. Returns the zip's path."""
    stems = [p.stem for p in nbk.notebooks()]
    chosen = list(notebooks) if notebooks else stems
    unknown = [s for s in chosen if s not in stems]
    if unknown:
        raise ValueError(f"no such notebook: {', '.join(unknown)} (one of {', '.join(stems)})")
    out = Path(out)
    path = out if out.suffix == ".zip" else out / "autograder.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with zipfile.ZipFile(tmp, "w") as z:
        _zip_add(z, "setup.sh", _SETUP.encode(), executable=True)
        _zip_add(z, "run_autograder", (_RUN % {"notebooks": " ".join(chosen)}).encode(),
                 executable=True)
        for name in files:
            _zip_add(z, name, (nbk.ROOT / name).read_bytes())
        for p in nbk.notebooks():
            _zip_add(z, f"exercises/{p.name}", p.read_bytes())
        pkg = nbk.ROOT / "tostnp"
        for p in sorted(pkg.rglob("*.py")):
            if "__pycache__" not in p.parts:
                _zip_add(z, p.relative_to(nbk.ROOT).as_posix(), p.read_bytes())
    os.replace(tmp, path)
    return path


def _submitted(folder: Path) -> tuple[dict, list[str]]:
    """{stem: notebook file} under ``folder`` and notes about what was passed over: files
    are read as ``exercises grade`` reads them (no link followed, drafts never in place of the
    named notebook, :func:`.grading.course.scan_submissions`), one per notebook."""
    from .grading import notebook_stem
    from .grading.course import scan_submissions
    graded, refused = scan_submissions(folder)
    notes = [f"{Path(r['file']).name}: {r['reason']}" for r in refused]
    found: dict = {}
    for _, p in graded:
        stem = notebook_stem(p)
        if stem in found:
            notes.append(f"{p.relative_to(folder)}: another {stem} notebook was graded "
                         f"({found[stem].relative_to(folder)}); hand in one per notebook")
        else:
            found[stem] = p
    return found, notes


def grade(root: Path, notebooks, *, cell_timeout: float = 60.0,
          notebook_timeout: float = 600.0, memory_mb: int = 2048) -> dict:
    """Grade ``root/submission`` for the notebooks ``notebooks``; returns the results.json
    content (also written to ``root/results/results.json``)."""
    from .grading import run_submission
    from .grading.course import parse_submission
    t0 = time.monotonic()
    root = Path(root)
    found, notes = _submitted(root / "submission")
    salt = secrets.randbits(63)
    tests, written = [], 0
    for stem in notebooks:
        official = nbk.read(nbk.EXERCISES / f"{stem}.md")
        if stem in found:
            try:
                res = run_submission(parse_submission(found[stem]), stem, hidden=True,
                                     cell_timeout=cell_timeout,
                                     notebook_timeout=notebook_timeout, memory_mb=memory_mb,
                                     salt=salt, protected=[str(root / "results")])
                # (source/tostnp, the real package, is hidden from the child by the session)
                exercises, more = res["exercises"], res.get("notes", [])
                more = more + [f"graded with isolation: {res.get('isolation', 'none')}"]
                written += len(res.get("questions", []))
            except Exception as e:                      # noqa: BLE001  a file that is no notebook
                exercises, more = {}, [f"{found[stem].name} could not be read as a notebook: "
                                       f"{type(e).__name__}: {e}"]
        else:
            exercises, more = {}, []
        why = ("not handed in: upload your " + f"{stem}.md (or .ipynb)" if stem not in found
               else "the notebook could not be graded")
        for i, name in enumerate(nbk.exercises_of(official), start=1):
            e = exercises.get(name) or {"score": 0.0, "points": nbk.points_of(name),
                                        "hint": why}
            full = e["score"] == e["points"]
            tests.append({"name": f"{stem}: {name}", "number": f"{int(stem[:2])}.{i}",
                          "score": round(float(e["score"]), 4), "max_score": float(e["points"]),
                          "status": "passed" if full else "failed",
                          "output": "all cases pass" if full else (e.get("hint") or ""),
                          "visibility": "visible"})
        notes += [f"{stem}: {n}" for n in more]
    lines = notes + ([f"{written} written answer(s) are marked by hand, not in this score"]
                     if written else [])
    out = {"score": round(sum(t["score"] for t in tests), 4),
           "execution_time": int(time.monotonic() - t0), "output": "\n".join(lines),
           "output_format": "text", "stdout_visibility": "hidden", "tests": tests}
    results = root / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "results.json").write_text(json.dumps(out, indent=1), encoding="utf-8")
    return out


def main(argv=None) -> int:
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    root = Path(os.environ.get(ROOT_ENV) or "/autograder")
    stems = argv or [p.stem for p in nbk.notebooks()]
    r = grade(root, stems)
    print(f"score {r['score']:g} / {sum(t['max_score'] for t in r['tests']):g}; "
          f"{root / 'results' / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

