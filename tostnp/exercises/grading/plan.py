"""One set of rules for ``check`` and ``grade`` alike: which cells of a submission run, which
check cells are the official ones, and the written answers."""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import notebook as nbk


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _norm(src: str) -> str:
    return "\n".join(line.rstrip() for line in src.strip().splitlines())


def _check_calls(src: str) -> list[tuple[str, list[str]]]:
    """[(exercise, [argument names])] of a check cell's ``check_<name>(a, b)`` calls."""
    out = []
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id.startswith("check_"):
            out.append((node.func.id[len("check_"):], [a.id for a in node.args
                                                        if isinstance(a, ast.Name)]))
    return out


_PYTHON_CELL_MAGICS = ("%%time", "%%timeit", "%%capture", "%%prun")


def without_magics(src: str) -> str:
    """A cell as plain Python: IPython's line magics and shell escapes (``%matplotlib inline``,
    ``!pip list``) become ``pass`` (line numbers kept); a cell magic that runs its body as
    Python (``%%time``) keeps the body; any other cell magic (``%%bash``) runs nothing."""
    lines = src.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        if lines[0].split()[0] not in _PYTHON_CELL_MAGICS:
            return ""
        lines = ["pass"] + lines[1:]
    return "\n".join(f"{ln[:len(ln) - len(ln.lstrip())]}pass  # {ln.strip()}"
                     if ln.lstrip().startswith(("%", "!")) else ln for ln in lines)


@dataclass
class Step:
    kind: str                     # "exec" or "check"
    source: str
    index: int                    # cell index in the submission
    exercise: str | None = None   # the exercise of a student cell / checked by a check cell
    calls: list = field(default_factory=list)


@dataclass
class Plan:
    stem: str
    steps: list[Step]
    exercises: list[str]                          # every exercise of the notebook, in order
    problems: dict[str, str]                      # exercise -> why it scores 0 before running
    answers: list[str]                            # written answers, in order
    questions: list[str]


def notebook_stem(path: Path) -> str | None:
    stem = re.sub(r"^.*?(\d\d_[A-Za-z0-9_]+)$", r"\1", Path(path).stem)
    return stem if (nbk.EXERCISES / f"{stem}.md").is_file() else None


def plan(sub, stem: str) -> Plan:
    """The steps of a submission (an nbformat node) of notebook ``stem``, by the one set of rules."""
    official = nbk.read(nbk.EXERCISES / f"{stem}.md")
    checks = {}                                   # exercise -> official check source
    for c in nbk.check_cells(official):
        for name in nbk.checks_in(c.source):
            checks[name] = c.source
    exercises = list(checks)
    steps, seen, problems = [], set(), {}
    for i, c in enumerate(sub.cells):
        if c.cell_type != "code":
            continue
        tags = _tags(c)
        if "hidden-check" in tags:
            continue
        if "check" in tags or any(n in checks for n in nbk.checks_in(c.source)):
            names = [n for n in nbk.checks_in(c.source) if n in checks]
            for n in names:
                if _norm(c.source) == _norm(checks[n]) and n not in seen:
                    seen.add(n)
                    problems.pop(n, None)        # a try of the check above the official cell
                    steps.append(Step("check", checks[n], i, n, _check_calls(checks[n])))
                elif n not in seen:
                    problems[n] = (f"the check cell of {n} was edited, so the exercise "
                                   f"scores 0: restore it as `{_norm(checks[n])}`")
            continue
        ex = next((t[3:] for t in tags if t.startswith("ex-")), None)
        steps.append(Step("exec", without_magics(c.source), i, ex))
    for n in exercises:
        if n not in seen and n not in problems:
            problems[n] = (f"the check cell of {n} is missing, so the exercise scores 0: put "
                           f"`{_norm(checks[n])}` back under your code")
    questions = written_questions(official)
    return Plan(stem, steps, exercises, problems, written_answers(sub, official), questions)


def written_answers(sub, official) -> list[str]:
    """The answer to each written question of ``official``: every Markdown cell of ``sub``
    between the question and the next exercise (its student or check cell) that is not the
    notebook's own text, the "Your answer:" cell included once written in; "" when none.

    The question is found by its text, or else by the order of the ``written`` cells (a
    question whose text was edited); a deleted answer cell leaves its answer blank."""
    own = {_norm(c.source) for c in official.cells if c.cell_type == "markdown"}
    qtexts = [_norm(q) for q in written_questions(official)]
    parts: list[list[str]] = [[] for _ in qtexts]
    cur, order = None, 0
    for c in sub.cells:
        tags = _tags(c)
        if c.cell_type == "code":
            if cur is not None and ("student" in tags or "check" in tags
                                    or any(t.startswith("ex-") for t in tags)):
                cur = None
            continue
        if c.cell_type != "markdown":
            continue
        text = _norm(c.source)
        if text in qtexts:
            cur = order = qtexts.index(text)
            continue
        if "written" in tags:
            cur, order = (order, order + 1) if order < len(qtexts) else (None, order)
        if cur is not None and text and text not in own:
            parts[cur].append(c.source.strip())
    return ["\n\n".join(p) for p in parts]


def written_questions(nb) -> list[str]:
    """The text of each written question: the markdown cell before each ``written`` cell."""
    out, prev = [], ""
    for c in nb.cells:
        if c.cell_type == "markdown" and "written" in _tags(c):
            out.append(prev.strip())
        if c.cell_type == "markdown":
            prev = c.source
    return out
