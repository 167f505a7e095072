"""Part 3 of the peer benchmark (--profile, 1 thread): where the time goes. cProfile of tostnp's
steps by layer, torch.profiler op tables of torch's, every GEMM of the LM step and of the big
block timed alone in NumPy/OpenBLAS and torch, the tanh-GELU alone, and perf samples of each
worker by library and category where `perf` is installed."""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time

from .benches import SCAN_GEMMS, gemm_inventory, gemm_inventory_block
from .timing import BENCH_TITLES, interleave, run_steps, start_worker


_CATS = [  # (label, [(module file suffix, function name)]) -- inclusive times
    ("data: task.next_batch", [("tasks.py", "next_batch")]),
    ("loss_and_grads (fwd+bwd)", [("tasks.py", "loss_and_grads")]),
    ("  model forward", [("lm.py", "lm_forward"), ("vision.py", "vision_forward")]),
    ("  model backward", [("lm.py", "_backward"), ("vision.py", "_backward")]),
    ("  TSSA fwd+bwd (incl. its W_u/W_o matmuls)", [("tssa.py", "_tssa_forward"),
                                                   ("tssa.py", "_tssa_backward")]),
    ("    of which _scan (causal prefix/suffix sums)", [("tssa_causal.py", "_scan")]),
    ("  MLP fwd+bwd (matmuls + GELU)", [("layers.py", "_mlp_forward"),
                                        ("layers.py", "mlp_backward")]),
    ("    of which GELU fwd+bwd (tanh form)", [("layers.py", "_gelu_forward"),
                                               ("layers.py", "gelu_backward")]),
    ("  LayerNorm fwd+bwd", [("layers.py", "_layer_norm_forward"),
                             ("layers.py", "layer_norm_backward")]),
    ("  LayerScale fwd+bwd", [("layers.py", "_layer_scale_forward"),
                              ("layers.py", "layer_scale_backward")]),
    ("  class-attention fwd+bwd (vision)", [("class_attention.py", "_class_attention_forward"),
                                            ("class_attention.py", "class_attention_backward")]),
    ("  patch embed fwd+bwd (vision)", [("layers.py", "_patch_embed_forward"),
                                        ("layers.py", "patch_embed_backward")]),
    ("  embedding fwd+bwd (LM; np.add.at scatter)", [("layers.py", "_embedding_forward"),
                                                    ("layers.py", "embedding_backward")]),
    ("  softmax cross-entropy fwd+bwd", [("loss.py", "softmax_cross_entropy_forward"),
                                         ("loss.py", "softmax_cross_entropy_backward")]),
    ("clip_grad_norm", [("optim.py", "clip_grad_norm")]),
    ("AdamW.step", [("optim.py", "step")]),
]
_VALIDATORS = [("validate.py", "check_array"), ("validate.py", "check_same_dtype"),
               ("validate.py", "check_param"), ("validate.py", "check_params"),
               ("validate.py", "check_token_ids")]


def _inclusive(st, funcs):
    """Inclusive time of a set of functions, counting only calls from outside the set."""
    keys = [k for k in st.stats if any(k[0].endswith(f) and k[2] == n for f, n in funcs)]
    tot = 0.0
    for k in keys:
        cc, nc, tt, ct, callers = st.stats[k]
        for ck, cv in callers.items():
            if ck not in keys:
                tot += cv[3]
    return tot


def cprofile_table(bench, k):
    import pstats
    w = start_worker("tostnp", bench, 1)
    try:
        path = os.path.join(tempfile.gettempdir(), f"peer_{bench}_{os.getpid()}.prof")
        r = w.cmd(cmd="cprofile", k=k, path=path)
        base = run_steps(w, max(3, k // 3))
    finally:
        w.close()
    st = pstats.Stats(path)
    prof_step = r["wall"] / k
    plain_step = statistics.median(x["total"] for x in base)
    print(f"  cProfile of tostnp's {bench} step, 1 thread: {k} steps; "
          f"{1e3 * prof_step:.1f} ms/step under the profiler, {1e3 * plain_step:.1f} ms/step "
          f"right after without it")
    rows = [(label, _inclusive(st, funcs) / k) for label, funcs in _CATS]
    rows.append(("input validators (check_array, check_params, check_token_ids, ...)",
                 _inclusive(st, _VALIDATORS) / k))
    print(f"    {'inclusive time per step':62s} {'ms':>8s} {'% of step':>9s}")
    for label, t in rows:
        if t > 0:
            print(f"    {label:62s} {1e3 * t:8.2f} {100 * t / prof_step:8.1f}%")
    calls = sum(v[1] for v in st.stats.values()) / k
    print(f"    Python-level function calls per step (incl. NumPy's Python wrappers): {calls:,.0f}")
    top = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:12]
    print("    top functions by own time (NumPy operators such as @ * + count in the caller):")
    for key, v in top:
        print(f"      {1e3 * v[2] / k:7.2f} ms  {v[1] / k:6.0f} calls  "
              f"{os.path.basename(key[0])}:{key[1]} {key[2]}")
    try:
        os.remove(path)
    except OSError:
        pass
    return {"ms_per_step_profiled": 1e3 * prof_step, "ms_per_step_plain": 1e3 * plain_step,
            "rows_ms": {l: 1e3 * t for l, t in rows}, "calls_per_step": calls,
            "top_tottime": [(f"{os.path.basename(k_[0])}:{k_[2]}", 1e3 * v[2] / k, v[1] / k)
                            for k_, v in top]}


_TORCH_GROUPS = [("GEMM (aten::mm/addmm/bmm, self)", ("aten::mm", "aten::addmm", "aten::bmm")),
                 ("GELU fwd+bwd (aten::gelu, aten::gelu_backward)", ("aten::gelu",
                                                                     "aten::gelu_backward")),
                 ("LayerNorm fwd+bwd", ("aten::native_layer_norm",
                                        "aten::native_layer_norm_backward")),
                 ("cumsum (causal TSSA) + flip (its backward)", ("aten::cumsum", "aten::flip")),
                 ("softmax fwd+bwd", ("aten::_softmax", "aten::_softmax_backward_data")),
                 ("embedding backward", ("aten::embedding_dense_backward",))]


def torch_profile_table(bench, k):
    w = start_worker("torch", bench, 1)
    try:
        rows = w.cmd(cmd="tprofile", k=k)["rows"]
        base = run_steps(w, max(3, k // 2))
    finally:
        w.close()
    plain = statistics.median(x["total"] for x in base)
    self_total = sum(r[1] for r in rows)
    byname = {r[0]: r for r in rows}
    print(f"  torch.profiler of the torch {bench} step, 1 thread: {k} steps; sum of op self "
          f"times {self_total:.1f} ms/step (step without profiler {1e3 * plain:.1f} ms)")
    out = {"self_total_ms": self_total, "plain_ms": 1e3 * plain, "groups_ms": {}}
    for label, names in _TORCH_GROUPS:
        t = sum(byname[n][1] for n in names if n in byname)
        out["groups_ms"][label] = t
        print(f"    {label:62s} {t:8.2f} ms")
    opt = byname.get("Optimizer.step#AdamW.step")
    if opt:
        out["groups_ms"]["AdamW.step (inclusive)"] = opt[2]
        print(f"    {'AdamW.step (inclusive)':62s} {opt[2]:8.2f} ms")
    print("    top ops by self time: " + "; ".join(f"{r[0]} {r[1]:.1f} ms ({r[3]:.0f}x)"
                                                  for r in rows[:8]))
    out["top"] = rows[:25]
    return out


def gemm_table(bench, rounds, out, threads=1):
    inv = gemm_inventory() if bench == "gemm" else gemm_inventory_block()
    what = "the LM step" if bench == "gemm" else "one ToST block fwd+bwd (B4 N4096 C384)"
    print(f"  GEMMs of {what} timed alone, {threads} thread(s), {rounds} interleaved rounds "
          f"(ms per call):")
    res = interleave(bench, threads, rounds, 0.5)
    g, tot_np, tot_t = {}, 0.0, 0.0
    for name, _, _, _, _, cnt in inv:
        x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
        y = statistics.median(r[name] for r in res["per_round"]["torch"])
        tot_np += cnt * x
        tot_t += cnt * y
        g[name] = {"calls": cnt, "numpy_ms": 1e3 * x, "torch_ms": 1e3 * y}
        print(f"    {name:46s} x{cnt:2d}  numpy {1e3 * x:8.3f}  torch {1e3 * y:8.3f}  "
              f"numpy/torch {x / y:4.2f}")
    tot_scan = 0.0
    if bench == "gemm":
        for name, _, cnt in SCAN_GEMMS:
            x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
            tot_scan += cnt * x
            g[name] = {"calls": cnt, "numpy_ms": 1e3 * x}
            print(f"    {name:46s} x{cnt:2d}  numpy {1e3 * x:8.3f}")
    print(f"    sum (calls x time): numpy {1e3 * tot_np:.1f} ms vs torch {1e3 * tot_t:.1f} ms "
          f"(numpy/torch {tot_np / tot_t:.2f})"
          + (f"; tostnp's scan GEMMs add {1e3 * tot_scan:.1f} ms" if tot_scan else ""))
    out[f"{bench}@{threads}"] = {"rows": g, "numpy_ms": 1e3 * tot_np, "torch_ms": 1e3 * tot_t,
                                 "numpy_scan_ms": 1e3 * tot_scan}


def run_profile(args, out):
    prof = {}
    rounds = args.rounds
    print("\n== 3. Where the time goes (1 thread) ==")
    prof["cprofile"] = {b: cprofile_table(b, 30 if b == "lm" else 150) for b in ("lm", "vision")}
    prof["torch_profiler"] = {b: torch_profile_table(b, 10 if b == "lm" else 60)
                              for b in ("lm", "vision")}
    # GEMMs alone
    prof["gemm"] = {}
    for threads in (1, 2):
        gemm_table("gemm", rounds, prof["gemm"], threads)
    gemm_table("gemm_block", 5, prof["gemm"], 1)
    # GELU alone
    prof["gelu"] = {}
    for threads in (1, 2):
        res = interleave("gelu", threads, rounds, 0.5)
        print(f"  tanh-GELU forward+backward alone, {threads} thread(s), {rounds} interleaved "
              f"rounds (tostnp gelu_forward+gelu_backward vs torch F.gelu(approximate='tanh') "
              f"+ backward):")
        for name in ("LM (32x64, 512)", "block (4x4096, 1536)"):
            x = statistics.median(r[name] for r in res["per_round"]["tostnp"])
            y = statistics.median(r[name] for r in res["per_round"]["torch"])
            prof["gelu"][f"{name}@{threads}"] = {"numpy_ms": 1e3 * x, "torch_ms": 1e3 * y}
            print(f"    {name:22s} tostnp {1e3 * x:8.2f} ms  torch {1e3 * y:8.2f} ms  ratio "
                  f"{x / y:5.2f}" + (f"   (x4 layers per LM step: {4e3 * x:.0f} vs "
                                     f"{4e3 * y:.0f} ms)" if name.startswith("LM") else ""))
    # perf
    if shutil.which("perf") and not args.no_perf:
        prof["perf"] = {}
        for bench, secs in (("lm", 8.0), ("vision", 6.0), ("block_nc", 14.0), ("block_c", 20.0)):
            for system in ("tostnp", "torch"):
                prof["perf"][f"{system}:{bench}"] = perf_profile(system, bench, 1, secs)
    else:
        print("  (perf not installed or --no-perf: no per-library CPU sample breakdown)")
    out["profile"] = prof


def _perf_category(dso, sym):
    d, s_ = dso.lower(), sym
    if "openblas" in d:
        if any(k in s_ for k in ("thread", "exec_blas", "blas_thread")):
            return "BLAS threading (wait/spin)"
        return "GEMM (OpenBLAS sgemm + packing)"
    if s_.startswith("mkl_") or "mkl" in d:
        return "GEMM (MKL sgemm + packing)"
    if "gomp" in d:
        return "OpenMP runtime (wait/spin)"
    if "Sleef" in s_:
        return "tanh for GELU (Sleef)"
    if "_multiarray_umath" in d or "_umath" in d:
        return "NumPy loops (elementwise, reductions, copies, add.at)"
    if "libtorch_cpu" in d:
        return "ATen non-GEMM kernels + dispatch"
    if "kernel" in d:
        return "kernel (page faults/zeroing of fresh memory, scheduling)"
    if "libpython" in d or "python3" in d:
        return "Python interpreter"
    if "libc10" in d or "libtorch_python" in d or "libstdc++" in d:
        return "torch framework overhead (c10, bindings)"
    if "libc" in d:
        return "libc (memcpy, memset, malloc/free)"
    return "other"


def perf_profile(system, bench, threads, seconds):
    """perf record of a worker's steady state -> percent of CPU samples by category."""
    import re
    w = start_worker(system, bench, threads)
    data = os.path.join(tempfile.gettempdir(), f"peer_perf_{system}_{bench}_{os.getpid()}.data")
    try:
        w.send(cmd="spin", s=seconds + 2)
        time.sleep(0.5)
        subprocess.run(["perf", "record", "-q", "-F", "1000", "-o", data, "-p", str(w.p.pid),
                        "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        w.read()
    finally:
        w.close()
    rep = subprocess.run(["perf", "report", "-i", data, "--sort", "dso,sym", "--stdio", "-q",
                          "--percent-limit", "0"], capture_output=True, text=True).stdout
    try:
        os.remove(data)
    except OSError:
        pass
    rows = []
    for line in rep.splitlines():
        mm = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$", line)
        if mm:
            rows.append((float(mm.group(1)), mm.group(2), mm.group(4).strip()))
    cats = {}
    for pct, dso, sym in rows:
        c = _perf_category(dso, sym)
        cats[c] = cats.get(c, 0.0) + pct
    tot = sum(cats.values()) or 1.0
    print(f"  perf, {system} {BENCH_TITLES.get(bench, bench)}, {threads} thread, "
          f"{seconds:.0f} s steady state: % of CPU samples")
    for c, v in sorted(cats.items(), key=lambda kv: -kv[1]):
        print(f"    {100 * v / tot:6.1f}%  {c}")
    print("    top symbols: " + "; ".join(f"{p:.1f}% {s_[:40]}" for p, _, s_ in rows[:6]))
    return {"categories_pct": {c: 100 * v / tot for c, v in cats.items()}, "top": rows[:20]}

