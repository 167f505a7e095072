"""Training speed: ``python -m tostnp bench --train``.

Times one training step of each default model, as :func:`tostnp.train.loop.train` runs it (data on
the device, forward, loss, backward, clipping, learning-rate schedule, loss to the host, AdamW),
on synthetic data of the CLI's default batch shapes, and one ToST block forward+backward
(+ AdamW on its parameters) at B = 4, N = 4096, C = 384, h = 6:

* steps per second and items per second (images or tokens);
* the phase split of a step: forward (model + loss), backward (loss + model), optimiser
  (clipping + AdamW); a step that runs its batch in shards on several threads, as training does
  (:mod:`tostnp.train.shards`), reports its forward and backward together, in "fwd";
* minor page faults per step (``resource.getrusage().ru_minflt``): each one is a page of memory
  the kernel had to map and zero, i.e. fresh memory the step touched (n/a without ``resource``:
  Windows);
* peak memory of one step, after the timed rounds (:mod:`tostnp.bench.peaks`): the bytes NumPy
  allocated at the step's high-water mark above what existed before it (tracemalloc:
  activations, gradients, temporaries; not the parameters or the optimiser state), and the
  process's peak RSS during the step (everything the process holds: interpreter, libraries,
  every benchmark's model, freed memory the allocator kept).

Timing: warm-up steps, then ``rounds`` rounds; in each round every benchmark runs ``k`` steps
(``k`` chosen from the warm-up so a round takes about ``round_s`` seconds) and the per-step mean
of the round is one sample; the median over rounds is reported. With ``compare_plain`` every
round also runs each benchmark with the NumPy fast path switched off
(:func:`tostnp.backend.set_fast`), and with several ``threads`` counts each count is a variant
too, so all of them are interleaved and their ratios are meaningful on a busy machine.
"""
from __future__ import annotations

import math
import statistics
import time

import numpy as np

from .. import backend
from .peaks import peak_rss_bytes, reset_peak_rss, traced_peak_bytes, workers_private_bytes

__all__ = ["TRAIN_BENCHES", "run_train_bench", "train_anatomy", "format_train_report"]

TRAIN_BENCHES = ("lm", "vision", "block")
BLOCK_SHAPE = dict(B=4, N=4096, C=384, h=6)


def _minflt() -> float:
    """Minor page faults of this process so far (NaN where ``resource`` does not exist)."""
    try:
        import resource
    except ImportError:
        return float("nan")
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _Step:
    """A training step split into phases: fwd() -> state, bwd(state) -> grads, opt(grads);
    ``shards``: a one-element list, the shards of the last step (1: the batch whole);
    ``params``: the parameter dict the step reads (for :func:`train_anatomy`)."""

    def __init__(self, name, desc, items, unit, fwd, bwd, opt, shards=None, params=None):
        self.name, self.desc, self.items, self.unit = name, desc, items, unit
        self.fwd, self.bwd, self.opt, self.params = fwd, bwd, opt, params
        self.shards = [1] if shards is None else shards

    def run(self, times=None):
        t0 = time.perf_counter()
        state = self.fwd()
        t1 = time.perf_counter()
        grads = self.bwd(state)
        t2 = time.perf_counter()
        self.opt(grads)
        t3 = time.perf_counter()
        if times is not None:
            times[0] += t1 - t0
            times[1] += t2 - t1
            times[2] += t3 - t2


def _optimiser(params, tcfg):
    """The training loop's optimizer and update (:func:`tostnp.train.loop.update_step`: clip,
    schedule, loss to the host and its check, AdamW), cycling through the schedule."""
    from ..train.loop import make_optimizer, update_step
    opt = make_optimizer(params, tcfg)
    count = [0]

    def step(grads_loss):
        grads, loss = grads_loss
        update_step(opt, grads, loss, count[0] % tcfg.steps, tcfg)
        count[0] += 1
    return opt, step


def _classifier_phases(xp, opt, batch, forward, backward, row_elements):
    """fwd/bwd phases of a softmax-cross-entropy training step: ``batch() -> (inputs, labels)``,
    ``forward(inputs, params) -> (logits, cache)``, ``backward(dlogits, cache) -> grads``;
    ``row_elements``: tokens x width of one row's activations (for the shards, as in
    :mod:`tostnp.train.tasks`). Returns (fwd, bwd, shards)."""
    from ..nn import layers as L
    from ..train.shards import shard_count, sharded
    shards = [1]

    def whole(params, inputs, labels):            # forward and backward of one shard
        with backend.backward_ahead():            # as the models' *_loss_and_grads
            logits, cache = forward(inputs, params)
        loss, c_loss = L.softmax_cross_entropy_forward(logits, labels)
        dlogits, _ = L.softmax_cross_entropy_backward(xp.ones_like(loss), c_loss)
        return loss, backward(dlogits, cache), None

    def fwd():
        inputs, labels = batch()
        shards[0] = shard_count(xp, opt.params, inputs.shape[0], row_elements)
        if shards[0] > 1:                         # forward and backward together, in shards
            loss, grads, _ = sharded(whole, opt.params, (inputs, labels), xp,
                                     row_elements=row_elements)
            return None, (grads, loss)
        with backend.backward_ahead():
            logits, cache = forward(inputs, opt.params)
        loss, c_loss = L.softmax_cross_entropy_forward(logits, labels)
        return loss, c_loss, cache

    def bwd(state):
        if state[0] is None:
            return state[1]
        loss, c_loss, cache = state
        dlogits, _ = L.softmax_cross_entropy_backward(xp.ones_like(loss), c_loss)
        return backward(dlogits, cache), loss

    return fwd, bwd, shards


def _lm_step(xp, dtype, quick, seed):
    from ..models import get_lm_config, lm_init
    from ..models.configs import DEFAULT_PRESET
    from ..models.lm import lm_forward, lm_backward
    from ..train.defaults import default_train_config, default_data_config
    # the default LM: its vocabulary is the default tokenizer's (BPE: d.vocab_size symbols)
    d = default_data_config("lm")
    V = d.vocab_size if d.tokenizer == "bpe" else get_lm_config().vocab_size
    cfg = get_lm_config(vocab_size=V,
                        **({"width": 16, "depth": 1, "block_size": 16} if quick else {}))
    tcfg = default_train_config("lm")
    B, T = (2 if quick else tcfg.batch_size), cfg.block_size
    opt, opt_step = _optimiser(lm_init(cfg, backend.RNG(seed), xp, dtype), tcfg)
    host = np.random.default_rng(seed)

    def batch():
        ids = host.integers(0, cfg.vocab_size, size=(B, T + 1))
        return (backend.from_host(xp, ids[:, :-1], dtype=xp.int64),
                backend.from_host(xp, ids[:, 1:], dtype=xp.int64))

    fwd, bwd, shards = _classifier_phases(xp, opt, batch, lambda x, p: lm_forward(x, p, cfg),
                                          lm_backward, T * cfg.width)
    return _Step("lm", f"LM {DEFAULT_PRESET['lm']} train step ({B}x{T} tokens, vocabulary {V})",
                 B * T, "tokens", fwd, bwd, opt_step, shards, opt.params)


def _vision_step(xp, dtype, quick, seed):
    from ..models import get_vision_config, vision_init
    from ..models.vision import vision_forward, vision_backward
    from ..train.defaults import default_train_config
    from ..data import load_digits_split
    cfg = get_vision_config(**({"width": 16, "depth": 1} if quick else {}))
    # the preset's schedule over the digits training images (the step's time does not depend on it)
    tcfg = default_train_config("vision", n_train=len(load_digits_split()[0]))
    B = 4 if quick else tcfg.batch_size
    opt, opt_step = _optimiser(vision_init(cfg, backend.RNG(seed), xp, dtype), tcfg)
    host = np.random.default_rng(seed)
    S, Cin = cfg.image_size, cfg.in_chans

    def batch():
        return (backend.from_host(xp, host.random((B, S, S, Cin)), dtype=dtype),
                backend.from_host(xp, host.integers(0, cfg.num_classes, size=B),
                                  dtype=xp.int64))

    fwd, bwd, shards = _classifier_phases(xp, opt, batch,
                                          lambda x, p: vision_forward(x, p, cfg), vision_backward,
                                          cfg.block_tokens * cfg.width)
    return _Step("vision", f"vision tiny-digits train step ({B} images)", B, "images",
                 fwd, bwd, opt_step, shards, opt.params)


def _block_step(xp, dtype, quick, seed):
    from ..nn.block import tost_block_init, tost_block_forward, tost_block_backward
    from ..train.loop import TrainConfig
    s = dict(B=1, N=64, C=24, h=2) if quick else BLOCK_SHAPE
    B, N, C, h = s["B"], s["N"], s["C"], s["h"]
    rng = backend.RNG(seed)
    opt, opt_step = _optimiser(tost_block_init(rng, xp, C, h, dtype=dtype), TrainConfig())
    x = rng.normal(xp, (B, N, C), dtype)
    dy = rng.normal(xp, (B, N, C), dtype)

    def fwd():
        with backend.backward_ahead():
            y, cache = tost_block_forward(x, opt.params, h)
        return y, cache

    def bwd(state):
        y, cache = state
        _, grads = tost_block_backward(dy, cache)
        return grads, xp.sum(y[0, 0, :])

    return _Step("block", f"ToST block fwd+bwd+AdamW, B{B} N{N} C{C} h{h}", B * N, "tokens",
                 fwd, bwd, opt_step, params=opt.params)


_BUILDERS = {"lm": _lm_step, "vision": _vision_step, "block": _block_step}


def run_train_bench(benches=TRAIN_BENCHES, *, dtype: str = "float32", rounds: int = 5,
                    round_s: float = 1.0, warmup: int = 2, quick: bool = False,
                    compare_plain: bool = False, threads=None, seed: int = 0,
                    progress: bool = True) -> dict:
    """Measure the training steps ``benches`` (names from :data:`TRAIN_BENCHES`) on the CPU.

    ``threads``: None (the BLAS setting in force) or a list of BLAS thread counts, each run as
    its own interleaved variant (to see where a second thread pays off).
    Returns {"<name>[@<n>t][:plain]": {"desc", "items", "unit", "threads", "step_s",
    "steps_per_s", "items_per_s", "forward_s", "backward_s", "optimiser_s",
    "minflt_per_step", "peak_traced_mb", "peak_rss_mb", "rounds", "k", "shards"}} plus
    "ratio_fast_plain" per fast entry when ``compare_plain``.
    """
    from tqdm import tqdm
    xp = backend.get_xp("cpu")
    dt = getattr(xp, dtype)
    counts = list(threads) if threads else [None]
    variants = [(name, True, n) for name in benches for n in counts]
    if compare_plain:
        variants += [(name, False, n) for name in benches for n in counts]
    steps = {}
    for name, fast, n in variants:
        old = backend.set_fast(fast)
        try:
            steps[(name, fast, n)] = _BUILDERS[name](xp, dt, quick, seed)
        finally:
            backend.set_fast(old)

    def run(key, k, times=None):
        old = backend.set_fast(key[1])
        try:
            with backend.threads(key[2]):
                for _ in range(k):
                    steps[key].run(times)
        finally:
            backend.set_fast(old)

    def label(key):
        return key[0] + ("" if key[2] is None else f"@{key[2]}t") + ("" if key[1] else ":plain")

    # warm-up, and k per round from the warm-up's speed
    ks = {}
    for key in steps:
        run(key, warmup)
        t0 = time.perf_counter()
        run(key, 1)
        ks[key] = max(1, min(200, int(round_s / max(time.perf_counter() - t0, 1e-6))))
    samples = {key: [] for key in steps}
    order = list(steps)
    bar = tqdm(total=rounds * len(order), desc="bench --train", disable=not progress)
    for rnd in range(rounds):
        for key in (order if rnd % 2 == 0 else order[::-1]):
            times = [0.0, 0.0, 0.0]
            f0 = _minflt()
            t0 = time.perf_counter()
            run(key, ks[key], times)
            wall = time.perf_counter() - t0
            faults = _minflt() - f0
            k = ks[key]
            samples[key].append((wall / k, times[0] / k, times[1] / k, times[2] / k,
                                 faults / k))
            bar.update(1)
    bar.close()
    # peak memory of one step of each, after the timed rounds (tracemalloc slows allocation)
    peaks = {}
    for key in order:
        reset_peak_rss()
        traced = traced_peak_bytes(lambda: run(key, 1))
        rss = peak_rss_bytes()                 # + the shard workers' own pages, if any
        peaks[key] = (traced / 2**20,
                      None if rss is None else (rss + workers_private_bytes()) / 2**20)
    out = {}
    for key, ss in samples.items():
        st = steps[key]
        med = lambda i: statistics.median(s[i] for s in ss)  # noqa: E731
        step_s, faults = med(0), med(4)
        out[label(key)] = {
            "desc": st.desc, "items": st.items, "unit": st.unit, "threads": key[2],
            "step_s": step_s,
            "steps_per_s": 1.0 / step_s, "items_per_s": st.items / step_s,
            "forward_s": med(1), "backward_s": med(2), "optimiser_s": med(3),
            "minflt_per_step": None if math.isnan(faults) else faults, "peak_traced_mb": peaks[key][0],
            "peak_rss_mb": peaks[key][1], "rounds": len(ss), "k": ks[key],
            "shards": st.shards[0]}
    if compare_plain:
        for name in benches:
            for n in counts:
                f, p = (name, True, n), (name, False, n)
                pairs = [a[0] / b[0] for a, b in zip(samples[f], samples[p])]
                out[label(f)]["ratio_fast_plain"] = \
                    out[label(f)]["step_s"] / out[label(p)]["step_s"]
                out[label(f)]["ratio_fast_plain_paired"] = statistics.median(pairs)
    if len(counts) > 1:
        for name in benches:
            base = (name, True, counts[0])
            for n in counts[1:]:
                key = (name, True, n)
                pairs = [a[0] / b[0] for a, b in zip(samples[key], samples[base])]
                out[label(key)][f"ratio_to_{counts[0]}t_paired"] = statistics.median(pairs)
    return out


def train_anatomy(benches=TRAIN_BENCHES, *, dtype: str = "float32", quick: bool = False,
                  seed: int = 0) -> dict:
    """Where each step's time goes (:func:`tostnp.bench.anatomy.step_anatomy`: its products
    with their shapes and time alone, the rest, NumPy and Python calls per step), on the fast
    path and the thread count in force: {name: anatomy}."""
    from .anatomy import step_anatomy
    xp = backend.get_xp("cpu")
    out = {}
    for name in benches:
        st = _BUILDERS[name](xp, getattr(xp, dtype), quick, seed)
        for _ in range(2):
            st.run()
        out[name] = step_anatomy(st.run, st.params)
    return out


def format_train_report(res: dict) -> str:
    lines = [f"{'training step':<52} {'steps/s':>8} {'items/s':>10} {'fwd ms':>8} "
             f"{'bwd ms':>8} {'opt ms':>8} {'faults/step':>11} {'peak MB':>8} {'RSS MB':>8}"]
    for key, r in res.items():
        label = r["desc"] + ("" if r.get("threads") is None else f", {r['threads']} thr") \
            + (" [plain]" if key.endswith(":plain") else "") \
            + (f", {r['shards']} shards" if r.get("shards", 1) > 1 else "")
        lines.append(f"{label:<52} {r['steps_per_s']:8.2f} {r['items_per_s']:10.0f} "
                     f"{r['forward_s'] * 1e3:8.1f} {r['backward_s'] * 1e3:8.1f} "
                     f"{r['optimiser_s'] * 1e3:8.1f} "
                     + ("        n/a " if r["minflt_per_step"] is None
                        else f"{r['minflt_per_step']:11.0f} ")
                     + f"{r['peak_traced_mb']:8.1f} "
                     + ("     n/a" if r["peak_rss_mb"] is None else f"{r['peak_rss_mb']:8.0f}"))
        if "ratio_fast_plain" in r:
            lines.append(f"{'':<4}fast path / plain path: {r['ratio_fast_plain']:.2f}x "
                         f"(paired median {r['ratio_fast_plain_paired']:.2f}x)")
        for k, v in r.items():
            if k.startswith("ratio_to_"):
                lines.append(f"{'':<4}step time / with {k[9:-8]} thread(s): {v:.2f}x "
                             "(paired median)")
    if any(r.get("shards", 1) > 1 for r in res.values()):
        lines.append("(a step in shards runs its forward and backward together: fwd ms holds "
                     "both, bwd ms is 0)")
    lines.append("(peak MB: what NumPy allocated at the step's high-water mark (tracemalloc); RSS MB: "
                 "the whole process's peak resident memory during the step)")
    return "\n".join(lines)
