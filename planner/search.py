"""Search: enumerate -> bound -> split -> evaluate -> rank, with a certificate of optimality.

1. `planner.space.candidates` yields every valid degree tuple.
2. Memory bound: a family whose weights, gradients and optimizer state alone (sharded as its ZeRO
   stage allows, spread evenly over the pipeline) exceed the GPU is dropped.
3. Time bound: no split beats m·(Σ layer times)/pp (cost_models.pipeline: the slowest stage is at
   least the average), computed from per-layer times cached per (tp, cp, sp, mbs, recompute).
   Candidates are priced in increasing order of this bound and the scan stops when the bound
   reaches the k-th best step time found: every layout left is provably no better (best-first
   branch and bound), so the answer is optimal within the modelled space.
4. Split: for 1F1B the layer-to-stage split and the per-stage count of fully recomputed layers are
   solved exactly (planner.partition DP, or the CP-SAT / HiGHS model of planner.ilp); interleaved
   layouts use balanced model chunks.
   Recompute-module sets (`space.module_family`, nested) become candidates only after the same degrees with the
   next cheaper choice (none, the default selective, the previous set) were priced, and only where that did not
   fit or its step time exceeds the set's bound (else the set is dominated: it frees memory for a looser split or
   fewer recomputed layers, which cannot repay more than the difference). A set's bound is at least its
   sibling's, so it joins the best-first order where it belongs.
5. The chosen layout is priced by the plain cost model (`evaluate_layout`), which also re-checks
   that every stage fits.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from cost_models import flops as F
from cost_models import memory as M
from cost_models.layer import LayerKnobs
from cost_models.schedules import W_SHARE, in_flight, wave_bubble
from cost_models.step import (
    LayerTimes,
    LayoutCosts,
    Prediction,
    StageLayers,
    StageParams,
    dp_reduce_exposed,
    evaluate_layout,
    layer_times,
    layout_costs,
    optimizer_time,
    p2p_exposure,
    pipeline_hop_time,
    pipeline_hops,
    rank_layer_ids,
    rank_params,
    rank_stage_layers,
    sharded_dp_exposed,
    stage_cost,
    stage_states,
)
from planner.errors import InfeasibleError
from planner.ilp import SolveOptions, Solver, solve_ilp
from planner.ilp_kinds import solve_kinds_ilp
from planner.partition import KindSplitProblem, Split, SplitProblem, solve_dp, solve_kinds
from planner.simulate import simulated_step_time
from planner.space import Candidate, SearchSpec, candidates, module_family, next_module_set, no_layout_reason
from planner.specs import (
    GIB,
    WAVE_PLACED,
    ClusterSpec,
    JobSpec,
    Layout,
    ModelSpec,
    Recompute,
    Schedule,
    check_expert_degrees,
    wave_chunks,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ranked:
    layout: Layout
    prediction: Prediction
    simulated_step_time_s: float | None = None  # the pipeline priced by the discrete-event simulator

    @property
    def step_time_s(self) -> float:
        """What the ranking uses: the simulated step when there is one, else the closed form."""
        return self.simulated_step_time_s if self.simulated_step_time_s is not None else self.prediction.step_time_s


@dataclass(frozen=True)
class Certificate:
    method: str
    solver: Solver
    candidates: int  # valid degree tuples enumerated
    evaluated: int  # priced with a stage split
    pruned_memory: int  # dropped by the memory bound
    pruned_time: int  # dropped by the time bound
    infeasible: int  # priced, but no split fits in memory
    solve_time_s: float
    optimal: bool
    gap: float


@dataclass(frozen=True)
class SearchResult:
    best: Ranked
    alternatives: tuple[Ranked, ...]
    certificate: Certificate


def _state_bound_bytes(job: JobSpec, c: Candidate, rank_parameters: StageParams) -> float:
    """Least static bytes on the busiest stage: all weights/gradients/optimizer state of a TP rank
    (`rank_parameters`, over every stage), sharded by the ZeRO stage, spread evenly over pp stages, plus the
    fixed buffer allowance."""
    states = stage_states(rank_parameters.scaled(1 / c.pp), c.layout(), job.runtime.grad_reduce_bytes)
    return states.total + M.BUFFER_ALLOWANCE_GIB * GIB


class _LayerTimes:
    """Per-layer times and step-time bounds of one search, cached by what they depend on."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec) -> None:
        self.model, self.cluster, self.job = model, cluster, job
        self._cache: dict[LayerKnobs, LayerTimes] = {}
        self._bounds: dict[Candidate, float] = {}
        self._families: dict[tuple[object, ...], tuple[float, float, float, float]] = {}
        self._params: dict[tuple[int, bool, int, int], StageParams] = {}
        self._sends: dict[tuple[int, int, Schedule], float] = {}
        self._states: dict[tuple[object, ...], float] = {}
        self._beside: dict[tuple[int, int, Schedule], bool] = {}

    def beside(self, c: Candidate) -> bool:
        """Whether the candidate's embedding and LM head share a rank (it depends on pp, vpp and the schedule)."""
        key = (c.pp, c.vpp, c.schedule)
        if key not in self._beside:
            self._beside[key] = c.layout().head_beside_embedding
        return self._beside[key]

    def state_bound(self, c: Candidate) -> float:
        """`_state_bound_bytes`, once per (degrees, ZeRO stage, head placement)."""
        beside = self.beside(c)
        key = (c.tp, c.pp, c.dp, c.cp, c.zero, c.ep, c.etp, beside)
        if key not in self._states:
            self._states[key] = _state_bound_bytes(self.job, c, self.params(c, beside))
        return self._states[key]

    def params(self, c: Candidate, head_beside_embedding: bool) -> StageParams:
        """All parameters of one rank of the (tp, ep, etp) mesh, over every pipeline stage."""
        key = (c.tp, head_beside_embedding, c.ep, c.etp)
        if key not in self._params:
            self._params[key] = rank_params(self.model, self.job, c.tp, head_beside_embedding, c.ep, c.etp)
        return self._params[key]

    def sends(self, c: Candidate) -> float:
        """Pipeline send/recv times on the average rank's critical path per micro-batch, in units of one send:
        every rank's hops over pp, times the exposed share (`p2p_exposure`); they depend on pp, vpp, schedule."""
        key = (c.pp, c.vpp, c.schedule)
        if key not in self._sends:
            layout = c.layout()
            hops = sum(pipeline_hops(layout, r) for r in range(layout.pp))
            self._sends[key] = hops / c.pp * p2p_exposure(layout, self.job, self.cluster)
        return self._sends[key]

    def get(self, c: Candidate) -> LayerTimes:
        knobs = LayerKnobs(c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)
        if knobs not in self._cache:
            self._cache[knobs] = layer_times(self.model, self.cluster, self.job, knobs)
        return self._cache[knobs]

    def bound(self, c: Candidate) -> float:
        if c not in self._bounds:
            self._bounds[c] = self._bound(c)
        return self._bounds[c]

    def _bound(self, c: Candidate) -> float:
        """Lower bound on the step time of any split of candidate `c`.

        The pipeline takes at least (m + (pp − 1)/v) times the average stage (its slowest stage is at
        least the average; ZB-H1 hides at most p − 1 average weight gradients), the step tail at least
        the average stage's gradient reduction and optimizer step. Exposed communication is convex in
        (bytes, compute), so pricing it on the average stage under-estimates the average (Jensen).
        Recomputation chosen by the split only adds time."""
        stage, hop, backward, tail = self._family(c, self.beside(c))
        m = self.job.global_batch // (c.dp * c.mbs)
        if c.pp > 1:
            stage += self.sends(c) * hop
        if c.schedule is Schedule.ZB_V:  # every rank is busy m·t_r, and the slowest t_r is at least the average
            return stage * m + tail
        if c.schedule is Schedule.WAVE:  # and the wave's bubble takes the slowest chunk's backward, >= the average's
            return stage * m + wave_bubble(c.pp, 0.0, backward / c.vpp) + tail
        hidden = (c.pp - 1) * W_SHARE * backward if c.schedule is Schedule.ZB_H1 else 0.0
        return stage * (m + (c.pp - 1) / c.vpp) - hidden + tail

    def _family(self, c: Candidate, head_beside_embedding: bool) -> tuple[float, float, float, float]:
        """What the bound needs that does not depend on vpp or the schedule (but for where the head sits):
        the average stage's time (without pipeline sends), one send, its backward, and the tail priced with
        the widest overlap window (vpp 1), itself a lower bound for any vpp since exposure only grows as
        windows shrink."""
        key = (c.tp, c.pp, c.dp, c.cp, c.mbs, c.zero, c.recompute, c.sp, c.ep, c.etp, c.modules,
               head_beside_embedding)
        if key in self._families:
            return self._families[key]
        c = replace(c, vpp=1, schedule=Schedule.ONE_F_ONE_B)
        model, job, cluster = self.model, self.job, self.cluster
        times = self.get(c)
        layout = c.layout()
        hop = pipeline_hop_time(model, job, cluster, layout)
        layers = model.num_layers / c.pp
        n_dense, n_moe = F.decoder_layer_counts(model)
        avg = times.decoder.scaled(n_dense / c.pp) + times.embedding.scaled(1 / c.pp) + times.head.scaled(1 / c.pp)
        if times.moe is not None:
            avg = avg + times.moe.scaled(n_moe / c.pp)
        params = self.params(c, head_beside_embedding).scaled(1 / c.pp)
        stage = avg.total + sharded_dp_exposed(params, layers, layout, job, cluster, avg)
        tail = (dp_reduce_exposed(params, layout, job, cluster, avg.backward, avg.forward)
                + optimizer_time(params, layout, cluster))
        self._families[key] = (stage, hop, avg.backward, tail)
        return self._families[key]


def split_problem(costs: LayoutCosts, partial_recompute: bool) -> SplitProblem:
    """Read the affine stage model of planner.partition off the cost model itself (`stage_cost` at one
    and two layers, with and without full recomputation). Middle ranks share rank 1's times; their
    activations scale with the micro-batches each keeps in flight."""
    layout, model = costs.layout, costs.model
    pp, m, full_base = layout.pp, costs.num_microbatches, layout.recompute is Recompute.FULL
    two = min(2, model.num_layers)

    def at(rank: int, n: int, f: int) -> tuple[float, float, float]:
        st = stage_cost(costs, rank, costs.uniform(n, n if full_base else f))
        return st.compute_s, st.activations_gib * GIB, (st.peak_memory_gib - st.activations_gib) * GIB

    def weight_grad(rank: int, n: int) -> float:
        return W_SHARE * stage_cost(costs, rank, costs.uniform(n, n if full_base else 0)).time.backward

    zero_bubble = layout.schedule is Schedule.ZB_H1
    # the ranks whose stages differ (first, a middle one, last), each priced once
    probes = {q: (at(q, 1, 0), at(q, two, 0), at(q, 1, 1), in_flight(layout.schedule, q, pp, m, layout.vpp),
                  (weight_grad(q, 1), weight_grad(q, two)) if zero_bubble else (0.0, 0.0))
              for q in {0, min(1, pp - 1), pp - 1}}
    t0, m0, m1, mr, w0 = [], [], [], [], []
    t1 = tr = transient = w1 = 0.0
    for rank in range(pp):
        q = rank if rank in (0, pp - 1) else 1
        (time1, act1, rest1), (time2, _, rest2), (time_r, act_r, rest_r), alive_q, (w_one, w_two) = probes[q]
        k = in_flight(layout.schedule, rank, pp, m, layout.vpp) / alive_q
        t1, tr = max((time2 - time1) if two == 2 else 1.0, 1e-12), max(time_r - time1, 0.0)
        transient = max(transient, rest_r - rest1)
        t0.append(time1)
        if zero_bubble:
            w0.append(w_one)
            w1 = w_two - w_one if two == 2 else 0.0
        m0.append(rest1 + k * act1)
        per_layer = (rest2 - rest1 + k * act1) if two == 2 else k * act1 + 1.0
        m1.append(per_layer)
        mr.append(min(k * (act1 - act_r), per_layer * (1 - 1e-12)))
    return SplitProblem(
        num_layers=model.num_layers, num_microbatches=m, t0=tuple(t0), t1=t1, tr=tr, m0=tuple(m0), m1=tuple(m1),
        mr=tuple(mr), transient=transient, capacity=costs.cluster.gpu.memory_gib * GIB,
        partial_recompute=partial_recompute and not full_base, w0=tuple(w0), w1=w1)


def kind_split_problem(costs: LayoutCosts, partial_recompute: bool) -> KindSplitProblem:
    """The layer-kind split model (dense and MoE layers) read off the cost model: every rank's stage priced
    empty, with one layer of each kind and with that layer fully recomputed; the differences are the
    per-layer coefficients (exposed ZeRO-2/3 traffic is linearised, and the full model re-checks the split)."""
    layout = costs.layout
    full_base = layout.recompute is Recompute.FULL

    def at(rank: int, layers: StageLayers) -> tuple[float, float, float]:
        st = stage_cost(costs, rank, layers)
        return st.compute_s, st.peak_memory_gib * GIB, st.time.backward

    kinds = (StageLayers(dense=1, dense_full=int(full_base)), StageLayers(moe=1, moe_full=int(full_base)))
    fulls = (StageLayers(dense=1, dense_full=1), StageLayers(moe=1, moe_full=1))
    t0, m0, m1, mr, w0 = [], [], [], [], []
    t1: list[float] = []
    tr: list[float] = []
    w1: list[float] = []
    transient = 0.0
    for rank in range(layout.pp):
        base_t, base_m, base_b = at(rank, StageLayers())
        t0.append(base_t)
        m0.append(base_m)
        w0.append(W_SHARE * base_b)
        row_m, row_r = [], []
        t1, tr, w1 = [], [], []
        for one, full in zip(kinds, fulls, strict=True):
            time1, mem1, back1 = at(rank, one)
            time_f, mem_f, _ = at(rank, full)
            t1.append(max(time1 - base_t, 1e-12))
            tr.append(max(time_f - time1, 0.0))
            w1.append(W_SHARE * (back1 - base_b))
            row_m.append(mem1 - base_m)
            # the recomputed layer's transient copy is priced once per stage (the largest kind's), not per layer
            own = costs.activations.moe if one.moe else costs.activations.dense
            transient = max(transient, own)
            row_r.append(0.0 if full_base else max(mem1 - (mem_f - own), 0.0))
        m1.append(tuple(row_m))
        mr.append(tuple(row_r))
    zero_bubble = layout.schedule is Schedule.ZB_H1
    return KindSplitProblem(
        kinds=tuple(int(k) for k in costs.kinds), num_microbatches=costs.num_microbatches, t0=tuple(t0),
        t1=tuple(t1), tr=tuple(tr), m0=tuple(m0), m1=tuple(m1), mr=tuple(mr), transient=transient,
        capacity=costs.cluster.gpu.memory_gib * GIB, partial_recompute=partial_recompute and not full_base,
        w0=tuple(w0) if zero_bubble else (), w1=tuple(w1) if zero_bubble else ())


def v_chunks(per_rank: tuple[int, ...], vpp: int = 2) -> tuple[int, ...]:
    """Chunk sizes in model order, for chunks placed in sweeps down and back up the ranks (ZB-V, the wave), from
    per-rank layer counts: rank r's n layers shared evenly over its vpp chunks, the later sweeps taking the
    remainder (ZB-V: the down chunk gets half rounded down, the up chunk the rest)."""
    pp = len(per_rank)
    sizes = [0] * (pp * vpp)
    for rank, n in enumerate(per_rank):
        base, extra = divmod(n, vpp)
        for j, chunk in enumerate(wave_chunks(rank, pp, vpp)):
            sizes[chunk] = base + (j >= vpp - extra)
    return tuple(sizes)


ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class _Priced:
    ranked: Ranked | None
    infeasible: bool
    gap: float
    optimal: bool


def _solve_split(costs: LayoutCosts, spec: SearchSpec, solver: Solver,
                 options: SolveOptions) -> tuple[Split | None, float, bool]:
    """(split, gap, optimal): the exact per-stage split of the layout's layers, by the DP or, when asked, the
    MILP seeded with it; stacks whose layers differ in kind take the segment DP and the per-layer MILP."""
    if costs.model.heterogeneous:
        kinds = kind_split_problem(costs, spec.partial_recompute)
        split = solve_kinds(kinds)
        if solver is Solver.DP or split is None:
            return split, 0.0, True
        result = solve_kinds_ilp(kinds, solver, options, hint=split)
    else:
        problem = split_problem(costs, spec.partial_recompute)
        split = solve_dp(problem)
        if solver is Solver.DP or split is None:
            return split, 0.0, True
        result = solve_ilp(problem, solver, options, hint=split)
    return result.split, result.gap, result.optimal


def _price(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: Candidate, spec: SearchSpec,
           solver: Solver, options: SolveOptions, times: LayerTimes) -> _Priced:
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
    costs = layout_costs(model, cluster, job, balanced, times)
    per_rank_split = c.schedule in WAVE_PLACED
    if (c.vpp > 1 and not per_rank_split) or not spec.uneven_split:  # balanced chunks: stage 0 keeps the most in flight
        ids = rank_layer_ids(balanced, model.num_layers)[0]
        if stage_cost(costs, 0, rank_stage_layers(costs, 0, ids)).peak_memory_gib > cluster.gpu.memory_gib:
            return _Priced(None, True, gap, optimal)
        layouts = [balanced]
    else:
        split, gap, optimal = _solve_split(costs, spec, solver, options)
        if split is None:
            return _Priced(None, True, gap, optimal)
        chunks = v_chunks(split.layers, c.vpp) if c.schedule in WAVE_PLACED else split.layers
        solved = replace(balanced, stage_layers=chunks,
                         recompute_layers=split.recompute if any(split.recompute) else None)
        layouts = [solved] if model.num_layers < c.pp else [solved, balanced]
    best: Ranked | None = None
    for layout in layouts:
        prediction = evaluate_layout(model, cluster, job, layout, times)
        if prediction.fits and (best is None or prediction.step_time_s < best.prediction.step_time_s):
            best = Ranked(layout, prediction)
    return _Priced(best, best is None, gap, optimal)


def search(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec | None = None,
           solver: Solver = Solver.DP, options: SolveOptions | None = None,
           progress: ProgressFn | None = None) -> SearchResult:
    """The fastest layouts that fit (best first), with the search's certificate."""
    start = time.perf_counter()
    spec, options = spec or SearchSpec(), options or SolveOptions()
    check_expert_degrees(model, spec.ep or 1, spec.etp or 1)  # a pin the model rules out, named as such
    layer_times = _LayerTimes(model, cluster, job)
    capacity = cluster.gpu.memory_gib * GIB
    pool = list(candidates(model, cluster, job, spec))
    if not pool:
        raise InfeasibleError(no_layout_reason(model, cluster, job, spec))
    fitting = [c for c in pool if layer_times.state_bound(c) <= capacity]
    pruned_memory = len(pool) - len(fitting)
    if not fitting:
        raise InfeasibleError(_no_fit_message(layer_times, pool))
    # best-first over a heap: module-set variants (`space.module_family`) join it only when their cheaper sibling
    # (same degrees, none or the default selective, or the previous set) needed fully recomputed layers or did not fit
    family = module_family(model, job, spec)
    heap = [(layer_times.bound(c), c.sort_key(), c) for c in fitting]
    heapq.heapify(heap)
    top: list[tuple[float, tuple[int, ...], Ranked]] = []  # max-heap by step time (negated)
    evaluated = infeasible = expanded = 0
    worst_gap, all_optimal = 0.0, True
    while heap:
        bound, _, cand = heapq.heappop(heap)
        if len(top) >= spec.top_k and bound >= -top[0][0]:
            break
        priced = _price(model, cluster, job, cand, spec, solver, options, layer_times.get(cand))
        evaluated += 1
        worst_gap, all_optimal = max(worst_gap, priced.gap), all_optimal and priced.optimal
        if progress is not None:
            progress(evaluated, len(fitting) + expanded)
        nxt = next_module_set(cand, family, job)
        # else nxt is dominated: this one is already as fast as nxt could be
        if nxt is not None and (priced.ranked is None or layer_times.bound(nxt) < priced.ranked.prediction.step_time_s):
            heapq.heappush(heap, (layer_times.bound(nxt), nxt.sort_key(), nxt))  # bound >= this one's: order holds
            expanded += 1
        if priced.ranked is None:
            infeasible += 1
            continue
        entry = (-priced.ranked.prediction.step_time_s, tuple(-x for x in cand.sort_key()), priced.ranked)
        if len(top) < spec.top_k:
            heapq.heappush(top, entry)
        elif entry[:2] > top[0][:2]:
            heapq.heapreplace(top, entry)
    if not top:
        raise InfeasibleError(_no_fit_message(layer_times, fitting))
    ranked = [e[2] for e in sorted(top, key=lambda e: (-e[0], tuple(-x for x in e[1])))]
    # on uneven stages the simulator is the reference: it re-ranks the finalists (ties keep the order)
    ranked = [replace(r, simulated_step_time_s=simulated_step_time(model, cluster, job, r.layout, r.prediction))
              for r in ranked]
    ranked = [r for _, r in sorted(enumerate(ranked), key=lambda ir: (ir[1].step_time_s, ir[0]))]
    cert = Certificate(
        method="enumerate + memory/time bounds (best-first) + exact stage split; top-k re-ranked by the "
               "discrete-event pipeline simulator", solver=solver,
        candidates=len(pool) + expanded, evaluated=evaluated, pruned_memory=pruned_memory,
        pruned_time=len(fitting) + expanded - evaluated, infeasible=infeasible,
        solve_time_s=time.perf_counter() - start,
        optimal=all_optimal, gap=worst_gap)
    log.info("searched %d candidates: %d priced, %d pruned by memory, %d by the time bound, %d did not fit",
             cert.candidates, cert.evaluated, cert.pruned_memory, cert.pruned_time, cert.infeasible)
    return SearchResult(ranked[0], tuple(ranked[1:]), cert)


def _no_fit_message(layer_times: _LayerTimes, pool: list[Candidate]) -> str:
    """Name the tightest resource and what would make the job fit."""
    cluster, job = layer_times.cluster, layer_times.job
    need_bytes, _, leanest = min((layer_times.state_bound(c), c.sort_key(), c) for c in pool)
    need = need_bytes / GIB
    cap = cluster.gpu.memory_gib
    spare = cap - M.BUFFER_ALLOWANCE_GIB
    if need <= cap:
        return (f"no layout fits in {cap:g} GiB per GPU: weights and optimizer state fit (leanest: "
                f"{need:.1f} GiB with tp {leanest.tp}, pp {leanest.pp}, ZeRO-{int(leanest.zero)}) but activations do "
                f"not; use a shorter sequence than {job.seq_len}, a smaller batch, more GPUs or GPUs with more memory")
    states = need - M.BUFFER_ALLOWANCE_GIB
    gpus = cluster.num_gpus * math.ceil(states / max(spare, 1e-9))
    return (f"no layout fits in {cap:g} GiB per GPU: even the leanest (tp {leanest.tp}, pp {leanest.pp}, "
            f"ZeRO-{int(leanest.zero)}) needs {need:.1f} GiB for weights, gradients and optimizer state alone; "
            f"use about {gpus} GPUs or more, GPUs with at least {need + 4:.0f} GiB, or a smaller model")


__all__ = ["Certificate", "Ranked", "SearchResult", "SearchSpec", "Solver", "search", "split_problem"]
