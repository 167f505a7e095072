"""A training batch in shards on threads (tostnp.train.shards): the same loss and gradients as
the whole batch, only where it is allowed, errors that reach the caller, and runs that repeat."""
import numpy as np
import pytest

from tostnp import backend
from tostnp.backend import kernels, tuning
from tostnp.data import CharTokenizer, load_digits_split
from tostnp.models import get_lm_config, get_vision_config
from tostnp.models.configs import SeqConfig
from tostnp.train import shard_workers, shards
from tostnp.train.loop import TrainConfig, train
from tostnp.train.tasks import LMTask, SeqTask, VisionTask

_TEXT = "the quick brown fox jumps over the lazy dog. " * 20


@pytest.fixture
def any_size(monkeypatch):
    """Shard the tiny test models too."""
    monkeypatch.setattr(tuning, "SHARD_MIN_ELEMENTS", 1)
    monkeypatch.setattr(tuning, "SHARD_MIN_ELEMENTS_FORKED", 1)


def _lm(dtype, batch=7):
    tok = CharTokenizer(_TEXT)
    ids = tok.encode(_TEXT)
    cfg = get_lm_config("tiny-char", vocab_size=tok.vocab_size, block_size=8, width=16, depth=2,
                        num_heads=2, mlp_ratio=2, layer_scale_init=1.0)
    return LMTask(cfg, ids[:800], ids[800:], tok, batch_size=batch, seed=0, dtype=dtype)


def _vision(dtype, batch=7, **over):
    Xtr, ytr, Xte, yte = load_digits_split()
    cfg = get_vision_config("tiny-digits", width=16, depth=2, num_heads=2, mlp_ratio=2, **over)
    return VisionTask(cfg, (Xtr[:40], ytr[:40], Xte[:20], yte[:20]), batch_size=batch, seed=0,
                      dtype=dtype)


def _seq(dtype, batch=7):
    g = np.random.default_rng(0)
    X, y = g.integers(0, 5, (30, 12)), g.integers(0, 2, 30)
    cfg = SeqConfig(in_dim=5, max_len=12, width=16, depth=2, num_heads=2)
    return SeqTask(cfg, (X[:20], y[:20], X[20:], y[20:]), one_hot_vocab=5, batch_size=batch,
                   seed=0, dtype=dtype)


def _step(task, threads, rows=None):
    """One step's (loss, grads, extra); ``rows`` (a list) receives the rows of each call of the
    model's loss_and_grads."""
    params = task.init_params(backend.RNG(1))
    batch = task.next_batch()
    if rows is not None:
        real = task._loss_and_grads

        def spy(params, *arrays):
            rows.append(arrays[0].shape[0])
            return real(params, *arrays)
        task._loss_and_grads = spy
    with backend.threads(threads):
        loss, grads, extra = task.loss_and_grads(params, batch)
    return float(loss), grads, {k: float(v) for k, v in extra.items()}


@pytest.mark.parametrize("make", [_lm, _vision, _seq], ids=["lm", "vision", "seq"])
@pytest.mark.parametrize("threads", [2, 3])
def test_shards_give_the_whole_batch_loss_and_gradients(any_size, make, threads):
    """B = 7 rows on 2 or 3 threads: shards of unequal size, weighted by their size. In float64
    the loss, every gradient and the accuracy equal the unsharded step to rounding."""
    rows1, rows = [], []
    l1, g1, e1 = _step(make(np.float64), 1, rows1)
    ln, gn, en = _step(make(np.float64), threads, rows)
    assert rows1 == [7] and sorted(rows) == ([3, 4] if threads == 2 else [2, 2, 3])
    assert ln == pytest.approx(l1, rel=1e-12)
    assert g1.keys() == gn.keys()
    for k in g1:
        scale = np.abs(g1[k]).max() + 1e-300
        assert np.abs(gn[k] - g1[k]).max() / scale < 1e-11, k
        assert gn[k].dtype == g1[k].dtype and gn[k].shape == g1[k].shape, k
    assert en == e1


def test_shards_run_on_the_threads_with_one_blas_thread_each(any_size, monkeypatch):
    """Each shard runs on its own thread with NumPy's BLAS and the kernels on one thread; the
    counts come back afterwards (the shards on threads: on Linux they run in worker processes,
    tests/test_shard_workers.py)."""
    import threading
    monkeypatch.setattr(tuning, "SHARD_PROCESSES", False)
    from threadpoolctl import threadpool_info
    seen = []
    task = _lm(np.float32, batch=6)
    real = task._loss_and_grads

    def spy(params, ids, targets):
        blas = [i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas" and "numpy" in i["filepath"]]
        seen.append((threading.get_ident(), ids.shape[0], kernels.get_threads(), blas))
        return real(params, ids, targets)
    monkeypatch.setattr(task, "_loss_and_grads", spy)
    _step(task, 2)
    assert sorted(s[1] for s in seen) == [3, 3]
    assert len({s[0] for s in seen}) == 2
    assert all(s[2] == 1 and s[3] == [1] for s in seen), seen
    with backend.threads(2):
        assert kernels.get_threads() == 2
        assert [i["num_threads"] for i in threadpool_info()
                if i["user_api"] == "blas" and "numpy" in i["filepath"]] == [2]


@pytest.fixture(autouse=True)
def no_workers_left():
    """Each test's shard worker processes end with it."""
    yield
    shard_workers.close_workers()


def test_no_shards_on_one_thread_on_the_plain_path_or_for_small_batches(monkeypatch):
    monkeypatch.setattr(tuning, "SHARD_PROCESSES", False)           # the limit of threads
    big = tuning.SHARD_MIN_ELEMENTS
    assert shards.shard_count(np, {}, 64, big) == 1                 # kernels on one thread
    with backend.threads(2):
        assert shards.shard_count(np, {}, 64, big) == 2
        assert shards.shard_count(np, {}, 1, 10 * big) == 1         # one row: whole
        assert shards.shard_count(np, {}, 2, big // 2) == 1         # shards under the limit
        assert shards.shard_count(np, {"bn.running_mean": None}, 64, big) == 1
        old = backend.set_fast(False)
        try:
            assert shards.shard_count(np, {}, 64, big) == 1         # the plain path: whole
        finally:
            backend.set_fast(old)
    import array_api_strict as xps
    with backend.threads(2):
        assert shards.shard_count(xps, {}, 64, big) == 1


def test_batch_statistics_are_never_sharded(any_size, monkeypatch):
    """The conv stem's BatchNorm couples the images of a batch: its step runs whole (one call,
    the whole batch), and its running statistics move exactly as on one thread."""
    calls = []
    task = _vision(np.float64, batch=6, stem="conv", pos="fourier", patch_size=2)
    real = task._loss_and_grads

    def spy(params, X, y):
        calls.append(X.shape[0])
        return real(params, X, y)
    monkeypatch.setattr(task, "_loss_and_grads", spy)
    params = task.init_params(backend.RNG(1))
    batch = task.next_batch()
    state = [k for k in params if k.endswith("running_mean")]
    assert state
    before = {k: params[k].copy() for k in state}
    with backend.threads(2):
        task.loss_and_grads(params, batch)
    assert calls == [6]
    assert all(not np.array_equal(before[k], params[k]) for k in state)


def test_an_error_in_a_shard_reaches_the_caller(any_size, monkeypatch):
    """B = 5 on 2 threads: the shard of 3 rows (on the pool's thread) raises; the error reaches
    the caller and the thread counts come back."""
    task = _lm(np.float32, batch=5)
    real = task._loss_and_grads

    def fails_on_three(params, ids, targets):
        if ids.shape[0] == 3:
            raise FloatingPointError("the shard of 3 rows failed")
        return real(params, ids, targets)
    monkeypatch.setattr(task, "_loss_and_grads", fails_on_three)
    with pytest.raises(FloatingPointError, match="3 rows failed"):
        _step(task, 2)
    assert kernels.get_threads() == 1


def test_sharded_training_repeats_exactly_and_follows_one_thread(any_size, tmp_path):
    """Two runs on 2 threads are bit-identical; on 1 thread the losses agree to float32
    rounding (the shards change the order of the sums only)."""
    tcfg = TrainConfig(steps=5, batch_size=6, lr=1e-2, warmup_steps=1, eval_every=5,
                       log_every=1, seed=2)
    runs = {}
    for name, threads in (("a", 2), ("b", 2), ("one", 1)):
        with backend.threads(threads):
            out = train(_lm(np.float32, batch=6), tcfg, str(tmp_path / name), progress=False,
                        plot=False)
        runs[name] = [r["loss"] for r in out["metrics"] if r.get("kind") == "train"]
    assert len(runs["a"]) == 5
    assert runs["a"] == runs["b"]
    np.testing.assert_allclose(runs["a"], runs["one"], rtol=1e-4)


def test_sharded_resume_is_bit_identical(any_size, tmp_path):
    """On 2 threads, in shards: stopped at step 3 and resumed equals the run that went through."""
    tcfg = dict(steps=6, batch_size=6, lr=1e-2, warmup_steps=1, eval_every=3, log_every=1,
                seed=2)
    with backend.threads(2):
        full = train(_lm(np.float32, batch=6), TrainConfig(**tcfg), str(tmp_path / "full"),
                     progress=False, plot=False)
        train(_lm(np.float32, batch=6), TrainConfig(**tcfg, stop_at=3), str(tmp_path / "part"),
              progress=False, plot=False)
        res = train(_lm(np.float32, batch=6), TrainConfig(**tcfg), str(tmp_path / "part"),
                    resume=True, progress=False, plot=False)
    assert res["step"] == 6
    losses = [[r.get("loss") for r in out["metrics"] if r.get("kind") == "train"]
              for out in (full, res)]
    assert losses[0][3:] == losses[1][-3:]
    for k, v in full["params"].items():
        np.testing.assert_array_equal(v, res["params"][k], err_msg=k)

