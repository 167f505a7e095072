"""Ctrl-C while the command line is still starting (importing NumPy can take seconds on a busy
machine): one line, never a traceback. Installed by ``tostnp/__init__.py`` only when tostnp runs
as a program (``python -m tostnp``, the ``tostnp`` script), before anything else is imported;
once a command runs, :func:`tostnp.__main__.main` handles interrupts itself.

An interrupt inside a C extension's import does not always arrive as KeyboardInterrupt: NumPy's
turns it into an ImportError ("Importing the numpy C-extensions failed ... PyCapsule_Import
could not import module 'datetime'", exit 1). So the SIGINT handler notes that an interrupt
came, and an ImportError after one is the interrupt too (one line, exit 130)."""
from __future__ import annotations

import os
import signal
import sys

_interrupted = []                 # SIGINT came while starting (see the module docstring)


def _on_sigint(signum, frame):
    _interrupted.append(signum)
    raise KeyboardInterrupt


def _quiet(kind, value, tb, _previous=sys.excepthook):
    if issubclass(kind, KeyboardInterrupt) or (_interrupted and issubclass(kind, ImportError)):
        print("interrupted while tostnp was starting; nothing was written", file=sys.stderr)
        if issubclass(kind, KeyboardInterrupt):
            return                # Python still exits as killed by SIGINT (status 130)
        sys.stderr.flush()
        os._exit(130)
    _previous(kind, value, tb)


def _unraisable(u, _previous=sys.unraisablehook):
    """A Ctrl-C that lands inside a callback from C (threadpoolctl's ctypes callback while it
    looks for BLAS, for one) cannot propagate: CPython prints "Exception ignored ..." with a
    traceback and goes on as if no key was pressed. Deliver it again, where it can be handled
    (the handler of this module or the training loop's), and print nothing.

    The training loop's handler only notes the signal: it is raised again at once. This
    module's handler raises KeyboardInterrupt, which inside this hook would be one more
    exception the hook cannot pass on (CPython prints it with a traceback): the signal is sent
    again from a short-lived thread instead, so that the main thread meets it after the hook
    has returned (and once more the same way, should it land in a callback again)."""
    if u.exc_type is not None and issubclass(u.exc_type, KeyboardInterrupt):
        _interrupted.append(signal.SIGINT)
        if signal.getsignal(signal.SIGINT) is _on_sigint:
            import threading
            threading.Thread(target=_interrupt_soon, daemon=True).start()
        else:
            signal.raise_signal(signal.SIGINT)
        return
    _previous(u)


def _interrupt_soon() -> None:
    """SIGINT to this process in a moment (from a thread: the main thread's handler runs it)."""
    import time
    time.sleep(0.002)
    signal.raise_signal(signal.SIGINT)


def running_as_program() -> bool:
    """Whether this process is the tostnp command line (and not a program importing tostnp)."""
    arg0 = sys.argv[0] if sys.argv else ""
    name = arg0.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return arg0 == "-m" or name in ("tostnp", "tostnp.exe", "tostnp-script.py")


DEFERRED = "TOSTNP_SIGINT_DEFERRED"   # set by run.py, which starts tostnp with SIGINT ignored


def quiet_interrupts() -> None:
    """The hook above, and a SIGINT handler that notes the interrupt. Where ``run.py`` started
    this process with SIGINT ignored (so that a Ctrl-C during the interpreter's own start, before
    any of this runs, cannot print CPython's traceback), Ctrl-C is turned back on from here;
    where something else ignores it, it stays ignored."""
    if not running_as_program():
        return
    sys.excepthook = _quiet
    sys.unraisablehook = _unraisable
    deferred = os.environ.pop(DEFERRED, None) == "1"
    current = signal.getsignal(signal.SIGINT)
    if current is signal.default_int_handler or (deferred and current is signal.SIG_IGN):
        signal.signal(signal.SIGINT, _on_sigint)
