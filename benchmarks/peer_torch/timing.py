"""Part 2 of the peer benchmark: the parent's side of the timing. Each system in its own worker
process (benchmarks/peer_torch/worker.py), rounds alternating between them, the per-round
means summarised as ratios, rates, load, phases and memory, and the tables printed."""
from __future__ import annotations

import os
import statistics
import time

from ..workers import Worker


def start_worker(system, bench, threads):
    """A worker process running ``bench`` for ``system`` on ``threads`` threads, warmed up."""
    # the tostnp worker gets OpenBLAS's spin as `train` has it (tostnp/backend/openblas.py)
    env = {"OPENBLAS_THREAD_TIMEOUT": "22"} if system == "tostnp" else None
    return Worker(["-m", "benchmarks.peer_torch", "--worker", system, bench, str(threads)],
                  f"{system}/{bench}", env_defaults=env)


def run_steps(w, k):
    """k steps in worker ``w``: one dict of phase seconds per step."""
    return w.cmd(cmd="run", k=k)["steps"]


def _phase_means(recs):
    keys = [k for k in recs[0]]
    return {k: sum(r[k] for r in recs) / len(recs) for k in keys}


def interleave(bench, threads, rounds, target_s, systems=("tostnp", "torch")):
    """Rounds A, B, A, B, ...: per-system lists of per-round phase means, and load averages.
    threads: one count for both, or a dict {system: count}."""
    ws = []
    try:
        for s in systems:           # started one at a time: warm-ups do not overlap
            ws.append(start_worker(s, bench, threads[s] if isinstance(threads, dict)
                                    else threads))
        ks = [max(1, min(500, round(target_s / w.meta["warm_step_s"]))) for w in ws]
        per = {s: [] for s in systems}
        loads = []
        for _ in range(rounds):
            for s, w, k in zip(systems, ws, ks):
                time.sleep(0.25)     # let the other worker's spinning BLAS/OpenMP threads sleep
                loads.append(os.getloadavg()[0])
                per[s].append(_phase_means(run_steps(w, k)))
        metas = {s: w.meta for s, w in zip(systems, ws)}
    finally:
        for w in ws:
            w.close()
    return {"per_round": per, "k": dict(zip(systems, ks)), "loads": loads, "meta": metas}


def summarize(res, a="tostnp", b="torch"):
    pa = [r["total"] for r in res["per_round"][a]]
    pb = [r["total"] for r in res["per_round"][b]]
    paired = [x / y for x, y in zip(pa, pb)]
    ma, mb = statistics.median(pa), statistics.median(pb)
    items = res["meta"][a]["items_per_step"]
    return {"median_step_s": {a: ma, b: mb}, "ratio_of_medians": ma / mb,
            "paired_ratio_median": statistics.median(paired),
            "paired_ratio_min": min(paired), "paired_ratio_max": max(paired),
            "steps_per_s": {a: 1 / ma, b: 1 / mb},
            "items_per_s": {a: items / ma, b: items / mb}, "unit": res["meta"][a]["unit"],
            "rounds": len(pa), "k": res["k"],
            "load_1min": {"min": min(res["loads"]), "median": statistics.median(res["loads"]),
                          "max": max(res["loads"])},
            "train_rss_mb": {s: res["meta"][s].get("train_rss_mb") for s in (a, b)},
            "step_traced_mb": res["meta"][a].get("step_traced_mb"),
            "phases_median": {s: {ph: statistics.median(r[ph] for r in res["per_round"][s])
                                  for ph in res["per_round"][s][0]} for s in (a, b)}}


BENCH_TITLES = {"gemm": "GEMMs",
                "tssa_lm": "TSSA layer alone fwd+bwd, causal, LM shape B32 T64 C128 h4",
                "tssa_nc": "TSSA layer alone fwd+bwd, non-causal, B4 N4096 C384 h6",
                "tssa_c": "TSSA layer alone fwd+bwd, causal, B4 N4096 C384 h6","lm": "LM tiny-char train step (32x64 tokens)",
                "vision": "vision tiny-digits train step (64 images)",
                "lm_tiny": "LM step at width 8, batch 1 (overhead floor)",
                "block_nc": "ToST block fwd+bwd, non-causal, B4 N4096 C384 h6",
                "block_c": "ToST block fwd+bwd, causal, B4 N4096 C384 h6"}


def run_timing(args, out):
    out["timing"] = {}
    for threads in args.threads:
        print(f"\n== 2. Timing, {threads} thread(s) for both (BLAS threads for NumPy, "
              f"torch.set_num_threads for torch); {args.rounds} interleaved rounds ==")
        out["timing"][threads] = {}
        for bench in args.only:
            target = 1.0 if bench in ("lm", "vision", "lm_tiny", "tssa_lm") else 0.1
            t0 = time.time()
            res = interleave(bench, threads, args.rounds, target)
            s = summarize(res)
            s["raw"] = res
            out["timing"][threads][bench] = s
            print(f"  {BENCH_TITLES[bench]:52s} tostnp/torch = {s['ratio_of_medians']:5.2f}x "
                  f"(paired {s['paired_ratio_median']:.2f}, range "
                  f"{s['paired_ratio_min']:.2f}-{s['paired_ratio_max']:.2f}); load "
                  f"{s['load_1min']['min']:.2f}-{s['load_1min']['max']:.2f}; "
                  f"{time.time() - t0:.0f} s", flush=True)


def print_table(out):
    print("\n== Results (medians over interleaved rounds; ratio = tostnp time / torch time) ==")
    hdr = (f"{'thr':>3s}  {'benchmark':52s} {'ratio':>6s} {'paired (min-max)':>18s} "
           f"{'tostnp steps/s':>14s} {'torch steps/s':>13s} {'tostnp items/s':>15s} "
           f"{'torch items/s':>14s} {'load avg 1-min':>15s}")
    print(hdr)
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            u = s["unit"][:3]
            print(f"{threads:>3}  {BENCH_TITLES[bench]:52s} {s['ratio_of_medians']:6.2f} "
                  f"{s['paired_ratio_median']:6.2f} ({s['paired_ratio_min']:.2f}-"
                  f"{s['paired_ratio_max']:.2f}) {s['steps_per_s']['tostnp']:14.2f} "
                  f"{s['steps_per_s']['torch']:13.2f} {s['items_per_s']['tostnp']:11.0f} {u} "
                  f"{s['items_per_s']['torch']:10.0f} {u} "
                  f"{s['load_1min']['min']:6.2f}-{s['load_1min']['max']:.2f}")
    print("  (thr: threads for both. steps/s and "
          "items/s are absolute numbers from a shared 2-core machine: read the ratios. The load "
          "average includes this benchmark's own running worker.)")
    print("\n  Phase split of one step (median ms per step; torch fwd_bwd = forward+loss + "
          "zero_grad+backward; update = clip + lr schedule + float(loss)/loss.item() + AdamW):")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            if bench not in ("lm", "vision", "lm_tiny"):
                continue
            ph = s["phases_median"]
            line = "  ".join(f"{k} {1e3 * ph['tostnp'][k]:.2f}/{1e3 * ph['torch'][k]:.2f}"
                             for k in ("data", "fwd_bwd", "update", "total"))
            print(f"  {threads} thr {bench:8s} tostnp/torch ms: {line}  | fresh memory "
                  f"faulted in per step {ph['tostnp']['fault_mb']:.1f}/{ph['torch']['fault_mb']:.1f}"
                  f" MB")
    print("\n  Memory (each system in its own fresh worker process): peak RSS over the warm-up "
          "above the RSS after the imports (model, data, optimiser state, activations, "
          "allocator caches); tostnp's NumPy peak of one step (tracemalloc):")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            m = s.get("train_rss_mb") or {}
            if m.get("tostnp") is None or m.get("torch") is None:
                continue
            print(f"  {threads} thr {bench:8s} RSS tostnp {m['tostnp']:.0f} MB, torch "
                  f"{m['torch']:.0f} MB, ratio {m['tostnp'] / max(m['torch'], 1e-9):.2f}; tostnp "
                  f"step (tracemalloc) {s['step_traced_mb']:.1f} MB")
    for threads, benches in out["timing"].items():
        for bench, s in benches.items():
            if not bench.startswith(("block", "tssa")):
                continue
            ph = s["phases_median"]
            print(f"  {threads} thr {bench:8s} tostnp/torch ms: fwd {1e3 * ph['tostnp']['fwd']:.1f}"
                  f"/{1e3 * ph['torch']['fwd']:.1f}  bwd {1e3 * ph['tostnp']['bwd']:.1f}/"
                  f"{1e3 * ph['torch']['bwd']:.1f}  fwd ratio "
                  f"{ph['tostnp']['fwd'] / ph['torch']['fwd']:.2f}, bwd ratio "
                  f"{ph['tostnp']['bwd'] / ph['torch']['bwd']:.2f}  | fresh memory faulted in "
                  f"{ph['tostnp']['fault_mb']:.0f}/{ph['torch']['fault_mb']:.0f} MB")

