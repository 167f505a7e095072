"""Repeat a job over seeds and summarise it: one implementation for every "over seeds" result.

A number shown to a reader is a distribution: the README's results, the experiments and the
``--seeds`` option of the CLI all run a job once per seed and report mean ± standard deviation
(sample standard deviation, ``ddof=1``) of every numeric metric, together with the seeds used.

    >>> summary = run_over_seeds(lambda s: {"acc": 0.9 + 0.01 * s}, parse_seeds("0-2"),
    ...                          progress=False)
    >>> summary["seeds"], round(summary["mean"]["acc"], 4), round(summary["std"]["acc"], 4)
    ([0, 1, 2], 0.91, 0.01)
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

__all__ = ["parse_seeds", "run_over_seeds", "summarise"]


def parse_seeds(text: str | int | Iterable[int]) -> list[int]:
    """Seeds from ``"3"``, ``"0-4"`` (inclusive), ``"0,2,7"`` or a mix ``"0-2,9"``; ints pass through.

    Raises ``ValueError`` naming the text for anything else (empty, negative, reversed range,
    repeated seed).
    """
    if isinstance(text, bool):
        raise ValueError(f"seeds: expected text like '0-4' or '0,2,7', got {text!r}")
    if isinstance(text, int):
        seeds = [text]
    elif isinstance(text, str):
        seeds = []
        parts = [p.strip() for p in text.split(",")]
        if not text.strip() or any(not p for p in parts):
            raise ValueError(f"seeds: expected text like '0-4' or '0,2,7', got {text!r}")
        for part in parts:
            lo, sep, hi = part.partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise ValueError(f"seeds: expected text like '0-4' or '0,2,7', got {text!r}") from None
            if b < a:
                raise ValueError(f"seeds: range {part!r} runs backwards in {text!r}")
            seeds.extend(range(a, b + 1))
    else:
        seeds = [int(s) for s in text]
    if not seeds:
        raise ValueError("seeds: no seed given")
    if any(s < 0 for s in seeds):
        raise ValueError(f"seeds: seeds must be >= 0, got {seeds}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: a seed is repeated in {seeds}")
    return seeds


def summarise(runs: list[dict], seeds: list[int]) -> dict:
    """Mean and sample standard deviation (ddof=1; 0.0 for one run) of each numeric key.

    Keys whose values are not all real numbers (strings, lists, None) are kept in ``runs`` only.
    """
    if len(runs) != len(seeds):
        raise ValueError(f"summarise: {len(runs)} runs for {len(seeds)} seeds")
    keys = [k for k in (runs[0] if runs else {})
            if all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                   for r in runs)]
    mean, std = {}, {}
    for k in keys:
        vals = [float(r[k]) for r in runs]
        m = math.fsum(vals) / len(vals)
        mean[k] = m
        std[k] = (math.sqrt(math.fsum((v - m) ** 2 for v in vals) / (len(vals) - 1))
                  if len(vals) > 1 else 0.0)
    return {"seeds": list(seeds), "runs": list(runs), "mean": mean, "std": std}


def run_over_seeds(fn: Callable[[int], dict], seeds, desc: str = "seeds",
                   progress: bool | None = None) -> dict:
    """Call ``fn(seed) -> dict of metrics`` for each seed (progress bar), then :func:`summarise`.

    ``seeds`` is anything :func:`parse_seeds` accepts. ``progress=None`` shows the bar only on a
    terminal (tqdm's ``disable=None``); ``False`` never shows it.
    """
    from tqdm.auto import tqdm

    seeds = parse_seeds(seeds)
    runs = []
    bar = tqdm(seeds, desc=desc, unit="seed", dynamic_ncols=True,
               disable=(None if progress is None else not progress))
    for seed in bar:
        result = fn(seed)
        if not isinstance(result, dict):
            raise TypeError(f"run_over_seeds: fn({seed}) must return a dict of metrics, "
                            f"got {type(result).__name__}")
        runs.append(dict(result))
    bar.close()
    return summarise(runs, seeds)
