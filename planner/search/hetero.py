"""Search across node groups of different hardware: which groups carry the pipeline in which order, each group's TP
degree, the shared data-parallel degree, micro-batch size and recomputation, and the layer split over the stages.

The space (meshcore.cluster.HeteroLayout): every pipeline replica spans the groups the same way, so a group g
with N_g GPUs used at TP degree t_g hosts p_g = N_g / (t_g · dp) consecutive stages; a group may be left idle.
Stages then number P = Σ p_g. One candidate is (dp, mbs, ZeRO, recomputation, the order of the groups used, their
TP degrees); for each, the layer split and each stage's count of fully recomputed layers are solved exactly:

    stage s (on its group, at its pipeline rank) holding n layers, r recomputed:
        T_s(n, r) = t0_s + (n − 1)·t1_s + r·tr_s,  M_s(n, r) = m0_s + (n − 1)·m1_s − r·mr_s (+ transient)  <= cap_s
    minimise J = (m − 1)·max_s T_s + Σ_s T_s  (1F1B, cost_models.pipeline.stages)

The coefficients are read off `stage_cost` on the stage's own group (cost_models.hetero) with the sends into and
out of the stage in t0_s; the per-stage tables come from planner.search.partition (`stage_tables` of a one-stage
SplitProblem each: the fewest recomputed layers that fit) and the split from its bottleneck scan and min-plus DP
over (stage, layer boundary) (`segments`, `least_bottleneck`, `best_boundaries`). The solved split competes with
the even split (Megatron-LM's default); the full model (cost_models.hetero.predict_hetero) prices both.
Candidates are priced best-first by a lower bound on J, J >= (m − 1 + P)·L·min t1 / P (the stage sum is at least
every layer at the fastest per-layer time the candidate uses, the bottleneck at least the mean), and the scan stops
once the bound reaches the k-th best step time. `brute_force` enumerates every candidate and split for the tests.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np

from cost_models.compute.knobs import LayerActivations, LayerTimes
from cost_models.hetero import group_costs, hetero_stage, predict_hetero, stage_hops
from cost_models.prediction import Prediction, StageLayers
from cost_models.step import LayoutCosts, layer_activations, layer_times, layout_knobs
from meshcore import GIB, JobSpec, ModelSpec, Recompute, ZeroStage
from meshcore.cluster import HeteroCluster, HeteroLayout, HeteroStage
from meshcore.errors import InfeasibleError, InputError
from planner.search.partition import best_boundaries, least_bottleneck, segments, stage_tables
from planner.search.space import divisors
from planner.search.split_model import SplitProblem

MAX_ORDERED = 4  # up to this many groups every order (and subset) is tried, beyond it the file's order only


@dataclass(frozen=True)
class HeteroSpec:
    """Pins and limits of the heterogeneous search (None: searched)."""

    dp: int | None = None
    mbs: int | None = None
    zero: ZeroStage | None = None
    recompute: Recompute | None = None
    tp: int | None = None  # one TP degree for every stage (Megatron-LM runs no other)
    max_tp: int | None = None
    max_mbs: int = 4
    partial_recompute: bool = True
    top_k: int = 5
    all_groups: bool = False  # every group must carry stages


@dataclass(frozen=True)
class HeteroCandidate:
    dp: int
    mbs: int
    zero: ZeroStage
    recompute: Recompute
    order: tuple[tuple[str, int], ...]  # (group, tp) in pipeline order

    def skeleton(self, cluster: HeteroCluster) -> HeteroLayout:
        """The layout's stages with no layers yet (p_g = N_g / (tp_g · dp) per group)."""
        stages = tuple(HeteroStage(g, t, 0) for g, t in self.order
                       for _ in range(cluster.group(g).num_gpus // (t * self.dp)))
        return HeteroLayout(self.dp, self.mbs, self.zero, self.recompute, stages)


@dataclass(frozen=True)
class HeteroRanked:
    layout: HeteroLayout
    prediction: Prediction
    objective: float  # J of the split (the pipeline term the split solver minimises)


@dataclass(frozen=True)
class HeteroResult:
    best: HeteroRanked
    alternatives: tuple[HeteroRanked, ...]
    candidates: int
    evaluated: int
    pruned_time: int
    infeasible: int
    solve_time_s: float


def _tp_choices(model: ModelSpec, cluster: HeteroCluster, group: str, dp: int, spec: HeteroSpec) -> list[int]:
    """TP degrees of `group`'s stages: powers of two inside its scale-up domain (and max_tp), dividing the heads
    (and the KV heads, or divided by them), leaving whole stages of tp·dp GPUs."""
    g = cluster.group(group)
    top = min(g.cluster.scale_up_size, g.gpus_per_node, spec.max_tp or g.gpus_per_node)
    out = []
    for t in (1, 2, 4, 8, 16, 32, 64):
        if t > top or g.num_gpus % (t * dp) or model.num_attention_heads % t:
            continue
        if model.num_kv_heads % t and t % model.num_kv_heads:
            continue
        if spec.tp is None or spec.tp == t:
            out.append(t)
    return out


def _orders(cluster: HeteroCluster, spec: HeteroSpec) -> list[tuple[str, ...]]:
    """Orders of the groups along the pipeline: every ordered subset up to MAX_ORDERED groups, else the file's."""
    names = [g.name for g in cluster.groups]
    if len(names) > MAX_ORDERED:
        return [tuple(names)]
    sizes = [len(names)] if spec.all_groups else range(1, len(names) + 1)
    return [perm for k in sizes for perm in itertools.permutations(names, k)]


def candidates(model: ModelSpec, cluster: HeteroCluster, job: JobSpec, spec: HeteroSpec) -> Iterator[HeteroCandidate]:
    """Every valid candidate (one flat generator; the rules in the module docstring)."""
    orders = _orders(cluster, spec)
    used_gpus = {g.name: g.num_gpus for g in cluster.groups}
    dps = sorted({d for g in cluster.groups for d in divisors(g.num_gpus)})
    recomputes = [spec.recompute] if spec.recompute else [Recompute.NONE, Recompute.FULL]
    for dp in dps if spec.dp is None else [spec.dp]:
        tps = {g.name: _tp_choices(model, cluster, g.name, dp, spec) for g in cluster.groups}
        for mbs in [spec.mbs] if spec.mbs else [b for b in (1, 2, 4, 8, 16) if b <= spec.max_mbs]:
            if job.global_batch % (mbs * dp):
                continue
            zero = spec.zero if spec.zero is not None else (ZeroStage.NONE if dp == 1 else ZeroStage.OPTIMIZER)
            for rc, order in itertools.product(recomputes, orders):
                if any(used_gpus[g] % dp for g in order):
                    continue
                for degrees in itertools.product(*(tps[g] for g in order)):
                    pp = sum(used_gpus[g] // (t * dp) for g, t in zip(order, degrees, strict=True))
                    if pp <= model.num_layers:
                        yield HeteroCandidate(dp, mbs, zero, rc, tuple(zip(order, degrees, strict=True)))


class _Costs:
    """Layer times and activations per (group, knobs), group costs per (group, tp, pp) of one candidate family."""

    def __init__(self, model: ModelSpec, cluster: HeteroCluster, job: JobSpec) -> None:
        self.model, self.cluster, self.job = model, cluster, job
        self._layers: dict[tuple[object, ...], tuple[LayerTimes, LayerActivations]] = {}

    def layers(self, group: str, layout: HeteroLayout, tp: int) -> tuple[LayerTimes, LayerActivations]:
        knobs = layout_knobs(layout.group_layout(tp))
        key = (group, knobs)
        if key not in self._layers:
            spec = self.cluster.group(group).cluster
            self._layers[key] = (layer_times(self.model, spec, self.job, knobs),
                                 layer_activations(self.model, spec, self.job, knobs))
        return self._layers[key]

    def group(self, layout: HeteroLayout, group: str, tp: int) -> LayoutCosts:
        times, acts = self.layers(group, layout, tp)
        return group_costs(self.model, self.job, self.cluster, layout, group, tp, times, acts)

    def per_layer(self, c: HeteroCandidate) -> float:
        """The fastest per-layer time (forward + backward) any stage of `c` can have."""
        layout = c.skeleton(self.cluster)
        out = math.inf
        for g, t in c.order:
            times = self.layers(g, layout, t)[0]
            out = min(out, times.decoder_full.total if c.recompute is Recompute.FULL else times.decoder.total)
        return out


def stage_rows(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout,
               costs: dict[tuple[str, int], LayoutCosts], partial: bool) -> tuple[np.ndarray, np.ndarray]:
    """time[s, n] and recomputed[s, n] for every stage s and n = 0..L layers (∞ where it does not fit): the affine
    stage model read off `stage_cost` at one and two layers and one recomputed, solved per stage by
    planner.search.partition.stage_tables."""
    L, m, full_base = model.num_layers, layout.num_microbatches(job), layout.recompute is Recompute.FULL
    two = min(2, L)
    times, recs = [], []
    for s, st in enumerate(layout.stages):
        gc = costs[(st.group, st.tp)]
        hops = stage_hops(model, job, cluster, layout, s)

        def at(n: int, f: int, gc: LayoutCosts = gc, s: int = s, hops: float = hops) -> tuple[float, float, float]:
            sc = hetero_stage(gc, s, gc.uniform(n, n if full_base else f), hops)
            return sc.compute_s, sc.activations_gib * GIB, (sc.peak_memory_gib - sc.activations_gib) * GIB

        (t1, a1, r1), (t2, a2, r2), (tf, af, rf) = at(1, 0), at(two, 0), at(1, 1)
        per_layer = (t2 - t1) if two == 2 else 1.0
        m1 = (a2 + r2 - a1 - r1) if two == 2 else a1 + 1.0
        problem = SplitProblem(
            num_layers=L, num_microbatches=m, t0=(t1,), t1=max(per_layer, 1e-12), tr=max(tf - t1, 0.0),
            m0=(a1 + r1,), m1=(m1,), mr=(min(max(a1 - af, 0.0), m1 * (1 - 1e-12)),), transient=max(rf - r1, 0.0),
            capacity=cluster.group(st.group).cluster.gpu.memory_gib * GIB, partial_recompute=partial and not full_base)
        row_t, row_r = stage_tables(problem)
        times.append(row_t[0])
        recs.append(row_r[0])
    return np.array(times), np.array(recs)


def solve_split(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout,
                costs: dict[tuple[str, int], LayoutCosts], partial: bool) -> tuple[HeteroLayout, float] | None:
    """The split minimising J over every composition of the layers into the stages (None: none fits)."""
    times, recs = stage_rows(model, job, cluster, layout, costs, partial)
    max_cost = segments(times)
    allowed = np.isfinite(max_cost)
    least = least_bottleneck(max_cost, allowed)
    if not np.isfinite(least):
        return None
    found = best_boundaries(max_cost, max_cost, allowed, layout.num_microbatches(job), start=least * (1 - 1e-9))
    if found is None:
        return None
    bounds, objective = found
    counts = [b - a for a, b in itertools.pairwise(bounds)]
    stages = tuple(replace(st, layers=n, full=int(recs[s, n])) for s, (st, n) in enumerate(zip(layout.stages, counts,
                                                                                                strict=True)))
    return replace(layout, stages=stages), objective


def even_split(layout: HeteroLayout, num_layers: int) -> HeteroLayout:
    """Megatron-LM's default: layers evenly over the stages, the remainder to the middle ones, none recomputed
    beyond the layout's own mode."""
    base, extra = divmod(num_layers, layout.pp)
    start = (layout.pp - extra) // 2
    return replace(layout, stages=tuple(replace(st, layers=base + (start <= i < start + extra), full=0)
                                        for i, st in enumerate(layout.stages)))


def price(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, c: HeteroCandidate, spec: HeteroSpec,
          cache: _Costs) -> HeteroRanked | None:
    """Split candidate `c` exactly, price it and the even split with the full model; the faster that fits."""
    layout = c.skeleton(cluster)
    costs = {(g, t): cache.group(layout, g, t) for g, t in c.order}
    solved = solve_split(model, job, cluster, layout, costs, spec.partial_recompute)
    best: HeteroRanked | None = None
    tries = [solved] if solved else []
    if model.num_layers >= layout.pp:
        tries.append((even_split(layout, model.num_layers), math.nan))
    for lay, objective in tries:
        pred = predict_hetero(model, job, cluster, lay, costs)
        if pred.fits and (best is None or pred.step_time_s < best.prediction.step_time_s):
            best = HeteroRanked(lay, pred, objective)
    return best


def check_model(model: ModelSpec, job: JobSpec) -> None:
    """The heterogeneous search plans dense language models priced analytically."""
    if model.moe is not None or model.vision is not None or model.mla is not None:
        raise InputError(f"{model.name}: planning across node groups covers dense decoder stacks; mixture-of-experts, "
                         "MLA and vision-language models are planned on one hardware (--hardware)")
    if job.runtime.measured is not None:
        raise InputError("planning across node groups prices layers analytically per group: a cost table (--costs) "
                         "measures one GPU type")


def search_hetero(model: ModelSpec, cluster: HeteroCluster, job: JobSpec,
                  spec: HeteroSpec | None = None) -> HeteroResult:
    """The fastest heterogeneous layouts that fit, best first (branch and bound in the module docstring)."""
    start = time.perf_counter()
    spec = spec or HeteroSpec()
    check_model(model, job)
    cache = _Costs(model, cluster, job)
    pool = list(candidates(model, cluster, job, spec))
    if not pool:
        raise InfeasibleError(f"no layout across the groups of {cluster.name}: no data-parallel degree, micro-batch "
                              f"size and TP degrees divide the groups' GPUs and the global batch {job.global_batch}")
    heap = []
    for i, c in enumerate(pool):
        pp = len(c.skeleton(cluster).stages)
        m = job.global_batch // (c.mbs * c.dp)
        heap.append(((m - 1 + pp) * model.num_layers * cache.per_layer(c) / pp, i, c))
    heapq.heapify(heap)
    top: list[tuple[float, int, HeteroRanked]] = []
    evaluated = infeasible = 0
    while heap:
        bound, i, c = heapq.heappop(heap)
        if len(top) >= spec.top_k and bound >= -top[0][0]:
            break
        ranked = price(model, job, cluster, c, spec, cache)
        evaluated += 1
        if ranked is None:
            infeasible += 1
            continue
        entry = (-ranked.prediction.step_time_s, -i, ranked)
        if len(top) < spec.top_k:
            heapq.heappush(top, entry)
        elif entry[:2] > top[0][:2]:
            heapq.heapreplace(top, entry)
    if not top:
        raise InfeasibleError(f"no layout across the groups of {cluster.name} fits in GPU memory "
                              f"({', '.join(f'{g.name}: {g.cluster.gpu.memory_gib:g} GiB' for g in cluster.groups)})"
                              "; more nodes, a shorter sequence or a smaller model would")
    order = [e[2] for e in sorted(top, key=lambda e: (-e[0], -e[1]))]
    return HeteroResult(order[0], tuple(order[1:]), len(pool), evaluated, len(pool) - evaluated, infeasible,
                        time.perf_counter() - start)


def split_objective(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout,
                    costs: dict[tuple[str, int], LayoutCosts] | None = None) -> float | None:
    """J of `layout`'s split priced stage by stage with the cost model itself (not the affine tables), each stage
    recomputing the fewest layers that fit; None when a stage does not fit at all. `costs`: group costs by
    (group, tp), computed here when not given."""
    if costs is None:
        costs = {(s.group, s.tp): group_costs(model, job, cluster, layout, s.group, s.tp) for s in layout.stages}
    totals = []
    full_base = layout.recompute is Recompute.FULL
    for s, st in enumerate(layout.stages):
        gc, cap = costs[(st.group, st.tp)], cluster.group(st.group).cluster.gpu.memory_gib
        hops = stage_hops(model, job, cluster, layout, s)
        for r in ([st.layers] if full_base else range(st.layers + 1)):
            sc = hetero_stage(gc, s, StageLayers(dense=st.layers, dense_full=r), hops)
            if sc.peak_memory_gib <= cap * (1 + 1e-12):
                totals.append(sc.compute_s)
                break
        else:
            return None
    m = layout.num_microbatches(job)
    return (m - 1) * max(totals) + sum(totals)


def brute_force(model: ModelSpec, cluster: HeteroCluster, job: JobSpec, spec: HeteroSpec,
                only: HeteroCandidate | None = None) -> tuple[float, HeteroLayout] | None:
    """The least J over every candidate (or `only` that one) and every composition of the layers (small cases
    only): the tests' reference for the split solver."""
    best: tuple[float, HeteroLayout] | None = None
    for c in [only] if only is not None else candidates(model, cluster, job, spec):
        layout = c.skeleton(cluster)
        costs = {(g, t): group_costs(model, job, cluster, layout, g, t) for g, t in c.order}
        for cuts in itertools.combinations(range(1, model.num_layers), layout.pp - 1):
            bounds = (0, *cuts, model.num_layers)
            lay = replace(layout, stages=tuple(replace(st, layers=b - a) for st, (a, b)
                                               in zip(layout.stages, itertools.pairwise(bounds), strict=True)))
            value = split_objective(model, job, cluster, lay, costs)
            if value is not None and (best is None or value < best[0] - 1e-12):
                best = (value, lay)
    return best
