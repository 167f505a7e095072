"""Experiments that answer the ICLR reviewers' questions, measured with the same code for every
token mixer: ``python -m tostnp experiment NAME [--quick] [--out DIR] [--seeds 0-2]``.

Each experiment module provides NAME, QUESTION, FULL and QUICK settings, ``run(recorder,
settings, seeds)``, ``table(result) -> markdown`` and ``plot(result, path)``; the runner
(:func:`run_experiment`) repeats every condition over the seeds (mean ± sample sd), writes
``NAME.json`` atomically after every condition and ``NAME.png`` at the end.
"""
from __future__ import annotations

import importlib

__all__ = ["EXPERIMENTS", "get_experiment", "run_experiment"]

# name -> module (in the order the README shows them)
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
    from ..seeds import parse_seeds
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
