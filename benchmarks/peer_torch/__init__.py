#!/usr/bin/env python
"""benchmarks/peer_torch -- training speed of tostnp (from-scratch NumPy) against the same models
in PyTorch eager on CPU.

    # from the repository root, with a separate venv that has torch and the project's
    # requirements (torch is never a dependency of tostnp; this file is outside the package):
    python3 -m venv /tmp/torchvenv && /tmp/torchvenv/bin/pip install torch -r requirements.txt
    PYTHONPATH=. /tmp/torchvenv/bin/python benchmarks/peer_torch.py [--profile]
    # or, the same: PYTHONPATH=. /tmp/torchvenv/bin/python -m benchmarks.peer_torch [--profile]

Every number it prints is measured in the run that prints it.

1. Equivalence. Builds tostnp's default presets (LM "tiny-char" on its default corpus, vision
   "tiny-digits" on the bundled digits, with tostnp's training defaults:
   tostnp.train.defaults.default_train_config) and a PyTorch
   nn.Module version of each (LayerNorm, TSSA -- causal with denom_bias for the LM, non-causal
   for vision, written from tostnp/nn/tssa.py's documented semantics -- LayerScale, tanh-GELU
   MLP, tied LM head, class-attention pooling), copies tostnp's initial weights into it, asserts
   equal parameter counts, and compares the first loss, every gradient, the losses of 3 full
   training steps (clip + lr schedule + AdamW) and the parameters after them, in float32 and
   float64. "stress": LayerScale gammas 1, random temp and denom_bias, so the LM's ToST blocks
   matter (at init their gammas are 1e-5). The ToST block of part 2 is checked the same way.
2. Timing. Each system runs in its own worker process (the tostnp worker never imports torch)
   with the same thread count: NumPy's BLAS via threadpoolctl.threadpool_limits(n, "blas") and
   tostnp's fast path via tostnp.backend.kernels.set_threads(n) (together: what `--threads n` sets),
   torch via torch.set_num_threads(n) (all asserted in the worker). The tostnp worker keeps
   freed memory in the process (backend.keep_freed_memory), as tostnp's training does. After warm-up the parent
   alternates rounds A (tostnp), B (torch), A, B, ...; a round runs k steps (k chosen so a
   round takes ~1 s; one call for the big blocks); the per-step mean of a round is one sample.
   Reported: ratio tostnp/torch of the medians over rounds, the median (min-max) of the
   per-round paired ratios, steps/s, items/s, the 1-min load average during the rounds, the
   phase split of a step, the fresh memory faulted in per step (minor faults, counting
   2 MB for each transparent-huge-page fault), and each worker's memory: its peak RSS over the
   warm-up above its RSS after the imports (for torch: and after one step of a tiny model, which
   sets up its runtime), and for tostnp the NumPy bytes at one step's
   high-water mark (tracemalloc; it cannot see torch's buffers).
   One training step = what tostnp/train/loop.py does per update minus logging/eval/checkpoints:
   task.next_batch(), task.loss_and_grads(), then the loop's own update_step (clip_grad_norm(1.0),
   lr_schedule(), float(loss) + finiteness check, AdamW.step()); torch: the same batch sampler, forward, cross-entropy,
   zero_grad + backward, clip_grad_norm_(1.0), the same lr schedule, loss.item() + check,
   torch.optim.AdamW (default implementation) with the same betas/eps/weight decay and the
   same no-decay parameters.
   Benches: LM step; vision step; the LM step at width 8, batch 1 (same op count, negligible
   FLOPs: the fixed per-step overhead); the TSSA layer alone at the LM's shape; one ToST block
   forward+backward at B=4, N=4096, C=384, h=6, non-causal and causal, and its TSSA layer alone.
   (tostnp's CLI default is all cores, so "2 threads" is both systems at their default here.)
3. --profile (1 thread): cProfile of tostnp's LM and vision steps (inclusive time per layer,
   input validators included), torch.profiler op tables of the torch steps, every GEMM shape of the LM step
   and of the big block timed alone in NumPy/OpenBLAS and torch, the tanh-GELU forward+backward
   alone, and -- if `perf` is installed -- perf samples of each worker by library/category.

Options: --threads 1 2   --rounds 9 (>= 5)   --only lm vision lm_tiny tssa_lm block_nc block_c
         tssa_nc tssa_c   --skip-check   --profile   --profile-only   --no-perf
         --json PATH

The modules: torch_models (the PyTorch models), weights (tostnp names <-> torch parameters),
setups (both systems' tasks, steps and blocks), checks (part 1), benches (what a worker times),
worker (a worker process; benchmarks/workers.py has the protocol, shared with
context_scaling.py), timing (part 2: rounds, summaries, tables), profiling (part 3), __main__
(the command line).
"""
