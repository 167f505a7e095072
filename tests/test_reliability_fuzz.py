"""Fuzz: every field of the checkpoint schema, each with bad values of every type, through
``evaluate``, ``sample`` and ``train --resume``.

One child Python, capped at 2 GiB of address space, walks every leaf of a tiny vision run's and
a tiny LM run's config and state, writes a checkpoint with that leaf replaced (``save_checkpoint``:
the checksums pass), and runs each command in-process with a 60 s alarm. Every run must end in
exactly one line ``error: ...`` with exit status 2, or in a run that exits 0 -- never a traceback,
a hang, or another status. The bad values cycle through the types (null, bool, negative, zero,
huge int, huge float, string, list, object), a fixed number per field, seeded, so the test is
the same on every run; ``TOSTNP_FUZZ_ALL=1`` runs every value for every field.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r'''
import contextlib, io, json, os, resource, signal, sys, tempfile, traceback
cap = 2 << 30
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
from tostnp.__main__ import main
from tostnp.io.checkpoint import load_checkpoint, save_checkpoint

work, per_field, every = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]
BAD = [None, True, -1, 0, 10 ** 40, 1e300, "x", [1, 2], {"a": 1}]

def quiet(argv):
    out, err = io.StringIO(), io.StringIO()
    def alarm(*a):
        raise TimeoutError("hang")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(60)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as e:
                code = e.code
            except BaseException:
                code = "traceback: " + traceback.format_exc()[-800:]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, err.getvalue()

text = os.path.join(work, "t.txt")
open(text, "w").write("hello world, hello tokens. " * 40)
vis, lm = os.path.join(work, "v"), os.path.join(work, "lm")
assert quiet(["train", "vision", "--out", vis, "--stop-at", "2", "--steps", "4",
              "--batch-size", "16"] + TINY)[0] == 0
assert quiet(["train", "lm", "--text", text, "--out", lm, "--stop-at", "2", "--steps", "4",
              "--block-size", "16", "--batch-size", "4", "--tokenizer", "bpe",
              "--vocab-size", "40"] + TINY)[0] == 0

def leaves(obj, path=()):
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, list) and obj and len(obj) <= 4:
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))
    else:
        yield path

def put(obj, path, value):
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value

commands = {"v": [["evaluate", "--checkpoint", "{d}"],
                  ["train", "vision", "--out", "{d}", "--resume", "--no-progress"]],
            "lm": [["evaluate", "--checkpoint", "{d}"],
                   ["sample", "--checkpoint", "{d}", "--length", "8", "--prompt", "hello"],
                   ["train", "lm", "--out", "{d}", "--resume", "--no-progress"]]}
report = {"runs": 0, "ok": 0, "refused": 0, "bad": []}
k = 0
for name, src in (("v", vis), ("lm", lm)):
    params, config, extra, state = load_checkpoint(os.path.join(src, "checkpoint"))
    for part, tree in (("config", config), ("state", state)):
        for path in leaves(tree):
            values = BAD if every else [BAD[(k + j * 4) % len(BAD)] for j in range(per_field)]
            k += 1
            for value in values:
                c, s = json.loads(json.dumps(config)), json.loads(json.dumps(state))
                put(c if part == "config" else s, path, value)
                d = tempfile.mkdtemp(dir=work)
                save_checkpoint(os.path.join(d, "checkpoint"), params, c, extra_arrays=extra,
                                state=s)
                for cmd in commands[name]:
                    argv = [a.format(d=d) for a in cmd]
                    code, err = quiet(argv)
                    report["runs"] += 1
                    lines = err.strip().splitlines()
                    errors = [ln for ln in lines if ln.startswith("error:")]
                    if code == 0:
                        report["ok"] += 1
                    elif code == 2 and len(errors) == 1 and "Traceback" not in err:
                        report["refused"] += 1
                    else:
                        report["bad"].append([name, part, list(path), repr(value)[:40],
                                              argv[0], str(code)[:900], err[-400:]])
print(json.dumps(report))
'''


def test_every_checkpoint_field_with_bad_values(tmp_path):
    env = dict(os.environ, MPLBACKEND="Agg", OPENBLAS_NUM_THREADS="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    every = os.environ.get("TOSTNP_FUZZ_ALL") == "1"
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), "2", "1" if every else "0"],
                       env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["runs"] > 200
    assert report["bad"] == [], json.dumps(report["bad"][:8], indent=1)
