"""A benchmark's worker processes: each system (tostnp, PyTorch) runs in a Python process of its
own, so that neither shares an interpreter, an allocator or thread pools with the other, and the
tostnp worker never imports torch. Used by benchmarks/peer_torch/ and
benchmarks/context_scaling.py.

The protocol: the parent writes one JSON command a line on the worker's stdin; the worker answers
each with one JSON line on its stdout, prefixed with :data:`PROTO` (library prints go to stderr,
and any other stdout line is skipped). The worker's first answer is ``{"ready": meta}``, once
its set-up (model, data, warm-up) is done; ``{"cmd": "quit"}`` ends it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

__all__ = ["PROTO", "REPO", "Worker", "protocol_channel"]

PROTO = "@@"                          # prefix of protocol lines on the workers' stdout
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository root


class Worker:
    """The parent's handle on one worker: ``python argv...`` with the repository root on its
    PYTHONPATH; ``env_defaults`` are set where the environment does not set them."""

    def __init__(self, argv, name, *, env_defaults=None, close_timeout=60):
        self.name, self.close_timeout = name, close_timeout
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [env.get("PYTHONPATH", ""), REPO] if p)
        for k, v in (env_defaults or {}).items():
            env.setdefault(k, v)
        self.p = subprocess.Popen([sys.executable, *argv], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.meta = self.read()["ready"]

    def read(self):
        """The worker's next answer (a dict); raises when the worker died."""
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.name} died (rc={self.p.poll()})")
            if line.startswith(PROTO):
                return json.loads(line[len(PROTO):])

    def send(self, **kw):
        """Write a command without waiting for its answer (see :meth:`read`)."""
        self.p.stdin.write(json.dumps(kw) + "\n")
        self.p.stdin.flush()

    def cmd(self, **kw):
        """Send a command and return its answer."""
        self.send(**kw)
        return self.read()

    def close(self):
        try:
            self.send(cmd="quit")
            self.p.wait(timeout=self.close_timeout)
        except Exception:
            self.p.kill()


def protocol_channel():
    """In a worker: send library prints to stderr from now on and return ``send(obj)``, which
    writes one protocol answer to the real stdout."""
    proto, sys.stdout = sys.stdout, sys.stderr

    def send(obj):
        print(PROTO + json.dumps(obj), file=proto, flush=True)
    return send
