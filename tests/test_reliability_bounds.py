"""Nothing exhausted, nothing clobbered, nothing silent: hostile files and values.

Every crafted file is built here (re-signed so that its checksum passes) and every case runs the
command line in a child process whose address space is capped (``RLIMIT_AS``): it must end with
one line ``error: ...`` naming the file and the field (or the option), exit status 2, and a
peak resident memory (the child's ``ru_maxrss``, from ``os.wait4``) under ``PEAK_LIMIT``.
``TOSTNP_CASE_TABLE=path`` writes the table case -> message -> peak memory -> seconds to
``path`` (markdown).
"""
import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np
import pytest

from crafted import npy_bytes, rewrite_member

from tostnp.io.checkpoint import load_checkpoint, save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAP = 1 << 30                 # address space of each child: 1 GiB
PEAK_LIMIT = 400 << 20        # its resident memory must stay under 400 MB
TINY = ["--width", "8", "--depth", "1", "--heads", "2", "--no-progress"]
_TABLE = []


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["MPLBACKEND"] = "Agg"
    env["OPENBLAS_NUM_THREADS"] = "1"        # thread stacks would count against the cap
    return env


# A small launcher runs each case: a process forked from pytest would start with pytest's
# resident memory as its high-water mark (Linux keeps ru_maxrss across exec), so the case is
# the child of a bare Python, whose RUSAGE_CHILDREN then holds the case's own peak.
_LAUNCHER = r"""
import json, resource, subprocess, sys
cap, out, err = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
with open(out, "wb") as fo, open(err, "wb") as fe:
    code = subprocess.Popen(sys.argv[4:], stdout=fo, stderr=fe, preexec_fn=limit).wait()
print(json.dumps([code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))
"""


def _capped(argv, cap=CAP):
    """Run ``python -m tostnp argv`` with RLIMIT_AS = cap -> (code, stdout, stderr, peak RSS
    in bytes, seconds)."""
    with tempfile.TemporaryDirectory() as d:
        fo, fe = os.path.join(d, "out"), os.path.join(d, "err")
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", _LAUNCHER, str(cap), fo, fe, sys.executable,
                            "-m", "tostnp", *map(str, argv)], env=_env(), capture_output=True,
                           text=True)
        wall = time.perf_counter() - t0
        assert r.returncode == 0, r.stderr
        code, maxrss_kb = json.loads(r.stdout)
        out, err = open(fo).read(), open(fe).read()
    return code, out, err, maxrss_kb * 1024, wall


def _refused(case, argv, *needles, cap=CAP):
    """The case ends in one line 'error: ...' holding every needle, exit 2, within memory."""
    code, out, err, peak, wall = _capped(argv, cap)
    msg = err.strip()
    _TABLE.append((case, msg, peak, wall))
    assert code == 2, (code, out[-500:], err[-2000:])
    assert msg.startswith("error: ") and len(msg.splitlines()) == 1, err[-2000:]
    assert "Traceback" not in err
    for n in needles:
        assert n in msg, (n, msg)
    assert peak < PEAK_LIMIT, f"{case}: peak RSS {peak / 1e6:.0f} MB"
    return msg


def write_case_table(path, rows) -> None:
    """The cases as a markdown table (case, message, peak RSS, wall) at ``path``."""
    lines = ["| case | message (stderr) | peak RSS | wall |", "|---|---|---|---|"]
    for case, msg, peak, wall in rows:
        m = msg.replace("|", "\\|").replace("\n", " ")
        m = m if len(m) < 400 else m[:400] + " …"
        lines.append(f"| {case} | {m} | {peak / 1e6:.0f} MB | {wall:.2f} s |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


@pytest.fixture(scope="module", autouse=True)
def case_table():
    yield
    path = os.environ.get("TOSTNP_CASE_TABLE")
    if path and _TABLE:
        write_case_table(path, _TABLE)


# ---------------------------------------------------------------------------------------------
# runs to craft from
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny vision run and a tiny LM run (2 of 4 updates: resumable), and the vision run's
    export to safetensors."""
    from tostnp.__main__ import main
    d = tmp_path_factory.mktemp("runs")
    v, lm = str(d / "v"), str(d / "lm")
    tiny = TINY + ["--steps", "4"]
    assert main(["train", "vision", "--out", v, "--stop-at", "2", "--batch-size", "32"]
                + tiny) == 0
    text = d / "t.txt"
    text.write_text("hello world, hello tokens. " * 40)
    assert main(["train", "lm", "--text", str(text), "--out", lm, "--stop-at", "2",
                 "--block-size", "16", "--batch-size", "4", "--tokenizer", "char"] + tiny) == 0
    pub, st = str(d / "pub"), str(d / "pub.safetensors")
    assert main(["train", "vision", "--stem", "conv", "--pos", "fourier", "--gelu", "erf",
                 "--out", pub, "--steps", "1", "--batch-size", "8", "--width", "16",
                 "--depth", "1", "--heads", "2", "--no-progress"]) == 0
    assert main(["convert", pub, st]) == 0
    return v, lm, st


def _craft(src_run, dst, model=None, config=None, train=None, extra=None):
    """Copy a run's checkpoint with its settings or arrays changed; save_checkpoint signs it."""
    params, cfg, ex, state = load_checkpoint(os.path.join(src_run, "checkpoint"))
    cfg = json.loads(json.dumps(cfg))
    cfg["model"].update(model or {})
    cfg.update(config or {})
    cfg["train"].update(train or {})
    ex.update(extra or {})
    os.makedirs(dst, exist_ok=True)
    save_checkpoint(os.path.join(dst, "checkpoint"), params, cfg, extra_arrays=ex, state=state)
    return dst



def _deep(n=100_000):
    return "[" * n + "]" * n


# ---------------------------------------------------------------------------------------------
# 1. sizes from files: bounded before anything is allocated
# ---------------------------------------------------------------------------------------------
def test_lm_batch_size_in_checkpoint(runs, tmp_path):
    bad = _craft(runs[1], str(tmp_path / "b"), train={"batch_size": 500_000})
    _refused("LM checkpoint train.batch_size = 500000, evaluate", ["evaluate", "--checkpoint",
             bad], "evaluating", "batches of 500000", "memory available")
    bad = _craft(runs[1], str(tmp_path / "c"), train={"batch_size": 10 ** 12})
    _refused("LM checkpoint train.batch_size = 1e12, evaluate", ["evaluate", "--checkpoint",
             bad], bad, "batch_size must be at most")
    _refused("LM checkpoint train.batch_size = 1e12, train --resume",
             ["train", "lm", "--out", bad, "--resume", "--no-progress"], bad, "batch_size")


def test_registers_and_position_table_counted(runs, tmp_path):
    bad = _craft(runs[0], str(tmp_path / "r"), model={"num_registers": 5_000_000})
    _refused("vision checkpoint num_registers = 5e6, evaluate",
             ["evaluate", "--checkpoint", bad], bad, "num_registers x width")
    bad = _craft(runs[0], str(tmp_path / "p"), model={"image_size": 2048, "patch_size": 1})
    _refused("vision checkpoint image_size 2048, patch_size 1, evaluate",
             ["evaluate", "--checkpoint", bad], bad, "(image_size / patch_size)^2")


def _sparse_zip(path, member="params/W.npy", size=5 << 30):
    """A zip (ZIP64) whose one stored member declares ``size`` bytes: a hole, not data."""
    name = member.encode()
    extra = struct.pack("<HHQQ", 1, 16, size, size)
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0x21, 0, 0xFFFFFFFF,
                        0xFFFFFFFF, len(name), len(extra)) + name + extra
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0x21, 0,
                          0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0, 0) \
        + name + extra
    with open(path, "wb") as f:
        f.write(local)
        f.seek(size, os.SEEK_CUR)
        cd_off = f.tell()
        f.write(central)
        z64 = f.tell()
        f.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, 1, 1, len(central),
                            cd_off))
        f.write(struct.pack("<IIQI", 0x07064B50, 0, z64, 1))
        f.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), 0xFFFFFFFF, 0))


def test_sparse_5gib_checkpoint_refused_from_its_directory(tmp_path):
    d = tmp_path / "sparse"
    d.mkdir()
    npz = str(d / "checkpoint.npz")
    _sparse_zip(npz)
    assert os.path.getsize(npz) > 5 << 30
    with zipfile.ZipFile(npz) as z:                      # a well-formed zip, as zipfile sees it
        assert z.infolist()[0].file_size == 5 << 30
    _refused("5 GiB sparse checkpoint.npz, evaluate", ["evaluate", "--checkpoint", str(d)],
             npz, "5,368,709,", "max_bytes")


def test_deep_json_in_meta_and_sidecar(runs, tmp_path):
    bad = _craft(runs[0], str(tmp_path / "m"))
    npz = os.path.join(bad, "checkpoint.npz")
    rewrite_member(npz, "__meta__.npy", npy_bytes(np.frombuffer(_deep().encode(), np.uint8)))
    _refused("checkpoint.npz __meta__ nested 100000 deep, evaluate",
             ["evaluate", "--checkpoint", bad], npz, "__meta__", "nested")
    bad = _craft(runs[0], str(tmp_path / "j"))
    with open(os.path.join(bad, "checkpoint.json"), "w") as f:
        f.write('{"format": "tostnp-checkpoint", "x": ' + _deep() + "}")
    _refused("checkpoint.json nested 100000 deep, evaluate", ["evaluate", "--checkpoint", bad],
             "checkpoint.json", "nested")


def _st_with_header(src, dst, edit):
    """A safetensors file whose JSON header is ``edit(header dict) -> bytes or dict``."""
    raw = open(src, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    new = edit(header)
    new = new if isinstance(new, bytes) else json.dumps(new).encode()
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(new)) + new + raw[8 + n:])
    return dst


def test_safetensors_deep_header_and_bad_offsets(runs, tmp_path):
    st = runs[2]
    bad = _st_with_header(st, str(tmp_path / "deep.safetensors"),
                          lambda h: ('{"a": ' + _deep(1_000_000) + "}").encode())
    _refused("safetensors header nested 1e6 deep, convert",
             ["convert", bad, tmp_path / "o1"], bad, "header", "nested")
    bad = _st_with_header(st, str(tmp_path / "meta.safetensors"),
                          lambda h: {**h, "__metadata__": {"x": {"y": [1, 2]}}})
    _refused("safetensors __metadata__ not names -> strings, convert",
             ["convert", bad, tmp_path / "o2"], bad, "__metadata__")

    def off(h, value):
        k = next(k for k in h if k != "__metadata__")
        h[k]["data_offsets"] = value
        return h
    bad = _st_with_header(st, str(tmp_path / "off1.safetensors"), lambda h: off(h, [0, 10**15]))
    _refused("safetensors data_offsets past the end, convert",
             ["convert", bad, tmp_path / "o3"], bad, "data_offsets", "outside")
    bad = _st_with_header(st, str(tmp_path / "off2.safetensors"), lambda h: off(h, ["0", 4]))
    _refused("safetensors data_offsets not integers, convert",
             ["convert", bad, tmp_path / "o4"], bad, "data_offsets", "two integers")
    bad = _st_with_header(st, str(tmp_path / "shape.safetensors"),
                          lambda h: {**h, next(k for k in h if k != "__metadata__"):
                                     {"dtype": "F32", "shape": ["x"], "data_offsets": [0, 4]}})
    _refused("safetensors shape not integers, convert",
             ["convert", bad, tmp_path / "o5"], bad, "shape")


def test_deep_tostnp_metadata_is_ignored_with_a_note(runs, tmp_path):
    st = runs[2]
    bad = _st_with_header(st, str(tmp_path / "m.safetensors"),
                          lambda h: {**h, "__metadata__": {**h["__metadata__"],
                                                           "tostnp": _deep()}})
    code, out, err, peak, wall = _capped(["convert", bad, tmp_path / "out"])
    _TABLE.append(("safetensors __metadata__.tostnp nested 100000 deep, convert (imported "
                   "without its settings, exit 0)", err.strip(), peak, wall))
    assert code == 0 and "note: ignored the file's tostnp settings" in err and "nested" in err
    assert peak < PEAK_LIMIT


@pytest.mark.parametrize("perm,case", [
    (lambda n: np.arange(n) + n, "out of range"),
    (lambda n: np.arange(n, dtype=np.float64), "float"),
    (lambda n: np.zeros(n, np.int64), "all zero"),
    (lambda n: np.arange(n - 1), "too short"),
])
def test_resumed_data_order_validated(runs, tmp_path, perm, case):
    _, _, ex, _ = load_checkpoint(os.path.join(runs[0], "checkpoint"))
    n = len(ex["data.perm"])
    bad = _craft(runs[0], str(tmp_path / "d"), extra={"data.perm": perm(n)})
    _refused(f"vision checkpoint data.perm {case}, train --resume",
             ["train", "vision", "--out", bad, "--resume", "--no-progress"],
             bad, "'perm' must be a permutation")


# ---------------------------------------------------------------------------------------------
# 5. every numeric option bounded (argparse, or an estimate before anything is built)
# ---------------------------------------------------------------------------------------------
CLI_CASES = [
    (["train", "vision", "--registers", "1e12"], "--registers"),
    (["train", "vision", "--seeds", "0-1000000000"], "--seeds"),
    (["experiment", "needle", "--seeds", "0-1000000000"], "--seeds"),
    (["train", "lm", "--batch-size", "1e12"], "--batch-size"),
    (["train", "vision", "--batch-size", "1e12"], "--batch-size"),
    (["train", "vision", "--warmup-steps", "1e12"], "--warmup-steps"),
    (["bench", "--batch", "1e12"], "--batch"),
    (["bench", "--width", "1e12"], "--width"),
    (["bench", "--sizes", "1e12"], "--sizes"),
    (["bench", "--contexts", "1e12"], "--contexts"),
    (["bench", "--decode-steps", "1e12"], "--decode-steps"),
    (["bench", "--repeats", "1e12"], "--repeats"),
    (["sample", "--checkpoint", "x", "--length", "1e12"], "--length"),
    (["sample", "--checkpoint", "x", "--temperature", "nan"], "--temperature"),
    (["sample", "--checkpoint", "x", "--temperature", "-1"], "--temperature"),
    (["evaluate", "--checkpoint", "x", "--batches", "1e12"], "--batches"),
    (["train", "vision", "--steps", "1e12"], "--steps"),
    (["train", "vision", "--lr", "inf"], "--lr"),
    (["convert", "a.safetensors", "b", "--image-size", "1000000"], "--image-size"),
    (["bench", "--threads", "0"], "--threads"),
]


@pytest.mark.parametrize("argv,option", CLI_CASES, ids=[" ".join(c[0]) for c in CLI_CASES])
def test_huge_option_values_one_line(argv, option, tmp_path):
    _refused(" ".join(argv), argv + (["--out", str(tmp_path / "o")] if argv[0] in
                                     ("train", "bench", "experiment") else []), option)


def test_in_range_sizes_refused_by_the_estimate(tmp_path):
    _refused("bench --batch 4096 --width 16384 --sizes 1048576",
             ["bench", "--batch", "4096", "--width", "16384", "--heads", "16", "--sizes",
              "1048576", "--no-train", "--out", tmp_path / "b"], "bench's input arrays",
             "memory available")
    _refused("train vision --registers 65536 --width 16384 --heads 16",
             ["train", "vision", "--registers", "65536", "--width", "16384", "--heads", "16",
              "--out", tmp_path / "v", "--no-progress"], "training in", "memory available",
             cap=2 << 30)
    _refused("train vision --batch-size 100000",
             ["train", "vision", "--batch-size", "100000", "--out", tmp_path / "w"],
             "--batch-size 100000", "training images", cap=2 << 30)
    _refused("train vision --steps 10 --warmup-steps 100",
             ["train", "vision", "--steps", "10", "--warmup-steps", "100", "--out",
              tmp_path / "x"], "--warmup-steps 100", cap=2 << 30)
    text = tmp_path / "t.txt"
    text.write_text("hello world " * 50)
    _refused("train lm --batch-size 1000000",
             ["train", "lm", "--batch-size", "1000000", "--tokenizer", "char", "--text", text,
              "--out", tmp_path / "l"], "training in", "batches of 1000000", cap=2 << 30)
    assert not (tmp_path / "v").exists() and not (tmp_path / "l").exists()


def test_bench_errors_exit_2_with_error_prefix(tmp_path):
    _refused("bench --width 25 --heads 2", ["bench", "--quick", "--width", "25", "--heads", "2",
                                            "--out", tmp_path], "--heads")
    _refused("bench --train --benches gpt", ["bench", "--train", "--benches", "gpt", "--out",
                                             tmp_path], "--benches")


# ---------------------------------------------------------------------------------------------
# 2. one writer per run directory
# ---------------------------------------------------------------------------------------------
def _train_proc(out, *extra):
    cmd = [sys.executable, "-m", "tostnp", "train", "vision", "--out", str(out), *TINY,
           "--eval-every", "0", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())


def _wait_for(path, timeout=60):
    t0 = time.time()
    while not os.path.exists(path):
        assert time.time() - t0 < timeout, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_second_training_on_one_folder_refused_first_finishes_intact(tmp_path):
    out = tmp_path / "run"
    first = _train_proc(out, "--steps", "300", "--checkpoint-every", "20", "--seed", "0")
    _wait_for(out / "checkpoint.npz")                     # the first is writing checkpoints
    msg = _refused("second train vision into a folder being trained (--overwrite, another "
                   "seed)", ["train", "vision", "--out", out, "--steps", "300", "--overwrite",
                             "--seed", "7"] + TINY, str(out), "in use by pid")
    assert str(first.pid) in msg
    _, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    params, cfg, _, state = load_checkpoint(str(out / "checkpoint"))
    assert state["step"] == 300 and cfg["train"]["seed"] == 0     # the first run's, whole
    assert json.load(open(out / "result.json"))["seed"] == 0
    assert [f for f in os.listdir(out) if "tmp" in f] == []


@pytest.mark.slow
def test_lock_of_a_killed_run_is_not_stale(tmp_path):
    out = tmp_path / "run"
    p = _train_proc(out, "--steps", "3000", "--checkpoint-every", "10")
    _wait_for(out / "checkpoint.npz")
    p.send_signal(signal.SIGKILL)
    p.communicate()
    from tostnp.__main__ import main
    assert main(["train", "vision", "--out", str(out), "--resume", "--stop-at",
                 str(load_checkpoint(str(out / "checkpoint"))[3]["step"] + 1)] + TINY) == 0


def test_convert_into_a_folder_being_trained_refused(runs, tmp_path):
    from tostnp.io.runlock import run_lock
    d = tmp_path / "busy"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from tostnp.io.runlock import run_lock\n"
        "with run_lock(sys.argv[1], 'train'):\n    print('held', flush=True); time.sleep(60)"),
        str(d)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "held"
        _refused("convert into a run folder held by another process",
                 ["convert", runs[2], d], str(d), "in use")
        with pytest.raises(OSError, match="in use"):
            with run_lock(str(d)):
                pass
    finally:
        holder.kill()
        holder.wait()
    with run_lock(str(d)):                               # released with its process
        pass


def test_temporaries_carry_their_writer_and_only_dead_ones_are_cleaned(tmp_path):
    from tostnp.io.atomic import clean_stale_temporaries, atomic_path
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        (tmp_path / f".tostnp-tmp-{live.pid}-abc123xy").mkdir()
        (tmp_path / f".tostnp-tmp-{dead.pid}-xyz_9abc").mkdir()
        mine = tmp_path / f".tostnp-tmp-{live.pid}-abc123xy" / "checkpoint.npz"
        theirs = tmp_path / f".tostnp-tmp-{dead.pid}-xyz_9abc" / "curves.png"
        mine.write_bytes(b"PK in flight")
        theirs.write_bytes(b"")                          # a 0-byte figure temporary
        # names a user may well have: never removed
        user = [tmp_path / ".notes.txt.tmp", tmp_path / f".backup.{dead.pid}-a.tmp",
                tmp_path / f".curves.png.{dead.pid}-xyz_9.tmp.png"]
        for u in user:
            u.write_bytes(b"user data")
        os.symlink(str(tmp_path / "elsewhere"), tmp_path / f".tostnp-tmp-{dead.pid}-linklink")
        removed = clean_stale_temporaries(tmp_path)
        assert removed == [str(theirs)] and mine.exists()
        assert not theirs.parent.exists()                # its folder, now empty, goes too
        assert all(u.read_bytes() == b"user data" for u in user)
        assert os.path.islink(tmp_path / f".tostnp-tmp-{dead.pid}-linklink")
    finally:
        live.kill()
        live.wait()
    with atomic_path(tmp_path / "f.txt") as tmp:
        assert os.path.basename(os.path.dirname(tmp)).startswith(f".tostnp-tmp-{os.getpid()}-")
        assert clean_stale_temporaries(tmp_path, "f.txt") == []    # ours, in flight: kept
        open(tmp, "w").write("x")
    assert (tmp_path / "f.txt").read_text() == "x"
    assert not [e for e in os.listdir(tmp_path) if e.startswith(f".tostnp-tmp-{os.getpid()}")]


# ---------------------------------------------------------------------------------------------
# 3. no silent overwrite
# ---------------------------------------------------------------------------------------------
def test_existing_run_needs_resume_or_overwrite(runs, tmp_path):
    import shutil
    out = str(tmp_path / "v")
    shutil.copytree(runs[0], out)
    before = open(os.path.join(out, "checkpoint.npz"), "rb").read()
    _refused("train vision into an existing run without --resume/--overwrite",
             ["train", "vision", "--out", out] + TINY, out, "--resume", "--overwrite",
             cap=2 << 30)
    assert open(os.path.join(out, "checkpoint.npz"), "rb").read() == before
    _refused("train --resume --overwrite", ["train", "vision", "--out", out, "--resume",
                                             "--overwrite"] + TINY, "give one of them")
    from tostnp.__main__ import main
    assert main(["train", "vision", "--out", out, "--overwrite", "--steps", "2", "--seed",
                 "5"] + TINY) == 0
    assert load_checkpoint(os.path.join(out, "checkpoint"))[1]["train"]["seed"] == 5


def test_convert_never_replaces_a_checkpoint(runs, tmp_path):
    d = tmp_path / "imp"
    d.mkdir()
    npz = d / "checkpoint.npz"
    npz.write_bytes(b"precious")                          # no .json beside it
    _refused("convert import onto a folder holding only checkpoint.npz",
             ["convert", runs[2], d], str(d), "already holds a checkpoint", "--overwrite")
    assert npz.read_bytes() == b"precious"
    code, *_ = _capped(["convert", runs[2], d, "--overwrite"])
    assert code == 0 and npz.read_bytes() != b"precious"
    st = tmp_path / "x.safetensors"
    st.write_bytes(b"precious")
    _refused("convert export onto an existing .safetensors", ["convert", runs[0], st],
             str(st), "--overwrite")
    assert st.read_bytes() == b"precious"


def test_resume_options_refused_or_applied(runs, tmp_path):
    import shutil
    out = str(tmp_path / "v")
    shutil.copytree(runs[0], out)
    for opt, val in (("--steps", "9"), ("--lr", "0.5"), ("--width", "16"), ("--data", "mnist"),
                     ("--seed", "3"), ("--batch-size", "8")):
        _refused(f"train --resume {opt} {val} (differs from the checkpoint)",
                 ["train", "vision", "--out", out, "--resume", opt, val, "--no-progress"], opt,
                 "differs from the checkpoint's", cap=2 << 30)
    _refused("train --resume --epochs 3", ["train", "vision", "--out", out, "--resume",
                                           "--epochs", "3"] + TINY, "--epochs")
    _refused("train --resume --stop-at 1 (checkpoint at step 2)",
             ["train", "vision", "--out", out, "--resume", "--stop-at", "1"] + TINY,
             "--stop-at 1", "step 2", cap=2 << 30)
    from tostnp.__main__ import main       # the same values, and the applied options: accepted
    assert main(["train", "vision", "--out", out, "--resume", "--steps", "4", "--width", "8",
                 "--stop-at", "3", "--checkpoint-every", "1"] + TINY) == 0
    assert load_checkpoint(os.path.join(out, "checkpoint"))[3]["step"] == 3


# ---------------------------------------------------------------------------------------------
# 4. no silent wrong answers
# ---------------------------------------------------------------------------------------------
def _tiny_lm():
    from tostnp import backend
    from tostnp.models import get_lm_config, lm_init
    cfg = get_lm_config("tiny-char", vocab_size=11, width=16, depth=2, num_heads=2,
                        block_size=16)
    return cfg, lm_init(cfg, backend.RNG(1), backend.get_xp("cpu"))


@pytest.mark.parametrize("mixer", ["tssa", "softmax"])
def test_tiny_temperature_is_the_greedy_continuation(mixer):
    from dataclasses import replace
    from tostnp import backend
    from tostnp.models import lm_generate, lm_init
    cfg, _ = _tiny_lm()
    cfg = replace(cfg, mixer=mixer).validate()
    params = lm_init(cfg, backend.RNG(1), backend.get_xp("cpu"))
    ids = np.array([[1, 2, 3]])
    greedy = lm_generate(params, cfg, ids, 20, temperature=0)
    # the greedy path, by an independent loop: argmax of the full forward's last logits
    from tostnp.models import lm_forward
    seq = ids
    for _ in range(20):
        logits, _ = lm_forward(seq[:, -cfg.block_size:], params, cfg)
        seq = np.concatenate([seq, np.argmax(logits[:, -1], axis=-1)[:, None]], axis=1)
    np.testing.assert_array_equal(greedy, seq)
    for t in (1e-300, 1e-30, 5e-324):
        np.testing.assert_array_equal(lm_generate(params, cfg, ids, 20, temperature=t), greedy)


@pytest.mark.parametrize("bad,needle", [
    (dict(temperature=float("nan")), "temperature"), (dict(temperature=float("inf")),
                                                      "temperature"),
    (dict(temperature=-1e-3), "temperature"), (dict(ids=[[-1, 2]]), "prompt_ids"),
    (dict(ids=[[1, 11]]), "prompt_ids"), (dict(ids=[[1.0, 2.0]]), "prompt_ids"),
])
def test_lm_generate_refuses_bad_input(bad, needle):
    from tostnp.models import lm_generate
    cfg, params = _tiny_lm()
    ids = np.asarray(bad.pop("ids", [[1, 2]]))
    with pytest.raises(ValueError, match=needle):
        lm_generate(params, cfg, ids, 3, **bad)


def test_vision_predict_refuses_nan_images():
    from tostnp import backend
    from tostnp.models import get_vision_config, vision_init, vision_predict
    cfg = get_vision_config("tiny-digits", width=8, depth=1, num_heads=2)
    params = vision_init(cfg, backend.RNG(0), backend.get_xp("cpu"))
    x = np.zeros((3, 8, 8, 1), np.float32)
    assert vision_predict(params, x, cfg).shape == (3,)
    for v in (np.nan, np.inf):
        x[1, 2, 3, 0] = v
        with pytest.raises(ValueError, match="images"):
            vision_predict(params, x, cfg)


def test_sample_at_tiny_temperature_equals_greedy(runs, capsys):
    from tostnp.__main__ import main
    outs = []
    for t in ("0", "1e-300"):
        assert main(["sample", "--checkpoint", runs[1], "--prompt", "hel", "--length", "30",
                     "--temperature", t]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1]


# ---------------------------------------------------------------------------------------------
# the estimates themselves, against independent counts
# ---------------------------------------------------------------------------------------------
def test_param_lower_bound_never_exceeds_the_built_model():
    """The refusal 'config declares more than the file holds' must never hit a real model:
    the bound is compared with the parameters init actually makes."""
    from dataclasses import replace
    from tostnp import backend
    from tostnp.models import VISION_CONFIGS, LM_CONFIGS, vision_init, lm_init
    from tostnp.models.memory import param_lower_bound
    xp = backend.get_xp("cpu")
    count = lambda p: sum(int(np.prod(a.shape)) for a in p.values())   # noqa: E731
    for name in ("tiny-digits", "tiny-mnist", "T"):
        base = VISION_CONFIGS[name]
        for cfg in (base, replace(base, num_registers=4), replace(base, pool="mean"),
                    replace(base, mixer="softmax"), replace(base, stem="linear", pos="learned")):
            n = count(vision_init(cfg.validate(), backend.RNG(0), xp))
            assert 0.75 * n <= param_lower_bound("vision", cfg) <= n, (name, cfg)
    base = LM_CONFIGS["tiny-char"]
    for cfg in (base, replace(base, mixer="softmax"), replace(base, mixer="tssa-uniform"),
                replace(base, block_size=512, vocab_size=300)):
        n = count(lm_init(cfg.validate(), backend.RNG(0), xp))
        assert 0.75 * n <= param_lower_bound("lm", cfg) <= n, cfg


def test_json_depth_against_the_parsed_structure():
    from tostnp.io.limits import json_depth, loads_json

    def depth(v):                                   # the nesting of the parsed value
        if isinstance(v, dict):
            return 1 + max((depth(x) for x in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(x) for x in v), default=0)
        return 0
    rng = np.random.default_rng(0)

    def build(d):
        if d == 0:
            leaves = ["x", '[{"]', 3, None, '"q" ]]', "\\", []]
            return leaves[int(rng.integers(len(leaves)))]
        return [build(d - 1), "a]"] if rng.random() < 0.5 else {"k[": build(d - 1), "z": 1}
    for d in range(0, 30):
        v = build(d)
        raw = json.dumps(v).encode()
        assert json_depth(raw) == depth(v)
        assert loads_json(raw, "x") == json.loads(raw)
    with pytest.raises(ValueError, match="nested 65 levels"):
        loads_json(b"[" * 65 + b"]" * 65, "x")


def test_max_memory_gb_lowers_the_budget(runs):
    _refused("evaluate --max-memory-gb 0.00001 (LM run)", ["evaluate", "--checkpoint", runs[1],
             "--max-memory-gb", "0.00001"], "0.01 MB of memory available", "--max-memory-gb")
