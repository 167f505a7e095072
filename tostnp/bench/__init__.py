"""Benchmark TSSA against softmax and linear attention: time and memory against the length N.

``python -m tostnp bench`` measures, at width C = 384, 6 heads, batch 4, float32 by default:

* forward and forward+backward wall time and peak memory of the TSSA layer (non-causal and
  causal), softmax attention (non-causal) and linear attention (tostnp's own, elu + 1), for N
  from 256 to 16384; sizes whose estimated memory exceeds ``--max-memory-gb`` are skipped and
  recorded as skipped (softmax attention keeps a (B, h, N, N) matrix: 25 GB at N = 16384);
* the reference matmuls measured in the same run at every N: the TSSA layer's two C x C
  projections (forward: x @ W_u and a @ W_o) and the six matmuls of their forward and backward
  (four shaped like x @ W -- two forward, dx = g @ W^T twice -- and two shaped like x^T @ dy, the
  weight gradients). These are plain ``@`` calls on (B*N, C) arrays; on OpenBLAS the x^T @ dy
  shape runs several times slower than x @ W, and that is part of the baseline as measured;
* the per-token time of the O(1) recurrent decoder (:func:`tostnp.nn.tssa_decode_step`)
  against the context length, after prefilling the state with the causal forward;
* the training throughput (forward, backward and AdamW step, synthetic data) of the default
  models ("tiny-digits" vision classifier, "tiny-lm" language model).

Timing: warm-up, then the median of ``--repeats`` runs; the runs are interleaved in rounds
(each measurement once per round), so a change of load during the run hits every size alike.
The TSSA layer's time over its products' time is also given round by round ("paired": the two
measured moments apart, :func:`paired_ratios`), with its median and range.
Peak memory: a separate run under ``tracemalloc`` (NumPy reports its buffers to it) on CPU, or
the bytes the CuPy memory pool holds after a run that started from an empty pool on GPU; both
count what the call allocates, not its inputs. Writes ``bench_<device>.json`` and log-log plots
(``bench_<device>_time.png``, ``_memory.png``, ``_decode.png``) atomically into ``--out``, prints
a table and the targets (tostnp/bench/report.py) with PASS/MISS. ``--device gpu`` without a usable GPU prints
why and exits with status 2, writing nothing.
"""
from __future__ import annotations

from .. import backend  # noqa: F401  (tests replace backend.gpu_available through here)
from .measure import (DEFAULT_SIZES, DEFAULT_CONTEXTS, LAYERS, LABELS, run_benchmark,
                      paired_ratios, estimate_bytes)
from .report import evaluate_targets, format_report, write_plots

__all__ = ["run_benchmark", "evaluate_targets", "format_report", "write_plots", "LAYERS",
           "LABELS", "DEFAULT_SIZES", "DEFAULT_CONTEXTS", "estimate_bytes", "paired_ratios"]
