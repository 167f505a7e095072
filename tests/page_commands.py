"""The commands a page prints, as argv lists: read from the page, never listed in a test.

Used by tests/test_readme_commands.py (the README, docs/*.md and the students' pages) and
tests/test_exercises_edition.py (the student edition's own README.md). The ```bash blocks are
read by .ci/doc_commands.py, which CI uses to run the book's commands as printed.
"""
from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREFIXES = [["python3", "run.py"], [".venv/bin/python", "-m", "tostnp"],
            ["python", "-m", "tostnp"], ["tostnp"]]
PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|\bARGS\b|\bNAME\b|\bSUBMISSIONS\b|\bOUT\b|\bFILE\b|\bDIR\b|\bRUN\b|\bPATH\b|\bD\b")
INLINE = re.compile(r"`((?:python3 run\.py|\.venv/bin/python -m tostnp|tostnp) [^`]*)`")


def _doc_commands():
    spec = importlib.util.spec_from_file_location("ci_doc_commands",
                                                  ROOT / ".ci" / "doc_commands.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


doc_commands = _doc_commands()


def page_commands(pages: list[Path]) -> list[list[str]]:
    """Every command line of ``pages`` as argv lists: the ```bash blocks' lines, pages in order,
    then the inline `...` spans that start like a command (lines with a placeholder left out)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in pages)
    lines = [ln for block in doc_commands.bash_blocks(text) for ln in block]
    lines += INLINE.findall(text)
    out = []
    for ln in lines:
        if PLACEHOLDER.search(ln.split("#")[0]):
            continue
        argv = shlex.split(ln, comments=True)
        if argv:
            out.append(argv)
    return out


def split_prefix(argv):
    """(prefix, args) for a tostnp command line, else (None, argv)."""
    for p in PREFIXES:
        if argv[:len(p)] == p:
            return p, argv[len(p):]
    return None, argv
