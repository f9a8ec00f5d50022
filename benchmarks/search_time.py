"""Search speed and start-up (issue 36): per job, the search's seconds and the whole process's CPU seconds, the
candidates priced, simulated and pruned, and the machine's load beside each figure.

    python benchmarks/search_time.py [--repeat N] [--runtime megatron|nemo|torchtitan|deepspeed|any|both|all]
                                     [--workers W] [--offload-auto] [--only NAME ...]

Each job is planned N times (default 3) in this process, for every runtime's space (`all`, the default: Megatron-LM,
NeMo, torchtitan, DeepSpeed, and the research space `any`, the largest; `both`: Megatron-LM and the research space); a
job a runtime cannot run (a model it has no definition for) or where nothing fits prints that in place of its figures.
`search s` is the median CPU seconds of `planner.plan` (one core), `process s`
the CPU seconds of `meshplan plan` run as its own process (start-up, search and printing; the median of N), `W
workers` the search's wall seconds over W processes (`plan --workers W`, default 2; the parts share their incumbent;
the median of N),
`load` the 1-minute load average when the job ran. Targets: a dense search at most 0.3 s and a mixture-of-experts
search at most 1 s on one core; the target column says 'ok' where one core meets it, 'ok, W workers' where only the
W-worker wall does, else 'over', and a line after the table counts them and names the jobs not met.
Then the start-up jobs as whole processes: `meshplan plan` of Llama-2-7B on 8 A100 (target 0.25 s of CPU),
`meshplan --help` and `meshplan models`. CPU seconds, not wall: a loaded machine stretches wall time more than CPU
time, though neither is the code's alone when other processes share the cores (the header line says how busy it was).
`vs prev` is the research-space search's ratio to the previous release's medians (data/search_time_previous.yaml,
measured in the idealised space that --runtime any keeps). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402
from machine import machine_line  # noqa: E402

import planner  # noqa: E402
from meshcore import Runtime  # noqa: E402
from meshcore.errors import MeshplanError  # noqa: E402
from meshcore.framework import Framework  # noqa: E402
from planner.search.space import SearchSpec  # noqa: E402

# the previous release's medians (idealised space): the research-space rows print their ratio to them
PREVIOUS: dict[str, Any] = yaml.safe_load((Path(__file__).parent / "data" / "search_time_previous.yaml").read_text())

# (model, hardware, GPUs, sequence length, global batch in sequences)
CASES = [
    ("llama3-8b", "h100-sxm", 8, 8192, 128),
    ("llama3-8b", "h100-sxm", 64, 8192, 512),
    ("llama3-70b", "h100-sxm", 1024, 8192, 1024),
    ("gpt3-175b", "a100-80gb", 1024, 2048, 1536),
    ("llama3-405b", "h100-sxm", 16384, 8192, 2048),
    ("mixtral-8x7b", "h100-sxm", 256, 4096, 1024),
    ("qwen3-235b-a22b", "h100-sxm", 1024, 4096, 2048),
    ("llama4-maverick", "h100-sxm", 256, 8192, 512),
    ("deepseek-v3", "h800", 2048, 4096, 15360),
]
MOE = {"mixtral-8x7b", "qwen3-235b-a22b", "llama4-maverick", "deepseek-v3"}
TARGET = {True: 1.0, False: 0.3}  # seconds of one core: MoE, dense
START_UP = ["plan", "--model", "llama2-7b", "--hardware", "a100-80gb", "--gpus", "8", "--seq-len", "4096",
            "--global-batch", "64"]


def process_cpu(command: list[str], repeat: int) -> float:
    """Median CPU seconds (user + system) of `command` run as its own process."""
    runs = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(command, check=True, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(runs)


def layout_text(plan: Any) -> str:
    lay = plan.best.layout
    experts = f"ep{lay.ep} etp{lay.etp} " if lay.ep > 1 or lay.etp > 1 else ""
    return (f"tp{lay.tp} pp{lay.pp} dp{lay.dp} cp{lay.cp} {experts}vpp{lay.vpp} mbs{lay.mbs} zero{int(lay.zero)} "
            f"{lay.recompute.value} {lay.schedule.value}, {plan.best.step_time_s:.3f} s")


class Met(str, Enum):
    """Whether a job meets its target: on one core, only over the workers, or not."""

    ONE_CORE = "ok"
    WORKERS = "ok, workers"
    OVER = "over"

    def label(self, workers: int) -> str:
        """What the table's target column prints."""
        return f"ok, {workers} workers" if self is Met.WORKERS else self.value


def verdict(search: float, walls: list[float], target: float) -> Met:
    """`Met.ONE_CORE` where the one-core search meets `target`, else `Met.WORKERS` where the median of `walls` (the
    W-worker wall seconds) does, else `Met.OVER`."""
    if search <= target:
        return Met.ONE_CORE
    if walls and statistics.median(walls) <= target:
        return Met.WORKERS
    return Met.OVER


def run_case(case: tuple[str, str, int, int, int], framework: Framework, args: argparse.Namespace,
             exe: str | None) -> tuple[str, Met | None]:
    """The job's table line and its `verdict` (None where it was not planned)."""
    model, hw, gpus, seq, batch = case
    spec = SearchSpec(offload_auto=True) if args.offload_auto else None
    runtime = Runtime(framework=framework)
    name = f"{model} on {gpus} x {hw} (s={seq}, B={batch})"
    cpu = []
    for _ in range(args.repeat):
        start = time.process_time()
        try:
            plan = planner.plan(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, spec=spec, runtime=runtime)
        except MeshplanError as exc:  # the runtime has no such model, or nothing fits: nothing to time
            return f"{name:50} {framework.value:10} not planned: {str(exc)[:100]}", None
        cpu.append(time.process_time() - start)
    load = os.getloadavg()[0]
    search = statistics.median(cpu)
    moe = model in MOE
    workers, walls = "-", []
    if args.workers > 1:
        for _ in range(args.repeat):
            start = time.perf_counter()
            planner.plan(model, hw, gpus=gpus, seq_len=seq, global_batch=batch, spec=spec, runtime=runtime,
                         workers=args.workers)
            walls.append(time.perf_counter() - start)
        workers = f"{statistics.median(walls):.2f}"
    whole = "-"
    if exe is not None:
        command = [exe, "plan", "--model", model, "--hardware", hw, "--gpus", str(gpus), "--seq-len", str(seq),
                   "--global-batch", str(batch), "--runtime", framework.value]
        whole = f"{process_cpu(command + (['--offload', 'auto'] if args.offload_auto else []), args.repeat):.2f}"
    c = plan.certificate
    assert c is not None
    previous = PREVIOUS.get("offload auto", {}) if args.offload_auto else PREVIOUS
    before = previous.get(name) if framework is Framework.ANY else None
    ratio = f"{before / search:5.1f}x" if before else "-"
    met = verdict(search, walls, TARGET[moe])
    shown = f"{met.label(args.workers)} ({TARGET[moe]:g})"
    return (f"{name:50} {framework.value:10} {search:8.2f} {whole:>9} {workers:>9} {shown:>18} {ratio:>7} "
            f"{c.candidates:10} {c.evaluated:6} {c.simulated:5} {c.pruned_memory:10} {c.pruned_time:11} {load:5.2f}  "
            f"{layout_text(plan)}"), met


def targets_line(tally: dict[Met, list[str]], workers: int) -> str:
    """How many searches met their target on one core, how many only over `workers` processes, and which did not."""
    met, over = len(tally[Met.ONE_CORE]), tally[Met.OVER]
    more = f", {len(tally[Met.WORKERS])} more over {workers} workers" if workers > 1 else ""
    named = f": {', '.join(over)}" if over else ""
    return f"targets: {met} search{'' if met == 1 else 'es'} met on one core{more}, {len(over)} not met{named}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runtime", choices=[*(f.value for f in Framework), "both", "all"], default="all")
    parser.add_argument("--workers", type=int, default=2, help="also time the search over this many processes "
                                                                "(1: not)")
    parser.add_argument("--offload-auto", action="store_true", help="search every offload choice as well")
    parser.add_argument("--only", nargs="*", default=None, help="jobs whose model name contains one of these")
    args = parser.parse_args(argv)
    frameworks = {"both": [Framework.MEGATRON, Framework.ANY], "all": list(Framework)}.get(args.runtime) or [
        Framework(args.runtime)]
    exe = shutil.which("meshplan")
    planner.plan("llama3-8b", "h100-sxm", gpus=8, seq_len=2048, global_batch=8)  # presets loaded before timing
    print(machine_line())
    print(f"{'job':50} {'runtime':10} {'search s':>8} {'process s':>9} {f'{args.workers} workers':>9} "
          f"{'target s':>18} {'vs prev':>7} {'candidates':>10} {'priced':>6} {'simul':>5} {'pruned mem':>10} "
          f"{'pruned time':>11} {'load':>5}  best")
    tally: dict[Met, list[str]] = {m: [] for m in Met}
    for framework in frameworks:
        for case in CASES:
            if args.only and not any(o in case[0] for o in args.only):
                continue
            line, met = run_case(case, framework, args, exe)
            print(line, flush=True)
            if met is not None:
                tally[met].append(f"{case[0]} ({framework.value})")
    print(targets_line(tally, args.workers))
    if exe is None:
        print("\nwhole process: no `meshplan` on PATH (pip install -e .), not timed")
        return 0
    print()
    for what, command, target in (("meshplan plan, Llama-2-7B on 8 x a100-80gb", [exe, *START_UP], 0.25),
                                  ("meshplan --help", [exe, "--help"], 0.25),
                                  ("meshplan models", [exe, "models"], 0.25)):
        runs = max(args.repeat, 5)
        cpu = process_cpu(command, runs)
        cache = "off (PYTHONDONTWRITEBYTECODE)" if sys.flags.dont_write_bytecode else "on"
        print(f"{what:44} {cpu:5.2f} s CPU, median of {runs} (target {target:g} s{'' if cpu <= target else ', over'})"
              f"; load {os.getloadavg()[0]:.2f}; Python's bytecode cache {cache}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
