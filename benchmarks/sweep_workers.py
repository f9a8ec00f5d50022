"""Sweep speed with worker processes: the same what-if sweep planned in 1 and in N processes.

    python benchmarks/sweep_workers.py [--points 100] [--workers 2]

Target (issue 20, 2 cores): a 100-point sweep at least 1.8x faster with 2 workers than with 1. The points are
Llama-3-8B on 8 to 800 H100s (GPU counts in steps of 8), so every point is a full search. Prints both wall
times, the speed-up and whether the rows agree.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import machine_line  # noqa: E402

from planner.studies.sweep import Job, Varied, sweep  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    job = Job("llama3-8b", "h100-sxm", 8, 4096, 1600)
    values = [str(8 * (i + 1)) for i in range(args.points)]
    times, frames = {}, {}
    for workers in (1, args.workers):
        start = time.perf_counter()
        frames[workers] = sweep(job, Varied.GPUS, values, workers=workers)
        times[workers] = time.perf_counter() - start
    same = frames[1].equals(frames[args.workers])
    print(f"{args.points}-point sweep of {job.model} (gpus 8..{8 * args.points}); {machine_line()}")
    print(f"  1 worker        {times[1]:8.2f} s")
    print(f"  {args.workers} workers       {times[args.workers]:8.2f} s")
    print(f"  speed-up        {times[1] / times[args.workers]:8.2f}x (target >= 1.8x with 2 workers); "
          f"rows {'identical' if same else 'DIFFER'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
