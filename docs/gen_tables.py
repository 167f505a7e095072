"""The tables of README.md and docs/*.md, generated from the committed JSON results.

A page holds its tables between ``<!-- BEGIN:GEN name -->`` and ``<!-- END:GEN name -->``;
this script rewrites what lies between them from the JSON named in the block, and leaves the
prose around them alone. ``tests/test_docs_tables.py`` regenerates every block and asserts the
committed page equals the output, so a table cannot drift from its JSON.

    python3 docs/gen_tables.py           # rewrite the blocks after committing a new result
    python3 docs/gen_tables.py --check   # exit 1 if a committed page differs

Every table names the file it comes from and the machine the file records (CPU, BLAS, load):
figures from different CPUs sit side by side as rows, never merged.
"""
from __future__ import annotations

import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"(<!-- BEGIN:GEN (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END:GEN (?P=name) -->)",
                   re.S)


def _load(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return json.load(f)


def _ms(seconds):
    v = seconds * 1e3
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def _mib(nbytes):
    return f"{nbytes / 2**20:,.0f}"


def _pm(mean, sd, fmt):
    return f"{fmt.format(mean)} ± {fmt.format(sd)}"


def _table(head, rows, align=None):
    align = align or ["---"] * len(head)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _load_str(vals):
    return "–".join(f"{v:.1f}" for v in sorted({round(min(vals), 1), round(max(vals), 1)}))


# ------------------------------------------------------------------------------- the machines
def peer_kernels(env):
    """Whether tostnp's compiled loops were available to the run: "Numba X installed" (it
    imported and was on; which layers then use the loops depends on their size,
    tostnp/backend/tuning.py) or "no Numba" (absent or off, and every run before the loops
    existed: its JSON has no ``compiled_kernels``)."""
    ck = env.get("machine", {}).get("compiled_kernels", "")       # "numba 0.68.1", or why not
    m = re.fullmatch(r"numba (\d[\w.+]*)", ck)
    return f"Numba {m.group(1)} installed" if m else "no Numba"


def peer_machine(env):
    """CPU, BLAS and versions of a benchmarks/peer_torch.py result's ``env``."""
    return (f"{env.get('cpu', 'CPU not recorded')}, {env['host_cpus']} CPUs; "
            f"NumPy {env['numpy']} ({'; '.join(env['blas'])}); PyTorch {env['torch']}; "
            f"tostnp: {peer_kernels(env)}")


def context_machine(m):
    blas = "; ".join(f"{b['internal_api']} {b['version']} ({b.get('architecture', '?')})"
                     for b in m["numpy_blas"])
    return (f"{m['cpu']}, {m['logical_cpus']} CPUs; NumPy {m['numpy']} ({blas}); "
            f"PyTorch {m['torch']}")


def bench_machine(meta):
    # bench_cpu.json of 2026-11-25 records the platform but not the CPU's name; the run log of
    # that day (docs/benchmarks.md) names it: the repository's 2-core AMD EPYC machine.
    return (f"{meta['machine']} ({meta.get('cpu', 'CPU not recorded in the file')}); "
            f"NumPy {meta['numpy']} ({meta['blas']}); Python {meta['python']}")


# -------------------------------------------------------------------------- bench (docs/bench)
def bench_layers(_):
    r = _load("docs/bench/bench_cpu.json")
    m, L = r["meta"], r["layers"]
    rows = []
    for N in m["sizes"]:
        k = str(N)
        ref = r["reference_matmuls"][k]

        def t(name, key="fwdbwd_s"):
            e = L[name][k]
            return f"skipped ({e['est_bytes'] / 1e9:.1f} GB est.)" if "skipped" in e else _ms(e[key])

        def mb(name):
            e = L[name][k]
            return "—" if "skipped" in e else _mib(e["fwdbwd_peak_bytes"])
        rows.append([f"{N:,}", _ms(ref["fwdbwd_6mm_s"]), f"{t('tssa', 'fwd_s')} / {t('tssa')}",
                     mb("tssa"), t("tssa_causal"), t("softmax"), mb("softmax"), t("linear")])
    head = ["N", "6 matmuls", "TSSA fwd / fwd+bwd", "TSSA MB", "causal TSSA fwd+bwd",
            "softmax fwd+bwd", "softmax MB", "linear attn fwd+bwd"]
    return (f"From [`bench/bench_cpu.json`](bench/bench_cpu.json), {m['date'][:16]} UTC, "
            f"{bench_machine(m)}; {m['dtype']}, B = {m['batch']}, C = {m['width']}, "
            f"h = {m['heads']}; load average {m['loadavg_before'][0]}–{m['loadavg_after'][0]}; "
            f"`{m['command']}`. Times in ms (median of {m['repeats']} rounds), memory = "
            "forward+backward peak in MiB:\n\n"
            + _table(head, rows, ["---:"] * len(head)) + "\n\n"
            + _table(["benchmark target", "value", "limit", ""],
                     [[t["target"], f"{t['value']:.2f}", f"{t['op']} {t['limit']:g}",
                       f"**{t['status']}**"] for t in r["targets"]],
                     ["---", "---:", "---:", "---"]) + "\n\n"
            + "Decoder per-token time (`tssa_decode_step`, B = 4): "
            + ", ".join(f"{int(T):,}: {e['per_token_s'] * 1e6:.0f} µs" for T, e in r["decode"].items())
            + " (context: time).")


def bench_train(_):
    r = _load("docs/bench/bench_train_cpu.json")
    m, tr = r["meta"], r["train"]
    rows = []
    for name in ("lm", "vision", "block"):
        one, two = tr[f"{name}@1t"], tr[f"{name}@2t"]
        fast = "; ".join(f"{tr[f'{name}@{t}t']['ratio_fast_plain_paired']:.2f}×" for t in (1, 2))
        faults = f"{two['minflt_per_step']:,.0f}; {tr[f'{name}@2t:plain']['minflt_per_step']:,.0f}" \
            if f"{name}@2t:plain" in tr else f"{two['minflt_per_step']:,.0f}"
        rows.append([one["desc"], f"{one['steps_per_s']:.2f}", f"{two['steps_per_s']:.2f}",
                     f"{two['ratio_to_1t_paired']:.2f}×", fast, faults])
    return (f"From [`bench/bench_train_cpu.json`](bench/bench_train_cpu.json) "
            f"(`{m['command']}`; load average {m['load_before'][0]}–{m['load_after'][0]}; "
            "the file records no CPU: the run log below names it). Ratios are paired medians:\n\n"
            + _table(["training step", "steps/s, 1 thread", "steps/s, 2 threads",
                      "2 threads / 1 (time)", "fast / plain path (1; 2 threads)",
                      "minor page faults per step at 2 threads (fast; plain)"], rows,
                     ["---", "---:", "---:", "---:", "---:", "---:"]))


# ------------------------------------------------------------------------------ peer PyTorch
PEER_BENCHES = [("lm", "default LM"), ("vision", "default digits")]


def _peer_cell(e):
    return (f"{e['ratio_of_medians']:.2f}× ({e['paired_ratio_min']:.2f}–"
            f"{e['paired_ratio_max']:.2f})")


def peer_runs(_):
    rows = []
    files = sorted(glob.glob(os.path.join(ROOT, "docs/bench/peer_torch*.json")))
    for path in sorted(files, key=lambda p: _load(os.path.relpath(p, ROOT))["env"]["date"]):
        rel = os.path.relpath(path, ROOT)
        d = _load(rel)
        if "timing" not in d:             # an --anatomy-only run: no step times to compare
            continue
        env, t = d["env"], d["timing"]
        load = env["loadavg_start"][0], env["loadavg_end"][0]
        cells = [_peer_cell(t[th][b]) if b in t.get(th, {}) else "—"
                 for b, _ in PEER_BENCHES for th in ("1", "2")]
        rows.append([f"[`{os.path.basename(rel)}`](bench/{os.path.basename(rel)})",
                     env["date"][:16], peer_machine(env), f"{load[0]:.1f}–{load[1]:.1f}", *cells])
    head = ["file", "date (UTC)", "CPU, BLAS", "load"] + [
        f"{label}, {th} thread{'s' if th == '2' else ''}" for _, label in PEER_BENCHES
        for th in ("1", "2")]
    return ("Step time tostnp / PyTorch (ratio of the medians, paired range in brackets), one "
            "row per committed run of `benchmarks/peer_torch.py`:\n\n"
            + _table(head, rows, ["---"] * 4 + ["---:"] * 4))


def speed_by_cpu(_):
    """README: the latest committed peer runs per CPU (and BLAS), side by side: per benchmark
    the latest idle run (1- and 5-minute load averages at the start at most 1.5: nothing else
    ran on the 2-core machine, the benchmark's own workers not yet started) that has it, or, for a CPU with
    no idle run, its latest run under load, marked as such."""
    runs = {}
    for path in glob.glob(os.path.join(ROOT, "docs/bench/peer_torch*.json")):
        rel = os.path.relpath(path, ROOT)
        d = _load(rel)
        if "timing" in d:
            key = (d["env"].get("cpu", "?"), tuple(d["env"]["blas"]), peer_kernels(d["env"]))
            runs.setdefault(key, []).append((max(d["env"]["loadavg_start"][:2]) <= 1.5, rel, d))
    rows, misses = [], []
    for (cpu, blas, kernels), rs in sorted(runs.items()):
        idle = any(r[0] for r in rs)
        rs = sorted((r for r in rs if r[0] == idle), key=lambda r: r[2]["env"]["date"])
        cells, used, slower = [], [], []
        for b, label in PEER_BENCHES:
            for th in ("1", "2"):
                have = [r for r in rs if b in r[2]["timing"].get(th, {})]
                cells.append(_peer_cell(have[-1][2]["timing"][th][b]) if have else "—")
                ratio = have[-1][2]["timing"][th][b]["ratio_of_medians"] if have else None
                if ratio is not None and ratio > 1.0 and idle:
                    slower.append(f"{label.split()[-1]} at {th} thread{'s' * (th != '1')} "
                                  f"({ratio:.2f}×)")
                if have and have[-1] not in used:
                    used.append(have[-1])
        loads = [x for _, _, d in used for x in (d["env"]["loadavg_start"][0],
                                                 d["env"]["loadavg_end"][0])]
        load = f"load {min(loads):.1f}–{max(loads):.1f}" if loads else ""
        if idle:
            misses.append(f"{cpu} ({'; '.join(blas)}; {kernels}): "
                          + (", ".join(slower) if slower else "none"))
        rows.append([f"{cpu}, {rs[-1][2]['env']['host_cpus']} CPUs", "; ".join(blas), kernels,
                     *cells,
                     f"idle ({load})" if idle
                     else f"**measured under shared load** ({load}): not a speed claim",
                     ", ".join(f"[`{os.path.basename(rel)}`]({rel})" for _, rel, _ in used)])
    return _table(["CPU", "NumPy's BLAS", "compiled loops", "LM, 1 thread", "LM, 2 threads",
                   "digits, 1 thread", "digits, 2 threads", "conditions", "files"], rows,
                  ["---", "---", "---", "---:", "---:", "---:", "---:", "---", "---"]) \
        + "\n\nSlower than PyTorch (above 1.0×) in the idle runs above: " + "; ".join(misses) + "."


def peer_anatomy(_):
    """docs/peer-torch.md: where the time of a step goes, from every committed peer run that
    has an anatomy (``benchmarks/peer_torch.py --anatomy``)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs/bench/peer_torch*.json"))):
        rel = os.path.relpath(path, ROOT)
        d = _load(rel)
        env = d["env"]
        for key, r in d.get("anatomy", {}).items():
            if not key.endswith("@1"):    # a step in shards on several threads: see below
                continue
            a, t = r["tostnp"], r["torch"]
            n = a["numpy_calls"]
            rows.append([f"[`{os.path.basename(rel)}`](bench/{os.path.basename(rel)})",
                         f"{env.get('cpu', '?')}; {'; '.join(env['blas'])}",
                         f"{env['loadavg_start'][0]:.1f}–{env['loadavg_end'][0]:.1f}",
                         key.replace("@", ", ") + " thr",
                         *[f"{1e3 * a[k]:.1f} / {1e3 * t[k]:.1f}"
                           for k in ("step_s", "products_s", "rest_s")],
                         f"{n['matmul']} / {t['numpy_calls']['matmul']:.0f}",
                         f"{n['ufunc']} + {n['function']}; {a['calls']['python_calls']:,}",
                         f"{t['numpy_calls']['aten_ops']:,.0f}"])
    return ("Where a step's time goes, tostnp / PyTorch, ms (medians): the step; its matrix "
            "products (tostnp's: all of them in a pass of their own, alternating with the step; "
            "PyTorch's: its GEMM ops' self time under torch.profiler); the rest (elementwise work, "
            "reductions, copies, the Python or dispatch between them). Calls per step: products; "
            "tostnp's other NumPy calls (ufuncs + array functions) and Python function calls; "
            "PyTorch's aten ops (nested ones included). A load above 2 means the two cores were "
            "shared with other work: read those rows as proportions, not speeds. 1 thread only: at "
            "2 threads tostnp's LM runs its batch in shards on both cores, while its products "
            "pass runs on one (the JSON files keep those rows).\n\n"
            + _table(["file", "CPU; NumPy's BLAS", "load", "step", "step ms", "products ms",
                      "rest ms", "products (calls)", "tostnp NumPy calls; Python calls",
                      "torch aten ops"], rows,
                     ["---", "---", "---:", "---", "---:", "---:", "---:", "---:", "---:",
                      "---:"]))


# --------------------------------------------------------------------------- context scaling
def context_table(_):
    d = _load("docs/bench/context_scaling.json")
    rows = []
    for e in d["train"]:
        rows.append([f"{e['context']:,}", f"{e['step_s']['tostnp']:.3f}",
                     f"{e['step_s']['torch']:.3f}",
                     f"{e['time_ratio']:.2f}× ({e['time_ratio_paired']:.2f})",
                     f"{e['train_rss_mb']['tostnp']:,.0f}", f"{e['train_rss_mb']['torch']:,.0f}",
                     f"{e['memory_ratio']:.2f}×"])
    dec = "; ".join(f"{e['context']:,}: {e['token_s']['tostnp'] * 1e3:.2f} against "
                    f"{e['token_s']['torch'] * 1e3:.2f} ms ({e['time_ratio']:.2f}×)"
                    for e in d.get("decode", []))
    return (f"From [`bench/context_scaling.json`](bench/context_scaling.json), "
            f"{d['machine']['date_utc']} UTC, {context_machine(d['machine'])}; "
            f"{d['machine']['threads']} thread; width {d['model']['width']}, depth "
            f"{d['model']['depth']}, {d['model']['heads']} heads, batch {d['model']['batch']}, "
            f"PyTorch attention `{d['model']['torch_attention']}`:\n\n"
            + _table(["context T", "ToST step (s)", "GPT step (s)", "time ratio (paired)",
                      "ToST memory (MB)", "GPT memory (MB)", "memory ratio"], rows,
                     ["---:"] * 7)
            + (f"\n\nGeneration per token, tostnp against PyTorch with a KV cache (context: "
               f"ms): {dec}." if dec else ""))


def context_runs(_):
    rows = []
    for path in sorted(glob.glob(os.path.join(ROOT, "docs/bench/context_scaling*.json"))):
        rel = os.path.relpath(path, ROOT)
        d = _load(rel)
        at = {e["context"]: e for e in d["train"]}
        e = at.get(d["paper"]["context"])
        rows.append([f"[`{os.path.basename(rel)}`](bench/{os.path.basename(rel)})",
                     d["machine"]["date_utc"], context_machine(d["machine"]),
                     f"{d['machine']['load_1min_at_start']:.1f}",
                     d["model"].get("torch_attention", "sdpa (the default; not recorded)"),
                     "—" if e is None else f"{e['time_ratio']:.2f}×",
                     "—" if e is None else f"{e['memory_ratio']:.2f}×"])
    return ("Every committed run at the paper's context (4,096 tokens; the paper: 0.60× time, "
            "0.41× memory on a GPU):\n\n"
            + _table(["file", "date (UTC)", "CPU, BLAS", "load at start", "PyTorch attention",
                      "time ratio at 4k", "memory ratio at 4k"], rows,
                     ["---"] * 5 + ["---:"] * 2))


# -------------------------------------------------------------------------- training results
RESULTS = [("digits.json", "test_acc", "test accuracy", "{:.2%}"),
           ("lm.json", "val_bpc", "validation bits/char", "{:.3f}"),
           ("lm-char.json", "val_bpc", "validation bits/char", "{:.3f}")]


def results_table(_):
    rows = []
    for name, key, what, fmt in RESULTS:
        d = _load(f"docs/results/{name}")
        per = ", ".join(fmt.format(r[key]) for r in d["runs"])
        extra = (f"; word rate {_pm(d['mean']['word_rate'] * 100, d['std']['word_rate'] * 100, '{:.1f}')}%"
                 if "word_rate" in d["mean"] else "")
        rows.append([f"[`{name}`](results/{name})", f"`{d['command']}`",
                     f"{what} **{_pm(d['mean'][key], d['std'][key], fmt)}**{extra}",
                     per, f"{_pm(d['mean']['train_cpu_s'], d['std']['train_cpu_s'], '{:.1f}')} s CPU, "
                     f"{_pm(d['mean']['train_wall_s'], d['std']['train_wall_s'], '{:.1f}')} s wall",
                     f"{d['cpu_count']} CPUs, load {d['loadavg_1min_end']:.1f} at the end"])
    return _table(["file", "command", "mean ± sd over the seeds", "per seed", "training time per run",
                   "machine"], rows)


def _duration(s):
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s" if s < 300 else f"{s / 60:.0f} min"


def durations(_):
    """README: each command's time, with the machine and load it was measured under."""
    d = _load("docs/results/durations.json")
    rows = []
    for c in d["commands"]:
        cells = []
        for m in c["measurements"]:
            if "from" in m and "key" not in m:      # a run of benchmarks/readme_times.py
                r = _load(m["from"])
                run = m.get("run", c["command"])
                hit = [x for x in r["results"] if x["command"] == run]
                assert len(hit) == 1, f"{m['from']}: no single result for {run!r}"
                secs = hit[0]["ready_s"] if hit[0].get("ready_s") else hit[0]["seconds"]
                t, src = _duration(secs), f"[`{m['from']}`]({m['from']})"
            elif "from" in m:
                r = _load(m["from"])
                t = f"{_duration(r['mean'][m['key']])} ± {r['std'][m['key']]:.0f} s"
                src = f"[`{m['from']}`]({m['from']})"
            else:
                t, src = _duration(m["seconds"]), m["source"]
            cpu = m["cpu"] if m["cpu"] != "not recorded" else "CPU not recorded"
            load = "idle" if m["load"] == "idle" else f"load {m['load'].replace('-', '–')}"
            cells.append(f"**{t}**: {m['what']}; {cpu}, {m['cores']} cores, {load}; {src}")
        rows.append([f"`{c['command']}`" if c["command"].startswith(("python3", "bash", "pip ")) else
                     c["command"], "<br>".join(cells)])
    return ("From [`docs/results/durations.json`](docs/results/durations.json) (time: what was "
            "timed; CPU, 1-minute load average; source):\n\n"
            + _table(["command", "measured"], rows))


def results_brief(_):
    """README: the headline figures, each with its file, CPU and BLAS."""
    dig, lm = _load("docs/results/digits.json"), _load("docs/results/lm.json")
    b = {t["target"]: t["value"] for t in _load("docs/bench/bench_cpu.json")["targets"]}
    bm = _load("docs/bench/bench_cpu.json")["meta"]
    cs = _load("docs/bench/context_scaling.json")
    at = next(e for e in cs["train"] if e["context"] == cs["paper"]["context"])
    return (
        f"- The main job over {len(dig['seeds'])} seeds: test accuracy "
        f"**{dig['mean']['test_acc']:.2%} ± {dig['std']['test_acc']:.2%}**; the LM over "
        f"{len(lm['seeds'])} seeds: **{lm['mean']['val_bpc']:.3f} ± {lm['std']['val_bpc']:.3f} "
        "bits/char** on validation text —\n  [`docs/results/digits.json`](docs/results/digits.json), "
        "[`docs/results/lm.json`](docs/results/lm.json) (2 AMD EPYC cores, OpenBLAS, one thread "
        "per run).\n"
        f"- TSSA's forward+backward time grows "
        f"{b['TSSA fwd+bwd time, N=16384 / N=1024 (ideal 16)']:.1f}× from N = 1,024 to 16,384 "
        f"(ideal 16) and its memory {b['TSSA fwd+bwd peak memory, N=16384 / N=1024 (ideal 16)']:.1f}×; "
        f"softmax attention takes {b['softmax / TSSA fwd+bwd time at N=4096']:.0f}× its time at "
        "N = 4,096 —\n  [`docs/bench/bench_cpu.json`](docs/bench/bench_cpu.json) (2 AMD EPYC cores, "
        f"{bm['blas']}, NumPy {bm['numpy']}).\n"
        f"- The paper's claim at {at['context']:,} tokens of context, on a CPU: ToST's training step "
        f"takes {at['time_ratio']:.2f}× the time of a GPT with PyTorch's fused attention and "
        f"{at['memory_ratio']:.2f}× its memory (the paper, on a GPU: {cs['paper']['time_ratio']:.2f}× "
        f"and {cs['paper']['memory_ratio']:.2f}×) —\n  "
        "[`docs/bench/context_scaling.json`](docs/bench/context_scaling.json) "
        f"({context_machine(cs['machine'])}, {cs['machine']['threads']} thread).")


def experiments_report(_):
    sys.path.insert(0, ROOT)
    from tostnp.experiments import markdown_report
    return markdown_report(os.path.join(ROOT, "docs", "experiments"), "experiments").rstrip("\n") \
        .replace(os.path.join(ROOT, "docs", "experiments") + "/", "")


GENERATORS = {
    "bench-layers": bench_layers, "bench-train": bench_train, "peer-runs": peer_runs,
    "speed-by-cpu": speed_by_cpu, "peer-anatomy": peer_anatomy, "context-table": context_table, "context-runs": context_runs,
    "results": results_table, "durations": durations, "results-brief": results_brief, "experiments": experiments_report,
}
PAGES = ["README.md", "docs/benchmarks.md", "docs/peer-torch.md", "docs/context-scaling.md",
         "docs/training-results.md", "docs/experiments.md"]


def render(text: str) -> str:
    """``text`` with every generated block rewritten from its JSON."""
    def sub(m):
        return m.group(1) + GENERATORS[m.group("name")](m.group("name")) + "\n" + m.group(4)
    return BLOCK.sub(sub, text)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for rel in PAGES:
        path = os.path.join(ROOT, rel)
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = render(old)
        if new != old:
            stale.append(rel)
            if "--check" not in argv:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
    if stale:
        print(("stale (run python3 docs/gen_tables.py): " if "--check" in argv else "rewrote: ")
              + ", ".join(stale))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main())
