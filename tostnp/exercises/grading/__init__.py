"""Grading submissions so that a course can trust the scores.

One set of rules (:func:`plan`) decides what runs, for ``exercises check`` and ``exercises grade``
alike: the submission's code cells in its own order (the exercise cells, the helper cells a
student adds, the setup cells), except that every check cell must be the official one: a check
cell that is missing or edited scores 0 for its exercises, with a message saying so.

The code cells run in a separate process (:class:`Session`, the *child*, ``_child.py``), one per
submission, started fresh:

* it sees a ``tostnp`` built for the notebook (:func:`build_sandbox`): no references, no
  solutions, no checkers, and the package functions the exercises are about removed; autograd
  and friends cannot be imported; files of the repository, of the submissions and of the grades
  cannot be opened (an audit hook, and a private mount namespace where the OS allows it);
* it has a memory cap (RLIMIT_AS), a wall-clock budget per cell and per notebook; a cell that
  runs out of time, memory or kills its process costs its exercise only: the child is started
  again, the cells that had run are run again, and grading goes on;
* it only *evaluates*: the checkers run here, in the grading process; they draw their inputs at
  grading time (a salt mixed into every seed), send them to the child, get plain arrays back
  (JSON + .npz, never a pickle) and compare, diagnose and record here.

:func:`grade_class` grades a folder of submissions on ``jobs`` processes, writes each
submission's result as soon as it is graded (re-running skips what is already graded), and
writes the grades CSV, a feedback page per student, the written answers per question for manual
marking (merged back once marked), and gradebook files for Canvas and Moodle.
"""
from __future__ import annotations

from .course import find_submissions, grade_class, read_roster
from .isolation import limits_note
from .plan import Plan, Step, notebook_stem, plan, written_questions
from .reports import RUBRIC, WRITTEN_FIELDS, write_reports, written_score
from .sandbox import (BLOCKED_MODULES, PACKAGE, PHASES, PRELOAD, SANDBOX_PACKAGE, build_sandbox,
                      real_package_dirs, site_dirs)
from .session import CHILD, Remote, Session
from .submission import run_submission
from .wire import MAX_MESSAGE, Lost

__all__ = ["BLOCKED_MODULES", "CHILD", "Lost", "MAX_MESSAGE", "PACKAGE", "PHASES", "PRELOAD",
           "Plan", "RUBRIC", "Remote", "SANDBOX_PACKAGE", "Session", "Step", "WRITTEN_FIELDS",
           "build_sandbox", "find_submissions", "grade_class", "limits_note", "notebook_stem",
           "plan", "read_roster", "real_package_dirs", "run_submission", "site_dirs", "write_reports",
           "written_questions", "written_score"]
