"""A peer-benchmark worker process: one system ("tostnp" or "torch"), one benchmark, one thread
count. It sets the thread limits (and asserts them), builds the step, warms up, measures its
memory, answers "ready", then runs the parent's commands: "run" k steps, "spin" for perf,
"cprofile" and "tprofile" (benchmarks/workers.py has the protocol)."""
from __future__ import annotations

import json
import os
import statistics
import sys
import time

from ..workers import protocol_channel
from .benches import make_step
from .torch_models import torch_defs


def _thp_faults():
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                if line.startswith("thp_fault_alloc "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def _anatomy(system, step):
    """tostnp: tostnp.bench.anatomy.step_anatomy (products recorded from the arrays and timed
    alone, the rest, NumPy and Python calls). torch: the same split from torch.profiler (GEMM
    ops with their input shapes and self times, aten ops per step) and the median of 5 plain
    steps."""
    if system == "tostnp":
        from tostnp.bench.anatomy import step_anatomy
        return step_anatomy(step, step.params)
    from torch.profiler import profile, ProfilerActivity
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    k = 3
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as pr:
        for _ in range(k):
            step()
    ev = pr.key_averages(group_by_input_shape=True)
    prods = sorted(({"op": e.key, "shapes": str(e.input_shapes), "count": e.count / k,
                     "s_each": e.self_cpu_time_total / e.count / 1e6}
                    for e in ev if e.key in _GEMMS), key=lambda p: -p["count"] * p["s_each"])
    step_s = statistics.median(ts)
    products_s = sum(p["count"] * p["s_each"] for p in prods)
    return {"step_s": step_s, "products": prods, "products_s": products_s,
            "rest_s": step_s - products_s,
            "numpy_calls": {"matmul": sum(p["count"] for p in prods),
                            "aten_ops": sum(e.count for e in pr.key_averages()) / k},
            "note": "torch: GEMM self times under torch.profiler (3 steps); step_s the "
                    "median of 5 plain steps"}


def worker_main(system, bench, threads):
    import resource
    import numpy  # noqa: F401  (load OpenBLAS first: threadpoolctl only limits loaded libraries)
    from threadpoolctl import threadpool_limits, threadpool_info
    send = protocol_channel()         # library prints go to stderr from here on
    from tostnp.bench.peaks import (peak_rss_bytes, reset_peak_rss, rss_bytes,
                                     traced_peak_bytes, workers_private_bytes)
    with threadpool_limits(limits=threads, user_api="blas"):
        if system == "torch":
            torch = torch_defs()["torch"]
            torch.set_num_threads(threads)
            # set up torch's runtime (thread pools, autograd engine, kernels) before measuring
            # memory, with a step of a tiny model, so that the memory below is the model's
            tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
            tiny_opt = torch.optim.AdamW(tiny.parameters())
            tiny(torch.randn(2, 8)).square().sum().backward()
            tiny_opt.step()
            del tiny, tiny_opt
        else:       # `--threads N` sets BLAS and tostnp's fast path together (backend.threads)
            from tostnp.backend import kernels as fused
            if hasattr(fused, "set_threads"):
                fused.set_threads(threads)
        reset_peak_rss()
        rss0 = rss_bytes()            # libraries loaded; no model, data or optimiser yet
        step0, meta = make_step(system, bench)

        def step():            # + page faults during the step (this process, all threads)
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            h0 = _thp_faults()
            r = step0()
            r["minflt"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
            r["thp"] = _thp_faults() - h0      # system-wide counter: 2 MB huge-page faults
            # fresh memory mapped in: a THP fault maps 2 MB, any other minor fault 4 KB
            r["fault_mb"] = (r["thp"] * 2048 + max(r["minflt"] - r["thp"], 0) * 4) / 1024
            return r
        # setup may load more BLAS copies (scikit-learn -> SciPy's OpenBLAS): limit them too
        threadpool_limits(limits=threads, user_api="blas")
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and all(n == threads for n in blas), (blas, threads)
        if system == "torch":
            assert torch.get_num_threads() == threads
        elif hasattr(fused, "get_threads"):
            assert fused.get_threads() == threads
        t0, warm = time.perf_counter(), []
        while len(warm) < 2 or time.perf_counter() - t0 < 2.0:
            warm.append(step()["total"])
        meta.update(warm_step_s=statistics.median(warm[-3:]), warm_steps=len(warm),
                    pid=os.getpid(), threads=threads)
        # memory: the process's peak RSS over the warm-up above its RSS after the imports
        # (model, data, optimiser state, activations, allocator caches), plus the pages of
        # tostnp's shard worker processes that this one does not share; for tostnp also the
        # NumPy bytes of one step's high-water mark, its shard workers' included (tracemalloc
        # does not see torch's buffers)
        hwm = peak_rss_bytes()
        if hwm is not None:
            hwm += workers_private_bytes()
        meta["rss_after_imports_mb"] = None if rss0 is None else rss0 / 2**20
        meta["train_rss_mb"] = None if rss0 is None or hwm is None else (hwm - rss0) / 2**20
        meta["step_traced_mb"] = (traced_peak_bytes(step0) / 2**20
                                  if system == "tostnp" else None)
        meta["blas_threads"] = blas
        if system == "torch":
            meta["torch_threads"] = torch.get_num_threads()
        send({"ready": meta})
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "run":
                recs = [step() for _ in range(cmd["k"])]
                send({"steps": recs})
            elif cmd["cmd"] == "spin":          # run steps for cmd["s"] seconds (for perf)
                t_end, n = time.perf_counter() + cmd["s"], 0
                while time.perf_counter() < t_end:
                    step()
                    n += 1
                send({"spun": n})
            elif cmd["cmd"] == "cprofile":
                import cProfile
                pr = cProfile.Profile()
                t0 = time.perf_counter()
                pr.enable()
                for _ in range(cmd["k"]):
                    step()
                pr.disable()
                wall = time.perf_counter() - t0
                pr.dump_stats(cmd["path"])
                send({"profiled": cmd["k"], "wall": wall})
            elif cmd["cmd"] == "tprofile":           # torch.profiler op table (torch only)
                from torch.profiler import profile, ProfilerActivity
                k = cmd["k"]
                with profile(activities=[ProfilerActivity.CPU]) as pr:
                    for _ in range(k):
                        step()
                rows = sorted(((e.key, e.self_cpu_time_total / k / 1e3,
                                e.cpu_time_total / k / 1e3, e.count / k)
                               for e in pr.key_averages()), key=lambda r: -r[1])
                send({"rows": rows})
            elif cmd["cmd"] == "anatomy":            # where a step's time goes
                send({"anatomy": _anatomy(system, step0)})
            else:
                break

