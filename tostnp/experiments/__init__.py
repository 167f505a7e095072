"""Experiments that answer the ICLR reviewers' questions, measured with the same code for every
token mixer: ``python -m tostnp experiment NAME [--quick] [--out DIR] [--seeds 0-2]``.

Each experiment module provides NAME, QUESTION, FULL and QUICK settings, ``run(recorder,
settings, seeds)``, ``table(result) -> markdown`` and ``plot(result, path)``; the runner
(:func:`run_experiment`) repeats every condition over the seeds (mean ± sample sd), writes
``NAME.json`` atomically after every condition and ``NAME.png`` at the end.
"""
from __future__ import annotations

import importlib

__all__ = ["EXPERIMENTS", "get_experiment", "run_experiment", "markdown_report"]

# name -> module (in the order docs/experiments.md shows them)
EXPERIMENTS = {
    "mixers-digits": "mixers_digits",
    "mixers-char": "mixers_char",
    "scaling": "scaling",
    "needle": "needle",
    "long-range": "long_range",
    "registers": "registers",
}


def get_experiment(name: str):
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"{__name__}.{EXPERIMENTS[name]}")


def run_experiment(name: str, out_dir: str, *, quick: bool = False, seeds="0-2",
                   command: str = "") -> dict:
    """Run experiment ``name`` -> the result dict (also in ``out_dir/NAME.json``, plot in
    ``out_dir/NAME.png``)."""
    from ..train.seeds import parse_seeds
    from .common import Recorder
    mod = get_experiment(name)
    seeds = parse_seeds(seeds)
    settings = mod.QUICK if quick else mod.FULL
    rec = Recorder(name, out_dir, quick=quick, seeds=seeds, settings=settings, command=command,
                   question=mod.QUESTION)
    mod.run(rec, settings, seeds)
    rec.save(complete=True, table=mod.table(rec.data))
    mod.plot(rec.data, rec.path[:-len(".json")] + ".png")
    return rec.data


def markdown_report(out_dir: str, link_dir: str | None = None) -> str:
    """The results of every finished experiment in ``out_dir`` as Markdown: per experiment its
    question, the command, the table (mean ± sd over the listed seeds), the figure, the
    wall/CPU time and load. ``link_dir``: how the figures are referred to (default out_dir)."""
    import json
    import os
    link_dir = out_dir if link_dir is None else link_dir
    parts = []
    for name in EXPERIMENTS:
        path = os.path.join(out_dir, f"{name}.json")
        if not os.path.exists(path):
            continue
        with open(path) as f:
            data = json.load(f)
        load = data.get("loadavg_1min", {})
        status = "" if data.get("complete") else " **(incomplete: the conditions finished so far)**"
        parts.append(
            f"### `{name}`{status}\n\n{data['question']}\n\n```bash\n{data['command']}\n```\n\n"
            f"{get_experiment(name).table(data)}\n\n"
            f"Seeds {data['seeds']}; {data['wall_s'] / 60:.1f} min wall, "
            f"{data['cpu_s'] / 60:.1f} min CPU; 1-min load average {load.get('start')} at the "
            f"start, {load.get('end')} at the end (a shared 2-core machine).\n\n"
            + (f"![{name}]({link_dir}/{name}.png)\n"
               if os.path.exists(os.path.join(out_dir, f"{name}.png")) else ""))
    return "\n".join(parts)
