"""A training batch's shards on forked worker processes (tostnp.train.shard_workers): the
numbers of the shards on threads bit for bit, workers that really are other processes, failures
that fall back to threads, no worker outliving its parent, and their memory counted."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tostnp import backend
from tostnp.backend import tuning
from tostnp.bench.peaks import traced_peak_bytes, workers_private_bytes
from tostnp.train import shard_workers, shards

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="shard workers are forked on Linux only")

from test_shards import _lm, _seq, _vision  # noqa: E402  (the tiny tasks of test_shards)


@pytest.fixture(autouse=True)
def small_shards(monkeypatch):
    """Shard the tiny test models too; no worker outlives a test; a failure in one test does
    not switch the workers off for the next."""
    monkeypatch.setattr(tuning, "SHARD_MIN_ELEMENTS", 1)
    monkeypatch.setattr(tuning, "SHARD_MIN_ELEMENTS_FORKED", 1)
    monkeypatch.setattr(shard_workers, "_broken", False)
    yield
    shard_workers.close_workers()


def _alive(pid) -> bool:
    """Is process ``pid`` running (a zombie, exited but not yet reaped by whoever inherited it,
    is not)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _steps(make, threads, processes, monkeypatch, n=3):
    """``n`` steps of a fresh task on the same parameters, each on its next batch; returns the
    (loss, grads, extra) of each and the worker pids seen after each."""
    monkeypatch.setattr(tuning, "SHARD_PROCESSES", processes)
    task = make(np.float64)
    params = task.init_params(backend.RNG(1))
    out, pids = [], []
    with backend.threads(threads):
        for _ in range(n):
            out.append(task.loss_and_grads(params, task.next_batch()))
            pids.append(shard_workers.worker_pids())
    shard_workers.close_workers()
    return out, pids


@pytest.mark.parametrize("make", [_lm, _vision, _seq], ids=["lm", "vision", "seq"])
@pytest.mark.parametrize("threads", [2, 3])
def test_workers_give_the_threads_numbers_bit_for_bit(make, threads, monkeypatch):
    """B = 7 in 2 or 3 shards of unequal size: the first step forks the workers, the next run
    in them (other processes, alive), and every loss, gradient and metric equals that of the
    shards on threads exactly."""
    forked, pids = _steps(make, threads, True, monkeypatch)
    threaded, none = _steps(make, threads, False, monkeypatch)
    assert all(p == [] for p in none)
    assert len(pids[0]) == threads - 1 and pids[0] == pids[1] == pids[2]
    assert os.getpid() not in pids[0]
    for (l1, g1, e1), (l2, g2, e2) in zip(forked, threaded):
        assert np.asarray(l1).dtype == np.asarray(l2).dtype and float(l1) == float(l2)
        assert g1.keys() == g2.keys()
        for k in g1:
            np.testing.assert_array_equal(g1[k], g2[k], err_msg=k)
            assert g1[k].dtype == g2[k].dtype
        assert {k: float(v) for k, v in e1.items()} == {k: float(v) for k, v in e2.items()}
    assert not any(_alive(p) for p in pids[0])         # closed and reaped


def test_one_step_of_the_workers_against_the_whole_batch(monkeypatch):
    """The workers' step against the unsharded step on one thread (an independent reference:
    no shards at all), float64, to rounding."""
    forked, pids = _steps(_lm, 2, True, monkeypatch, n=2)
    task = _lm(np.float64)
    params = task.init_params(backend.RNG(1))
    task.next_batch()
    loss, grads, _ = task.loss_and_grads(params, task.next_batch())      # 1 thread: whole
    assert pids[1] and float(forked[1][0]) == pytest.approx(float(loss), rel=1e-12)
    for k in grads:
        scale = np.abs(grads[k]).max() + 1e-300
        assert np.abs(forked[1][1][k] - grads[k]).max() / scale < 1e-11, k


def _fn_and_arrays(fail_in_worker=None):
    """A sharded function with a known answer: loss = mean of x, grads = {"w": sum of x},
    out = 2x; ``fail_in_worker`` (an exception) is raised by it in any process but this one."""
    parent = os.getpid()

    def fn(params, x):
        if fail_in_worker is not None and os.getpid() != parent:
            raise fail_in_worker
        return np.mean(x), {"w": params["w"] * 0 + x.sum(axis=0)}, 2 * x
    x = np.arange(24.0).reshape(8, 3)
    return fn, {"w": np.zeros(3)}, (x,)


def _sharded(fn, params, arrays):
    with backend.threads(2):
        return shards.sharded(fn, params, arrays, np, row_elements=1)


def test_a_worker_that_raises_falls_back_to_threads_with_a_warning():
    fn, params, arrays = _fn_and_arrays(fail_in_worker=FloatingPointError("in the worker"))
    x = arrays[0]
    _sharded(fn, params, arrays)                       # on threads; forks the worker
    assert len(shard_workers.worker_pids()) == 1
    with pytest.warns(RuntimeWarning, match="worker process failed"):
        loss, grads, out = _sharded(fn, params, arrays)
    assert loss == pytest.approx(x.mean()) and np.array_equal(grads["w"], x.sum(axis=0) / 2)
    assert np.array_equal(out, 2 * x)
    assert shard_workers.worker_pids() == [] and not shard_workers.available()


def test_an_error_in_the_parents_shard_is_raised_as_itself():
    """The first shard runs in the parent: its error reaches the caller with its type, after
    the worker has answered; the workers stay usable."""
    fn, params, arrays = _fn_and_arrays()
    parent, fail = os.getpid(), [False]

    def fails_in_the_parent_when_told(params, x):
        if fail[0] and os.getpid() == parent:
            raise FloatingPointError("the model failed")
        return fn(params, x)
    _sharded(fails_in_the_parent_when_told, params, arrays)
    pids = shard_workers.worker_pids()
    fail[0] = True
    with pytest.raises(FloatingPointError, match="model failed"):
        _sharded(fails_in_the_parent_when_told, params, arrays)
    fail[0] = False
    _, _, out = _sharded(fails_in_the_parent_when_told, params, arrays)
    assert shard_workers.worker_pids() == pids and np.array_equal(out, 2 * arrays[0])


def test_a_killed_worker_falls_back_to_threads():
    fn, params, arrays = _fn_and_arrays()
    x = arrays[0]
    _sharded(fn, params, arrays)
    (pid,) = shard_workers.worker_pids()
    os.kill(pid, signal.SIGKILL)
    with pytest.warns(RuntimeWarning, match="worker process failed"):
        loss, grads, out = _sharded(fn, params, arrays)
    assert loss == pytest.approx(x.mean()) and np.array_equal(out, 2 * x)
    assert not _alive(pid)


def test_a_worker_ignores_ctrl_c_and_sigterm():
    """Ctrl-C reaches the whole process group; the parent handles it (finishes the step, saves
    a checkpoint), so the worker goes on."""
    fn, params, arrays = _fn_and_arrays()
    _sharded(fn, params, arrays)
    (pid,) = shard_workers.worker_pids()
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    loss, _, out = _sharded(fn, params, arrays)       # no warning: the worker answered
    assert shard_workers.worker_pids() == [pid] and np.array_equal(out, 2 * arrays[0])


def test_no_worker_outlives_a_killed_parent(tmp_path):
    """A parent killed by SIGKILL between steps (no cleanup of its own) leaves no worker: the
    kernel closes its pipes and each worker exits."""
    code = textwrap.dedent("""
        import sys, time, numpy as np
        from tostnp import backend
        from tostnp.backend import tuning
        from tostnp.train import shard_workers, shards
        tuning.SHARD_MIN_ELEMENTS_FORKED = 1
        fn = lambda p, x: (np.mean(x), {"w": p["w"] + x.sum(0)}, None)
        with backend.threads(3):
            for _ in range(2):
                shards.sharded(fn, {"w": np.zeros(3)}, (np.ones((6, 3)),), np, row_elements=1)
        print(*shard_workers.worker_pids(), flush=True)
        time.sleep(60)
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(s) for s in p.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(q) for q in pids)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 10
    while any(_alive(q) for q in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(q) for q in pids)            # exited (their reaper may be slow)


def test_the_workers_memory_is_counted():
    """Each shard allocates a known 8 MB array and keeps it until it returns: the traced peak of
    a step run in workers counts both shards' (the worker's measured in the worker), and the
    worker's private pages include its array."""
    def fn(params, x):
        big = np.ones(1 << 20)                         # 8 MiB, held to the end of the shard
        return float(big[0]) * np.mean(x), {"w": params["w"] + x.sum(axis=0)}, None
    params, arrays = {"w": np.zeros(3)}, (np.ones((8, 3)),)
    _sharded(fn, params, arrays)                       # threads; forks the worker
    peak = traced_peak_bytes(lambda: _sharded(fn, params, arrays))
    assert shard_workers.worker_pids()
    assert peak >= 2 * 8 * 2**20
    assert workers_private_bytes() >= 8 * 2**20 * 0.9


def test_no_fork_allowed_falls_back_to_threads(monkeypatch):
    """Where fork fails (a sandbox, a process limit), the step's numbers come from the threads
    and one warning says so."""
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")
    monkeypatch.setattr(os, "fork", no_fork)
    fn, params, arrays = _fn_and_arrays()
    x = arrays[0]
    with pytest.warns(RuntimeWarning, match="cannot start"):
        _sharded(fn, params, arrays)
    loss, grads, out = _sharded(fn, params, arrays)
    assert loss == pytest.approx(x.mean()) and np.array_equal(out, 2 * x)
    assert shard_workers.worker_pids() == [] and not shard_workers.available()


def test_each_shard_runs_in_its_own_process_with_one_blas_thread(tmp_path, monkeypatch):
    """The first step of a shape runs its shards one after the other in this process; from the
    second on, the second shard runs in the worker, both with NumPy's BLAS and the fast path's
    kernels on one thread (each call writes a line to a file: the worker's list is its own)."""
    from threadpoolctl import threadpool_info
    from tostnp.backend import kernels
    log = tmp_path / "calls.txt"
    task = _lm(np.float32)
    real = task._loss_and_grads

    def spy(params, ids, targets):
        blas = [i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas" and "numpy" in i["filepath"]]
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {ids.shape[0]} {kernels.get_threads()} {blas}\n")
        return real(params, ids, targets)
    monkeypatch.setattr(task, "_loss_and_grads", spy)
    params = task.init_params(backend.RNG(1))
    with backend.threads(2):
        for _ in range(2):
            task.loss_and_grads(params, task.next_batch())
        assert kernels.get_threads() == 2
    lines = [ln.split(" ", 3) for ln in log.read_text().splitlines()]
    me = str(os.getpid())
    assert [(p == me, rows) for p, rows, _, _ in lines[:2]] == [(True, "3"), (True, "4")]
    assert sorted((p == me, rows) for p, rows, _, _ in lines[2:]) == [(False, "4"), (True, "3")]
    assert all(k == "1" and b == "[1]" for _, _, k, b in lines)
