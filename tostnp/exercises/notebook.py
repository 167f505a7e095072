"""Reading, filling and executing the exercise notebooks (MyST Markdown, read by jupytext).

Conventions of a notebook in ``exercises/``:

* a code cell tagged ``student`` and ``ex-<name>`` is where the student writes exercise <name>;
  it starts as a ``TODO`` that raises ``NotImplementedError``;
* a code cell tagged ``check`` calls ``check_<name>(...)`` from :mod:`tostnp.exercises`;
* a markdown cell tagged ``written`` holds the answer to an inline (written) question.

Reference solutions live in ``exercises/instructor/solutions/<stem>.py``, one section per
exercise, each opened by a line ``# %% ex-<name>``.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

from ._core import HIDDEN_ENV, RESULTS_ENV

ROOT = Path(__file__).resolve().parents[2]
EXERCISES = ROOT / "exercises"
INSTRUCTOR = EXERCISES / "instructor"
SOLUTIONS = INSTRUCTOR / "solutions"

_CHECK_CALL = re.compile(r"\bcheck_(\w+)\s*\(")


def notebooks(folder: Path = EXERCISES) -> list[Path]:
    """The exercise notebooks of a folder, in chapter order (NN_stem.md)."""
    return sorted(p for p in Path(folder).glob("[0-9][0-9]_*.md"))


def read(path):
    """The notebook at ``path`` (.md or .ipynb) as an nbformat node."""
    import jupytext
    return jupytext.read(str(path))


def write(nb, path) -> None:
    import jupytext
    path = Path(path)
    fmt = "md:myst" if path.suffix == ".md" else None
    jupytext.write(nb, str(path), fmt=fmt)


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def student_cells(nb) -> dict:
    """{exercise name: cell} for every cell tagged ``student`` and ``ex-<name>``."""
    out = {}
    for c in nb.cells:
        tags = _tags(c)
        if c.cell_type == "code" and "student" in tags:
            names = [t[3:] for t in tags if t.startswith("ex-")]
            if len(names) != 1:
                raise ValueError(f"a student cell needs exactly one ex-<name> tag, has {tags}")
            out[names[0]] = c
    return out


def check_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and "check" in _tags(c)]


def checks_in(source: str) -> list[str]:
    """Names of the exercises a cell's source checks: its calls ``check_<name>(...)``, read as
    code (a comment or a string naming a check is not a call). A cell Python cannot parse (an
    IPython magic, a slip) is read without its comments."""
    import ast
    try:
        tree = ast.parse("\n".join(ln for ln in source.splitlines()
                                   if not ln.lstrip().startswith(("%", "!"))))
    except SyntaxError:
        code = "\n".join(ln.split("#", 1)[0] for ln in source.splitlines())
        return [m.group(1) for m in _CHECK_CALL.finditer(code)]
    calls = sorted((n.lineno, n.col_offset, n.func.id) for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id.startswith("check_"))
    return [name[len("check_"):] for _, _, name in calls]


def exercises_of(nb) -> list[str]:
    """Names of the exercises a notebook checks, in order (from its check cells)."""
    names = []
    for c in check_cells(nb):
        names += [n for n in checks_in(c.source) if n not in names]
    return names


def written_answers(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "markdown" and "written" in _tags(c)]


def solution_sections(stem: str, folder: Path = SOLUTIONS) -> dict[str, str]:
    """{exercise name: source} from ``<folder>/<stem>.py``."""
    text = (Path(folder) / f"{stem}.py").read_text(encoding="utf-8")
    parts = re.split(r"^# %% ex-(\w+)[^\n]*\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip() + "\n" for i in range(1, len(parts), 2)}


def mutants(folder: Path = INSTRUCTOR / "mutants") -> dict[str, list]:
    """{exercise name: [(label, source, hint), ...]} from every ``<folder>/NN_name.py``."""
    import importlib.util
    out: dict[str, list] = {}
    for f in sorted(Path(folder).glob("[0-9][0-9]_*.py")):
        spec = importlib.util.spec_from_file_location(f"_tostnp_mutants_{f.stem}", f)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.update(mod.MUTANTS)
    return out


def fill(nb, sections: dict[str, str]):
    """Put ``sections[name]`` into the student cell of each exercise named there (in place)."""
    cells = student_cells(nb)
    for name, src in sections.items():
        if name not in cells:
            raise KeyError(f"no student cell tagged ex-{name}")
        cells[name].source = src.rstrip("\n")
    return nb


def points_of(name: str) -> float:
    from tostnp import exercises
    return float(getattr(getattr(exercises, f"check_{name}", None), "points", 1.0))


def execute(nb, cwd, *, hidden: bool = False, timeout: int = 300, python: str | None = None):
    """Execute ``nb`` in one fresh kernel, every cell even after an error.

    Returns (nb, results): results[name] = {"score", "points", "passed", "cases", "hint"} as
    recorded by the checkers, plus exercises whose check never reported (score 0, with the
    error of their check cell as the hint).
    """
    import nbclient
    fd, res_path = tempfile.mkstemp(prefix="tostnp-ex-", suffix=".jsonl")
    os.close(fd)
    saved = {k: os.environ.get(k) for k in (RESULTS_ENV, HIDDEN_ENV, "MPLBACKEND", "PYTHONPATH")}
    os.environ[RESULTS_ENV] = res_path
    os.environ[HIDDEN_ENV] = "1" if hidden else "0"
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + saved["PYTHONPATH"]
                                           if saved["PYTHONPATH"] else "")
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         allow_errors=True,
                                         resources={"metadata": {"path": str(cwd)}})
        client.execute()
        lines = Path(res_path).read_text(encoding="utf-8").splitlines()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.unlink(res_path)
    results = {}
    for line in lines:
        r = json.loads(line)
        results[r.pop("exercise")] = r          # a re-run check replaces the earlier record
    for c in check_cells(nb):
        err = next((o for o in c.get("outputs", []) if o.get("output_type") == "error"), None)
        for name in checks_in(c.source):
            if name not in results:
                hint = f"{err['ename']}: {err['evalue']}" if err else "the check did not run"
                results[name] = {"score": 0.0, "points": points_of(name), "passed": 0,
                                 "cases": 0, "hint": hint}
    return nb, results


def errors(nb) -> list[tuple[int, list[str], str, str]]:
    """(cell index, tags, ename, evalue) of every cell that raised."""
    out = []
    for i, c in enumerate(nb.cells):
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            if o.get("output_type") == "error":
                out.append((i, _tags(c), o["ename"], o["evalue"]))
    return out
