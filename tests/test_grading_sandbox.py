"""A hostile class against the grader's walls (tostnp.exercises.grading): the sandbox (bubblewrap),
the measurements taken from outside the child, the submissions read as files and never
followed, the names that cannot collide, and the bounded wire.

The class is graded twice where bubblewrap works here: in the sandbox, and as on a machine
without it (``isolation="none"``: an ordinary process with the audit hook). Each forgery must
score 0 on what it touches, write nothing outside its sandbox, leave no process behind, and the
rest of the class must be graded. Without a sandbox some forgeries still succeed (native code
can read and write what the grading user can; the instructor guide says so, and ``grade``
refuses to run there unless asked): those are checked in the sandbox only. Expected scores are
written here by hand.
"""
from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("jupytext")

from tostnp.exercises import grading  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402
from tostnp.exercises.grading import course, isolation as iso, session as sess  # noqa: E402

STEM = "02_coding_rate"
EXS = ["coding_rate", "compression", "coding_rate_grad", "max_rate_design"]
SOL = nbk.solution_sections(STEM)
FULL = dict.fromkeys(EXS, 1.0)
CELL_TIMEOUT = 5.0
TOKEN = f"zzgrade{os.getpid()}"
MODES = [m for m in (iso.BWRAP, iso.NONE) if m == iso.NONE or iso.available() == iso.BWRAP]


def _nb(sections=None):
    nb = nbk.read(nbk.EXERCISES / f"{STEM}.md")
    cells = nbk.student_cells(nb)
    for name in EXS:
        src = (sections or {}).get(name, SOL[name])
        cells[name].source = src if src is not None else cells[name].source
    return nb


def _todo():
    return dict.fromkeys(EXS, None)


def _forgeries(root: Path) -> dict:
    """student -> (sections, expected scores in the sandbox, expected without one)."""
    subs, out = root / "subs$(touch PWNED)", root / "out"
    perfect = subs / "perfect" / f"{STEM}.md"
    pth = ("import os, sys\n"
           "for _d in sys.path:\n"
           "    if _d.endswith('site-packages'):\n"
           "        try:\n"
           "            _fd = os.open(_d, os.O_RDONLY)\n"
           "            _w = os.open('zz_grading_forgery.pth', os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=_fd)\n"
           "            os.write(_w, b'# harmless: a forged .pth would run code here\\n')\n"
           "            os.close(_w)\n"
           "        except OSError:\n"
           "            pass\n"
           "        break\n")
    config = ("import json, os, sys\n"
              "def coding_rate_grad_mine(Z, eps):\n"
              "    cfg = sys.argv[1]\n"
              "    try:\n"
              "        c = json.load(open(cfg))\n"
              "        c['blocked_modules'] = []\n"
              "        fd = os.open(cfg, os.O_WRONLY | os.O_TRUNC)\n"
              "        os.write(fd, json.dumps(c).encode()); os.close(fd)\n"
              "        os._exit(3)\n"
              "    except OSError:\n"
              "        pass\n"
              "    import autograd, autograd.numpy as anp\n"
              "    n, d = Z.shape\n"
              "    f = lambda Z: 0.5 * anp.linalg.slogdet(anp.eye(d) + d / (n * eps**2) * anp.dot(Z.T, Z))[1]\n"
              "    return autograd.grad(f)(Z)\n")
    reader = ("import os\n"
              "def _steal(path):\n"
              "    d, name = os.path.split(path)\n"
              "    fd = os.open(d, os.O_RDONLY)\n"
              "    return os.read(os.open(name, os.O_RDONLY, dir_fd=fd), 1 << 20).decode()\n"
              "_found = []\n"
              f"for _p in [{str(perfect)!r}, {str(nbk.SOLUTIONS / (STEM + '.py'))!r}]:\n"
              "    try:\n"
              "        _found.append(_steal(_p))\n"
              "    except OSError:\n"
              "        pass\n"
              "import time\n"
              "_t0 = time.monotonic()\n"
              "for _dir, _ds, _fs in os.walk('/'):\n"
              "    _ds[:] = [] if time.monotonic() - _t0 > 1.5 else [\n"
              "        x for x in _ds if x not in ('proc', 'sys', 'dev', 'usr')]\n"
              f"    if _dir.endswith('solutions') and '{STEM}.py' in _fs:\n"
              f"        _found.append(_steal(os.path.join(_dir, '{STEM}.py')))\n"
              "for _src in _found:\n"
              "    try:\n"
              "        exec(_src.replace('# %%', '#'))\n"
              "    except Exception:\n"
              "        pass\n"
              "try:\n"
              f"    print('SALT', _steal({str(out / 'salt.txt')!r}))\n"
              "except OSError:\n"
              "    pass\n")
    native = ("import ctypes, os, time\n"
              "libc = ctypes.CDLL(None)\n"
              f"libc.system(b'touch {root}/native_escape; echo x > /tmp/n')\n"
              "try:\n"
              f"    open({str(root / 'python_escape')!r}, 'w').write('x')\n"
              "except OSError:\n"
              "    pass\n"
              "_pid = libc.fork()\n"
              "print('FORK', _pid)\n"
              "if _pid == 0:\n"
              "    libc.setsid()\n"
              "    if libc.fork() == 0:\n"
              f"        libc.prctl(15, b'{TOKEN}', 0, 0, 0)\n"
              "        time.sleep(120)\n"
              "    os._exit(0)\n"
              "time.sleep(0.3)\n")
    spy = ("import os, tempfile, time\n"
           "_seen = set()\n"
           "for _ in range(30):\n"
           "    for _d in {'/tmp', tempfile.gettempdir()}:\n"
           "        try:\n"
           "            _seen |= {x for x in os.listdir(_d) if x.startswith('tostnp-grade')}\n"
           "        except OSError:\n"
           "            pass\n"
           "    time.sleep(0.1)\n"
           "for _x in _seen:\n"
           "    try:\n"
           "        open(os.path.join('/tmp', _x, 'work', 'spy.txt'), 'w').write('x')\n"
           "    except OSError:\n"
           "        pass\n"
           "print('SPY SAW', len(_seen))\n")
    stall = ("import __main__, time\n"
             "_orig_read = __main__._read_exact\n"
             "def _read_exact(fd, n):\n"
             "    if n > 50000:\n"
             "        time.sleep(10**6)\n"
             "    return _orig_read(fd, n)\n"
             "__main__._read_exact = _read_exact\n")
    bomb = ("import __main__, io, zipfile, numpy as np\n"
            "_frame = __main__.frame\n"
            "def frame(head, arrays=None):\n"
            "    if not arrays or 'result' not in head:\n"
            "        return _frame(head, arrays)\n"
            "    b = io.BytesIO()\n"
            "    with zipfile.ZipFile(b, 'w', zipfile.ZIP_DEFLATED) as z:\n"
            "        with z.open('a0.npy', 'w', force_zip64=True) as f:\n"
            "            np.lib.format.write_array_header_1_0(f, {'descr': '<f8', 'fortran_order': False, 'shape': (2**25,)})\n"
            "            zero = bytes(1 << 20)\n"
            "            for _ in range(256):\n"
            "                f.write(zero)\n"
            "    return _frame(dict(head, result={'__nd__': 'a0'})) + b.getvalue()\n"
            "__main__.frame = frame\n")
    return {
        "perfect": ({}, FULL, FULL),
        "pth": ({"coding_rate": pth + SOL["coding_rate"]}, FULL, dict.fromkeys(EXS, 0.0)),
        "config_rewrite": ({"coding_rate_grad": config}, {**FULL, "coding_rate_grad": 0.0},
                           {**FULL, "coding_rate_grad": 0.0}),
        "reader": ({**_todo(), "coding_rate": reader}, dict.fromkeys(EXS, 0.0), None),
        "native": ({"coding_rate": native + SOL["coding_rate"]}, FULL, FULL),
        "spy": ({"compression": spy + SOL["compression"]}, FULL, FULL),
        "stall": ({"coding_rate": stall + SOL["coding_rate"]}, {"coding_rate": 0.0}, {"coding_rate": 0.0}),
        "bomb": ({"max_rate_design": SOL["max_rate_design"] + "\n" + bomb},
                 {**FULL, "max_rate_design": 0.0}, {**FULL, "max_rate_design": 0.0}),
        "jo smith": ({}, FULL, FULL),
        "jo_smith": (_todo(), dict.fromkeys(EXS, 0.0), dict.fromkeys(EXS, 0.0)),
    }


@pytest.fixture(scope="module", params=MODES)
def hostile(request, tmp_path_factory):
    mode = request.param
    root = tmp_path_factory.mktemp(f"hostile-{mode}")
    subs = root / "subs$(touch PWNED)"
    fake_site = root / "fake" / "site-packages"          # a .pth lands here, not in the venv
    fake_site.mkdir(parents=True)
    forgeries = _forgeries(root)
    for student, (sections, _, want_none) in forgeries.items():
        if mode == iso.NONE and want_none is None:
            continue
        (subs / student).mkdir(parents=True)
        nbk.write(_nb(sections), subs / student / f"{STEM}.md")
    perfect = subs / "perfect" / f"{STEM}.md"
    for name, target in [("link_other", perfect), ("link_passwd", Path("/etc/passwd")),
                         ("dangling", root / "nothing.md")]:
        (subs / name).mkdir()
        (subs / name / f"{STEM}.md").symlink_to(target)
    (subs / "drafty").mkdir()
    nbk.write(_nb(), subs / "drafty" / f"{STEM}.md")
    nbk.write(_nb(_todo()), subs / "drafty" / f"v0_{STEM}.md")
    (subs / "two_drafts").mkdir()
    nbk.write(_nb(), subs / "two_drafts" / f"a_{STEM}.md")
    nbk.write(_nb(_todo()), subs / "two_drafts" / f"b_{STEM}.md")
    (subs / "only_draft").mkdir()
    nbk.write(_nb(), subs / "only_draft" / f"v1_{STEM}.md")
    mp = pytest.MonkeyPatch()
    site = [str(fake_site)] + grading.site_dirs()
    mp.setattr(sess, "site_dirs", lambda: site)
    mp.setattr(grading.submission, "site_dirs", lambda: site)
    t0 = time.monotonic()
    try:
        rep = grading.grade_class(subs, root / "out", jobs=2 if mode == iso.BWRAP else 1,
                                  cell_timeout=CELL_TIMEOUT, notebook_timeout=60,
                                  memory_mb=1024, log=lambda *a: None, isolation=mode)
    finally:
        mp.undo()
    return mode, root, rep, time.monotonic() - t0, forgeries


def _result(root, student):
    key = grading.reports.student_key(student)
    return json.loads((root / "out" / "results" / key / f"{STEM}.json").read_text())


@pytest.mark.slow
def test_each_forgery_scores_zero_on_what_it_touches(hostile):
    mode, root, rep, seconds, forgeries = hostile
    rows = {r["student"]: r for r in csv.DictReader(open(root / "out" / "grades.csv"))}
    for student, (_, want_box, want_none) in forgeries.items():
        want = want_box if mode == iso.BWRAP else want_none
        if want is None:
            continue
        res = _result(root, student)
        got = {n: e["score"] for n, e in res["exercises"].items()}
        assert {n: got[n] for n in want} == want, (mode, student, {
            n: (e["score"], e["hint"][:160]) for n, e in res["exercises"].items()}, res["notes"])
        assert rows[student]["status"] == "graded" and rows[student]["isolation"] == mode
    assert "stopped reading" in _result(root, "stall")["exercises"]["coding_rate"]["hint"]
    assert "compressed" in _result(root, "bomb")["exercises"]["max_rate_design"]["hint"]
    # two students whose names differ only in a space: two folders, two rows
    assert rows["jo smith"]["total"] != rows["jo_smith"]["total"]
    assert float(rows["jo smith"]["exercises_total"]) == 4.0
    # the draft never replaces the notebook named in the plan; a lone draft is graded; two are refused
    assert float(rows["drafty"]["exercises_total"]) == 4.0
    assert float(rows["only_draft"]["exercises_total"]) == 4.0
    assert rows["two_drafts"]["status"] == "refused"
    # symbolic links: refused with a reason, never read (no /etc/passwd in any output)
    for name in ("link_other", "link_passwd", "dangling"):
        assert rows[name]["status"] == "refused" and float(rows[name]["total"]) == 0.0, rows[name]
        assert "symbolic link" in _result(root, name)["notes"][0]
    text = " ".join(p.read_text(errors="replace") for p in (root / "out").rglob("*") if p.is_file())
    assert "root:x:0:0" not in text
    if mode == iso.NONE:
        assert (root / "fake" / "site-packages" / "zz_grading_forgery.pth").exists()
        assert "changed the Python install" in " ".join(_result(root, "pth")["notes"])
    # bounded: the stalls and loops cost their budgets only
    assert seconds < 200, seconds


@pytest.mark.slow
def test_nothing_written_or_left_running_outside_the_sandbox(hostile):
    mode, root, _, _, _ = hostile
    for site in grading.site_dirs():
        assert not os.path.exists(os.path.join(site, "zz_grading_forgery.pth"))
    assert not (root / "PWNED").exists() and not Path("PWNED").exists()
    assert not any(Path(p).exists() for p in (root / "python_escape",))
    leftover = []
    for pid in os.listdir("/proc"):
        try:
            if pid.isdigit() and open(f"/proc/{pid}/comm").read().strip() == TOKEN[:15]:
                leftover.append(pid)
        except OSError:
            pass
    assert not leftover, leftover
    if mode == iso.BWRAP:
        assert not (root / "native_escape").exists()
        assert "FORK -1" in _result(root, "native")["output_tail"]      # no new process at all
        assert "SPY SAW 0" in _result(root, "spy")["output_tail"]
        salt = (root / "out" / "salt.txt").read_text().strip()
        assert salt not in _result(root, "reader")["output_tail"]


def test_measurements_come_from_outside_the_child():
    """10.1 with a T x T mask, and a Python loop, that rewrite every measuring name the child
    could reach (its ``__main__``, ``time``, ``tracemalloc``): memory and time are the grader's."""
    stem = "10_causal_language"
    patch = ("import __main__, time, tracemalloc\n"
             "for _n in ('_clock', '_wall', '_tm_peak', '_tm_start', '_tm_stop', '_tm_reset'):\n"
             "    setattr(__main__, _n, (lambda *a: (0, 0)) if 'peak' in _n else (lambda *a: 0.0))\n"
             "time.thread_time = time.perf_counter = time.process_time = lambda: 0.0\n"
             "tracemalloc.get_traced_memory = lambda: (0, 0)\n")
    mask = (patch + "import numpy as np\n"
            "def prefix_statistics_mine(w, Pi, h):\n"
            "    B, T, C = w.shape\n"
            "    p = C // h\n"
            "    M = np.tril(np.ones((T, T)))\n"
            "    sq = w**2\n"
            "    return (np.einsum('ts,bsc->btc', M, sq),\n"
            "            np.einsum('ts,bsc->btc', M, np.repeat(Pi, p, axis=-1) * sq),\n"
            "            np.einsum('ts,bsh->bth', M, Pi))\n")
    loop = (patch + "import numpy as np\n"
            "def prefix_statistics_mine(w, Pi, h):\n"
            "    B, T, C = w.shape\n"
            "    p = C // h\n"
            "    sq = w**2\n"
            "    wp = np.repeat(Pi, p, axis=-1) * sq\n"
            "    S1, S2, S3 = np.zeros_like(sq), np.zeros_like(sq), np.zeros_like(Pi)\n"
            "    a, b, c = np.zeros((B, C)), np.zeros((B, C)), np.zeros(Pi.shape[::2])\n"
            "    for t in range(T):\n"
            "        for k in range(C):\n"
            "            a[:, k] += sq[:, t, k]\n"
            "            b[:, k] += wp[:, t, k]\n"
            "        c += Pi[:, t]\n"
            "        S1[:, t], S2[:, t], S3[:, t] = a, b, c\n"
            "    return S1, S2, S3\n")
    sections = nbk.solution_sections(stem)
    for src, word in [(mask, "memory"), (loop, "takes")]:
        nb = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"), dict(sections, prefix_statistics=src))
        res = grading.run_submission(nb, stem, hidden=True, cell_timeout=60, salt=3,
                                     notebook_timeout=120)
        e = res["exercises"]["prefix_statistics"]
        assert e["score"] < e["points"] and word in e["hint"], (word, e)
    honest = nbk.fill(nbk.read(nbk.EXERCISES / f"{stem}.md"),
                      dict(sections, prefix_statistics=patch + sections["prefix_statistics"]))
    res = grading.run_submission(honest, stem, hidden=True, cell_timeout=60, salt=3)
    assert res["exercises"]["prefix_statistics"]["score"] == 1.0, res["exercises"]


def test_scan_refuses_links_and_keeps_names_apart(tmp_path):
    subs = tmp_path / "subs"
    for s in ("jo smith", "jo_smith", "Jo"):
        (subs / s).mkdir(parents=True)
        (subs / s / f"{STEM}.md").write_text("x")
    (subs / "eve").symlink_to(subs / "jo_smith")
    (subs / "mal").mkdir()
    (subs / "mal" / f"{STEM}.md").symlink_to("/nonexistent/file.md")
    graded, refused = course.scan_submissions(subs)
    assert [s for s, _ in graded] == ["Jo", "jo smith", "jo_smith"]
    assert {r["student"] for r in refused} == {"eve", "mal"}
    keys = {grading.reports.student_key(s) for s, _ in graded}
    assert len(keys) == 3 and "jo_smith" in keys
    with pytest.raises(OSError):
        course.read_submission(subs / "mal" / f"{STEM}.md")


def test_a_killed_run_leaves_no_student_output(tmp_path):
    """The grading process killed while a child runs: its child goes with it, and the folder it
    leaves holds none of the student's output; the next run removes that folder."""
    nb = tmp_path / f"{STEM}.md"
    nbk.write(_nb({"coding_rate": "open('student_output.txt', 'w').write('x')\n"
                                  "while True:\n    pass\n"}), nb)
    code = ("import sys; from tostnp.exercises import grading, notebook as nbk\n"
            f"grading.run_submission(nbk.read({str(nb)!r}), {STEM!r}, hidden=False, "
            "cell_timeout=60)\n")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("tostnp-grade-*"))
    p = subprocess.Popen([sys.executable, "-c", code], env=env)
    deadline = time.monotonic() + 60
    mine = []
    while time.monotonic() < deadline and not mine:
        time.sleep(0.5)
        mine = [d for d in set(tmp.glob("tostnp-grade-*")) - before
                if (d / "owner").exists() and json.loads((d / "owner").read_text())["pid"] == p.pid]
    time.sleep(3)                                        # the looping cell runs
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert mine
    time.sleep(1)
    if iso.available() == iso.BWRAP:
        assert not [f for d in mine for f in d.rglob("student_output.txt")]
    removed = course.remove_stale_folders()
    assert all(str(d) in removed and not d.exists() for d in mine)


def test_without_bwrap_on_the_path_there_is_no_sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))                  # an empty folder: no bwrap
    monkeypatch.delattr(iso.available, "result", raising=False)
    monkeypatch.delenv("TOSTNP_GRADING_ISOLATION", raising=False)
    assert iso.available() == iso.NONE


def test_a_reply_is_bounded_before_its_arrays_are_allocated():
    """A stored .npz member whose header claims more than its bytes, and a deflated member, are
    refused before numpy allocates or inflates anything; a plain reply passes."""
    import io
    import struct
    import zipfile

    import numpy as np
    from tostnp.exercises import _child
    from tostnp.exercises.grading.wire import Lost, check_arrays

    head = b'{"ok": true}'
    good = _child.frame({"ok": True}, {"a0": np.arange(10.0)})
    check_arrays(good)
    for compression, shape in [(zipfile.ZIP_STORED, (10**12,)), (zipfile.ZIP_DEFLATED, (4,))]:
        b = io.BytesIO()
        with zipfile.ZipFile(b, "w", compression) as z:
            with z.open("a0.npy", "w") as f:
                np.lib.format.write_array_header_1_0(
                    f, {"descr": "<f8", "fortran_order": False, "shape": shape})
                f.write(bytes(32))
        with pytest.raises(Lost):
            check_arrays(struct.pack(">I", len(head)) + head + b.getvalue())


@pytest.mark.skipif(iso.available() != iso.BWRAP, reason="bubblewrap is not usable here")
def test_a_read_only_folder_under_tmp_is_seen_inside(tmp_path):
    """The sandbox's own /tmp is empty, but a folder bound read-only from under the host's /tmp
    (a venv there: CI clones, pytest's folders) is mounted on top of it, not hidden by it."""
    d = tempfile.mkdtemp(dir="/tmp")
    try:
        Path(d, "probe.txt").write_text("seen")
        real = os.path.realpath(sys.executable)
        cmd = iso.bwrap_command([real, "-S", "-E", "-c", f"print(open({d + '/probe.txt'!r}).read())"],
                                read_only=iso._python_dirs() + [d], hidden=[],
                                sandbox=os.path.dirname(real))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "seen", r.stderr[-1000:]
    finally:
        import shutil
        shutil.rmtree(d)
