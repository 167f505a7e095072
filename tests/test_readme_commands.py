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
tested in tests/test_launcher.py; the student edition runs its own README's commands in
tests/test_exercises_edition.py. The book's block of docs/usage.md (book, lite site, browser
test) is run as printed by CI itself (.ci/run, through .ci/doc_commands.py); here its order, the
files it names and CI's use of it are checked. The commands are read by tests/page_commands.py.
"""
import os
import re
import shlex

import pytest

from page_commands import ROOT, doc_commands, page_commands, split_prefix
from tostnp.__main__ import build_parser, main

README = ROOT / "README.md"
# the README's run logs moved to docs/; a student's page and the exercises' README (their
# `exercises` commands parse here; the student edition runs its own README's commands:
# tests/test_exercises_edition.py)
PAGES = ([README] + sorted((ROOT / "docs").glob("*.md"))
         + [ROOT / "exercises" / "STUDENT.md", ROOT / "exercises" / "README.md"])
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress", "--eval-every", "0"]
# the book and its browser site, as docs/usage.md prints them; CI runs this block as printed
BOOK_PAGE, BOOK_WORD = "docs/usage.md", ".ci/build-lite"


def readme_commands() -> list[list[str]]:
    """Every command line of README.md, docs/*.md and the students' pages, as argv lists, in
    order (placeholders left out)."""
    return page_commands(PAGES)


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



def test_the_books_block_builds_before_it_checks_and_ci_runs_it_as_printed():
    """docs/usage.md's book block, in its order from a clean state: the book, then the lite site
    its pages link to (into the book's folder), then the browser test of both; every file it
    names exists; only the server line is left out; and .ci/run runs this block itself
    (.ci/doc_commands.py --run), with no copy of its commands of its own."""
    lines = doc_commands.block_with(ROOT / BOOK_PAGE, BOOK_WORD)
    runs = [ln for ln in lines if not doc_commands.is_server(ln)]
    assert len(runs) == len(lines) - 1, lines
    argvs = [shlex.split(ln, comments=True) for ln in runs]

    def first(*words):
        return next(i for i, a in enumerate(argvs) if " ".join(a[:len(words)]) == " ".join(words))

    assert first("python3", "run.py", "book") < first("bash", ".ci/build-lite") \
        < first("python3", ".ci/browser-test", "_build/html")
    for argv in argvs:
        for a in argv:
            if a.startswith(".ci/") or a.endswith(".py"):
                assert (ROOT / a).is_file(), f"{BOOK_PAGE}: {' '.join(argv)}: {a} does not exist"
    # the lite site lands where the browser test looks for the book's ../lite/ links
    assert "${1:-_build/html/lite}" in (ROOT / ".ci" / "build-lite").read_text(encoding="utf-8")
    code = "\n".join(ln.split("#")[0] for ln in
                     (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines())
    call = f"python3 .ci/doc_commands.py --run {BOOK_PAGE} {BOOK_WORD}"
    assert code.count(call) == 1
    code = code.replace(call, "")
    for script in ("run.py book", ".ci/build-lite", ".ci/build-book", ".ci/browser-test "):
        assert script not in code, f".ci/run runs its own copy of {script!r}"


def test_doc_commands_runs_in_order_leaves_the_server_out_and_stops_at_a_failure(tmp_path, capfd):
    mark = tmp_path / "ran"
    code = doc_commands.run([f"python3 -m http.server -d {tmp_path} 8000   # read it",
                             f"echo one >> {mark}", "false  # fails", f"echo two >> {mark}"])
    out, err = capfd.readouterr()
    assert code == 1
    assert mark.read_text() == "one\n"
    assert "left out (a server" in out and "failed (exit 1): false" in err


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
