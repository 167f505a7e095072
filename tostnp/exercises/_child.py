"""The grading child: runs ONE submission's code cells and evaluates its functions on request.

Started by :mod:`tostnp.exercises.grading` as ``python -S -E _child.py CONFIG RFD WFD OUTFD``
(a copy of this file, read-only inside the sandbox; it imports nothing from tostnp, and the grading
process imports its wire functions, so that both ends share one codec). It never sees a
reference, a solution or a score: the grading process sends cells to execute and calls to
make; this process answers with plain data (JSON + arrays in an .npz, no pickle) over two pipes.

Before any student code runs it: sets resource limits (address space, file size, no core
files; the grader set them before exec as well), puts the stand-in package first on sys.path (a
``tostnp`` built without the code the notebook's exercises are about), installs an audit hook
(PEP 578; it cannot be removed) that refuses to import blocked modules (autograd, ...), to open
files under the protected folders (the repository, the submissions, the grades), to write
outside its work folder, and to start processes, then says it is ready. The hook is the second
layer: native code (ctypes, a C extension) is not bound by it, so the grader runs this process
in a sandbox made for the job where the machine has one (bubblewrap: see
``tostnp/exercises/grading/isolation.py``). Nothing the grader relies on comes from here but the
answers: CPU time and peak memory are read from outside this process.
"""
import io
import json
import os
import struct
import sys
import traceback

MAX_MESSAGE = 256 * 2**20


def _limits(cfg):
    try:
        import resource
    except ImportError:                          # Windows: no caps here (the grader says so)
        return

    def cap(which, soft, hard=None):
        try:
            resource.setrlimit(which, (soft, soft if hard is None else hard))
        except (ValueError, OSError):            # a platform without this limit (macOS: AS)
            pass
    mem = int(cfg.get("memory_bytes") or 0)
    if mem > 0:
        cap(resource.RLIMIT_AS, mem)
    fsize = int(cfg.get("file_bytes") or 0)
    if fsize > 0:
        cap(resource.RLIMIT_FSIZE, fsize)
    cap(resource.RLIMIT_CORE, 0)
    cpu = int(cfg.get("cpu_seconds") or 0)
    if cpu > 0:                                  # a backstop: the grader's clock comes first
        cap(resource.RLIMIT_CPU, cpu, cpu + 5)


def _die_with_parent(sandboxed):
    """Linux: be killed when the grading process dies (a killed grading run leaves no child)."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, 9)            # PR_SET_PDEATHSIG, SIGKILL
    except Exception:                            # noqa: BLE001  not Linux: the pipe closes
        pass
    if os.getppid() == 1 and not sandboxed:      # orphaned (in bwrap, pid 1 is its reaper)
        os._exit(1)


def _audit(cfg):
    blocked = tuple(cfg.get("blocked_modules", ()))
    protected = [os.path.realpath(p) for p in cfg.get("protected", ())]
    allowed_read = [os.path.realpath(p) for p in cfg.get("allowed_read", ())]
    writable = [os.path.realpath(p) for p in cfg["writable"]] + [os.devnull]

    def under(path, roots):              # separator and case as the system has them (Windows)
        path = os.path.normcase(path)
        return any(path == os.path.normcase(r)
                   or path.startswith(os.path.join(os.path.normcase(r), "")) for r in roots)

    def hook(event, args):
        if event == "import":
            name = args[0] or ""
            if any(name == b or name.startswith(b + ".") for b in blocked):
                raise ImportError(f"{name} cannot be imported while grading: write the "
                                  "exercise yourself")
        elif event == "open":
            path, mode, flags = (tuple(args) + (None, None))[:3]
            if not isinstance(path, (str, bytes, os.PathLike)):
                return
            p = os.path.realpath(os.fsdecode(path))
            write = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if write and not under(p, writable):
                raise PermissionError(f"writing {p} is not allowed while grading")
            if under(p, protected) and not under(p, allowed_read):
                raise PermissionError(f"{p} cannot be read while grading")
        elif event in ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                       "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg"):
            raise PermissionError(f"{event} is not allowed while grading")
    sys.addaudithook(hook)


# --------------------------------------------------------------------------------------------
# the wire: 8-byte length, then 4-byte JSON length, JSON, and an .npz of the arrays (if any).
# frame, unframe and write_all are the grading process's too (tostnp.exercises.grading imports
# them from this file): one codec for both ends, in the file the child runs without tostnp.
# --------------------------------------------------------------------------------------------
def frame(head, arrays=None) -> bytes:
    """A message without its 8-byte length: 4-byte JSON length, the JSON of ``head``, then an
    .npz of ``arrays`` (if any)."""
    import numpy as np
    body = json.dumps(head, allow_nan=True).encode()
    extra = b""
    if arrays:
        b = io.BytesIO()
        np.savez(b, **arrays)
        extra = b.getvalue()
    return struct.pack(">I", len(body)) + body + extra


def unframe(data):
    """(head, arrays) of a message made by :func:`frame`; the arrays are read without pickle."""
    import numpy as np
    (j,) = struct.unpack(">I", data[:4])
    head = json.loads(data[4:4 + j].decode())
    arrays = {}
    if len(data) > 4 + j:
        with np.load(io.BytesIO(data[4 + j:]), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    return head, arrays


def write_all(fd, msg) -> None:
    """Write the 8-byte length of ``msg``, then ``msg``, in chunks of 1 MiB."""
    os.write(fd, struct.pack(">Q", len(msg)))
    view = memoryview(msg)
    while view:
        view = view[os.write(fd, view[:1 << 20]):]


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def recv(fd):
    (n,) = struct.unpack(">Q", _read_exact(fd, 8))
    if n > MAX_MESSAGE:
        raise ValueError("message too large")
    return unframe(_read_exact(fd, n))


def send(fd, head, arrays=None):
    write_all(fd, frame(head, arrays))


class Encoder:
    """Python values -> JSON-able structure + arrays (a student result, after a call)."""

    def __init__(self):
        self.arrays = {}

    def put(self, a):
        import numpy as np
        a = np.asarray(a)
        if a.dtype == object or a.dtype.kind not in "biufc":
            return {"__opaque__": f"an array of {a.dtype}"}
        key = f"a{len(self.arrays)}"
        self.arrays[key] = np.array(a, order="C")
        return {"__nd__": key}

    def enc(self, v, depth=0):
        import numpy as np
        if depth > 20:
            return {"__opaque__": "a structure nested too deeply"}
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, int):
            return v if abs(v) < 2**62 else float(v)
        if isinstance(v, float):
            return {"__float__": repr(v)} if v != v or v in (float("inf"), float("-inf")) else v
        if isinstance(v, (np.ndarray, np.generic)):
            return self.put(v)
        if isinstance(v, tuple):
            return {"__tuple__": [self.enc(x, depth + 1) for x in v]}
        if isinstance(v, list):
            return [self.enc(x, depth + 1) for x in v]
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                return {"__opaque__": "a dict with keys that are not strings"}
            return {"__dict__": {k: self.enc(x, depth + 1) for k, x in v.items()}}
        mod = type(v).__module__ or ""
        if mod.startswith("array_api_strict"):
            try:
                import array_api_strict as xps
                host = np.asarray(xps.asarray(v, device=xps.Device("CPU_DEVICE")))
                return {"__xp__": {"device": str(v.device), "a": self.put(host)}}
            except Exception as e:                         # noqa: BLE001
                return {"__opaque__": f"an array_api_strict array that cannot be read ({e})"}
        if mod.startswith("matplotlib") and hasattr(v, "axes") and hasattr(v, "savefig"):
            ims = []
            for ax in v.axes:
                for im in ax.get_images():
                    lo, hi = im.get_clim()
                    ims.append({"a": self.put(np.asarray(im.get_array(), dtype=float)),
                                "clim": [float(lo), float(hi)]})
            try:
                import matplotlib.pyplot as plt
                plt.close(v)
            except Exception:                              # noqa: BLE001
                pass
            return {"__figure__": ims}
        if hasattr(v, "__array__") and not callable(v):
            try:
                return self.put(np.asarray(v))
            except Exception:                              # noqa: BLE001
                pass
        return {"__opaque__": f"a {type(v).__name__}"}


def main():
    cfg_path, rfd, wfd, outfd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    _die_with_parent(cfg.get("sandboxed"))
    sys.path[:0] = [cfg["pkgs"]]
    sys.path += [d for d in cfg.get("site_packages", ()) if d not in sys.path]
    os.chdir(cfg["work"])
    log = open(outfd, "a", buffering=1, encoding="utf-8", errors="replace")
    sys.stdout = sys.stderr = log
    import numpy as np                                       # noqa: F401  before the limits
    for mod in cfg.get("preload", ()):
        try:
            __import__(mod)
        except Exception:                                    # noqa: BLE001
            pass
    _limits(cfg)
    _audit(cfg)
    # a notebook's own builtin: an honest cell that shows a value runs here too (shows nothing)
    ns = {"__name__": "__main__", "display": lambda *objs, **kwargs: None}
    send(wfd, {"op": "ready"})

    def decode(v):
        if isinstance(v, list):
            return [decode(x) for x in v]
        if isinstance(v, dict):
            if "__nd__" in v:
                return arrays[v["__nd__"]].copy()
            if "__float__" in v:
                return float(v["__float__"])
            if "__tuple__" in v:
                return tuple(decode(x) for x in v["__tuple__"])
            if "__dict__" in v:
                return {k: decode(x) for k, x in v["__dict__"].items()}
            if "__dev__" in v:
                import array_api_strict as xps
                return xps.asarray(arrays[v["__dev__"]].copy(), device=xps.Device("device1"))
            if "__cb__" in v:
                return callback(v["__cb__"])
        return v

    def callback(cid):
        def f(*args):
            e = Encoder()
            send(wfd, {"op": "callback", "id": cid, "args": e.enc(list(args))}, e.arrays)
            nonlocal_arrays = recv(rfd)
            head, arr = nonlocal_arrays
            saved = dict(arrays)
            arrays.clear()
            arrays.update(arr)
            try:
                out = decode(head.get("result"))
            finally:
                arrays.clear()
                arrays.update(saved)
            if not head.get("ok"):
                raise RuntimeError(head.get("message", "the grader's function failed"))
            return out
        return f

    def error(e):
        tb = traceback.format_exception(type(e), e, e.__traceback__)
        tb = [t for t in tb if "_child.py" not in t]
        return {"ok": False, "etype": type(e).__name__, "message": str(e)[:2000],
                "traceback": "".join(tb)[-4000:]}

    while True:
        try:
            head, arrays = recv(rfd)
        except EOFError:
            return
        op = head.get("op")
        if op == "exec":
            try:
                code = compile(head["source"], f"<cell {head.get('cell', '?')}>", "exec")
                exec(code, ns)                                   # noqa: S102  the point
                reply = {"ok": True}
            except BaseException as e:                           # noqa: BLE001  SystemExit too
                reply = error(e)
            send(wfd, reply)
        elif op == "kind":
            name = head["name"]
            if name not in ns:
                send(wfd, {"ok": True, "kind": "missing"})
            else:
                send(wfd, {"ok": True, "kind": "callable" if callable(ns[name]) else "value"})
        elif op == "value":
            e = Encoder()
            try:
                send(wfd, {"ok": True, "result": e.enc(ns[head["name"]])}, e.arrays)
            except BaseException as ex:                          # noqa: BLE001
                send(wfd, error(ex))
        elif op == "call":
            fn = ns.get(head["name"])
            args = decode(head["args"])
            inside = bool(head.get("measure_inside"))   # only where the grader has no /proc
            try:
                if inside:
                    import time
                    import tracemalloc
                    tracemalloc.start()
                    t0, w0 = time.thread_time(), time.perf_counter()
                out = fn(*args)             # timed and measured by the grader, from outside
                e = Encoder()
                reply = {"ok": True, "result": e.enc(out)}
                if inside:
                    reply.update(seconds=time.thread_time() - t0, wall=time.perf_counter() - w0,
                                 peak=tracemalloc.get_traced_memory()[1])
                    tracemalloc.stop()
                if head.get("writeback"):
                    reply["args"] = e.enc(list(args))
                send(wfd, reply, e.arrays)
            except BaseException as ex:                          # noqa: BLE001
                send(wfd, error(ex))
        else:
            send(wfd, {"ok": False, "etype": "ProtocolError", "message": f"unknown op {op!r}"})


if __name__ == "__main__":
    main()
