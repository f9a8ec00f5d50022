"""Chain-table search speed (issue 31): the uniform chain search and the per-layer search (`plan --costs chain.csv
--per-layer`) of VGG-16 on 8 A100-40GB, global batch 256, from benchmarks/data/chains/vgg16-a100-formula.csv.

    python benchmarks/chain_time.py [--repeat N]

Prints the machine line (its load), then per search the median CPU seconds of N runs (default 1) in this process,
the candidates and stage frontiers it worked through, and the per-layer target (2 s); then the CPU seconds (user +
system, median of N) of the whole command `meshplan plan --costs ... --per-layer` in a fresh process (start-up,
imports, reading the table, printing). CPU seconds, not wall: a loaded machine stretches wall time more than CPU
time. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import machine_line  # noqa: E402

from planner.api import plan_chain_table  # noqa: E402

TABLE = Path(__file__).resolve().parent / "data" / "chains" / "vgg16-a100-formula.csv"
TARGET_S = 2.0  # issue 31: the per-layer search of VGG-16 on 8 GPUs


def timed(per_layer: bool, repeat: int) -> tuple[float, int, float]:
    """(median CPU seconds, frontiers worked through (0 for the uniform search), best step seconds)."""
    cpu, work, step = [], [0], 0.0

    def progress(done: int, total: int) -> None:
        work[0] = total

    for _ in range(repeat):
        start = time.process_time()
        plans = plan_chain_table(TABLE, "a100-40gb", 8, 256, per_layer=per_layer, progress=progress)
        cpu.append(time.process_time() - start)
        step = plans.plans[0].step_time_s
    return statistics.median(cpu), work[0], step


def whole_command(repeat: int) -> float:
    """Median CPU seconds (user + system) of `python -m planner plan --costs TABLE --per-layer ...` run from this
    tree in a child process."""
    cmd = [sys.executable, "-m", "planner", "plan", "--costs", str(TABLE), "--hardware", "a100-40gb", "--gpus", "8",
           "--global-batch", "256", "--seq-len", "1", "--per-layer"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    cpu = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    print(machine_line())
    print(f"VGG-16 chain ({TABLE.name}) on 8 x a100-40gb, global batch 256")
    print(f"  {'search':<10} {'CPU s':>7} {'frontiers':>10} {'best step s':>12}  target")
    for name, per_layer in (("uniform", False), ("per-layer", True)):
        cpu, work, step = timed(per_layer, args.repeat)
        target = (f"<= {TARGET_S:g} s: {'met' if cpu <= TARGET_S else 'NOT met'}" if per_layer else "-")
        print(f"  {name:<10} {cpu:7.2f} {work or '-':>10} {step:12.4f}  {target}")
    print(f"  whole `meshplan plan --costs ... --per-layer` process: {whole_command(args.repeat):.2f} CPU s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
