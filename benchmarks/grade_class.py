"""Time ``exercises grade`` on a class of N submissions and print the figures.

    python benchmarks/grade_class.py [N] [--jobs 2]

The class cycles through the eleven notebooks (or holds one, ``--notebook NN_name``): a third of
the submissions are the reference solution, a third carry one planted bug per exercise, a third
are left untouched (every exercise raises NotImplementedError). Each is graded in its own child process with the
hidden cases, as `python3 run.py exercises grade` does. The figure is one sample of one machine
under whatever else runs on it: say so when you quote it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tostnp.exercises import grading  # noqa: E402
from tostnp.exercises import notebook as nbk  # noqa: E402


KINDS = ("solved", "bugged", "untouched")


def build_class(folder: Path, n: int, only: str | None = None) -> None:
    stems = [only] if only else [p.stem for p in nbk.notebooks()]
    mutants = nbk.mutants()
    for i in range(n):
        stem = stems[i % len(stems)]
        sections = nbk.solution_sections(stem)
        kind = KINDS[(i // len(stems)) % 3]
        nb = nbk.read(nbk.EXERCISES / f"{stem}.md")
        if kind == "solved":
            nbk.fill(nb, sections)
        elif kind == "bugged":
            bugged = {k: v + "\n\n" + mutants[k][0][1] if k in mutants else v
                      for k, v in sections.items()}
            nbk.fill(nb, bugged)
        d = folder / f"student{i:03d}"
        d.mkdir(parents=True)
        nbk.write(nb, d / f"{stem}.md")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=30)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--notebook", default=None, help="every submission of this notebook (NN_name)")
    ap.add_argument("--isolation", choices=("bwrap", "none"), default=None,
                    help="the sandbox of each child (default: bwrap where it works here)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tostnp-gradebench-") as tmp:
        subs = Path(tmp) / "subs"
        build_class(subs, args.n, args.notebook)
        t0 = time.perf_counter()
        rep = grading.grade_class(subs, Path(tmp) / "out", jobs=args.jobs, log=lambda *a: None,
                                  isolation=args.isolation)
        wall = time.perf_counter() - t0
        results = [json.loads(p.read_text()) for p in (Path(tmp) / "out" / "results").rglob("*.json")]
        per = sorted(r["seconds"] for r in results)
        kinds = sorted({r.get("isolation", "") for r in results})
        full = {}
        for r in results:                      # sanity: which kinds got full marks
            kind = KINDS[(int(r["student"][7:]) // (1 if args.notebook else 11)) % 3]
            ok = all(e["score"] == e["points"] for e in r["exercises"].values())
            full.setdefault(kind, [0, 0])
            full[kind][0] += ok
            full[kind][1] += 1
    print(f"graded {args.n} submissions ({len(rep['notebooks'])} notebooks) on {args.jobs} "
          f"process(es) in {wall:.1f} s wall ({wall / args.n:.2f} s per submission); "
          f"per submission: median {per[len(per) // 2]:.1f} s, max {per[-1]:.1f} s; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
          f"isolation {', '.join(kinds)}")
    print("full marks: " + ", ".join(f"{k} {a}/{b}" for k, (a, b) in sorted(full.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
