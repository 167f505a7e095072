"""Run one of the experiments that answer the ICLR reviewers (token mixers compared on the same
budget, over seeds). Writes NAME.json (mean ± sd over the seeds, per-seed runs, settings, the
command, time and load) and NAME.png into --out, and prints the results table.

Experiments:
  mixers-digits  test accuracy, time and memory of every mixer on the digits classifier
  mixers-char    validation bits/char against time for every mixer on the char LM, at equal
                 parameters and at equal training time
  scaling        time and peak memory of a training step against the sequence length
  needle         one rare outlier token decides the label: accuracy against length and norm
  long-range     ListOps-style nested operators, length 512, one hyper-parameter set for all
  registers      the vision model with 0 and 4 register tokens; Pi maps side by side

Examples::

    python -m tostnp experiment needle --quick            # smoke version, seconds
    python -m tostnp experiment mixers-digits             # full size, seeds 0-2: runs/experiments
    python -m tostnp experiment mixers-digits --out docs/experiments   # replace the committed results
"""
from __future__ import annotations

import os

from .options import bounded, add_old_spelling
from ..experiments import EXPERIMENTS

# Written under runs/ (ignored by git); the committed results in docs/experiments are replaced
# only when asked for with --out docs/experiments.
DEFAULT_OUT = os.path.join("runs", "experiments")


def add_arguments(parser) -> None:
    parser.add_argument("name", choices=list(EXPERIMENTS), help="which experiment")
    parser.add_argument("--quick", action="store_true",
                        help="smoke version (tiny sizes, seconds): checks the pipeline only")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory [{DEFAULT_OUT}]")
    parser.add_argument("--seeds", default="0-2",
                        help="seeds to average over, e.g. 0-4 or 0,3,7 [0-2]")
    threads = parser.add_argument("--threads", dest="blas_threads",
                                  type=bounded(int, 0, 1024), default=1,
                                  help="CPU threads for BLAS [1]: the models are small and a "
                                       "shared machine slows extra threads down; 0 = BLAS "
                                       "default")
    add_old_spelling(parser, "--blas-threads", threads)


def run(args) -> int:
    from ..experiments import run_experiment, get_experiment
    from ..train.seeds import parse_seeds
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as e:
        raise ValueError(f"--seeds: {e}") from None
    from .options import how_to_run
    cmd = how_to_run("experiment", args.name, "--quick" if args.quick else "",
                     *(() if args.seeds == "0-2" else ("--seeds", args.seeds)),
                     *(() if args.out == DEFAULT_OUT else ("--out", args.out)))

    def go():
        return run_experiment(args.name, args.out, quick=args.quick, seeds=seeds, command=cmd)
    if args.blas_threads and args.blas_threads > 0:
        from threadpoolctl import threadpool_limits
        with threadpool_limits(limits=args.blas_threads, user_api="blas"):
            data = go()
    else:
        data = go()
    print(get_experiment(args.name).table(data))
    print(f"seeds {data['seeds']}; wall {data['wall_s']:.0f} s, CPU {data['cpu_s']:.0f} s, "
          f"1-min load average {data['loadavg_1min']['start']} -> {data['loadavg_1min']['end']}")
    base = os.path.join(args.out, args.name)
    print(f"wrote {base}.json and {base}.png")
    return 0
