"""Search: enumerate -> bound -> split -> evaluate -> rank, with a certificate of optimality.

1. `planner.search.space.candidates` yields every valid degree tuple, each with the first of its offload choices
   (`space.offload_options`); the others join it, sharing its group's floor, when that group comes up.
2. Memory bound: a family whose weights, gradients and optimizer state alone (sharded as its ZeRO
   stage allows, spread evenly over the pipeline) exceed the GPU is dropped.
3. Time bound: no split beats m·(Σ layer times)/pp (cost_models.pipeline.stages: the slowest stage is at
   least the average), computed from per-layer times cached per (tp, cp, sp, mbs, recompute).
   Candidates are priced in increasing order of this bound and the scan stops when the bound
   reaches the k-th best step time found: every layout left is provably no better (best-first
   branch and bound), so the answer is optimal within the modelled space. The heap starts from cheaper floors of
   each bound and computes the bound only when the floor comes first: the same order. Two levels of floors: the
   families sharing layer times and pp (`SearchBounds.floor_key`) wait as one entry at `family_floor` (the layer
   times alone); when it comes first their groups are built (the state bound of step 2) and queued at their floors
   (`shape_floor`, which adds traffic and tail). Most families never come up: their groups' floors and state bounds
   are never computed, and their candidates count as pruned by the time bound.
4. Split: for 1F1B the layer-to-stage split and the per-stage count of fully recomputed layers are
   solved exactly (planner.search.partition DP, or the CP-SAT / HiGHS model of planner.search.ilp); interleaved
   layouts use balanced model chunks.
   Recompute-module sets (`space.module_family`, nested) become candidates only after the same degrees with the
   next cheaper choice (none, the default selective, the previous set) were priced, and only where that did not
   fit or its step time exceeds the set's bound (else the set is dominated: it frees memory for a looser split or
   fewer recomputed layers, which cannot repay more than the difference). A set's bound is at least its
   sibling's, so it joins the best-first order where it belongs.
5. The chosen layout is priced by the plain cost model (`evaluate_costs`, as `evaluate_layout`), which also re-checks
   that every stage fits.
"""

from __future__ import annotations

import gc
import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Durations
from cost_models.step import (
    LayerActivations,
    LayerTimes,
    evaluate_costs,
    layout_costs,
    rank_layer_ids,
    rank_stage_layers,
    stage_cost,
)
from meshcore import (
    GIB,
    WAVE_PLACED,
    ClusterSpec,
    JobSpec,
    ModelSpec,
    Offload,
    Schedule,
    ZeroStage,
    check_expert_degrees,
)
from meshcore.errors import InfeasibleError, LayoutError
from planner.inputs.runtimes import load_runtime
from planner.search.ilp import SolveOptions, Solver
from planner.search.memory_floors import ROUNDING
from planner.search.nofit import fit_hints, no_fit_message
from planner.search.ranked import Certificate, Ranked, SearchResult
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds, durations_floor
from planner.search.simulate import durations, simulated_step_time, step_tail
from planner.search.space import (
    Candidate,
    SearchSpec,
    candidates,
    families,
    module_family,
    next_module_set,
    no_layout_reason,
    offload_options,
)
from planner.search.splits import solve_split, split_problem, v_chunks

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class _Priced:
    ranked: Ranked | None  # the least closed-form step of `layouts`
    infeasible: bool
    gap: float
    optimal: bool
    layouts: tuple[Ranked, ...] = ()  # every layout of the candidate that fits: the solved split, then the balanced


def reported(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, priced: _Priced) -> Ranked | None:
    """The candidate as a plan reports it: of its layouts that fit, the one with the least reported step time
    (`Ranked.step_time_s`: simulated where the pipeline is simulated, else the closed form), the first on a tie."""
    found = [_simulated(model, cluster, job, r) for r in priced.layouts]
    return min(found, key=lambda r: r.step_time_s, default=None)


def _simulated(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Ranked,
               d: Durations | None = None) -> Ranked:
    return replace(r, simulated_step_time_s=simulated_step_time(model, cluster, job, r.layout, r.prediction, d))


def balanced_only(c: Candidate, spec: SearchSpec) -> bool:
    """Whether `_price` prices the candidate's balanced chunks alone (interleaved, or no uneven splits)."""
    return (c.vpp > 1 and c.schedule not in WAVE_PLACED) or not spec.uneven_split


def _price(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: Candidate, spec: SearchSpec,
           solver: Solver, options: SolveOptions, times: LayerTimes,
           activations: LayerActivations | None = None) -> _Priced:
    """Split and price one candidate; ranked is None when nothing fits.

    With one chunk per rank the solved split competes with the balanced split (Megatron-LM's default), priced
    by the same cost model: the split solver optimises the pipeline term, the full model also prices the
    step's tail (gradient reduction, optimizer), so the plan is never slower than the plain even split.
    ZB-V and the wave are split the same way per rank (on a uniform stack a rank's cost depends only on how many
    layers it holds), each rank's layers then shared over its chunks; on a stack of mixed kinds the wave's chunks
    hold other kinds than the one-chunk split assumed, so there the split is a candidate that the cost model
    prices as it really falls, against the balanced chunks. Interleaved layouts stay balanced."""
    balanced = c.layout()
    gap, optimal = 0.0, True
    costs = layout_costs(model, cluster, job, balanced, times, activations)
    if balanced_only(c, spec):  # balanced chunks: stage 0 keeps the most in flight
        ids = rank_layer_ids(balanced, model.num_layers)[0]
        if stage_cost(costs, 0, rank_stage_layers(costs, 0, ids)).peak_memory_gib > cluster.gpu.memory_gib:
            return _Priced(None, True, gap, optimal)
        layouts = [balanced]
    else:
        split, gap, optimal = solve_split(costs, spec, solver, options)
        if split is None:
            return _Priced(None, True, gap, optimal)
        chunks = v_chunks(split.layers, c.vpp) if c.schedule in WAVE_PLACED else split.layers
        solved = replace(balanced, stage_layers=chunks,
                         recompute_layers=split.recompute if any(split.recompute) else None)
        layouts = [solved] if model.num_layers < c.pp else [solved, balanced]
    fitting = [Ranked(layout, prediction) for layout in layouts
               for prediction in (evaluate_costs(replace(costs, layout=layout)),) if prediction.fits]
    best = min(fitting, key=lambda r: r.prediction.step_time_s, default=None)
    return _Priced(best, best is None, gap, optimal, tuple(fitting))


class Incumbent(Protocol):
    """The k best reported steps found by searches of other parts of the space (planner.search.parallel)."""

    def kth(self) -> float: ...

    def offer(self, step: float) -> None: ...


def search(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec | None = None,
           solver: Solver = Solver.DP, options: SolveOptions | None = None,
           progress: ProgressFn | None = None, incumbent: Incumbent | None = None) -> SearchResult:
    """The fastest layouts that fit (best first), with the search's certificate. Python's cyclic garbage collector
    is paused meanwhile: the search holds a few hundred thousand candidates and their heap entries, which every full
    collection would walk (about 0.4 s a search for the MoE benchmarks) while it leaves almost no cycles behind."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return _search(model, cluster, job, spec, solver, options, progress, incumbent)
    finally:
        if paused:
            gc.enable()


def _search(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec | None, solver: Solver,
            options: SolveOptions | None, progress: ProgressFn | None, incumbent: Incumbent | None) -> SearchResult:
    start = time.perf_counter()
    spec, options = for_runtime(spec or SearchSpec(), load_runtime(job.runtime.framework)), options or SolveOptions()
    check_expert_degrees(model, spec.ep or 1, spec.etp or 1)  # a pin the model rules out, named as such
    layer_times = ReportedBounds(model, cluster, job, spec.partial_recompute)
    capacity, host_capacity = cluster.gpu.memory_gib * GIB, layer_times.host_capacity()
    built = list(families(model, cluster, job, spec))
    if not built:
        raise LayoutError(no_layout_reason(model, cluster, job, spec))  # a rule or a limit, not memory: exit 2
    nvme = cluster.host.nvme_gbs > 0
    offloads = {(z, alone): tuple(offload_options(z, spec, alone, nvme)) for z in ZeroStage for alone in (False, True)}

    def choices(c: Candidate) -> tuple[frozenset[Offload], ...]:
        return offloads[c.zero, c.dp * c.cp == 1]
    variants: dict[tuple[object, ...], tuple[frozenset[Offload], ...]] = {}

    def within_state_bound(c: Candidate, beside: bool | None = None) -> tuple[frozenset[Offload], ...]:
        """The offload choices of `c` (its `offload_options`) whose states fit (`state_bound`); they share c's
        floor, which is their group's. Offloading only takes states off the GPU: when c fits without, all do."""
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp,
               layer_times.beside(c) if beside is None else beside)
        if key not in variants:
            if not c.offload and layer_times.state_bound(c) <= capacity:
                variants[key] = choices(c)
            else:
                variants[key] = tuple(o for o in choices(c)
                                      if layer_times.state_bound(replace(c, offload=o)) <= capacity)
        return variants[key]

    # the candidates by `floor_key` (knobs and pp), each a list of (family, its (ep, etp) choice): they enter the heap
    # as one entry below the floor of each of their groups (`family_floor`), and become groups when it reaches the top
    # (`expand`): most never do, and neither their groups' floors nor their state bounds are computed
    floors: dict[tuple[object, ...], list[tuple[int, int]]] = {}
    total = 0
    for f, (first, shapes, experts, _) in enumerate(built):
        total += len(choices(first)) * len(shapes) * len(experts)
        for e, (ep, etp) in enumerate(experts):
            floors.setdefault((first.tp, first.cp, first.sp, first.mbs, first.recompute, ep, etp, first.modules,
                               first.pp), []).append((f, e))
    tally = {"evaluated": 0, "infeasible": 0, "expanded": 0, "floored": 0, "simulated": 0, "fitting": 0, "held": 0}
    groups: list[tuple[Candidate, list[tuple[Schedule, int]]]] = []  # every group queued so far

    def expand(members: list[tuple[int, int]]) -> None:
        """Queue the groups of these (family, (ep, etp) choice)s at their floors, each its first candidate within the
        state bound and its (schedule, vpp) shapes that hold one."""
        for f, e in members:
            first, shapes, experts, _ = built[f]
            ep, etp = experts[e]
            tally["held"] += len(choices(first)) * len(shapes)
            base = first if (ep, etp) == (first.ep, first.etp) else Candidate(
                first.tp, first.cp, first.pp, first.dp, first.mbs, first.vpp, first.zero, first.recompute, first.sp,
                first.schedule, ep, etp, first.modules, first.offload, first.dp_replicate)
            sides = [layer_times.shape_beside(first, vpp, schedule) for vpp, schedule in shapes]
            fits = {side: len(within_state_bound(base, side)) for side in set(sides)}
            held = [(schedule, vpp) for (vpp, schedule), side in zip(shapes, sides, strict=True) if fits[side]]
            if not held:
                continue
            tally["fitting"] += sum(fits[side] for side in sides)
            vpp, schedule = shapes[next(i for i, side in enumerate(sides) if fits[side])]
            c = Candidate(first.tp, first.cp, first.pp, first.dp, first.mbs, vpp, first.zero, first.recompute,
                          first.sp, schedule, ep, etp, first.modules, first.offload, first.dp_replicate)
            groups.append((c, held))
            heapq.heappush(heap, (layer_times.shape_floor(c, held, choices(c)), (), 0, len(groups), (c, held)))

    # best-first over a heap. Entries are (key, sort key, level, tie, candidate or group); the candidates sharing a
    # `floor` enter as one group there (sort key (), below every other; groups tie-break on their order) and, when it
    # reaches the top, each is queued at its bound; there a candidate is dropped if its memory floor exceeds the GPU or
    # else re-queued at its tight bound (with the recomputation it needs to fit), and priced when it reaches the top
    # again: in the order of (tight bound, sort key), most bounds never computed. Module-set variants
    # (`space.module_family`: none or the default selective, then each set) join at their bound once their cheaper
    # sibling reaches its own; one is dominated, and never priced, when that sibling fits at a step time no more than
    # the variant's bound (it frees memory for a looser split or fewer recomputed layers, which cannot repay more).
    # A variant may come up before its sibling (its tight bound can be the lower one): the sibling is priced first.
    # HSDP candidates (dp_replicate > 1) are variants of the same candidate sharded over every data-parallel rank in
    # the same way: they hold more state, so they can only win on exposed communication, and are dominated when that
    # sibling's step is no more than their bound. Above the groups, the families sharing a `floor_key` wait as one
    # entry (a list of them) at `family_floor`, below every floor of their groups.
    family = module_family(model, job, spec)
    Group = tuple[Candidate, list[tuple[Schedule, int]]]
    heap: list[tuple[float, tuple[int, ...], int, int, Candidate | Group | list[tuple[int, int]]]] = []
    for i, members in enumerate(floors.values()):
        first, shapes, experts, _ = built[members[0][0]]
        ep, etp = experts[members[0][1]]
        c = first if (ep, etp) == (first.ep, first.etp) else replace(first, ep=ep, etp=etp)
        heap.append((layer_times.family_floor(c, [(s, v) for v, s in shapes]), (), -1, i, members))
    heapq.heapify(heap)
    top: list[tuple[float, tuple[int, ...], Ranked]] = []  # max-heap by reported step time (negated)
    steps: dict[Candidate, float | None] = {}  # settled: the reported step, None where nothing fits or it is dominated
    sibling: dict[Candidate, Candidate] = {}  # a module-set variant's cheaper sibling
    dominated: set[Candidate] = set()
    waiting: dict[Candidate, list[tuple[float, int, Ranked, Durations]]] = {}  # priced, to simulate: by floor
    worst_gap, all_optimal = 0.0, True

    def kth() -> float:
        """The k-th best reported step so far (here, or in the other parts of a split search): nothing whose bound
        reaches it can enter the top-k."""
        own = -top[0][0] if len(top) >= spec.top_k else math.inf
        return own if incumbent is None else min(own, incumbent.kth())

    def keep(c: Candidate, ranked: Ranked) -> None:
        steps[c] = ranked.step_time_s
        if incumbent is not None:
            incumbent.offer(ranked.step_time_s)
        entry = (-ranked.step_time_s, tuple(-x for x in c.sort_key()), ranked)
        if len(top) < spec.top_k:
            heapq.heappush(top, entry)
        elif entry[:2] > top[0][:2]:
            heapq.heapreplace(top, entry)

    def settle(c: Candidate) -> None:
        """Price `c` (its cheaper sibling first) unless priced or dominated; a simulated one waits at its floor."""
        nonlocal worst_gap, all_optimal
        if c in steps or c in waiting:
            return
        before = sibling.get(c)
        if before is not None:
            settle(before)
            if before in waiting:
                simulate(before, math.inf)  # its reported step decides
            step = steps[before]
            if before in dominated or (step is not None and layer_times.key(c) >= step):
                steps[c] = None
                dominated.add(c)
                return
        priced = _price(model, cluster, job, c, spec, solver, options, layer_times.get(c), layer_times.activations(c))
        tally["evaluated"] += 1
        worst_gap, all_optimal = max(worst_gap, priced.gap), all_optimal and priced.optimal
        if progress is not None:
            progress(tally["evaluated"] + tally["floored"], total + tally["expanded"])
        if priced.ranked is None:
            steps[c] = None
            tally["infeasible"] += 1
        elif not layer_times.simulated(c):
            keep(c, priced.ranked)
        else:  # each layout at the least the simulator can return for it (sim_bounds.durations_floor)
            waiting[c] = sorted(_floored(model, cluster, job, r, i) for i, r in enumerate(priced.layouts))
            heapq.heappush(heap, (waiting[c][0][0], c.sort_key(), 3, 0, c))

    def simulate(c: Candidate, below: float) -> None:
        """Simulate the layouts of `c` whose floor is below `below` and below the best of them simulated so far;
        keep the least (the first on a tie). None is kept when none is below `below`: it cannot enter the top-k."""
        best: tuple[float, int, Ranked] | None = None
        for floor, i, ranked, d in waiting.pop(c):
            if floor >= below or (best is not None and floor > best[0]):
                break
            found = _simulated(model, cluster, job, ranked, d)
            tally["simulated"] += 1
            if best is None or (found.step_time_s, i) < best[:2]:
                best = (found.step_time_s, i, found)
        steps[c] = None
        if best is not None:
            keep(c, best[2])

    while heap:
        bound, key, level, tie, item = heapq.heappop(heap)
        if bound >= kth():
            break
        if isinstance(item, list):  # families at their floor: their groups
            expand(item)
            continue
        if isinstance(item, tuple):  # a group at its floor: each offload choice of each queued at its bound
            first, held = item
            for schedule, vpp in held:
                base = first if (schedule, vpp) == (first.schedule, first.vpp) else replace(first, vpp=vpp,
                                                                                              schedule=schedule)
                for o in within_state_bound(base):
                    c = base if o == base.offload else replace(base, offload=o)
                    heapq.heappush(heap, (layer_times.key(c), c.sort_key(), 1, 0, c))
            continue
        cand = item
        if cand.dp_replicate > 1 and spec.dp_replicate is None and cand not in sibling:
            sibling[cand] = replace(cand, dp_replicate=1)  # HSDP: priced only where it may beat sharding over all
        if level == 3:
            if cand in waiting:  # (not simulated already for a variant's dominance)
                simulate(cand, kth())
            continue
        if level == 2:
            if tie or cand in steps or not layer_times.simulated(cand) or balanced_only(cand, spec):
                settle(cand)
            elif not (kth() < math.inf and layer_times.split_refuses(cand, kth())):  # else no split can beat the top-k
                heapq.heappush(heap, (layer_times.split_bound(cand, bound), key, 2, 1, cand))  # (its paths)
            continue
        balanced = balanced_only(cand, spec)
        if (layer_times.memory_floor(cand, balanced) > capacity  # no layout of it fits on the GPU
                or layer_times.host_floor(cand, balanced) > host_capacity):  # or in its node's host memory
            steps[cand] = None
            tally["floored"] += 1
        else:  # re-queued at the bound with the recomputation it needs
            heapq.heappush(heap, (layer_times.tight_key(cand, balanced), key, 2, 0, cand))
        nxt = next_module_set(cand, family, job)
        if nxt is not None:
            sibling[nxt] = cand
            heapq.heappush(heap, (layer_times.key(nxt), nxt.sort_key(), 1, 0, nxt))
            tally["expanded"] += 1
    evaluated, infeasible, expanded, floored = (tally[k] for k in ("evaluated", "infeasible", "expanded", "floored"))
    if not tally["fitting"]:  # (the heap ran dry: every family was expanded)
        pool = list(candidates(model, cluster, job, spec, offload_variants=False))
        raise InfeasibleError(no_fit_message(layer_times, _with_choices(pool, choices), fit_hints(spec, job)))
    if not top:
        pool = [replace(first, vpp=vpp, schedule=schedule) for first, held in groups for schedule, vpp in held]
        raise InfeasibleError(no_fit_message(layer_times, _with_choices(pool, within_state_bound),
                                              fit_hints(spec, job)))
    ranked = [e[2] for e in sorted(top, key=lambda e: (-e[0], tuple(-x for x in e[1])))]
    cert = Certificate(
        method="enumerate + memory/time bounds (best-first) + exact stage split, ranked and bounded by the reported "
               "step (the discrete-event pipeline simulator's where it runs)", solver=solver,
        candidates=total + expanded, evaluated=evaluated, pruned_memory=tally["held"] - tally["fitting"] + floored,
        pruned_time=total - tally["held"] + tally["fitting"] + expanded - evaluated - floored, infeasible=infeasible,
        solve_time_s=time.perf_counter() - start,
        optimal=all_optimal, gap=worst_gap, simulated=tally["simulated"])
    log.info("searched %d candidates: %d priced (%d simulated), %d pruned by memory, %d by the time bound, %d did not "
             "fit", cert.candidates, cert.evaluated, cert.simulated, cert.pruned_memory, cert.pruned_time,
             cert.infeasible)
    return SearchResult(ranked[0], tuple(ranked[1:]), cert)


def _floored(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Ranked, index: int
             ) -> tuple[float, int, Ranked, Durations]:
    """(the least simulated step `r` can have, its index, r, its simulator durations): the work and path bounds on
    its chunks' durations (`durations_floor`) plus the step's tail."""
    d, lay = durations(model, cluster, job, r.layout, r.prediction), r.layout
    floor = durations_floor(program(lay.schedule, lay.pp, r.prediction.num_microbatches, lay.vpp), d,
                            r.prediction.num_microbatches)
    return (floor + step_tail(r.prediction)) * (1 - ROUNDING), index, r, d


def _with_choices(cs: list[Candidate], choices: Callable[[Candidate], tuple[frozenset[Offload], ...]]
                  ) -> list[Candidate]:
    """Every candidate of `cs` with each offload choice `choices` gives it."""
    return [replace(c, offload=o) for c in cs for o in choices(c)]


__all__ = ["Certificate", "Ranked", "SearchResult", "SearchSpec", "Solver", "search", "split_problem"]
