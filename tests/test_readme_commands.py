"""Every command README.md, the docs pages it links (docs/*.md) and the students' pages
(exercises/STUDENT.md, exercises/README.md) print works as printed, and so does every command
the CLI prints as advice.

The commands (```bash blocks, and inline `...` spans that start like a command), README first,
then the docs pages in name order, are read here, not listed: a command added to the README or
a docs page is tested without touching this file.
Each tostnp command must parse as printed (every option exists, every value is accepted), name
files that exist in the repository or that an earlier README command creates, and then run in a
quick form in a scratch directory, in README order (a training command gets a tiny model and a
few steps; experiments and benchmarks --quick). The commands the runs print as advice ("sample
with:", "resume with:") are run in their turn. The launcher itself (``python3 run.py``) is
tested in tests/test_launcher.py.
"""
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from tostnp.__main__ import build_parser, main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
# the README's run logs moved to docs/; a student's page and the exercises' README (their
# `exercises` commands parse here; the edition runs them: tests/test_exercises_edition.py)
PAGES = ([README] + sorted((ROOT / "docs").glob("*.md"))
         + [ROOT / "exercises" / "STUDENT.md", ROOT / "exercises" / "README.md"])
PREFIXES = [["python3", "run.py"], [".venv/bin/python", "-m", "tostnp"],
            ["python", "-m", "tostnp"], ["tostnp"]]
PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|\bARGS\b|\bNAME\b|\bSUBMISSIONS\b|\bOUT\b|\bFILE\b|\bDIR\b|\bRUN\b|\bPATH\b|\bD\b")
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress", "--eval-every", "0"]


def readme_commands() -> list[list[str]]:
    """Every command line of README.md and docs/*.md, as argv lists, in order (placeholders left
    out)."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        lines += [ln for ln in block.splitlines() if ln.strip()]
    lines += re.findall(r"`((?:python3 run\.py|\.venv/bin/python -m tostnp|tostnp) [^`]*)`", text)
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


def test_readme_has_the_quick_start():
    cmds = [" ".join(a) for a in readme_commands()]
    assert "python3 run.py train vision" in cmds and "python3 run.py test" in cmds


def test_every_readme_command_parses_as_printed():
    seen = 0
    for argv in readme_commands():
        prefix, args = split_prefix(argv)
        if prefix is None:
            # other tools: every repository file they name exists
            for a in argv:
                if re.match(r"^(\.ci|benchmarks|tests|tostnp|book|exercises)/", a):
                    assert (ROOT / a).exists(), f"README: {' '.join(argv)}: {a} does not exist"
            continue
        if args[:1] in (["test"], ["book"]):
            assert prefix == ["python3", "run.py"], argv
            for a in args[1:]:
                if a.startswith("tests/"):
                    assert (ROOT / a).exists(), f"README: {' '.join(argv)}: {a} does not exist"
            continue
        try:
            build_parser().parse_args(args)
        except SystemExit as e:
            pytest.fail(f"README command does not parse: {' '.join(argv)} (exit {e.code})")
        seen += 1
    assert seen >= 20


def _quick(args):
    """The quick form of a tostnp command (None: parsed only, not run here)."""
    if args[0] == "train":
        if "--seeds" in args:
            i = args.index("--seeds")
            args = args[:i + 1] + ["0-1"] + args[i + 2:]
        extra = ["--steps", "3"] + TINY
        if args[1] == "lm":
            extra += ["--word-rate-samples", "0", "--block-size", "16", "--batch-size", "4",
                      "--vocab-size", "300"]
        return args + extra
    if args[0] in ("experiment", "bench", "exercises"):
        return None     # quick forms run by test_experiments.py, test_bench.py, test_exercises_cli.py
    if args[0] == "sample":
        return args + ["--length", "20"]
    if args[0] == "evaluate":
        return args + ["--batches", "1", "--word-rate-samples", "0"]
    return args


@pytest.mark.slow
def test_readme_commands_run_in_order_from_a_fresh_layout(tmp_path, monkeypatch, capsys):
    """The README's tostnp commands in order in an empty directory (as a fresh clone's root holds
    no runs/), each in its quick form; then the commands they printed as advice."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    advice = []
    ran = set()
    for argv in readme_commands():
        prefix, args = split_prefix(argv)
        if prefix is None or args[:1] in (["test"], ["book"]):
            continue
        quick = _quick(list(args))
        if quick is None or tuple(quick) in ran:
            continue
        ran.add(tuple(quick))
        code = main(quick)
        out, err = capsys.readouterr()
        assert code == 0, f"README: {' '.join(argv)} -> exit {code}\n{err[-2000:]}"
        advice += re.findall(r"(?:sample|resume|check one) with:\s+(python3 run\.py [^\n;]*)",
                             out + err)
    assert any(a[0] == "convert" for a in ran) and any(a[0] == "verify" for a in ran)
    assert advice, "no command printed advice"
    for line in advice:
        args = shlex.split(line)[2:]
        quick = _quick(args)
        code = main(quick)
        out, err = capsys.readouterr()
        assert code == 0, f"printed advice {line!r} -> exit {code}\n{err[-2000:]}"


@pytest.mark.slow
def test_stopped_run_prints_a_resume_line_that_works(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("TOSTNP_LAUNCHER", "python3 run.py")
    assert main(["train", "vision", "--steps", "6", "--stop-at", "3", *TINY]) == 0
    out = capsys.readouterr().out
    m = re.search(r"resume with: (python3 run\.py [^\n]*)", out)
    assert m, out[-2000:]
    args = shlex.split(m.group(1))[2:]
    assert args == ["train", "vision", "--out", os.path.join("runs", "vision"), "--resume"]
    assert main(args + ["--no-progress"]) == 0
