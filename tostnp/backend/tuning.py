"""Every tuning constant of the package in one place: sizes of pieces and blocks that change the
speed or the peak memory of a computation, never its result beyond float rounding.

The code reads them here at call time (``tuning.CHUNK``), so a test or a benchmark may set one
(``monkeypatch.setattr(tuning, "SCAN_BLOCK", 3)``) to exercise the blocking or to sweep it.
Each comment says how the value was chosen. Figures of one machine are not kept here: to redo
a measurement, run the command named (``python3 run.py bench`` times the ToST block and the
causal TSSA at the sizes it prints, ``benchmarks/peer_torch.py`` the training steps) with the
constant set to each candidate, on an otherwise idle machine.
"""
from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# the NumPy fast path (tostnp.backend.kernels)
# ---------------------------------------------------------------------------------------------
# Elements per piece of a fused elementwise chain: 512 KiB of float32, so the chain's passes
# re-read a piece from the core's cache. Swept from 8K to 128K elements with the GELU and
# LayerNorm forward+backward at the ToST block benchmark's MLP shape (``bench``): the best of
# that range.
CHUNK = 1 << 17

# Arrays under this many elements (4 MiB of float32) run whole, on one thread: they sit in the
# caches anyway and each piece costs Python calls. Chosen by a measured sweep of the threshold
# (the same kernels and benchmark as CHUNK).
PIECES_MIN = 1 << 20

# Numbers per tiled row of kernels.add_rows (the bias add): k rows of C numbers are added to b
# repeated k times, k = ADD_ROWS_TILE // C. Swept over 4K, 16K and 64K numbers with the adds of
# the models' shapes ((1088, 64) to (16384, 384) float32): 16K and 64K were alike, 20-35%
# faster than the plain broadcast add from 256 columns on; 4K gained little.
ADD_ROWS_TILE = 1 << 14

# The largest model (numbers in its optimised parameters) whose AdamW update runs on flat
# groups (tostnp.train.optim.AdamW, kernels.adamw_update_flat). A step concatenates the
# parameters and the gradients and writes the new parameters into one buffer while the old ones
# are still held: about three copies of the model at once, 12 MB of float32 at this limit. Above
# it the update runs one call per parameter, whose fixed cost is small beside the arithmetic of
# such a model. The gain is the per-call cost of small models (the digits model's update, 54
# parameters and 86K numbers: 0.9 ms per call against 0.3 ms flat). At 4M numbers the context
# benchmark's 2.7M-parameter LM (benchmarks/context_scaling.py, T = 64) peaked 37 MB higher
# than with one call per parameter, so the limit is 1M: the default LM (676K) stays flat.
ADAMW_FLAT_MAX_ELEMENTS = 1 << 20

# The smallest shard of a training batch (tostnp.train.shards: one shard per thread), as the
# size of its activations in the blocks, tokens x width. Below it the step runs whole: a
# shard's fixed cost -- the Python calls of a forward and backward, which hold the GIL -- would
# outweigh what the second core gains, and BLAS's and the kernels' own threads do better.
# Chosen with ``python3 run.py bench --train --threads 1 2`` and the same steps with the limit
# set to 1: at 2 threads the LM preset's step (shards of 16 x 64 tokens x 128 = 131,072) took
# 0.6x its one-thread time in shards against about 0.7x whole; the digits preset's (shards of 32
# images x 16 patches x 64 = 32,768) 9.5-9.6 ms in shards against 7.9-8.1 ms whole. The limit sits
# between the two; it was not swept further.
SHARD_MIN_ELEMENTS = 1 << 16

# The smallest batch slice of the non-causal TSSA layer run on its own thread (tostnp.nn.tssa:
# the layer on slices of the batch, one per thread), as the numbers in the slice's input,
# rows x tokens x width. Below it the layer runs whole: its matrix products on BLAS's threads,
# its elementwise passes on one. Chosen from the forward at 2 threads, B = 4, C = 384, float32,
# sliced and whole (median of 30 calls, 2 runs): at N = 256 (196,608 numbers per slice) the
# slices were slower, from N = 512 (393,216) on faster (N = 512, 1024, 4096); then confirmed
# in ``python3 run.py bench --sizes 256 512 1024 4096``. Not swept further.
LAYER_SLICE_MIN_ELEMENTS = 1 << 18

# ---------------------------------------------------------------------------------------------
# causal TSSA (tostnp.nn.tssa_causal): the blocked prefix and suffix sums
# ---------------------------------------------------------------------------------------------
# Tokens per block of the blocked scan: inside a block one (L, L) triangular matmul, across
# blocks a cumulative sum of T / L block totals. Not swept: L trades the L-fold extra work of
# the matmul against the length of the strided cumulative sum; 32 keeps the extra work small
# and turns the sum into matmuls. (Also sets the float32 accuracy: sums of L, then T / L terms.)
SCAN_BLOCK = 32

# ---------------------------------------------------------------------------------------------
# attention baselines (tostnp.nn.attention, tostnp.nn.flash)
# ---------------------------------------------------------------------------------------------
# Softmax attention runs in blocks of query rows so that no temporary (scores, their gradient)
# exceeds this many elements: 256 MiB of float32. A memory bound, not a speed setting.
ATTENTION_BLOCK_ELEMS = 1 << 26

# Causal softmax attention with at least this many queries uses at least 8 row blocks, so the
# skipped future keys add up (about half of the work and memory). Not swept.
ATTENTION_CAUSAL_MIN_ROWS = 512

# Tokens per chunk of causal linear attention (matmuls inside a chunk, prefix sums over the
# chunks' statistics). Not swept; memory O(B h N (c + p^2 / c)).
LINEAR_CHUNK = 64

# Query rows and keys per block of the memory-efficient (flash) attention. Not swept; the
# cache holds no N x N array whatever the blocks.
FLASH_BLOCK_Q = 128
FLASH_BLOCK_K = 128
