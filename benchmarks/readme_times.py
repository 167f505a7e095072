"""How long each command of the README takes, from a fresh clone, as a newcomer runs them: in
README order, in a terminal (a pseudo-terminal, so progress bars and colours are what a reader
sees), optionally beside N busy-loop processes (a busy laptop). Records per command the
seconds, the exit status, the 1-minute load average before and after, and what the terminal
showed in the first minute (``first_minute``). ``exercises start`` is timed to its "ready"
address, then stopped with Ctrl-C.

    python3 benchmarks/readme_times.py --json FILE [--load N] [--clone DIR]

``--clone`` (default: a new temporary directory) gets ``git clone`` of this repository's HEAD
first, so the first command creates ``.venv`` as on a fresh machine (PyPI, or pip's
find-links). Takes about 25 minutes idle on 2 cores. The README's duration table reads the
committed results (``docs/results/durations.json`` names them; ``docs/gen_tables.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The README's commands in its order (each checked to be in the README below); the second field
# is what marks a server as ready.
COMMANDS = [
    ("python3 run.py train vision", None),
    ("python3 run.py train lm", None),
    ("python3 run.py evaluate --checkpoint runs/vision", None),
    ('python3 run.py sample --checkpoint runs/lm --prompt "The " --length 300', None),
    ("python3 run.py figures --checkpoint runs/vision", None),
    ("python3 run.py verify", None),
    ("python3 run.py train vision --stem conv --pos fourier --gelu erf --patch-size 8 --steps 200"
     " --out runs/vision-published", None),
    ("python3 run.py convert runs/vision-published runs/model.safetensors", None),
    ("python3 run.py bench --quick", None),
    ("python3 run.py experiment mixers-digits --quick", None),
    ("python3 run.py exercises start --no-browser", "http://"),
    ("python3 run.py book", None),
    ('python3 run.py test -m "not slow"', None),
    ("python3 run.py test tests/test_layers.py", None),
    ("python3 run.py test", None),
    ("pip wheel --no-deps -w dist .", None),
]
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_docs(cmd: str) -> bool:
    """The command (or, for start, its page form without --no-browser) is printed in README.md
    or the page it links for it (docs/usage.md)."""
    text = "".join(open(os.path.join(ROOT, p), encoding="utf-8").read()
                   for p in ("README.md", "docs/usage.md"))
    return cmd.replace(" --no-browser", "") in text


def terminal_text(raw: str) -> str:
    """What a terminal shows of raw output: colours dropped, each line as last overwritten."""
    lines = []
    for ln in _ANSI.sub("", raw).replace("\r\n", "\n").split("\n"):
        lines.append(ln.split("\r")[-1] if "\r" in ln.rstrip("\r") else ln.rstrip("\r"))
    return "\n".join(lines)


def run_one(cmd: str, ready: str | None, cwd: str) -> dict:
    la0 = os.getloadavg()
    master, slave = pty.openpty()
    t0 = time.time()
    p = subprocess.Popen(["bash", "-c", cmd], cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave,
                         stderr=slave, start_new_session=True,
                         env={**os.environ, "COLUMNS": "100", "LINES": "40"})
    os.close(slave)
    chunks, t_ready, seen = [], None, b""
    while True:
        r, _, _ = select.select([master], [], [], 1.0)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append((time.time() - t0, data.decode("utf-8", "replace")))
            seen += data
            if ready and t_ready is None and ready.encode() in seen:
                t_ready = time.time() - t0
                time.sleep(3)
                os.killpg(p.pid, signal.SIGINT)
        elif p.poll() is not None:
            break
    rc = p.wait()
    os.close(master)
    first = terminal_text("".join(c for t, c in chunks if t <= 60))
    return {"command": cmd, "seconds": round(time.time() - t0, 1),
            "ready_s": None if t_ready is None else round(t_ready, 1), "rc": rc,
            "load_start": [round(x, 2) for x in la0],
            "load_end": [round(x, 2) for x in os.getloadavg()],
            "first_minute": first[:1500] + ("\n[...]\n" + first[-700:] if len(first) > 2200 else
                                            first[1500:])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="write the results here (after each command)")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N busy-loop processes beside the commands (default 0)")
    ap.add_argument("--clone", default=None, help="the fresh clone's directory (must not exist)")
    args = ap.parse_args()
    if args.load < 0:
        ap.error("--load must be >= 0")
    missing = [c for c, _ in COMMANDS if not in_docs(c)]
    if missing:
        ap.error(f"not printed in README.md or docs/usage.md any more: {missing}")
    clone = args.clone or os.path.join(tempfile.mkdtemp(prefix="readme-times-"), "tostnp")
    if os.path.exists(clone):
        ap.error(f"--clone {clone} exists: give a new directory")
    subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
    commit = subprocess.run(["git", "-C", clone, "rev-parse", "--short", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    from tostnp.bench.machine import machine_info
    out = {"commit": commit, "machine": machine_info(), "date": time.strftime("%Y-%m-%d %H:%M"),
           "load_processes": args.load, "terminal": "pseudo-terminal, 100 columns",
           "results": []}
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.load)]
    try:
        for cmd, ready in COMMANDS:
            r = run_one(cmd, ready, clone)
            out["results"].append(r)
            shown = r["ready_s"] if r["ready_s"] is not None else r["seconds"]
            print(f"{shown:8.1f} s  exit {r['rc']}  load {r['load_start'][0]:.1f}-"
                  f"{r['load_end'][0]:.1f}  {cmd}", flush=True)
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(out, f, indent=1, ensure_ascii=False)
    finally:
        for q in spin:
            q.kill()
    print(f"wrote {args.json} (clone {clone}, commit {commit})")


if __name__ == "__main__":
    main()
