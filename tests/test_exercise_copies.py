"""No graded exercise can be copied from the book: every function of every reference solution
(exercises/instructor/solutions/) is compared with every function printed in the book's code
cells (book/*.md), token by token with comments, docstrings and layout removed and every
identifier replaced by one placeholder (so renaming variables does not hide a copy). A pair that
matches as closely as a copy does fails.

Calibration (difflib ratio of the anonymised token sequences): the book's former `mssa` against
the solution of exercise 3.1 scored 0.87 (a copy with other names); distinct implementations of
the same formula score 0.4-0.7 (shared idioms: a stable softmax, a loop over heads).
"""
from __future__ import annotations

import ast
import builtins
import difflib
import io
import keyword
import tokenize
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")

from tostnp.exercises import notebook as nbk  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
THRESHOLD = 0.8          # a near-copy scores above; distinct code below (see the calibration)
MIN_TOKENS = 30          # shorter functions (one-liners) say nothing either way
_KEEP = set(keyword.kwlist) | set(dir(builtins))


def functions(src: str) -> list[str]:
    """The source of every top-level function of a cell (a cell that does not parse: none)."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    return [ast.get_source_segment(src, n) for n in tree.body if isinstance(n, ast.FunctionDef)]


def tokens(src: str) -> list[str]:
    """Code tokens without comments, docstrings and layout; identifiers -> 'V' (keywords and
    builtins kept), so that renaming changes nothing."""
    out = []
    for t in tokenize.generate_tokens(io.StringIO(src).readline):
        if t.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                      tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        if t.type == tokenize.STRING and t.string.startswith(('"""', "'''")):
            continue
        out.append("V" if t.type == tokenize.NAME and t.string not in _KEEP else t.string)
    return out


def similarity(a: list[str], b: list[str]) -> float:
    m = difflib.SequenceMatcher(None, a, b, autojunk=False)
    if m.real_quick_ratio() < THRESHOLD or m.quick_ratio() < THRESHOLD:
        return min(m.quick_ratio(), THRESHOLD - 1e-9)      # cannot reach the threshold
    return m.ratio()


def book_functions() -> list[tuple[str, str, list[str]]]:
    found = []
    for page in sorted((ROOT / "book").glob("*.md")):
        nb = jupytext.read(page)
        for cell in nb.cells:
            if cell.cell_type == "code":
                for f in functions(cell.source):
                    t = tokens(f)
                    if len(t) >= MIN_TOKENS:
                        found.append((page.name, f.split("(", 1)[0].removeprefix("def "), t))
    return found


def test_the_detector_flags_a_renamed_copy_and_passes_distinct_code():
    original = '''
def mssa(Z):
    out = np.zeros_like(Z)
    for k in range(K):
        P = Z @ U[k]                                  # (n, p)
        G = P @ P.T
        A = np.exp(G - G.max(axis=1, keepdims=True)); A /= A.sum(axis=1, keepdims=True)
        out += beta * (A @ P) @ U[k].T
    return out
'''
    renamed = '''
def mssa_mine(X, bases, b):
    """my own"""
    res = np.zeros_like(X)
    for j in range(K):
        Q = X @ bases[j]
        S = Q @ Q.T
        W = np.exp(S - S.max(axis=1, keepdims=True)); W /= W.sum(axis=1, keepdims=True)
        res += b * (W @ Q) @ bases[j].T
    return res
'''
    other = '''
def coding_rate(Z, eps):
    n, d = Z.shape
    sign, logdet = np.linalg.slogdet(np.eye(d) + d / (n * eps**2) * Z.T @ Z)
    return 0.5 * logdet
'''
    a, b, c = (tokens(functions(s)[0]) for s in (original, renamed, other))
    assert similarity(a, b) > 0.95
    assert similarity(a, c) < THRESHOLD


def test_no_graded_solution_is_a_near_copy_of_the_books_code():
    book = book_functions()
    assert len(book) > 30, "the book's code cells should hold functions"
    copies, checked = [], 0
    for nb_path in nbk.notebooks():
        for name, src in nbk.solution_sections(nb_path.stem).items():
            for f in functions(src):
                t = tokens(f)
                if len(t) < MIN_TOKENS:
                    continue
                checked += 1
                for page, fname, bt in book:
                    r = similarity(t, bt)
                    if r >= THRESHOLD:
                        copies.append(f"exercise {nb_path.stem}:{name} ~ {page}:{fname} ({r:.2f})")
    assert checked >= 20, checked
    assert not copies, "graded solutions the book prints almost verbatim:\n" + "\n".join(copies)
