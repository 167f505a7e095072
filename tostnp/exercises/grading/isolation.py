"""Where a grading child runs, and what the grader measures of it from outside.

* :func:`available` says which isolation this machine gives a child: ``"bwrap"`` (bubblewrap,
  the sandbox Flatpak uses: Debian/Ubuntu package ``bubblewrap``) or ``"none"`` (an ordinary
  process of the grading user, bounded only by the audit hook of ``_child.py`` and its limits).
* :func:`bwrap_command` wraps the child's command line: the Python install, the site folders
  and the stand-in package read-only, the blocked packages hidden, a private empty ``/tmp`` and
  work folder (memory, gone with the sandbox), no other file of the machine (no repository, no
  submissions, no grades, no home), no network, its own PID, IPC, UTS and user namespaces (all
  of its processes end with it), a new session, no capabilities, no new privileges, and no new
  processes (:func:`seccomp_program`: threads only).
* :func:`limits` sets the memory, CPU-time and file-size limits in the process that becomes
  the child, before ``exec`` (they hold for everything it starts).
* :class:`Meter` reads the child's CPU time (its process CPU clock, with the CPU of every other
  process of its tree) and its peak resident memory (reset before a call through
  ``/proc/PID/clear_refs``, read from ``/proc/PID/status``) from the grading process: numbers
  the child cannot rewrite (inside bwrap it has no ``/proc`` at all).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

BWRAP = "bwrap"
NONE = "none"
DESCRIPTION = {BWRAP: "bwrap (own namespaces, read-only install, no network)",
               NONE: "none (an ordinary process with an audit hook: NOT a sandbox)"}
INSIDE = "/sandbox"                  # the child's folder, as the child sees it inside bwrap


def _bwrap_exe() -> str | None:
    if not sys.platform.startswith("linux"):
        return None
    return shutil.which("bwrap")


def _system_binds() -> list[str]:
    """Read-only binds of the system libraries (and /bin style links of a merged /usr)."""
    out = ["--ro-bind", "/usr", "/usr"]
    for top in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        if os.path.islink(top):
            out += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            out += ["--ro-bind", top, top]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/fonts",
              "/etc/localtime"):
        out += ["--ro-bind-try", f, f]
    return out


# --------------------------------------------------------------------------------------------
# no new processes: a seccomp filter (classic BPF) that refuses fork, vfork and clone without
# CLONE_THREAD (threads stay allowed: BLAS, Python threads), and clone3 with ENOSYS (so that the C
# library falls back to clone, where the flags can be read). Python code is refused the same by
# the audit hook; this stops native code (ctypes system(), fork + setsid, a fork bomb).
# --------------------------------------------------------------------------------------------
_ARCH = {"x86_64": (0xC000003E, {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435}),
         "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435})}
_ALLOW, _EPERM, _ENOSYS = 0x7FFF0000, 0x00050001, 0x00050026
_KILL = 0x80000000                               # SECCOMP_RET_KILL_PROCESS


def seccomp_program() -> bytes | None:
    """The filter for this machine's architecture (x86-64, arm64), or None elsewhere."""
    import platform
    import struct
    arch = _ARCH.get(platform.machine())
    if arch is None:
        return None
    audit, nr = arch
    LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JSET|K, RET|K
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, audit), (RET, 0, 0, _KILL),   # another ABI: killed
            (LD, 0, 0, 0)]
    if "fork" in nr:                             # x32 calls (nr | 0x40000000): refused
        prog += [(JSET, 0, 1, 0x40000000), (RET, 0, 0, _EPERM)]
    for name in ("fork", "vfork"):
        if name in nr:
            prog += [(JEQ, 0, 1, nr[name]), (RET, 0, 0, _EPERM)]
    prog += [(JEQ, 0, 1, nr["clone3"]), (RET, 0, 0, _ENOSYS),
             (JEQ, 0, 3, nr["clone"]), (LD, 0, 0, 16),              # clone: its flags
             (JSET, 1, 0, 0x00010000), (RET, 0, 0, _EPERM),         # CLONE_THREAD or refused
             (RET, 0, 0, _ALLOW)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def program_fd(data: bytes) -> int:
    """A file descriptor to read ``data`` from (for bwrap's --seccomp), positioned at its start."""
    try:
        fd = os.memfd_create("tostnp-seccomp", 0)
    except (AttributeError, OSError):
        import tempfile
        fd = os.dup(tempfile.TemporaryFile().fileno())
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def bwrap_command(argv: list[str], *, read_only: list[str], hidden: list[str], sandbox: str,
                  exe: str | None = None, seccomp_fd: int | None = None) -> list[str]:
    """``argv`` run inside bwrap: ``read_only`` folders bound read-only at their own paths,
    ``hidden`` folders (under them) replaced by empty read-only ones, ``sandbox`` (the grader's
    read-only folder of the stand-in package) at :data:`INSIDE`/ro, an empty work folder and
    ``/tmp`` in memory."""
    exe = exe or _bwrap_exe() or BWRAP
    cmd = [exe, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--hostname", "grading"]
    cmd += ["--unshare-user"]                # its own user namespace (root: as nobody in it)
    cmd += ["--uid", "65534", "--gid", "65534"] if os.geteuid() == 0 else []
    cmd += ["--disable-userns"] if _supports("--disable-userns") else []
    cmd += ["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []
    size = ["--size", str(256 * 2**20)] if _supports("--size") else []   # bwrap >= 0.5
    # /tmp first: a read-only folder under /tmp (a venv there) is bound on top of it, not hidden
    cmd += _system_binds() + ["--dev", "/dev", *size, "--tmpfs", "/tmp"]
    for p in dict.fromkeys(read_only):
        cmd += ["--ro-bind", p, p]
    for p in hidden:
        cmd += ["--tmpfs", p, "--remount-ro", p]
    cmd += [*size, "--tmpfs", INSIDE,
            "--ro-bind", sandbox, f"{INSIDE}/ro", "--dir", f"{INSIDE}/work",
            "--chdir", f"{INSIDE}/work", "--"]
    return cmd + list(argv)


def _supports(flag: str) -> bool:
    cache = _supports.__dict__.setdefault("cache", {})
    if flag not in cache:
        exe = _bwrap_exe()
        try:
            cache[flag] = bool(exe) and flag in subprocess.run(
                [exe, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            cache[flag] = False
    return cache[flag]


def available() -> str:
    """``"bwrap"`` where bubblewrap is installed and starts a sandbox here (user namespaces may be
    refused, e.g. by Ubuntu 24.04's AppArmor rule), else ``"none"``. Asked once per process;
    ``TOSTNP_GRADING_ISOLATION=none`` forces ``"none"`` (what a machine without bwrap gets)."""
    if os.environ.get("TOSTNP_GRADING_ISOLATION") == NONE or not hasattr(os, "geteuid"):
        return NONE                       # (bubblewrap is Linux's: no POSIX user ids, no bwrap)
    if "result" not in available.__dict__:
        ok = False
        exe = _bwrap_exe()
        if exe:
            real = os.path.realpath(sys.executable)
            prog = seccomp_program()
            fd = program_fd(prog) if prog else None
            cmd = bwrap_command([real, "-S", "-E", "-c", "import threading; t = threading."
                                 "Thread(target=print); t.start(); t.join()"],
                                read_only=_python_dirs(), hidden=[],
                                sandbox=os.path.dirname(real), exe=exe, seccomp_fd=fd)
            try:
                ok = subprocess.run(cmd, capture_output=True, timeout=30,
                                    pass_fds=() if fd is None else (fd,)).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
            finally:
                if fd is not None:
                    os.close(fd)
        available.result = BWRAP if ok else NONE
    return available.result


def _python_dirs() -> list[str]:
    """The folders of the Python install (where the interpreter and the standard library are)."""
    dirs = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    dirs.add(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    return sorted(d for d in dirs if os.path.isdir(d) and d != "/")


def limits_note() -> str | None:
    """One line for the user where the child's memory and CPU caps cannot be set (no
    ``resource`` module: Windows); None where they can."""
    try:
        import resource  # noqa: F401
    except ImportError:
        return ("note: this system has no `resource` module (Windows): the notebook runs "
                "without a memory cap; the time limits still hold")
    return None


def limits(memory_bytes: int, cpu_seconds: int, file_bytes: int):
    """A ``preexec_fn``: the limits of the child and of everything it starts, set before exec
    (None where there is no ``resource`` module: Windows)."""
    if limits_note() is not None:
        return None

    def apply():
        import resource

        def cap(which, soft, hard=None):
            try:
                resource.setrlimit(which, (soft, soft if hard is None else hard))
            except (ValueError, OSError):
                pass
        if memory_bytes > 0:
            cap(resource.RLIMIT_AS, memory_bytes)
        if cpu_seconds > 0:
            cap(resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 5)
        if file_bytes > 0:
            cap(resource.RLIMIT_FSIZE, file_bytes)
        cap(resource.RLIMIT_CORE, 0)
    return apply


# --------------------------------------------------------------------------------------------
# the child's process tree, read from the grading side
# --------------------------------------------------------------------------------------------
def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux ``/proc``; empty where there is none)."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children", encoding="ascii") as f:
                out += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return out


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children(p)
    return out


def leaf_python(pid: int) -> int | None:
    """The interpreter of a child started as ``pid`` (itself, or the process bwrap runs)."""
    for p in reversed(tree(pid)):
        try:
            if os.path.basename(os.readlink(f"/proc/{p}/exe")).startswith("python"):
                return p
        except OSError:
            continue
    return None


def _stat_ticks(pid: int, own: bool = True) -> int:
    """utime + stime (+ cutime + cstime: its reaped children) of ``pid``, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    t = [int(x) for x in fields[11:15]]
    return (t[0] + t[1] if own else 0) + t[2] + t[3]


class Meter:
    """CPU seconds and peak memory of a running child, read from outside it."""

    def __init__(self, root: int, child: int | None):
        self.root, self.child = root, child
        self.ok = child is not None and os.path.exists(f"/proc/{child}/status")
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.clock = ((~child) << 3) | 2 if child is not None else None   # its CPU clock

    def cpu(self) -> float:
        """CPU seconds of the child's interpreter (every thread, ns resolution) and of every other
        process of its tree, running or reaped (clock ticks)."""
        import time
        try:
            own = time.clock_gettime(self.clock)
        except (OSError, TypeError):
            own = None
        ticks = sum(_stat_ticks(p, own=p != self.child or own is None) for p in tree(self.root))
        return (own or 0.0) + ticks / self.hz

    def _status(self, key: str) -> int:
        with open(f"/proc/{self.child}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def reset_peak(self) -> int:
        """Start a new peak of resident memory; returns the resident bytes now."""
        with open(f"/proc/{self.child}/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return self._status("VmRSS")

    def peak(self) -> int:
        return self._status("VmHWM")


def process_started(pid: int):
    """When process ``pid`` started (clock ticks since boot), or None (no such process, or no
    ``/proc``): with the pid, it names one process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def site_state(dirs) -> dict:
    """{path: (size, mtime_ns)} of what lies directly in each site folder (a .pth a child
    writes there would run in the next Python started with ``site``)."""
    out = {}
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            try:
                st = os.lstat(os.path.join(d, n))
            except OSError:
                continue
            out[os.path.join(d, n)] = (st.st_size, st.st_mtime_ns)
    return out


def changed(before: dict, after: dict) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
