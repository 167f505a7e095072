"""scaling: time and peak memory of one training step (forward + backward) against N.

The same one-block sequence model (:mod:`tostnp.models.seqcls`, width 64, 4 heads, batch 1,
random inputs) with each mixer; N doubles from 256. Time: one forward + backward (loss and all
gradients), warmed up, once per seed (mean ± sd over seeds; the seed draws inputs and weights).
Peak memory: the tracemalloc high-water mark of one such step (deterministic, measured once).

A size is run only when its estimated memory is below ``run_cap_gb`` (8 GB in the full run;
a smaller cap for a busy machine) and its predicted time per step below ``time_cap_s``. Where each mixer stops fitting in
``fit_gb`` (8 GB) is then extrapolated from the two largest measured sizes -- linearly for the
O(N)-memory mixers, by a + b N + c N^2 through the origin-free quadratic fit for softmax --
and reported as an estimate, never measured. ``flash`` is the point of the reviewers' remark:
softmax attention in O(N) memory, still O(N^2) time.
"""
from __future__ import annotations

import time

import numpy as np

from ..bench.peaks import traced_peak_bytes
from .common import fmt, savefig
from ..nn.mixers import MIXERS

NAME = "scaling"
QUESTION = ("Time and peak memory of a training step (forward+backward) against sequence length "
            "for every mixer, up to where each stops fitting in 8 GB.")
FULL = dict(mixers=list(MIXERS), sizes=[256 * 2 ** i for i in range(13)], width=64,
            num_heads=4, depth=1, batch=1, fit_gb=8.0, run_cap_gb=8.0, time_cap_s=30.0)
QUICK = dict(FULL, sizes=[16, 32], width=8, num_heads=2)

_QUADRATIC = {"softmax"}             # memory O(N^2); flash and the rest keep O(N)
_QUADRATIC_TIME = {"softmax", "flash"}


def estimate_bytes(mixer, s, N) -> int:
    """Rough peak memory of one training step: what decides whether a size is run."""
    from ..bench import estimate_bytes as layer_bytes
    per_block = layer_bytes("softmax" if mixer in _QUADRATIC else "tssa", s["batch"], N,
                            s["width"], s["num_heads"], 4)
    return int(s["depth"] * per_block)


def _setup(mixer, s, N, seed):
    from .. import backend
    from ..models.configs import SeqConfig
    from ..models.seqcls import seqcls_init, seqcls_loss_and_grads
    xp = backend.get_xp("cpu")
    cfg = SeqConfig(in_dim=16, max_len=N, num_classes=2, width=s["width"], depth=s["depth"],
                    num_heads=s["num_heads"], mixer=mixer, mlp_ratio=2)
    params = seqcls_init(cfg, backend.RNG(seed), xp)
    g = np.random.default_rng(seed)
    X = backend.from_host(xp, g.standard_normal((s["batch"], N, 16)), dtype=xp.float32)
    y = xp.asarray(g.integers(0, 2, s["batch"]))
    return lambda: seqcls_loss_and_grads(params, X, y, cfg)


def fit_limit(points, quadratic, limit_bytes):
    """The N where the extrapolated peak memory reaches ``limit_bytes``, from the two largest
    measured (N, bytes) points: bytes = a + b N (linear) or a + c N^2 (quadratic)."""
    (n1, m1), (n2, m2) = points[-2:]
    if quadratic:
        c = (m2 - m1) / (n2 ** 2 - n1 ** 2)
        a = m2 - c * n2 ** 2
        return float(np.sqrt(max(limit_bytes - a, 0) / c)) if c > 0 else float("inf")
    b = (m2 - m1) / (n2 - n1)
    a = m2 - b * n2
    return float((limit_bytes - a) / b) if b > 0 else float("inf")


def run(rec, s, seeds):
    limits = {}
    for mixer in s["mixers"]:
        last_t, measured = None, []
        for N in s["sizes"]:
            est = estimate_bytes(mixer, s, N)
            base = dict(mixer=mixer, N=N, est_gb=est / 1e9)
            if est > s["fit_gb"] * 1e9:
                rec.add({**base, "status": f"over {s['fit_gb']:g} GB (estimated)"})
                break
            if est > s["run_cap_gb"] * 1e9:
                rec.add({**base, "status": f"not run: estimated {est / 1e9:.1f} GB > the "
                                           f"{s['run_cap_gb']:g} GB cap of this shared machine"})
                continue
            if last_t is not None:
                grow = (N / measured[-1][0]) ** (2 if mixer in _QUADRATIC_TIME else 1)
                if last_t * grow > s["time_cap_s"]:
                    rec.add({**base, "status": f"not run: predicted {last_t * grow:.0f} s per "
                                               f"step > {s['time_cap_s']:g} s"})
                    break
            peak = {}

            def one(seed, mixer=mixer, N=N):
                step = _setup(mixer, s, N, seed)
                if not peak:
                    step()                                          # warm-up
                    peak["bytes"] = traced_peak_bytes(step)
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                return {"step_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                        "peak_mb": peak["bytes"] / 2**20}
            e = rec.condition(one, seeds, desc=f"{NAME} {mixer} N={N}", status="measured",
                              **base)
            last_t = e["mean"]["cpu_s"]
            measured.append((N, e["mean"]["peak_mb"] * 2**20))
        if len(measured) >= 2:
            limits[mixer] = fit_limit(measured, mixer in _QUADRATIC, s["fit_gb"] * 1e9)
    rec.data["max_N_in_fit_gb_extrapolated"] = limits


def table(data) -> str:
    s = data["settings"]
    sizes = sorted({r["N"] for r in data["results"]})
    mixers = s["mixers"]
    rows = ["| N | " + " | ".join(mixers) + " |", "|---:|" + "---|" * len(mixers)]
    for n in sizes:
        cells = []
        for m in mixers:
            e = [r for r in data["results"] if r["mixer"] == m and r["N"] == n]
            if not e:
                cells.append("")
            elif e[0]["status"] == "measured":
                cells.append(f"{fmt(e[0], 'cpu_s', 1e3, 0)} ms, "
                             f"{e[0]['mean']['peak_mb']:,.0f} MB")
            elif "predicted" in e[0]["status"]:
                cells.append(f"— (over {s['time_cap_s']:g} s)")
            else:
                cells.append(f"— ({e[0]['est_gb']:.1f} GB est.)")
        rows.append(f"| {n:,} | " + " | ".join(cells) + " |")
    lim = data.get("max_N_in_fit_gb_extrapolated", {})
    rows.append(f"| **{s['fit_gb']:g} GB reached at N ≈** | "
                + " | ".join(f"{lim[m]:,.0f}" if lim.get(m) else "—" for m in mixers) + " |")
    return "\n".join(rows) + ("\n\nCPU time per training step (mean ± sd over seeds) and peak "
                              "memory; — = not run: its predicted time per step was over the "
                              "cap, or its estimated memory over the cap; the last row is "
                              "extrapolated from the two largest measured sizes (linear in N, "
                              "quadratic for softmax)")


def plot(data, path):
    import matplotlib.pyplot as plt
    colors = dict(zip(MIXERS, ["C0", "C9", "C1", "C2", "C3"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labelled = False
    for m in data["settings"]["mixers"]:
        meas = [r for r in data["results"] if r["mixer"] == m and r["status"] == "measured"]
        est = [r for r in data["results"] if r["mixer"] == m and r["status"] != "measured"]
        if meas:
            Ns = [r["N"] for r in meas]
            axes[0].errorbar(Ns, [r["mean"]["cpu_s"] for r in meas],
                             yerr=[r["std"]["cpu_s"] for r in meas], marker="o", ms=3,
                             color=colors[m], label=m, capsize=2)
            axes[1].plot(Ns, [r["mean"]["peak_mb"] / 1024 for r in meas], "o-", ms=3,
                         color=colors[m])
        if est:          # one legend entry for every open circle (the colours are the left's)
            axes[1].plot([r["N"] for r in est], [r["est_gb"] * 1e9 / 2**30 for r in est], "o",
                         mfc="none", color=colors[m], label=None if labelled else
                         "estimated, not run")
            labelled = True
    axes[1].axhline(data["settings"]["fit_gb"] * 1e9 / 2**30, color="gray", ls=":",
                    label=f"{data['settings']['fit_gb']:g} GB")
    axes[0].set_ylabel("CPU time per training step (s)")
    axes[1].set_ylabel("peak memory of the step (GiB)")
    for ax in axes:
        ax.set_xscale("log", base=2); ax.set_yscale("log")
        ax.set_xlabel("sequence length N"); ax.grid(alpha=0.3, which="both")
        ax.legend()
    fig.suptitle(f"{NAME}: one block, width {data['settings']['width']}, batch "
                 f"{data['settings']['batch']}, forward+backward (seeds {data['seeds']})")
    fig.tight_layout()
    return savefig(fig, path)
