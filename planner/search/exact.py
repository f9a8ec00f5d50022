"""Search: enumerate -> bound -> split -> evaluate -> rank, with a certificate of optimality.

1. `planner.search.space.candidates` yields every valid degree tuple, each with the first of its offload choices
   (`space.offload_options`); the others join it, sharing its group's floor, when that group comes up.
2. Memory bound: a family whose weights, gradients and optimizer state alone (sharded as its ZeRO stage allows,
   spread evenly over the pipeline) exceed the GPU is dropped; where no family of an entry of them (step 3) fits, the
   entry is settled before its family floor is computed (planner.search.state_fit).
3. Time bound: no split beats m·(Σ layer times)/pp (cost_models.pipeline.stages: the slowest stage is at least the
   average), computed from per-layer times cached per (tp, cp, sp, mbs, recompute). Candidates are priced in
   increasing order of this bound and the scan stops when the bound reaches the k-th best step time found: every
   layout left is provably no better (best-first branch and bound), so the answer is optimal within the modelled
   space. The heap starts from cheaper floors of each bound and computes the bound only when the floor comes first:
   the same order. Two levels of floors: the families sharing layer times and pp (`SearchBounds.floor_key`) wait as
   one entry at `family_floor` (the layer times alone); when it comes first their groups are built (the state bound
   of step 2) and queued at their floors (`shape_floor`, which adds traffic and tail; one whose members' least memory
   exceeds the GPU is dropped: planner.search.group_floor). Most families never come up: their groups' floors and
   state bounds are never computed.
4. Split: for 1F1B the layer-to-stage split and the per-stage count of fully recomputed layers are solved exactly
   (planner.search.partition DP, or the CP-SAT / HiGHS model of planner.search.ilp); interleaved layouts use balanced
   model chunks. Recompute-module sets (`space.module_family`, nested) become candidates only after the same degrees
   with the next cheaper choice (none, the default selective, the previous set) were priced, and only where that did
   not fit or its step time exceeds the set's bound (else the set is dominated: it frees memory for a looser split or
   fewer recomputed layers, which cannot repay more than the difference). A set's bound is at least its sibling's, so
   it joins the best-first order where it belongs.
5. The chosen layout is priced by the plain cost model (`evaluate_costs`, as `evaluate_layout`), which also re-checks
   that every stage fits.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import replace

from cost_models.pipeline.registry import pricing
from cost_models.pipeline.simulator import Durations
from meshcore import GIB, ClusterSpec, JobSpec, ModelSpec, Schedule, check_expert_degrees
from meshcore.errors import InfeasibleError, LayoutError
from planner.inputs.runtimes import load_runtime
from planner.search.early_floor import EarlyFloors
from planner.search.group_floor import GroupFloors
from planner.search.ilp import SolveOptions, Solver
from planner.search.nofit import fit_hints, no_fit_message, with_choices
from planner.search.pricing import Shared, balanced_only, floored, price, simulated
from planner.search.ranked import Certificate, Incumbent, Ranked, SearchResult, certified
from planner.search.runtime_space import for_runtime
from planner.search.sim_bounds import ReportedBounds
from planner.search.space import (
    Candidate,
    SearchSpec,
    candidates,
    families,
    module_family,
    next_module_set,
    no_layout_reason,
)
from planner.search.split_paths import FloorSearch
from planner.search.splits import split_problem
from planner.search.state_fit import StateFit

ProgressFn = Callable[[int, int], None]
Group = tuple[Candidate, list[tuple[Schedule, int]]]  # a group's first candidate and its (schedule, vpp) shapes
Members = list[tuple[int, int]]  # families sharing a `floor_key`: (family, its (ep, etp) choice)
Entry = tuple[float, tuple[int, ...], int, int, Candidate | Group | Members]


def search(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec | None = None,
           solver: Solver = Solver.DP, options: SolveOptions | None = None,
           progress: ProgressFn | None = None, incumbent: Incumbent | None = None) -> SearchResult:
    """The fastest layouts that fit (best first), with the search's certificate. Python's cyclic garbage collector
    is paused meanwhile: the search holds a few hundred thousand candidates and their heap entries, which every full
    collection would walk (about 0.4 s a search for the MoE benchmarks) while it leaves almost no cycles behind
    (its state is one `_Search`, freed by reference counting when it returns)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        spec = for_runtime(spec or SearchSpec(), load_runtime(job.runtime.framework))
        check_expert_degrees(model, spec.ep or 1, spec.etp or 1)  # a pin the model rules out, named as such
        state = _Search(model, cluster, job, spec, solver, options or SolveOptions(), progress, incumbent)
        state.run()
        return state.result(time.perf_counter() - start)
    finally:
        if paused:
            gc.enable()


class _Search:
    """One best-first search over a heap. Entries are (key, sort key, level, tie, item): families at their early
    floor (level -2) and their floor (level -1, a `Members` list), groups at theirs (level 0), candidates at their
    bound (level 1), at their tight bound (level 2; tie 1: at the bound of their split's paths; tie 2: at their early
    key, below it) and priced layouts waiting to be simulated (level 3).

    The candidates sharing a `floor` enter as one group there (sort key (), below every other; groups tie-break on
    their order) and, when it reaches the top, each is queued at its bound; there a candidate is dropped if its memory
    floor exceeds the GPU or else re-queued at its tight bound (with the recomputation it needs to fit), and priced
    when it reaches the top again: in the order of (tight bound, sort key), most bounds never computed. Module-set
    variants (`space.module_family`: none or the default selective, then each set) join at their bound once their
    cheaper sibling reaches its own; one is dominated, and never priced, when that sibling fits at a step time no
    more than the variant's bound (it frees memory for a looser split or fewer recomputed layers, which cannot repay
    more). A variant may come up before its sibling (its tight bound can be the lower one): the sibling is priced
    first, unless its own tight bound exceeds the variant's bound (it cannot dominate it then; the variant is dominated
    exactly when the sibling is). HSDP candidates (dp_replicate > 1) are variants of the same candidate sharded over
    every data-parallel rank in the same way: they hold more state, so they can only win on exposed communication, and
    are dominated when that sibling's step is no more than their bound. Above the groups, the families sharing a
    `floor_key` wait as one entry (a list of them) at `family_floor`, below every floor of their groups."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec, solver: Solver,
                 options: SolveOptions, progress: ProgressFn | None, incumbent: Incumbent | None) -> None:
        self.model, self.cluster, self.job, self.spec = model, cluster, job, spec
        self.solver, self.options, self.progress, self.incumbent = solver, options, progress, incumbent
        self.bounds = ReportedBounds(model, cluster, job, spec.partial_recompute)
        self.capacity, self.host_capacity = cluster.gpu.memory_gib * GIB, self.bounds.host_capacity()
        self.group_floors = GroupFloors(self.bounds, self.capacity)
        self.built = list(families(model, cluster, job, spec))
        if not self.built:
            raise LayoutError(no_layout_reason(model, cluster, job, spec))  # a rule or a limit, not memory: exit 2
        self.fit = StateFit(self.bounds, spec, cluster, self.capacity)  # the state bound (step 2), offload choices
        self.tally = {"evaluated": 0, "infeasible": 0, "expanded": 0, "floored": 0, "simulated": 0, "fitting": 0,
                      "held": 0, "total": 0}
        self.groups: list[Group] = []  # every group queued so far
        self.family = module_family(model, job, spec)
        self.top: list[tuple[float, tuple[int, ...], Ranked]] = []  # max-heap by reported step time (negated)
        self.steps: dict[Candidate, float | None] = {}  # settled: the reported step, None: nothing fits or dominated
        self.sibling: dict[Candidate, Candidate] = {}  # a module-set variant's cheaper sibling
        self.dominated: set[Candidate] = set()
        self.lows: dict[Candidate, float] = {}  # a queued candidate's tight bound: <= its step
        self.early: dict[Candidate, float] = {}  # queued at its early key, its tight bound not yet computed
        self.makespans: dict[tuple[object, ...], float] = {}  # the simulator's, by what it reads (simulate.py)
        self.paths: dict[Candidate, tuple[float, FloorSearch]] = {}  # its split's bound: (its tight bound, the search)
        self.waiting: dict[Candidate, list[tuple[float, int, Ranked, Durations]]] = {}  # to simulate
        self.shared = Shared()  # what the candidates priced share: stage bodies, splits
        self.worst_gap, self.all_optimal = 0.0, True
        self.heap = self._family_entries()

    def held(self, f: int) -> int:
        return len(self.fit.choices(self.built[f][0])) * len(self.built[f][1])  # family f's candidates of one (ep, etp)

    def _family_entries(self) -> list[Entry]:
        """The candidates by `floor_key` (knobs and pp), each a list of (family, its (ep, etp) choice): they enter
        the heap as one entry at a floor below the floor of each of their groups (`EarlyFloors.floor`, level -2), are
        re-queued at `family_floor` (level -1) when it reaches the top, and become groups when that does (`expand`):
        most never do, and neither their layer times, their groups' floors nor their state bounds are computed."""
        floors: dict[tuple[object, ...], Members] = {}
        for f, (first, shapes, experts, _) in enumerate(self.built):
            self.tally["total"] += len(self.fit.choices(first)) * len(shapes) * len(experts)
            for e, (ep, etp) in enumerate(experts):
                floors.setdefault((first.tp, first.cp, first.sp, first.mbs, first.recompute, ep, etp, first.modules,
                                   first.pp), []).append((f, e))
        early = EarlyFloors(self.bounds)
        heap: list[Entry] = [(early.floor(*self._family(members)), (), -2, i, members)
                             for i, members in enumerate(floors.values())]
        heapq.heapify(heap)
        return heap

    def _family(self, members: Members) -> tuple[Candidate, list[tuple[Schedule, int]]]:
        """The first candidate of these families (with their (ep, etp)) and their (schedule, vpp) shapes."""
        first, shapes, experts, _ = self.built[members[0][0]]
        ep, etp = experts[members[0][1]]
        c = first if (ep, etp) == (first.ep, first.etp) else first.but(ep=ep, etp=etp)
        return c, [(s, v) for v, s in shapes]

    def expand(self, members: Members) -> None:
        """Queue the groups of these (family, (ep, etp) choice)s at their floors, each its first candidate within the
        state bound and its (schedule, vpp) shapes that hold one; a group whose floor over its members' memory
        (`GroupFloors.drops`) rules them all out is dropped with them, unless their next module sets would be
        searched (they store less)."""
        for f, e in members:
            first, shapes, experts, _ = self.built[f]
            ep, etp = experts[e]
            self.tally["held"] += self.held(f)
            base = first if (ep, etp) == (first.ep, first.etp) else first.but(ep=ep, etp=etp)
            sides = self.fit.placements(first, shapes)  # (each shape's head placement)
            fits = {side: self.fit.within(base, side) for side in set(sides)}
            shaped = [(schedule, vpp, side, fits[side]) for (vpp, schedule), side in zip(shapes, sides, strict=True)
                      if fits[side]]
            if not shaped:
                continue
            count = sum(len(offloads) for *_, offloads in shaped)
            self.tally["fitting"] += count
            held = [(schedule, vpp) for schedule, vpp, *_ in shaped]
            c = base if held[0] == (base.schedule, base.vpp) else base.but(schedule=held[0][0], vpp=held[0][1])
            self.groups.append((c, held))
            if next_module_set(c, self.family, self.job) is None and self.group_floors.drops(c, shaped):
                self.tally["floored"] += count  # none fits: dropped with the group (planner.search.group_floor)
                continue
            heapq.heappush(self.heap, (self.bounds.shape_floor(c, held, self.fit.choices(c)), (), 0, len(self.groups),
                                       (c, held)))

    def queue_group(self, group: Group) -> None:
        """A group at its floor: each offload choice of each of its shapes queued at its bound (tie 1: its memory
        floors checked), but those their memory floors drop where their schedule counts micro-batches in flight in
        closed form (else its orders are built: once a process), dropped here with their next sets (`next_sets`):
        dropped when they came up they would settle nothing, and a set's bound is at least its sibling's."""
        first, held = group
        placed = [self.bounds.shape_beside(first, vpp, schedule) for schedule, vpp in held]
        sides = {side: self.fit.within(first, side) for side in set(placed)}  # (what `expand` found)
        for (schedule, vpp), side in zip(held, placed, strict=True):
            base = first if (schedule, vpp) == (first.schedule, first.vpp) else first.but(vpp=vpp, schedule=schedule)
            balanced, early = balanced_only(base, self.spec), pricing(schedule).in_flight is not None
            for o in sides[side]:
                c = base if o == base.offload else base.but(offload=o)
                if not early:
                    heapq.heappush(self.heap, (self.bounds.key(c), c.sort_key(), 1, 0, c))
                elif self.floored(c, balanced):
                    self.steps[c] = None
                    self.tally["floored"] += 1
                    self.next_sets(c, balanced, True)
                else:
                    heapq.heappush(self.heap, (self.bounds.key(c), c.sort_key(), 1, 1, c))

    def kth(self) -> float:
        """The k-th best reported step so far (here, or in the other parts of a split search): nothing whose bound
        reaches it can enter the top-k."""
        own = -self.top[0][0] if len(self.top) >= self.spec.top_k else math.inf
        return own if self.incumbent is None else min(own, self.incumbent.kth())

    def keep(self, c: Candidate, ranked: Ranked) -> None:
        self.steps[c] = ranked.step_time_s
        if self.incumbent is not None:
            self.incumbent.offer(ranked.step_time_s)
        entry = (-ranked.step_time_s, tuple(-x for x in c.sort_key()), ranked)
        if len(self.top) < self.spec.top_k:
            heapq.heappush(self.top, entry)
        elif entry[:2] > self.top[0][:2]:
            heapq.heapreplace(self.top, entry)

    def dominated_by_sibling(self, c: Candidate) -> bool:
        """Whether `c`'s cheaper sibling (priced first) fits at a step no more than c's bound, or is dominated. One
        not yet priced whose tight bound exceeds c's bound (`cannot_dominate`) cannot dominate c itself: then c is
        dominated exactly when it is, and it is not priced for c (only when it comes up, if ever)."""
        before = self.sibling.get(c)
        if before is None:
            return False
        if self.cannot_dominate(before, c):
            if not self.dominated_by_sibling(before):
                return False
            self.steps[before] = None
            self.dominated.add(before)
            return True
        self.settle(before)
        if before in self.waiting:
            self.simulate(before, math.inf)  # its reported step decides
        step = self.steps[before]
        return before in self.dominated or (step is not None and self.bounds.key(c) >= step)

    def cannot_dominate(self, before: Candidate, c: Candidate) -> bool:
        """Whether `c`'s sibling `before`, not priced yet, has a tight bound above c's (`dominated_by_sibling`)."""
        return before not in self.steps and before not in self.waiting and self.low(before) > self.bounds.key(c)

    def low(self, c: Candidate) -> float:
        """A lower bound on the reported step of `c`, queued: its tight bound, or its split's bound (searched to the
        end); -∞ for one not queued."""
        if c in self.early:  # queued at its early key: its tight bound now
            del self.early[c]
            self.lows[c] = self.bounds.tight_key(c, False)
        low = self.lows.get(c, -math.inf)
        if c in self.paths and low > -math.inf:
            known, search = self.paths[c]
            search.finish()
            low = self.bounds.split_key(c, known, search.low)
        return low

    def settle(self, c: Candidate) -> None:
        """Price `c` (its cheaper sibling first) unless priced or dominated; a simulated one waits at its floor."""
        if c in self.steps or c in self.waiting:
            return
        if self.dominated_by_sibling(c):
            self.steps[c] = None
            self.dominated.add(c)
            return
        model, cluster, job, bounds = self.model, self.cluster, self.job, self.bounds
        priced = price(model, cluster, job, c, self.spec, self.solver, self.options, bounds.get(c),
                       bounds.activations(c), self.shared, not bounds.memory_exceeds(c, True, self.capacity))
        self.tally["evaluated"] += 1
        self.worst_gap, self.all_optimal = max(self.worst_gap, priced.gap), self.all_optimal and priced.optimal
        if self.progress is not None:
            self.progress(self.tally["evaluated"] + self.tally["floored"], self.tally["total"] + self.tally["expanded"])
        if priced.ranked is None:
            self.steps[c] = None
            self.tally["infeasible"] += 1
        elif not bounds.simulated(c):
            self.keep(c, priced.ranked)
        else:  # each layout at the least the simulator can return for it (sim_bounds.durations_floor)
            self.waiting[c] = sorted(floored(model, cluster, job, r, i) for i, r in enumerate(priced.layouts))
            heapq.heappush(self.heap, (self.waiting[c][0][0], c.sort_key(), 3, 0, c))

    def simulate(self, c: Candidate, below: float) -> None:
        """Simulate the layouts of `c` whose floor is below `below` and below the best of them simulated so far;
        keep the least (the first on a tie). None is kept when none is below `below`: it cannot enter the top-k."""
        best: tuple[float, int, Ranked] | None = None
        for floor, i, ranked, d in self.waiting.pop(c):
            if floor >= below or (best is not None and floor > best[0]):
                break
            found = simulated(self.model, self.cluster, self.job, ranked, d, self.makespans)
            self.tally["simulated"] += 1
            if best is None or (found.step_time_s, i) < best[:2]:
                best = (found.step_time_s, i, found)
        self.steps[c] = None
        if best is not None:
            self.keep(c, best[2])

    def run(self) -> None:
        """Pop the heap until its least key reaches the k-th best reported step (or it runs dry)."""
        while self.heap:
            bound, key, level, tie, item = heapq.heappop(self.heap)
            if bound >= self.kth():
                break
            if isinstance(item, list) and level == -2:  # families at their early floor: now at their own, or
                if self.fit.none_fit(self.built, item):  # settled where no member's states fit (state_fit)
                    self.tally["held"] += sum(self.held(f) for f, _ in item)
                else:
                    heapq.heappush(self.heap, (self.bounds.family_floor(*self._family(item)), key, -1, tie, item))
            elif isinstance(item, list):  # families at their floor: their groups
                self.expand(item)
            elif isinstance(item, tuple):
                self.queue_group(item)
            else:
                self.candidate(item, bound, key, level, tie)

    def candidate(self, c: Candidate, bound: float, key: tuple[int, ...], level: int, tie: int) -> None:
        """A candidate at the top of the heap, at its bound (level 1), its tight bound (2) or its simulation floor
        (3)."""
        if c.dp_replicate > 1 and self.spec.dp_replicate is None and c not in self.sibling:
            self.sibling[c] = c.but(dp_replicate=1)  # HSDP: priced only where it may beat sharding over all
        if level == 3:
            if c in self.waiting:  # (not simulated already for a variant's dominance)
                self.simulate(c, self.kth())
        elif level == 2 and tie == 2:
            self.refine(c, bound, key)
        elif level == 2:
            self.tight(c, bound, key, tie)
        else:
            self.bounded(c, key, tie == 1)

    def refine(self, c: Candidate, bound: float, key: tuple[int, ...]) -> None:
        """A candidate at its early key (`ReportedBounds.early_key`, below its tight bound): at its tight bound now,
        or re-queued there. It comes up at its tight bound in the same order as if queued there at once (the early key
        is below it), and the tight bounds of candidates that never come up are not computed."""
        low = self.low(c)
        if low > bound:
            heapq.heappush(self.heap, (low, key, 2, 0, c))
        else:
            self.tight(c, low, key, 0)

    def tight(self, c: Candidate, bound: float, key: tuple[int, ...], tie: int) -> None:
        """A candidate at its tight bound: priced, or re-queued at the bound of its split's paths (unless no split
        can beat the top-k). That bound is refined one test at a time (`FloorSearch`), each time the candidate comes
        up at it, until it rises above where it came up or is done (then priced): the candidate comes up at the bound
        of its finished search in the same order, and the tests that would refine a bound the search never reaches are
        not made."""
        bounds = self.bounds
        if tie and c not in self.steps and c not in self.waiting:
            known, search = self.paths[c]
            while (now := bounds.split_key(c, known, search.low)) <= bound and not search.done:
                search.step()
            if now > bound:
                heapq.heappush(self.heap, (now, key, 2, 1, c))
                return
        if tie or c in self.steps or not bounds.simulated(c) or balanced_only(c, self.spec):
            self.settle(c)
        elif not (self.kth() < math.inf and bounds.split_refuses(c, self.kth())):
            self.paths[c] = (bound, bounds.split_search(c, bound))
            heapq.heappush(self.heap, (bounds.split_key(c, bound, self.paths[c][1].low), key, 2, 1, c))

    def floored(self, c: Candidate, balanced: bool) -> bool:
        """Whether `c`'s memory floors rule out every layout of it: none fits on the GPU or in its node's host
        memory."""
        bounds = self.bounds
        return (bounds.memory_exceeds(c, balanced, self.capacity)
                or bounds.host_floor(c, balanced) > self.host_capacity)

    def bounded(self, c: Candidate, key: tuple[int, ...], fits: bool = False) -> None:
        """A candidate at its bound: dropped by its memory floors, else re-queued at its tight bound; its next
        module set joins at its own bound (`next_sets`). `fits`: its floors were checked when it was queued."""
        bounds, balanced = self.bounds, balanced_only(c, self.spec)
        dropped = not fits and self.floored(c, balanced)
        if dropped:
            self.steps[c] = None
            self.tally["floored"] += 1
        elif balanced:  # re-queued at the bound with the recomputation it needs (its tight bound, or a cheaper
            self.lows[c] = bounds.tight_key(c, balanced)  # one below it first: `refine`)
            heapq.heappush(self.heap, (self.lows[c], key, 2, 0, c))
        else:
            self.early[c] = bounds.early_key(c)
            heapq.heappush(self.heap, (self.early[c], key, 2, 2, c))
        self.next_sets(c, balanced, dropped)

    def next_sets(self, c: Candidate, balanced: bool, dropped: bool) -> None:
        """Queue c's next module set at its bound; where c was `dropped`, each next set its own floors drop too is
        dropped at once, its bound never computed (most of a mixture-of-experts search): dropped when it came up, it
        would settle nothing for the next (`dominated_by_sibling`)."""
        bounds, nxt = self.bounds, next_module_set(c, self.family, self.job)
        while nxt is not None:
            self.sibling[nxt] = c
            self.tally["expanded"] += 1
            if not (dropped and self.floored(nxt, balanced)):
                heapq.heappush(self.heap, (bounds.key(nxt), nxt.sort_key(), 1, 0, nxt))
                return
            self.steps[nxt] = None
            self.tally["floored"] += 1
            c, nxt = nxt, next_module_set(nxt, self.family, self.job)

    def result(self, seconds: float) -> SearchResult:
        """The top-k, best first, with the certificate; InfeasibleError where nothing fits."""
        self._refuse_empty()
        return certified(self.top, self.tally, self.solver, self.all_optimal, self.worst_gap, seconds)

    def _refuse_empty(self) -> None:
        """InfeasibleError naming what does not fit where the top-k is empty (unnamed where other parts beat it all)."""
        if not self.top and self.incumbent is not None and self.incumbent.kth() < math.inf:
            raise InfeasibleError("every layout of this part is slower than the k-th best the other parts found")
        model, cluster, job, spec = self.model, self.cluster, self.job, self.spec
        if not self.tally["fitting"]:  # (the heap ran dry: every family was expanded)
            pool = list(candidates(model, cluster, job, spec, offload_variants=False))
            raise InfeasibleError(no_fit_message(self.bounds, with_choices(pool, self.fit.choices),
                                                 fit_hints(spec, job)))
        if not self.top:
            pool = [replace(first, vpp=vpp, schedule=schedule) for first, held in self.groups for schedule, vpp in held]
            raise InfeasibleError(no_fit_message(self.bounds, with_choices(pool, self.fit.within),
                                                 fit_hints(spec, job)))


__all__ = ["Certificate", "Ranked", "SearchResult", "SearchSpec", "Solver", "search", "split_problem"]
