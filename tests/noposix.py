"""Run Python as Windows shows it to tostnp, as far as a Linux machine can tell.

    python noposix.py -m tostnp train vision ...     # a module
    python noposix.py -c "import fcntl"              # a command
    python noposix.py script.py args ...             # a script

Before the program runs: ``fcntl``, ``resource`` and ``termios`` cannot be imported (a meta-path
finder raises ImportError, as on Windows); the POSIX-only signals (SIGKILL, SIGHUP, SIGUSR1,
SIGALRM, ...) and the POSIX-only calls of ``os`` (killpg, getpgid, setsid, getloadavg, sysconf,
fork, getuid, ...) are gone from
``signal`` and ``os``. Every Python process the program starts through ``sys.executable`` (the
exercise grader's child, notebook kernels) is started through this file again, by a small shell
wrapper written next to it. The standard library's own POSIX internals keep working
(subprocess.Popen.kill sends signal 9 itself), so a failure is tostnp's, not the simulation's.

What this cannot show: a Windows process model (no fork, no pass_fds, select() on sockets only),
drive letters, file locking that forbids deleting an open file. GitHub Actions runs the quick
tests on real Windows and macOS for those.
"""
import importlib.abc
import os
import runpy
import signal
import subprocess
import sys

BLOCKED = ("fcntl", "resource", "termios")
WINDOWS_SIGNALS = {"SIGABRT", "SIGFPE", "SIGILL", "SIGINT", "SIGSEGV", "SIGTERM", "SIGBREAK",
                   "SIG_DFL", "SIG_IGN"}
POSIX_SIGNAL_CALLS = ("alarm", "pause", "setitimer", "getitimer", "siginterrupt", "sigwait",
                      "sigtimedwait", "sigwaitinfo", "sigpending", "pthread_kill",
                      "pthread_sigmask", "pidfd_send_signal")
POSIX_OS_CALLS = ("killpg", "getpgid", "setsid", "setpgid", "getpgrp", "getloadavg", "sysconf",
                  "fork", "getuid", "geteuid", "getgid", "getegid")   # not uname: NumPy on Linux reads it


class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked: Windows has none)", name=name)
        return None


def _wrapper() -> str:
    """A shell script that starts this interpreter with this file first (the flags kept)."""
    here = os.path.abspath(__file__)
    path = os.path.join(os.path.dirname(here), "python-noposix")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write('#!/bin/sh\nflags=""\nwhile [ $# -gt 0 ]; do case "$1" in\n'
                    '  -m|-c) break ;;\n  -*) flags="$flags $1"; shift ;;\n  *) break ;;\n'
                    f'esac; done\nexec "{sys.executable}" $flags "{here}" "$@"\n')
        os.chmod(path, 0o755)
    return path


def install() -> None:
    sys.meta_path.insert(0, _Refuse())
    for name in BLOCKED:
        sys.modules.pop(name, None)
    for name in dir(signal):
        if (name.startswith("SIG") and name not in WINDOWS_SIGNALS) or name in POSIX_SIGNAL_CALLS:
            delattr(signal, name)
    for name in POSIX_OS_CALLS:
        if hasattr(os, name):
            delattr(os, name)
    subprocess.Popen.kill = lambda self: self.send_signal(9)   # the stdlib's, not tostnp's
    sys.executable = _wrapper()


def main() -> None:
    args = sys.argv[1:]
    install()
    if args[:1] == ["-m"]:
        sys.argv = [args[1]] + args[2:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[:1] == ["-c"]:
        sys.argv = ["-c"] + args[2:]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = args
        sys.path[0] = os.path.dirname(os.path.abspath(args[0]))
        runpy.run_path(args[0], run_name="__main__")


if __name__ == "__main__":
    main()
