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
                    steps.append(Step("check", checks[n], i, n, _check_calls(checks[n])))
                elif n not in seen:
                    problems[n] = (f"the check cell of {n} was edited, so the exercise "
                                   f"scores 0: restore it as `{_norm(checks[n])}`")
            continue
        ex = next((t[3:] for t in tags if t.startswith("ex-")), None)
        steps.append(Step("exec", c.source, i, ex))
    for n in exercises:
        if n not in seen and n not in problems:
            problems[n] = (f"the check cell of {n} is missing, so the exercise scores 0: put "
                           f"`{_norm(checks[n])}` back under your code")
    blank = {s.strip() for s in nbk.written_answers(official)}
    answers = [a if a.strip() not in blank else "" for a in nbk.written_answers(sub)]
    questions = written_questions(official)
    answers = (answers + [""] * len(questions))[:len(questions)]   # a deleted answer cell: blank
    return Plan(stem, steps, exercises, problems, answers, questions)


def written_questions(nb) -> list[str]:
    """The text of each written question: the markdown cell before each ``written`` cell."""
    out, prev = [], ""
    for c in nb.cells:
        if c.cell_type == "markdown" and "written" in _tags(c):
            out.append(prev.strip())
        if c.cell_type == "markdown":
            prev = c.source
    return out
