"""The machine a timing was taken on, for every benchmark's JSON: CPU model and vendor, NumPy and
its BLAS (library, version, the kernel set it picked, threading), Python, the load average.

A figure says little without the CPU and the BLAS behind it: the same step runs at different
ratios to PyTorch on an AMD EPYC and on an Intel Xeon, with OpenBLAS picking "Haswell" kernels on
one and "SkylakeX" (AVX-512) on the other. :func:`cpu_slug` names a result file by its CPU, so
runs on different CPUs sit side by side instead of overwriting each other.
"""
from __future__ import annotations

import os
import platform
import re

__all__ = ["machine_info", "cpu_slug", "loadavg"]


def loadavg():
    """The 1-, 5- and 15-minute load averages rounded to 2 digits (None where there is none)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpuinfo() -> tuple:
    """(model name, vendor) from /proc/cpuinfo (Linux), else from ``platform``."""
    model = vendor = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model is None:
                    model = val.strip()
                elif key == "vendor_id" and vendor is None:
                    vendor = val.strip()
                if model and vendor:
                    break
    except OSError:
        pass
    if not model:                    # macOS, Windows: the best the standard library knows
        model = platform.processor() or platform.machine() or "unknown CPU"
    if not vendor:
        vendor = next((v for v in ("Intel", "AMD", "Apple") if v.lower() in model.lower()),
                      "unknown")
    return model, {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vendor, vendor)


def cpu_model() -> str:
    """The CPU's model name ("Intel(R) Xeon(R) Processor", "AMD EPYC 7B13", ...)."""
    return _cpuinfo()[0]


def machine_info() -> dict:
    """What a benchmark JSON records about the machine (every field measured here and now)."""
    import numpy as np
    from ..backend.compiled import describe as compiled_status
    model, vendor = _cpuinfo()
    blas = []
    try:
        from threadpoolctl import threadpool_info
        blas = [{k: i.get(k) for k in ("internal_api", "prefix", "version", "architecture",
                                        "threading_layer", "num_threads")}
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        pass
    return {"cpu": model, "cpu_vendor": vendor, "cpu_slug": cpu_slug(model),
            "logical_cpus": os.cpu_count(), "system": platform.system(),
            "arch": platform.machine(), "python": platform.python_version(),
            "numpy": np.__version__, "numpy_blas": blas,
            "blas": "; ".join(f"{b['internal_api']} {b['version']} ({b['architecture']}, "
                              f"{b['prefix']})" for b in blas),
            "env_OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "compiled_kernels": compiled_status(),
            "loadavg": loadavg()}


def cpu_slug(model: str | None = None) -> str:
    """A file-name-safe short name of the CPU: "intel-xeon", "amd-epyc", "apple-m2", ...

    Brand words ((R), (TM), "Processor", "CPU", core counts, frequencies) are dropped, so the
    slug names the CPU line rather than one listing of it."""
    if model is None:
        model = _cpuinfo()[0]
    s = re.sub(r"\((r|tm)\)", " ", model.lower())
    s = re.sub(r"@.*$", " ", s)                                    # "@ 2.60GHz"
    s = re.sub(r"\b(processor|cpu|\d+-core|with radeon.*)\b", " ", s)
    s = re.sub(r"[^a-z0-9]+", "-", s).strip("-")
    return s[:40].strip("-") or "unknown-cpu"
