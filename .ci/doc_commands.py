#!/usr/bin/env python3
"""The commands a page prints, run as printed: CI follows the docs, not copies of them.

    python3 .ci/doc_commands.py PAGE WORD          # the lines of PAGE's ```bash block holding WORD
    python3 .ci/doc_commands.py --run PAGE WORD    # ... run in order from the repository root

``--run`` runs each line of the block with bash, in the page's order, from the repository root,
in this process's environment, and stops at the first that fails (its exit status); a line that
starts a server (``python3 -m http.server``: it runs until stopped) is left out and said so.
CI runs the book's block this way (``.ci/run``: docs/usage.md, the block holding
``.ci/build-lite``); tests/test_readme_commands.py checks that block's order and the files it
names, and reads every page's commands with :func:`bash_blocks` too. Standard library only.
"""
from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# a command that serves until stopped: a reader runs it beside the others, CI cannot wait on it
SERVERS = re.compile(r"^python3? -m http\.server\b")


def bash_blocks(text: str) -> list[list[str]]:
    """The non-blank lines of every ```bash block of a Markdown text, block by block."""
    return [[ln for ln in block.splitlines() if ln.strip()]
            for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def block_with(page: Path, word: str) -> list[str]:
    """The lines of the one ```bash block of ``page`` that holds ``word``."""
    hits = [b for b in bash_blocks(page.read_text(encoding="utf-8")) if any(word in ln for ln in b)]
    if len(hits) != 1:
        raise ValueError(f"{page}: {len(hits)} ```bash blocks hold {word!r}, expected one")
    return hits[0]


def is_server(line: str) -> bool:
    return bool(SERVERS.match(line.strip()))


def run(lines: list[str]) -> int:
    for line in lines:
        if is_server(line):
            print(f"doc-commands: left out (a server, runs until stopped): {line}", flush=True)
            continue
        print(f"doc-commands: {line}", flush=True)
        t0 = time.monotonic()
        code = subprocess.run(["bash", "-c", line], cwd=ROOT).returncode
        if code:
            print(f"doc-commands: failed (exit {code}): {line}", file=sys.stderr, flush=True)
            return code
        print(f"doc-commands: done in {time.monotonic() - t0:.0f} s: {line.split('#')[0].strip()}",
              flush=True)
    return 0


def main(argv: list[str]) -> int:
    do_run = argv[:1] == ["--run"]
    args = argv[1:] if do_run else argv
    if len(args) != 2:
        print("usage: python3 .ci/doc_commands.py [--run] PAGE WORD", file=sys.stderr)
        return 2
    try:
        lines = block_with(ROOT / args[0], args[1])
    except (OSError, ValueError) as e:
        print(f"doc-commands: {e}", file=sys.stderr)
        return 2
    if do_run:
        return run(lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
