"""The split of the GPUs for a graph interatomic potential: how many data-parallel replicas, and for each structure
which px x py x pz grid of spatial domains. Branch and bound over the domain counts (divisors of the GPU count):
a domain count's bound is its compute at N/d atoms without ghosts or halo exchange (the cost table never falls
as atoms grow), so counts are visited best bound first and the search stops when the bound reaches the best step
found; `brute_force` prices every split and is what the tests compare with."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from meshcore import GIB, ClusterSpec
from meshcore.errors import InfeasibleError, InputError
from planner.search.space import divisors
from planner.workloads.mlip.cost import MlipPrediction, evaluate_split, interpolate
from planner.workloads.mlip.md import evaluate_md
from planner.workloads.mlip.spec import MlipCostTable, MlipJob, MlipMode, MlipSplit


@dataclass(frozen=True)
class MlipSearch:
    """The fitting splits, fastest first (`best` = ranked[0]); how many were priced and how many domain counts
    the bound skipped."""

    ranked: tuple[MlipPrediction, ...]
    candidates: int
    pruned: int

    @property
    def best(self) -> MlipPrediction:
        return self.ranked[0]


def grids(domains: int, ordered: bool = False) -> Iterator[tuple[int, int, int]]:
    """Factorisations of `domains` into three; for a cubic box the order of the factors does not matter, so only
    px <= py <= pz unless `ordered`."""
    for px in range(1, domains + 1):
        if domains % px:
            continue
        for py in range(1, domains // px + 1):
            if (domains // px) % py:
                continue
            pz = domains // px // py
            if ordered or px <= py <= pz:
                yield px, py, pz


def _valid(table: MlipCostTable, job: MlipJob, grid: tuple[int, int, int]) -> bool:
    """Each brick at least one cutoff wide (its ghosts then come from its face, edge and corner neighbours only)."""
    side = (job.atoms / table.density) ** (1.0 / 3.0)
    return max(grid) == 1 or side / max(grid) >= table.cutoff_a


def _key(p: MlipPrediction) -> tuple[float, int, tuple[int, int, int]]:
    return (p.step_s, p.domains, tuple(sorted(p.grid)))  # type: ignore[return-value]


def search_md(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec, top_k: int = 5) -> MlipSearch:
    """Every domain grid over all of the job's GPUs (LAMMPS runs one rank per GPU), priced by md.evaluate_md; bricks
    thinner than the ghost shell are allowed, as LAMMPS allows them (more swaps: md.swaps)."""
    if table.mode is not MlipMode.MD:
        raise InputError(f"cost table {table.name!r} times training steps (mode: {table.mode.value}); an MD plan needs "
                         "a forces-only table: '# mode: md' and step_s = one energy and forces call")
    priced = [evaluate_md(table, job, cluster, g) for g in grids(job.gpus, ordered=True)]
    found = sorted((p for p in priced if p.fits), key=_key)
    if not found:
        raise InfeasibleError(_infeasible(table, job, cluster))
    return MlipSearch(tuple(found[:top_k]), len(priced), 0)


def search_mlip(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec, top_k: int = 5) -> MlipSearch:
    if job.mode is MlipMode.MD:
        return search_md(table, job, cluster, top_k)
    counts = divisors(job.gpus)
    bounds = []
    capacity = cluster.gpu.memory_gib * GIB
    for d in counts:
        seconds, memory = interpolate(table, job.atoms / d)
        rounds = math.ceil(job.structures / (job.gpus // d))
        bounds.append((rounds * seconds, memory, d))
    bounds.sort()
    found: list[MlipPrediction] = []
    priced = pruned = 0
    for i, (bound, memory, d) in enumerate(bounds):
        if found and bound >= found[0].step_s:
            pruned += len(bounds) - i
            break
        if memory > capacity:
            pruned += 1
            continue
        for grid in grids(d):
            if not _valid(table, job, grid):
                continue
            priced += 1
            p = evaluate_split(table, job, cluster, MlipSplit(job.gpus // d, grid))
            if p.fits:
                found.append(p)
                found.sort(key=_key)
    if not found:
        raise InfeasibleError(_infeasible(table, job, cluster))
    return MlipSearch(tuple(found[:top_k]), priced, pruned)


def _infeasible(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec) -> str:
    _, memory = interpolate(table, job.atoms / job.gpus)
    return (f"{job.atoms} atoms do not fit: even over all {job.gpus} GPUs as domains each holds {job.atoms // job.gpus}"
            f" atoms needing at least {memory / GIB:.1f} GiB of {cluster.gpu.memory_gib:g} GiB (or bricks would be "
            f"thinner than the {table.cutoff_a:g} Å cutoff); use more GPUs or GPUs with more memory")


def brute_force(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec) -> MlipPrediction | None:
    """Every domain count and every ordered grid, no bound."""
    best: MlipPrediction | None = None
    for d in (d for d in range(1, job.gpus + 1) if job.gpus % d == 0):
        for grid in grids(d, ordered=True):
            if not _valid(table, job, grid):
                continue
            p = evaluate_split(table, job, cluster, MlipSplit(job.gpus // d, grid))
            if p.fits and (best is None or _key(p) < _key(best)):
                best = p
    return best
