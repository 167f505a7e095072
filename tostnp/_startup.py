"""Ctrl-C while the command line is still starting (importing NumPy can take seconds on a busy
machine): one line, never a traceback. Installed by ``tostnp/__init__.py`` only when tostnp runs
as a program (``python -m tostnp``, the ``tostnp`` script), before anything else is imported;
once a command runs, :func:`tostnp.__main__.main` handles interrupts itself."""
from __future__ import annotations

import sys


def _quiet(kind, value, tb, _previous=sys.excepthook):
    if issubclass(kind, KeyboardInterrupt):
        print("interrupted while tostnp was starting; nothing was written", file=sys.stderr)
        return                    # Python still exits as killed by SIGINT (status 130)
    _previous(kind, value, tb)


def running_as_program() -> bool:
    """Whether this process is the tostnp command line (and not a program importing tostnp)."""
    arg0 = sys.argv[0] if sys.argv else ""
    name = arg0.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return arg0 == "-m" or name in ("tostnp", "tostnp.exe", "tostnp-script.py")


DEFERRED = "TOSTNP_SIGINT_DEFERRED"   # set by run.py, which starts tostnp with SIGINT ignored


def quiet_interrupts() -> None:
    """The hook above; and where ``run.py`` started this process with SIGINT ignored (so that a
    Ctrl-C during the interpreter's own start, before any of this runs, cannot print CPython's
    traceback), Ctrl-C is turned back on from here."""
    if not running_as_program():
        return
    sys.excepthook = _quiet
    import os
    if os.environ.pop(DEFERRED, None) == "1":
        import signal
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            signal.signal(signal.SIGINT, signal.default_int_handler)
