"""Reporting for ``python -m tostnp bench``: the targets (ratios measured in one run), a
plain-text table and log-log plots, from the result dict of
:func:`tostnp.bench.measure.run_benchmark`. Plots are written atomically by :mod:`tostnp.io.atomic`."""
from __future__ import annotations

import os

import numpy as np

from ..io.atomic import atomic_savefig
from .measure import LAYERS, LABELS

__all__ = ["evaluate_targets", "format_report", "write_plots"]


def _get(result, name, N, key):
    e = result["layers"].get(name, {}).get(str(N))
    return None if e is None or key not in e else e[key]


def _target(desc, value, op, limit, unit="x"):
    if value is None:
        return {"target": desc, "value": None, "limit": limit, "status": "not measured"}
    ok = value <= limit if op == "<=" else value >= limit
    return {"target": desc, "value": value, "limit": limit, "op": op, "unit": unit,
            "status": "PASS" if ok else "MISS"}


def evaluate_targets(result: dict) -> list:
    """The benchmark's targets (ratios from one run), from the measured numbers (None where a
    size was not measured)."""
    ref = result["reference_matmuls"]

    def ratio(a, b):
        return None if a is None or b is None or b <= 0 else a / b

    t16, t1 = _get(result, "tssa", 16384, "fwdbwd_s"), _get(result, "tssa", 1024, "fwdbwd_s")
    m16 = _get(result, "tssa", 16384, "fwdbwd_peak_bytes")
    m1 = _get(result, "tssa", 1024, "fwdbwd_peak_bytes")
    sm_t, ts_t = _get(result, "softmax", 4096, "fwdbwd_s"), _get(result, "tssa", 4096, "fwdbwd_s")
    sm_m = _get(result, "softmax", 4096, "fwdbwd_peak_bytes")
    ts_m = _get(result, "tssa", 4096, "fwdbwd_peak_bytes")
    r4 = ref.get("4096", {})
    ts_f = _get(result, "tssa", 4096, "fwd_s")
    dec = result.get("decode", {})
    d_hi = dec.get("8192", {}).get("per_token_s")
    d_lo = dec.get("256", {}).get("per_token_s")
    return [
        _target("TSSA fwd+bwd time, N=16384 / N=1024 (ideal 16)", ratio(t16, t1), "<=", 20.0),
        _target("TSSA fwd+bwd peak memory, N=16384 / N=1024 (ideal 16)", ratio(m16, m1),
                "<=", 18.0),
        _target("softmax / TSSA fwd+bwd time at N=4096", ratio(sm_t, ts_t), ">=", 5.0),
        _target("softmax / TSSA fwd+bwd peak memory at N=4096", ratio(sm_m, ts_m), ">=", 10.0),
        _target("TSSA forward / its 2 C x C matmuls at N=4096", ratio(ts_f, r4.get("fwd_2mm_s")),
                "<=", 1.25),
        _target("TSSA fwd+bwd / the 6 projection matmuls at N=4096",
                ratio(ts_t, r4.get("fwdbwd_6mm_s")), "<=", 1.5),
        _target("decoder per-token time, context 8192 / context 256", ratio(d_hi, d_lo),
                "<=", 1.5),
    ]


_PAIRED_LABELS = {"tssa_fwd_over_2mm": "forward / its 2 matmuls",
                  "tssa_fwdbwd_over_6mm": "fwd+bwd / its 6 matmuls"}


def _fmt_t(v):
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}" if v >= 1e-3 else f"{v * 1e3:.3f}"


def _fmt_mb(v):
    return "-" if v is None else f"{v / 2**20:.1f}"


def format_report(result: dict) -> str:
    """A plain-text table (ms, MB) and the targets."""
    m = result["meta"]
    lines = [f"tostnp bench: B={m['batch']} C={m['width']} h={m['heads']} {m['dtype']} on "
             f"{m['device']} ({m['machine']}); load average {m['loadavg_before']} -> "
             f"{m['loadavg_after']}",
             f"compiled kernels: {m.get('compiled_kernels', 'not recorded')}", ""]
    head = f"{'N':>6} {'layer':<16}{'fwd ms':>10}{'fwd+bwd ms':>12}{'fwd MB':>10}{'f+b MB':>10}"
    lines += [head, "-" * len(head)]
    for N in m["sizes"]:
        r = result["reference_matmuls"][str(N)]
        lines.append(f"{N:>6} {'2 / 6 matmuls':<16}{_fmt_t(r['fwd_2mm_s']):>10}"
                     f"{_fmt_t(r['fwdbwd_6mm_s']):>12}{'':>10}{'':>10}")
        for name in LAYERS:
            e = result["layers"][name][str(N)]
            if "skipped" in e:
                lines.append(f"{'':>6} {name:<16}  skipped: {e['skipped']}")
                continue
            lines.append(f"{'':>6} {name:<16}{_fmt_t(e['fwd_s']):>10}{_fmt_t(e['fwdbwd_s']):>12}"
                         f"{_fmt_mb(e['fwd_peak_bytes']):>10}"
                         f"{_fmt_mb(e['fwdbwd_peak_bytes']):>10}")
    lines += ["", "decoder (tssa_decode_step) per-token time:"]
    for T, e in result["decode"].items():
        lines.append(f"  context {T:>6}: {e['per_token_s'] * 1e6:8.1f} us")
    if result["train"] and "skipped" not in result["train"]:
        lines += ["", "training throughput (forward + backward + AdamW, synthetic data):"]
        for k, e in result["train"].items():
            rate = (f"{e['images_per_s']:.0f} images/s" if "images_per_s" in e
                    else f"{e['tokens_per_s']:.0f} tokens/s")
            lines.append(f"  {k:<20} batch {e['batch']:>3}: {e['step_s'] * 1e3:8.1f} ms/step, "
                         f"{rate}")
    paired = [(N, name, v) for N, d in result.get("paired", {}).items() for name, v in d.items()]
    if paired:
        lines += ["", "the TSSA layer over its matrix products, paired round by round "
                      "(median, range):"]
        for N, name, v in paired:
            lines.append(f"  N={N:>6} {_PAIRED_LABELS.get(name, name)}: {v['median']:.2f} "
                         f"({v['min']:.2f}-{v['max']:.2f}) over {len(v['per_round'])} rounds")
    lines += ["", "targets:"]
    for t in result["targets"]:
        v = "-" if t["value"] is None else f"{t['value']:.2f}"
        lim = f"{t.get('op', '')} {t['limit']:g}"
        lines.append(f"  [{t['status']:^12}] {t['target']}: {v} (target {lim.strip()})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------------
def _ideal_lines(ax, Ns, anchor_N, anchor_v):
    """Dotted O(N) and O(N^2) guides through (anchor_N, anchor_v)."""
    Ns = np.asarray(Ns, dtype=float)
    ax.plot(Ns, anchor_v * Ns / anchor_N, ":", color="gray", label="O(N)")
    ax.plot(Ns, anchor_v * (Ns / anchor_N) ** 2, "--", color="lightgray", label="O(N²)")


def write_plots(result: dict, out: str, prefix: str = "bench") -> list:
    """Log-log time and memory against N, and decoder time against context -> file paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    m = result["meta"]
    title = f"B={m['batch']}, C={m['width']}, h={m['heads']}, {m['dtype']}, {m['device']}"
    paths = []
    Ns = m["sizes"]
    styles = {"tssa": "C0", "tssa_causal": "C2", "softmax": "C3", "linear": "C1"}

    for kind, key, ylabel, fname in (
            ("time", "fwdbwd_s", "forward + backward time (s)", f"{prefix}_time.png"),
            ("memory", "fwdbwd_peak_bytes", "forward + backward peak memory (MB)",
             f"{prefix}_memory.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        scale = 1.0 if kind == "time" else 1.0 / 2 ** 20
        for name in LAYERS:
            pts = [(N, _get(result, name, N, key)) for N in Ns]
            pts = [(N, v * scale) for N, v in pts if v is not None]
            if pts:
                ax.plot(*zip(*pts), "o-", color=styles[name], label=LABELS[name])
            if kind == "time":
                fp = [(N, _get(result, name, N, "fwd_s")) for N in Ns]
                fp = [(N, v) for N, v in fp if v is not None]
                if fp and name in ("tssa", "softmax"):
                    ax.plot(*zip(*fp), "x--", color=styles[name], alpha=0.6,
                            label=f"{LABELS[name]} (forward)")
        if kind == "time":
            ref = [(N, result["reference_matmuls"][str(N)]["fwdbwd_6mm_s"]) for N in Ns]
            ax.plot(*zip(*ref), "s-", color="k", alpha=0.5, ms=3, label="6 projection matmuls")
        anchor = [(N, _get(result, "tssa", N, key)) for N in Ns]
        anchor = [(N, v * scale) for N, v in anchor if v is not None]
        if anchor:
            _ideal_lines(ax, Ns, anchor[0][0], anchor[0][1])
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{kind} vs N ({title})", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out, fname)
        atomic_savefig(fig, path, dpi=90)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    Ts = [int(T) for T in result["decode"]]
    vals = [result["decode"][str(T)]["per_token_s"] * 1e6 for T in Ts]
    ax.plot(Ts, vals, "o-", color="C0", label="tssa_decode_step (recurrent state)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, max(vals) * 1.3)
    ax.set_xlabel("context length (tokens already consumed)")
    ax.set_ylabel("time per token (µs)")
    ax.set_title(f"O(1) decoder ({title})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(out, f"{prefix}_decode.png")
    atomic_savefig(fig, path, dpi=90)
    plt.close(fig)
    paths.append(path)
    return paths
