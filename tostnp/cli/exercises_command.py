"""Exercise notebooks: start JupyterLab on your own copies, check a notebook, build the student
or instructor edition, grade many submissions.

  python -m tostnp exercises start                       # copy exercises/ to my-exercises/, open JupyterLab
  python -m tostnp exercises check my-exercises/02_coding_rate.md   # run it, print the score per exercise
  python -m tostnp exercises build --student OUT         # notebooks (.md and .ipynb), no solutions
  python -m tostnp exercises build --instructor OUT      # + solved notebooks with hidden tests, planted bugs
  python -m tostnp exercises build --gradescope OUT      # a Gradescope autograder zip
  python -m tostnp exercises grade SUBMISSIONS [--out DIR] [--roster roster.csv]

``start`` never overwrites a notebook already in my-exercises/ (git ignores that folder, so the
tracked notebooks never change); it opens .md notebooks as notebooks (jupytext) and pairs each
with an .ipynb that keeps your outputs. ``check`` and ``grade`` follow one set of rules
(:mod:`tostnp.exercises.grading`): the notebook's code cells run in a separate, time- and
memory-limited process that cannot reach the references, the solutions or the code under study;
the checks run outside it. ``grade`` adds the hidden edge-case tests and inputs drawn at grading
time, grades two submissions at a time, and writes grades, feedback pages, the written answers
for manual marking and gradebook files for Canvas and Moodle.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..exercises import notebook as nbk
from ..io.atomic import atomic_write_text
from .options import bounded, how_to_run

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
    s.add_argument("--dir", default=str(MY_DIR), help=f"your working folder [{MY_DIR.name}]")
    s.add_argument("--no-lab", action="store_true", help="only copy and configure; do not start")
    s.add_argument("--no-browser", action="store_true",
                   help="start JupyterLab without opening a browser: open the address it prints")
    s.add_argument("lab_args", nargs=argparse.REMAINDER,
                   help="passed to jupyter lab (e.g. -- --no-browser --port 8890)")
    c = sub.add_parser("check", help="execute notebooks and print the score of each exercise")
    c.add_argument("notebooks", nargs="+", help="notebook files (.md or .ipynb)")
    c.add_argument("--hidden", action="store_true", help="add the hidden edge-case tests")
    _limits_arguments(c)
    b = sub.add_parser("build", help="write the student or the instructor edition")
    g = b.add_mutually_exclusive_group(required=True)
    g.add_argument("--student", metavar="OUT", help="notebooks and the package, no solutions")
    g.add_argument("--instructor", metavar="OUT", help="also solved notebooks, hidden tests, bugs")
    g.add_argument("--gradescope", metavar="OUT",
                   help="a Gradescope autograder zip (OUT.zip, or OUT/autograder.zip)")
    b.add_argument("--notebook", action="append", metavar="NN_name",
                   help="with --gradescope: a notebook the assignment covers (repeat; all when "
                        "omitted)")
    r = sub.add_parser("grade", help="grade submitted notebooks: grades, feedback, exports")
    r.add_argument("submissions", help="folder: <student>/NN_name.md|.ipynb (or files directly)")
    r.add_argument("--out", default=None,
                   help="output folder (default: SUBMISSIONS-graded next to SUBMISSIONS)")
    r.add_argument("--csv", default=None, help="the grades CSV (default: OUT/grades.csv)")
    r.add_argument("--roster", default=None,
                   help="CSV with a 'student' column: every student gets a row, submitted or not")
    r.add_argument("--no-hidden", action="store_true", help="only the tests students see")
    r.add_argument("--jobs", type=bounded(int, 1, 64), default=2,
                   help="submissions graded at once [2]")
    r.add_argument("--regrade", action="store_true",
                   help="grade again what is already graded (new inputs drawn)")
    r.add_argument("--allow-unsandboxed", action="store_true",
                   help="grade for marks even where no sandbox (bubblewrap) can be had: each "
                        "student's code then runs as you, bounded by an audit hook only")
    _limits_arguments(r)


def _limits_arguments(p) -> None:
    p.add_argument("--timeout", type=bounded(float, 0, 86400, open_lo=True), default=60.0,
                   help="seconds for one cell or one checked call [60]")
    p.add_argument("--notebook-timeout", type=bounded(float, 0, 86400, open_lo=True), default=600.0,
                   help="seconds for a whole notebook [600]")
    p.add_argument("--memory-mb", type=bounded(int, 256, 1 << 20), default=2048,
                   help="address-space cap of the process running the notebook [2048]")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def _require(*modules) -> str | None:
    for m in modules:
        try:
            __import__(m)
        except ImportError:
            return (f"{m} is not installed: pip install -r requirements-exercises.txt "
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
    print("check one with:  " + how_to_run(
        "exercises", "check", os.path.relpath(workdir / (copied or kept or ['NN_name.md'])[0])))
    if args.no_lab:
        return 0
    cmd, env = lab_command(workdir, list(args.lab_args)
                           + (["--no-browser"] if args.no_browser else []))
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
def _report(path, results, out=None, width=None) -> tuple[float, float]:
    """One table: exercise, score, and PASS or the whole hint, wrapped under its column."""
    import textwrap
    out = out or sys.stdout
    width = width or min(max(shutil.get_terminal_size((100, 24)).columns, 60), 120)
    print(f"{path}", file=out)
    total = maxi = 0.0
    name_w = max([len(n) for n in results] + [5])
    for name, r in results.items():
        total += r["score"]
        maxi += r["points"]
        mark = "PASS" if r["score"] == r["points"] else " ".join((r["hint"] or "").split())
        head = f"  {name:<{name_w}}  {r['score']:5.2f} / {r['points']:g}  "
        lines = textwrap.wrap(mark, max(width - len(head), 30)) or [""]
        print(head + lines[0], file=out)
        for line in lines[1:]:
            print(" " * len(head) + line, file=out)              # under the hint column
    print(f"  {'total':<{name_w}}  {total:5.2f} / {maxi:g}", file=out)
    return total, maxi


def _check(args) -> int:
    err = _require("jupytext", "nbformat")
    if err:
        return _fail(err)
    from ..exercises import grading
    if grading.limits_note():
        print(grading.limits_note(), file=sys.stderr)
    full = True
    for f in args.notebooks:
        path = Path(f)
        if not path.is_file():
            return _fail(f"no such notebook: {f}")
        stem = grading.notebook_stem(path)
        if stem is None:
            return _fail(f"{f} is not an exercise notebook: its name must end with one of "
                         f"{', '.join(p.stem for p in nbk.notebooks())}")
        try:
            nb = nbk.read(path)
        except Exception as e:
            return _fail(f"cannot read {f} as a notebook: {e}")
        print(f"running {f} ...", flush=True)
        res = grading.run_submission(
            nb, stem, hidden=args.hidden, cell_timeout=args.timeout,
            notebook_timeout=args.notebook_timeout, memory_mb=args.memory_mb,
            protected=[nbk.INSTRUCTOR, nbk.ROOT / "tostnp", nbk.ROOT / ".git"])
        total, maxi = _report(f, res["exercises"])
        for note in res["notes"]:
            print(f"  note: {note}")
        full = full and total == maxi
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


def edition_files() -> list[str]:
    """What an edition holds besides the notebooks, enough to start, check (and grade) with it
    alone: run.py, pyproject.toml and every requirements file run.py installs for
    ``exercises`` (asked of run.py itself, so that its includes are followed)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("_tostnp_run_py", nbk.ROOT / "run.py")
    run_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_py)
    return ["run.py", "pyproject.toml"] + run_py.included(run_py.STACKS["exercises"])


def build(out: Path, instructor: bool) -> list[Path]:
    """Write an edition into ``out``; returns the files written.

    Both editions: README.md (the student guide, exercises/STUDENT.md), exercises/NN_name.md and
    .ipynb, the tostnp package (the checkers run on it), run.py, pyproject.toml and the
    requirements files run.py installs for ``exercises`` (:func:`edition_files`), so that
    ``python3 run.py exercises start`` and ``... check`` work in the edition alone. The instructor edition adds exercises/instructor/ (the solutions, the planted
    bugs, the instructor guide) and solutions/ (solved notebooks with the hidden tests)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    ex = out / "exercises"
    ex.mkdir(exist_ok=True)
    for src in nbk.notebooks():
        shutil.copyfile(src, ex / src.name)                      # the .md as it is
        nbk.write(nbk.read(src), ex / (src.stem + ".ipynb"))     # and for download
        written += [ex / src.name, ex / (src.stem + ".ipynb")]
    shutil.copyfile(nbk.EXERCISES / "STUDENT.md", out / "README.md")
    written.append(out / "README.md")
    for name in edition_files():
        shutil.copyfile(nbk.ROOT / name, out / name)
        written.append(out / name)
    pkg = out / "tostnp"
    if pkg.exists():
        shutil.rmtree(pkg)
    shutil.copytree(nbk.ROOT / "tostnp", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    written += sorted(p for p in pkg.rglob("*") if p.is_file())
    if instructor:
        sol = out / "solutions"
        sol.mkdir(exist_ok=True)
        for src in nbk.notebooks():
            nb = solved_notebook(src)
            for suffix in (".md", ".ipynb"):
                nbk.write(nb, sol / (src.stem + suffix))
                written.append(sol / (src.stem + suffix))
        dst = ex / "instructor"
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(nbk.INSTRUCTOR, dst, ignore=shutil.ignore_patterns("__pycache__"))
        written += sorted(p for p in dst.rglob("*") if p.is_file())
    return written


def _build(args) -> int:
    err = _require("jupytext", "nbformat")
    if err:
        return _fail(err)
    if args.gradescope:
        from ..exercises.gradescope import build_autograder
        try:
            path = build_autograder(Path(args.gradescope), args.notebook, files=edition_files())
        except ValueError as e:
            return _fail(str(e))
        print(f"Gradescope autograder: {path} (upload it as the assignment's autograder; "
              "written answers: add them as manually graded questions)")
        return 0
    if args.notebook:
        return _fail("--notebook goes with --gradescope")
    out = Path(args.instructor or args.student).resolve()
    if out == nbk.EXERCISES.resolve() or nbk.EXERCISES.resolve() in out.parents:
        return _fail("OUT must be outside exercises/")
    if (out / ".git").exists() or out == nbk.ROOT.resolve():
        return _fail("OUT must be a new folder, not a clone of the repository")
    files = build(out, instructor=bool(args.instructor))
    kind = "instructor" if args.instructor else "student"
    print(f"{kind} edition: {len(files)} files in {out}; "
          f"its README.md says how to start and check (cd {os.path.relpath(out)} && "
          "python3 run.py exercises start)")
    return 0


# --------------------------------------------------------------------------------------------
# grade
# --------------------------------------------------------------------------------------------
def _grade(args) -> int:
    err = _require("jupytext", "nbformat")
    if err:
        return _fail(err)
    from ..exercises import grading
    folder = Path(args.submissions)
    if not folder.is_dir():
        return _fail(f"submissions must be a folder, got {args.submissions!r}")
    if not grading.find_submissions(folder):
        return _fail(f"no exercise notebooks (NN_name.md or .ipynb) under {folder}")
    out = Path(args.out) if args.out else folder.resolve().parent / f"{folder.resolve().name}-graded"
    if out.resolve() == folder.resolve() or folder.resolve() in out.resolve().parents:
        return _fail("--out must be outside the submissions folder")
    roster = Path(args.roster) if args.roster else None
    if roster is not None:
        if not roster.is_file():
            return _fail(f"no such roster: {args.roster}")
        try:
            grading.read_roster(roster)
        except (ValueError, csv.Error) as e:
            return _fail(str(e))
    if grading.limits_note():
        print(grading.limits_note(), file=sys.stderr)
    from ..exercises.grading import isolation as iso
    kind = iso.available()
    if kind == iso.NONE and not args.allow_unsandboxed:
        return _fail("no sandbox for the students' code on this machine: install bubblewrap "
                     "(apt-get install bubblewrap; on Ubuntu 24.04 unprivileged user namespaces "
                     "must be allowed for it), or pass --allow-unsandboxed to grade with each "
                     "student's code running as you, bounded by an audit hook only")
    print(f"isolation of each submission: {iso.DESCRIPTION[kind]}", flush=True)
    try:
        rep = grading.grade_class(folder, out, hidden=not args.no_hidden, jobs=args.jobs,
                                  cell_timeout=args.timeout,
                                  notebook_timeout=args.notebook_timeout,
                                  memory_mb=args.memory_mb, roster=roster, regrade=args.regrade,
                                  csv_path=Path(args.csv) if args.csv else None,
                                  isolation=kind)
    except ValueError as e:                          # a written mark that is not a mark
        return _fail(str(e))
    for r in rep["rows"]:
        print(f"  {r['student']:<20} {r['notebook']:<22} {r['total']:6.2f} / {r['max_score']:g}"
              f"  {r['status']}, written answers marked {r['written_marked']}")
    from ..exercises.grading.reports import export_gaps
    gaps = export_gaps(rep["rows"])
    if gaps["missing"] or gaps["unmarked"]:
        print(f"left blank in canvas.csv and moodle.csv (not 0): {gaps['missing']} notebook(s) "
              f"never submitted, {gaps['unmarked']} with written answers not marked yet (mark "
              f"them in {out / 'written'} and run grade again)")
    print(f"wrote {rep['csv']} ({len(rep['rows'])} rows), feedback pages in {out / 'feedback'}, "
          f"written answers to mark in {out / 'written'}, {out / 'canvas.csv'} and "
          f"{out / 'moodle.csv'}")
    return 0


def run(args) -> int:
    return {"start": _start, "check": _check, "build": _build, "grade": _grade}[args.action](args)
