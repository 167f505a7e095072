"""Every tuning constant of the package in one place: sizes of pieces and blocks that change the
speed or the peak memory of a computation, never its result beyond float rounding.

The code reads them here at call time (``tuning.CHUNK``), so a test or a benchmark may set one
(``monkeypatch.setattr(tuning, "SCAN_BLOCK", 3)``) to exercise the blocking or to sweep it.
Each comment says in a line why the value; the figures it was chosen from (one machine's),
with their command and date, are in docs/tuning.md. To redo a choice, run the command named
there with the constant set to each candidate, on an otherwise idle machine.
"""
from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# the NumPy fast path (tostnp.backend.kernels)
# ---------------------------------------------------------------------------------------------
# Elements per piece of a fused elementwise chain: 512 KiB of float32, so the chain's passes
# re-read a piece from the core's cache (the best of a sweep, docs/tuning.md).
CHUNK = 1 << 17

# Arrays under this many elements (1 MiB of float32) run whole, on one thread: they sit in a
# core's cache anyway and each piece costs Python calls. 1M (the earlier value) left the LM's
# MLP arrays in its shards (16 x 64 x 512) whole, larger than the Intel Xeon's 2 MiB L2; 256K
# pieces them: the LM's step at 2 threads 3% faster, at 1 thread unchanged (docs/tuning.md).
PIECES_MIN = 1 << 18

# Numbers per tiled row of kernels.add_rows (the bias add): k rows of C numbers are added to b
# repeated k times, k = ADD_ROWS_TILE // C; faster than the plain broadcast add from 256
# columns on, and larger tiles gained nothing (docs/tuning.md).
ADD_ROWS_TILE = 1 << 14

# Numbers per piece of the non-causal TSSA layer's token statistics (kernels.tssa_statistics)
# and of its backward (kernels.tssa_statistics_backward), on the NumPy kernels (their compiled
# twins, tostnp.backend.compiled, loop over tokens: no pieces): 2 MiB of float32. Smaller pieces
# (CHUNK's 128K) cost more calls, which the layer's batch slices, one per thread, then wait
# for each other to make (the forward at B 4, N 4096, C 384, 2 threads: 1.43x its two
# products against 1.32x with 512K or 2M pieces, the plain lines' 1.32x; docs/tuning.md).
TSSA_PIECE = 1 << 19

# The largest model (numbers in its optimised parameters) whose AdamW update runs on flat
# groups (tostnp.train.optim.AdamW, kernels.adamw_update_flat). A step concatenates the
# parameters and the gradients and writes the new parameters into one buffer while the old ones
# are still held: about three copies of the model at once. Above it the update runs one call
# per parameter, whose fixed cost is small beside the arithmetic of such a model; flat groups
# save the per-call cost of small models, and the limit keeps the default LM (676K) flat
# without the peak memory a higher one cost a larger model (docs/tuning.md).
ADAMW_FLAT_MAX_ELEMENTS = 1 << 20

# The smallest shard of a training batch (tostnp.train.shards: one shard per thread), as the
# size of its activations in the blocks, tokens x width. Below it the step runs whole: a
# shard's fixed cost -- the Python calls of a forward and backward, which hold the GIL -- would
# outweigh what the second core gains, and BLAS's and the kernels' own threads do better.
# The limit sits between the LM preset's shards (faster in shards) and the digits preset's
# (faster whole); not swept further (docs/tuning.md).
SHARD_MIN_ELEMENTS = 1 << 16

# The shards after the first on forked worker processes (tostnp.train.shard_workers; Linux),
# each with its own GIL, instead of threads of this process: the same numbers, bit for bit.
# Their smallest shard: without a shared GIL, the digits preset's step (64 images) was faster
# in shards down to 4 images a shard (4 x 17 tokens x 64 = 4,352 numbers): 3.5 against 3.7 ms
# at B = 8, 5.2 against 7.7 ms at B = 32 (2 threads; docs/tuning.md).
SHARD_PROCESSES = True
SHARD_MIN_ELEMENTS_FORKED = 1 << 12

# The smallest batch slice of the non-causal TSSA layer run on its own thread (tostnp.nn.tssa:
# the layer on slices of the batch, one per thread), as the numbers in the slice's input,
# rows x tokens x width. Below it the layer runs whole: its matrix products on BLAS's threads,
# its elementwise passes on one. Slices were slower at N = 256 and faster from N = 512 on
# (B = 4, C = 384); not swept further (docs/tuning.md).
LAYER_SLICE_MIN_ELEMENTS = 1 << 18

# ---------------------------------------------------------------------------------------------
# causal TSSA (tostnp.nn.tssa_causal): the blocked prefix and suffix sums
# ---------------------------------------------------------------------------------------------
# Tokens per block of the blocked scan: inside a block one (L, L) triangular matmul, across
# blocks a cumulative sum of T / L block totals. Not swept: L trades the L-fold extra work of
# the matmul against the length of the strided cumulative sum; 32 keeps the extra work small
# and turns the sum into matmuls. (Also sets the float32 accuracy: sums of L, then T / L terms.)
SCAN_BLOCK = 32
# Sequences of at most this many tokens are one block: a single (T, T) triangular matmul, no
# block totals; faster at the default LM's 64 tokens, and one block's work grows as T^2, so
# longer sequences keep the blocks (docs/tuning.md).
SCAN_WHOLE = 64

# Numbers per piece of the causal layer's NumPy fast path (tostnp.backend.kernels_causal): whole
# batch rows of (T, C), so that the layer's chain, forward or backward, runs on one piece while
# it sits in a core's cache. The default LM's step at 1 thread: pieces of 16K to 64K numbers
# within 3% of each other, the whole batch at once the slowest (docs/tuning.md).
CAUSAL_PIECE = 1 << 16
# The smallest causal layer, as numbers in w (B x T x C), that runs on the compiled loops
# (tostnp.backend.compiled, where Numba is installed): below it the NumPy kernels (up to
# SCAN_WHOLE tokens) or the plain lines. Above the default LM's 262,144: Numba and its compiler
# hold about 130 MB of the process's memory, and on the LM's step the loops gained too little
# beside the NumPy kernels to pay for that (docs/tuning.md); long sequences gain much more.
CAUSAL_COMPILED_MIN = 1 << 19

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
