"""SIGINT and SIGTERM during training: a flag the loop checks after each update (the checkpoint
is saved, then the run stops); a second signal stops at once; an evaluation in progress ends at
once (:meth:`SignalFlag.during`)."""
from __future__ import annotations

import signal
import threading

__all__ = ["SignalFlag"]


class _CutShort(Exception):
    """Raised by the signal handler inside :meth:`SignalFlag.during`."""


class SignalFlag:
    """SIGINT/SIGTERM set a flag checked after each update; a second signal stops at once."""

    def __init__(self):
        self.signum = 0
        self.old = {}
        self.interruptible = False       # inside :meth:`during`: a signal ends the work at once
        self.cut_short = False           # a signal ended such work
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        for sig in (signal.SIGINT, signal.SIGTERM):
            self.old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        if self.signum:  # second signal: stop now (the last checkpoint is still complete)
            raise KeyboardInterrupt
        self.signum = signum
        if self.interruptible:
            raise _CutShort

    def during(self, work):
        """``work()``, unless a signal arrives meanwhile: then None at once (an evaluation
        need not finish before the checkpoint is saved and the run stops)."""
        if self.signum:
            self.cut_short = True
            return None
        self.interruptible = True
        try:
            return work()
        except _CutShort:
            self.cut_short = True
            return None
        finally:
            self.interruptible = False

    def restore(self):
        for sig, h in self.old.items():
            signal.signal(sig, h)
        self.old = {}
