"""How much of a search over two processes is the proof and how much the finding (issue 36): per job, the one-core
search and each part of the split one (planner.search.parallel: the TP degrees dealt round-robin to the parts, and each
TP degree alone), each timed alone and seeded, with the candidates it priced.

    python benchmarks/search_parts.py [--repeat N] [--runtime any|megatron|nemo|torchtitan|deepspeed] [--only NAME ...]

`alone`: the part searched by itself, pruning with the best steps it finds. `seeded`: the same part given, from its
start, the k-th best reported step of the whole search (`SeedIncumbent`: the step the search ranks by, the simulator's
where it runs, not the plain cost model's `prediction.step_time_s`, which is higher for simulated layouts and prunes
less). A part's seeded time is the least it can take over two processes however early the other parts share what they
find: the work of proving that nothing in it beats the k-th best. So the largest seeded part is the floor of the
two-worker wall for this deal of degrees, and the seeded one-core search against the plain one says whether a better
incumbent would help a single process. CPU seconds of this process (`time.process_time`), the median of N (default
3). Not a test: nothing asserts a time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import machine_line  # noqa: E402
from search_time import CASES as TIMED  # noqa: E402

from meshcore import ClusterSpec, JobSpec, ModelSpec, Runtime  # noqa: E402
from meshcore.errors import MeshplanError  # noqa: E402
from meshcore.framework import Framework  # noqa: E402
from planner.api import resolve  # noqa: E402
from planner.inputs.runtimes import load_runtime  # noqa: E402
from planner.search.exact import search  # noqa: E402
from planner.search.ilp import SolveOptions, Solver  # noqa: E402
from planner.search.parallel import tp_groups  # noqa: E402
from planner.search.ranked import SearchResult  # noqa: E402
from planner.search.runtime_space import for_runtime  # noqa: E402
from planner.search.space import SearchSpec, tp_options  # noqa: E402

# the jobs of benchmarks/search_time.py that issue 36 finds over in the research space
CASES = [case for case in TIMED if case[0] in {"llama3-70b", "llama3-405b", "llama4-maverick", "deepseek-v3"}]


@dataclass(frozen=True)
class SeedIncumbent:
    """An incumbent (planner.search.ranked.Incumbent) that knows the whole search's k-th best reported step from the
    start and learns nothing more."""

    step: float

    def kth(self) -> float:
        return self.step

    def offer(self, step: float) -> None:
        """Nothing to learn: the seed is already the whole space's k-th best."""


def seed_of(result: SearchResult) -> SeedIncumbent:
    """The seed of a whole search's `result`: its k-th best reported step (`Ranked.step_time_s`, what the search ranks
    and prunes by)."""
    return SeedIncumbent(max(r.step_time_s for r in (result.best, *result.alternatives)))


@dataclass(frozen=True)
class Timed:
    """A part's median CPU seconds and the candidates it priced (None, printed 'none better', where no layout of it
    beats the seed, or nothing fits: the part's search then ends with an error, as a part of a split search does, and
    its counts are not returned)."""

    seconds: float
    priced: int | None


Job = tuple[ModelSpec, ClusterSpec, JobSpec]


def timed(job: Job, spec: SearchSpec, seed: SeedIncumbent | None, repeat: int) -> Timed:
    """`search` of `spec`'s part of the job, `repeat` times."""
    runs: list[float] = []
    priced: int | None = None
    for _ in range(repeat):
        start = time.process_time()
        try:
            result = search(*job, spec, Solver.DP, SolveOptions(), incumbent=seed)
            priced = result.certificate.evaluated
        except MeshplanError:
            priced = None
        runs.append(time.process_time() - start)
    return Timed(statistics.median(runs), priced)


def shown(t: Timed) -> str:
    return f"{t.seconds:6.2f} s ({'none better' if t.priced is None else f'{t.priced} priced'})"


def run_case(case: tuple[str, str, int, int, int], framework: Framework, repeat: int) -> list[str]:
    """The job's lines: the whole search, the two-way deal's parts and each TP degree, alone and seeded."""
    name, hw, gpus, seq, batch = case
    try:
        problem = resolve(name, hw, gpus=gpus, seq_len=seq, global_batch=batch, runtime=Runtime(framework=framework))
        job: Job = (problem.model, problem.cluster, problem.job)
        spec = for_runtime(SearchSpec(), load_runtime(problem.job.runtime.framework))
        seed = seed_of(search(*job, spec, Solver.DP, SolveOptions()))
    except MeshplanError as exc:  # the runtime has no such model, or nothing fits
        return [f"{name}: not planned: {exc}"]
    degrees = tp_options(problem.model, problem.cluster, spec)
    parts = [("whole", spec)] + [(f"TP {', '.join(map(str, g))}", replace(spec, tp_choices=g))
                                 for g in tp_groups(degrees, 2)]
    parts += [(f"TP {tp} only", replace(spec, tp_choices=(tp,))) for tp in degrees]
    lines = [f"{name} on {gpus} x {hw} ({framework.value}): k-th best reported step {seed.step:.3f} s"]
    for label, part in parts:
        alone, seeded = timed(job, part, None, repeat), timed(job, part, seed, repeat)
        lines.append(f"  {label:16} alone {shown(alone)}   seeded {shown(seeded)}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runtime", choices=[f.value for f in Framework], default=Framework.ANY.value)
    parser.add_argument("--only", nargs="*", default=None, help="jobs whose model name contains one of these")
    args = parser.parse_args(argv)
    print(machine_line())
    for case in CASES:
        if args.only and not any(o in case[0] for o in args.only):
            continue
        for line in run_case(case, Framework(args.runtime), args.repeat):
            print(line, flush=True)
    print(machine_line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
