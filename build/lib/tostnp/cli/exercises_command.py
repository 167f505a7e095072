"""Exercise notebooks: start JupyterLab on your own copies, check a notebook, build the student
or instructor edition, grade many submissions.

  python -m tostnp exercises start                       # copy exercises/ to my-exercises/, open JupyterLab
  python -m tostnp exercises check my-exercises/02_coding_rate.md   # run it, print the score per exercise
  python -m tostnp exercises build --student OUT         # notebooks (.md and .ipynb), no solutions
  python -m tostnp exercises build --instructor OUT      # + solved notebooks with hidden tests, planted bugs
  python -m tostnp exercises grade SUBMISSIONS [--csv grades.csv]

``start`` never overwrites a notebook already in my-exercises/ (git ignores that folder, so the
tracked notebooks never change); it opens .md notebooks as notebooks (jupytext) and pairs each
with an .ipynb that keeps your outputs. ``grade`` takes the student cells of each submission
(SUBMISSIONS/<student>/NN_name.md or .ipynb), runs them in the official notebook with the hidden
edge-case tests, and writes one CSV row per student and notebook.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..exercises import notebook as nbk
from ..io.atomic import atomic_write_text

MY_DIR = nbk.ROOT / "my-exercises"
# .md notebooks open as notebooks in JupyterLab (the jupytext viewer), read from a config dir
# that `start` adds to JUPYTER_CONFIG_PATH (the user's own ~/.jupyter stays in use)
_LAB_OVERRIDES = {"@jupyterlab/docmanager-extension:plugin": {
    "defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}
# pair every notebook with an .ipynb that keeps the outputs; the .md stays the one you check
_JUPYTEXT_TOML = '# Written by `python -m tostnp exercises start`.\nformats = "ipynb,md:myst"\n'


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="action")
    sub.required = True
    s = sub.add_parser("start", help="copy the notebooks to my-exercises/ and start JupyterLab")
    s.add_argument("--dir", default=str(MY_DIR), help="your working folder (default: %(default)s)")
    s.add_argument("--no-lab", action="store_true", help="only copy and configure; do not start")
    s.add_argument("lab_args", nargs=argparse.REMAINDER,
                   help="passed to jupyter lab (e.g. -- --no-browser --port 8890)")
    c = sub.add_parser("check", help="execute notebooks and print the score of each exercise")
    c.add_argument("notebooks", nargs="+", help="notebook files (.md or .ipynb)")
    c.add_argument("--hidden", action="store_true", help="add the hidden edge-case tests")
    c.add_argument("--timeout", type=int, default=600, help="seconds per cell (%(default)s)")
    b = sub.add_parser("build", help="write the student or the instructor edition")
    g = b.add_mutually_exclusive_group(required=True)
    g.add_argument("--student", metavar="OUT", help="notebooks only, no solutions")
    g.add_argument("--instructor", metavar="OUT", help="also solved notebooks, hidden tests, bugs")
    r = sub.add_parser("grade", help="grade submitted notebooks; write a CSV of scores")
    r.add_argument("submissions", help="folder: <student>/NN_name.md|.ipynb (or files directly)")
    r.add_argument("--csv", default=None, help="output CSV (default: SUBMISSIONS/grades.csv)")
    r.add_argument("--no-hidden", action="store_true", help="only the tests students see")
    r.add_argument("--timeout", type=int, default=600, help="seconds per cell (%(default)s)")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _require(*modules) -> str | None:
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            return (f"{m} is not installed: pip install -r requirements.txt "
                    "(or run the command through python3 run.py)")
    return None


# --------------------------------------------------------------------------------------------
# start
# --------------------------------------------------------------------------------------------
def prepare_workdir(workdir: Path) -> tuple[list[str], list[str]]:
    """Copy the notebooks that are not there yet, write the Jupyter/jupytext config.
    Returns (copied, kept) file names."""
    workdir.mkdir(parents=True, exist_ok=True)
    copied, kept = [], []
    for src in nbk.notebooks():
        dst = workdir / src.name
        if dst.exists():
            kept.append(src.name)
        else:
            shutil.copyfile(src, dst)
            copied.append(src.name)
    toml = workdir / "jupytext.toml"
    if not toml.exists():
        toml.write_text(_JUPYTEXT_TOML, encoding="utf-8")
    conf = workdir / ".jupyter" / "labconfig" / "default_setting_overrides.json"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(json.dumps(_LAB_OVERRIDES, indent=2) + "\n", encoding="utf-8")
    return copied, kept


def lab_command(workdir: Path, lab_args) -> tuple[list[str], dict]:
    """The command and environment that start JupyterLab on ``workdir``."""
    env = dict(os.environ)
    extra = str(workdir / ".jupyter")
    env["JUPYTER_CONFIG_PATH"] = extra + (os.pathsep + env["JUPYTER_CONFIG_PATH"]
                                          if env.get("JUPYTER_CONFIG_PATH") else "")
    env["PYTHONPATH"] = str(nbk.ROOT) + (os.pathsep + env["PYTHONPATH"]
                                         if env.get("PYTHONPATH") else "")
    args = [a for a in lab_args if a != "--"]
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in args:
        args.append("--allow-root")          # containers often run as root; Jupyter refuses it
    return [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={workdir}", *args], env


def _start(args) -> int:
    err = _require("jupyterlab", "jupytext")
    if err:
        return _fail(err)
    if not nbk.EXERCISES.is_dir():
        return _fail(f"no exercises/ folder at {nbk.EXERCISES}: run from a clone of the repository")
    workdir = Path(args.dir).resolve()
    if workdir == nbk.EXERCISES.resolve():
        return _fail("--dir must not be exercises/ itself: work on copies")
    copied, kept = prepare_workdir(workdir)
    print(f"{workdir}: copied {len(copied)} notebook(s)"
          + (f", kept your {len(kept)} existing one(s)" if kept else ""))
    print("check one with:  python -m tostnp exercises check "
          f"{os.path.relpath(workdir / (copied or kept or ['NN_name.md'])[0])}")
    if args.no_lab:
        return 0
    cmd, env = lab_command(workdir, args.lab_args)
    print("starting JupyterLab (Ctrl-C to stop):", " ".join(cmd[2:]), flush=True)
    if os.name == "posix":
        # become JupyterLab (same pid): stopping this command stops the server, no orphan
        os.execve(cmd[0], cmd, env)
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 0


# --------------------------------------------------------------------------------------------
# check
# --------------------------------------------------------------------------------------------
def _report(path, results, out=None) -> tuple[float, float]:
    out = out or sys.stdout
    print(f"{path}", file=out)
    total = maxi = 0.0
    width = max([len(n) for n in results] + [5])
    for name, r in results.items():
        total += r["score"]
        maxi += r["points"]
        mark = "PASS" if r["score"] == r["points"] else (r["hint"].splitlines()[0][:110]
                                                        if r["hint"] else "")
        print(f"  {name:<{width}}  {r['score']:5.2f} / {r['points']:g}  {mark}", file=out)
    print(f"  {'total':<{width}}  {total:5.2f} / {maxi:g}", file=out)
    return total, maxi


def _check(args) -> int:
    err = _require("jupytext", "nbclient")
    if err:
        return _fail(err)
    full = True
    for f in args.notebooks:
        path = Path(f)
        if not path.is_file():
            return _fail(f"no such notebook: {f}")
        try:
            nb = nbk.read(path)
        except Exception as e:
            return _fail(f"cannot read {f} as a notebook: {e}")
        if not nbk.exercises_of(nb):
            return _fail(f"{f} has no check cells (cells tagged 'check'): is it an exercise notebook?")
        print(f"running {f} ...", flush=True)
        nb, results = nbk.execute(nb, path.parent.resolve(), hidden=args.hidden,
                                  timeout=args.timeout)
        total, maxi = _report(f, results)
        other = [e for e in nbk.errors(nb) if "check" not in e[1]]
        for i, _, ename, evalue in other:
            print(f"  note: cell {i} (not a check) raised {ename}: {evalue[:200]}")
        full = full and total == maxi and not other
    return 0 if full else 1


# --------------------------------------------------------------------------------------------
# build
# --------------------------------------------------------------------------------------------
def _hidden_cell_source(src: str) -> str:
    lines = []
    for line in src.splitlines():
        m = re.match(r"^(\s*check_\w+\()(.*)\)\s*$", line)
        if m:
            lines.append(f"{m.group(1)}{m.group(2)}, hidden=True)")
    return "\n".join(lines)


def solved_notebook(path: Path):
    """The notebook with its reference solutions filled in and, after each check cell, a cell
    tagged ``hidden-check`` that runs the hidden edge-case tests."""
    import nbformat
    nb = nbk.fill(nbk.read(path), nbk.solution_sections(path.stem))
    cells = []
    for c in nb.cells:
        cells.append(c)
        if c.cell_type == "code" and "check" in c.get("metadata", {}).get("tags", []):
            cells.append(nbformat.v4.new_code_cell(_hidden_cell_source(c.source),
                                                   metadata={"tags": ["hidden-check"]}))
    nb.cells = cells
    return nb


def build(out: Path, instructor: bool) -> list[Path]:
    """Write an edition into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for src in nbk.notebooks():
        shutil.copyfile(src, out / src.name)                     # the .md as it is
        nbk.write(nbk.read(src), out / (src.stem + ".ipynb"))    # and for download
        written += [out / src.name, out / (src.stem + ".ipynb")]
    shutil.copyfile(nbk.EXERCISES / "README.md", out / "README.md")
    written.append(out / "README.md")
    if instructor:
        sol = out / "solutions"
        sol.mkdir(exist_ok=True)
        for src in nbk.notebooks():
            nb = solved_notebook(src)
            for suffix in (".md", ".ipynb"):
                nbk.write(nb, sol / (src.stem + suffix))
                written.append(sol / (src.stem + suffix))
        dst = out / "instructor"
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(nbk.INSTRUCTOR, dst, ignore=shutil.ignore_patterns("__pycache__"))
        written += sorted(p for p in dst.rglob("*") if p.is_file())
    return written


def _build(args) -> int:
    err = _require("jupytext", "nbformat")
    if err:
        return _fail(err)
    out = Path(args.instructor or args.student).resolve()
    if out == nbk.EXERCISES.resolve() or nbk.EXERCISES.resolve() in out.parents:
        return _fail("OUT must be outside exercises/")
    files = build(out, instructor=bool(args.instructor))
    kind = "instructor" if args.instructor else "student"
    print(f"{kind} edition: {len(files)} files in {out}")
    return 0


# --------------------------------------------------------------------------------------------
# grade
# --------------------------------------------------------------------------------------------
def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, file) pairs: SUBMISSIONS/<student>/NN_name.(md|ipynb), or files directly in
    SUBMISSIONS (student = the file name). An .md wins over its paired .ipynb."""
    official = {p.stem for p in nbk.notebooks()}
    found: dict[tuple[str, str], Path] = {}
    for p in sorted(folder.rglob("*")):
        if p.suffix not in (".md", ".ipynb") or ".ipynb_checkpoints" in p.parts:
            continue
        stem = re.sub(r"^.*?(\d\d_[A-Za-z0-9_]+)$", r"\1", p.stem)
        if stem not in official:
            continue
        rel = p.parent.relative_to(folder)
        student = str(rel) if str(rel) != "." else p.stem
        key = (student, stem)
        if key not in found or p.suffix == ".md":
            found[key] = p
    return [(s, found[(s, stem)]) for s, stem in sorted(found)]


def grade_one(path: Path, hidden: bool = True, timeout: int = 600):
    """Run the student cells of ``path`` inside the official notebook; returns (stem, results,
    written answers filled in, written questions)."""
    stem = re.sub(r"^.*?(\d\d_[A-Za-z0-9_]+)$", r"\1", path.stem)
    sub = nbk.read(path)
    official = nbk.read(nbk.EXERCISES / f"{stem}.md")
    mine = {}
    for c in sub.cells:
        tags = c.get("metadata", {}).get("tags", [])
        names = [t[3:] for t in tags if t.startswith("ex-")]
        if c.cell_type == "code" and "student" in tags and len(names) == 1:
            mine[names[0]] = c.source
    mine = {k: v for k, v in mine.items() if k in nbk.student_cells(official)}
    nbk.fill(official, mine)
    nb, results = nbk.execute(official, path.parent.resolve(), hidden=hidden, timeout=timeout)
    blank = {s.strip() for s in nbk.written_answers(nbk.read(nbk.EXERCISES / f"{stem}.md"))}
    answers = nbk.written_answers(sub)
    filled = sum(1 for a in answers if a.strip() and a.strip() not in blank)
    return stem, results, filled, len(nbk.written_answers(official))


def grade(folder: Path, out_csv: Path, hidden: bool = True, timeout: int = 600) -> list[dict]:
    rows = []
    for student, path in find_submissions(folder):
        print(f"grading {student}: {path.name} ...", flush=True)
        stem, results, filled, n_written = grade_one(path, hidden, timeout)
        total = sum(r["score"] for r in results.values())
        maxi = sum(r["points"] for r in results.values())
        row = {"student": student, "notebook": stem}
        row.update({name: round(r["score"], 4) for name, r in results.items()})
        row.update({"total": round(total, 4), "max_score": maxi,
                    "percent": round(100 * total / maxi, 1) if maxi else 0.0,
                    "written_answered": f"{filled}/{n_written}"})
        rows.append(row)
    fields = ["student", "notebook"]
    for r in rows:
        fields += [k for k in r if k not in fields and k not in
                   ("total", "max_score", "percent", "written_answered")]
    fields += ["total", "max_score", "percent", "written_answered"]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    out_csv.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_csv, buf.getvalue())
    return rows


def _grade(args) -> int:
    err = _require("jupytext", "nbclient")
    if err:
        return _fail(err)
    folder = Path(args.submissions)
    if not folder.is_dir():
        return _fail(f"submissions must be a folder, got {args.submissions!r}")
    if not find_submissions(folder):
        return _fail(f"no exercise notebooks (NN_name.md or .ipynb) under {folder}")
    out = Path(args.csv) if args.csv else folder / "grades.csv"
    rows = grade(folder, out, hidden=not args.no_hidden, timeout=args.timeout)
    for r in rows:
        print(f"  {r['student']:<20} {r['notebook']:<22} {r['total']:6.2f} / {r['max_score']:g}"
              f"  written answers {r['written_answered']}")
    print(f"wrote {out} ({len(rows)} rows)")
    return 0


def run(args) -> int:
    return {"start": _start, "check": _check, "build": _build, "grade": _grade}[args.action](args)
