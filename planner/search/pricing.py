"""Pricing one candidate of the exact search (planner.search.exact): its split solved and its layouts priced by the
cost model (`price`), the layout a plan reports of them (`reported`), and the least the simulator can return for a
layout (`floored`), at which it waits to be simulated."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Durations
from cost_models.prediction import StageLayers
from cost_models.step import (
    LayerActivations,
    LayerTimes,
    StageBody,
    StageWeights,
    evaluate_costs,
    layout_costs,
    rank_layer_ids,
    rank_stage_layers,
    stage_cost,
)
from cost_models.sync import zero_alike
from meshcore import WAVE_PLACED, ClusterSpec, JobSpec, ModelSpec, ScheduleFamily, ZeroStage, spec_of
from planner.search.ilp import SolveOptions, Solver
from planner.search.memory_floors import ROUNDING
from planner.search.ranked import Ranked
from planner.search.sim_bounds import durations_floor
from planner.search.simulate import durations, simulated_step_time, step_tail
from planner.search.space import Candidate, SearchSpec
from planner.search.splits import Solved, solve_split, v_chunks


@dataclass(frozen=True)
class Priced:
    ranked: Ranked | None  # the least closed-form step of `layouts`
    infeasible: bool
    gap: float
    optimal: bool
    layouts: tuple[Ranked, ...] = ()  # every layout of the candidate that fits: the solved split, then the balanced


def reported(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, priced: Priced) -> Ranked | None:
    """The candidate as a plan reports it: of its layouts that fit, the one with the least reported step time
    (`Ranked.step_time_s`: simulated where the pipeline is simulated, else the closed form), the first on a tie."""
    found = [simulated(model, cluster, job, r) for r in priced.layouts]
    return min(found, key=lambda r: r.step_time_s, default=None)


def simulated(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Ranked, d: Durations | None = None,
              memo: dict[tuple[object, ...], float] | None = None) -> Ranked:
    """`r` with its simulated step (`d`: its simulator durations, when the caller has them; `memo`: makespans already
    simulated, `simulated_step_time`'s)."""
    return replace(r, simulated_step_time_s=simulated_step_time(model, cluster, job, r.layout, r.prediction, d, memo))


def balanced_only(c: Candidate, spec: SearchSpec) -> bool:
    """Whether `price` prices the candidate's balanced chunks alone (interleaved, or no uneven splits)."""
    return (c.vpp > 1 and c.schedule not in WAVE_PLACED) or not spec.uneven_split


Key = tuple[object, ...]


@dataclass(frozen=True)
class Shared:
    """What the candidates one search prices share: stage bodies by `body_key`, stage weights by `weights_key`, the
    DP's splits by problem (splits.solve_split), and what `price` found for a candidate whose ZeRO-2 and ZeRO-3 price
    alike (by the candidate at ZeRO-2 and whether its balanced chunks may fit)."""

    bodies: dict[Key, dict[tuple[bool, bool, StageLayers], StageBody]] = field(default_factory=dict)
    weights: dict[Key, dict[tuple[bool, bool, int, int], StageWeights]] = field(default_factory=dict)
    splits: Solved = field(default_factory=dict)
    alike: dict[tuple[Candidate, bool], Priced] = field(default_factory=dict)


def weights_key(c: Candidate) -> Key:
    """What the stage weights of `c`'s layouts (cost_models.step.stage_weights: every (embedding, head, layers) of
    them) read of it. Proof, by what it reads: one layer's parameters (tp, ep, etp), the embedding's (tp) and the
    head's (tp, ep, etp and `head_beside_embedding`); of the layout, through cost_models.sync (stage_states,
    host_state_bytes, grad_accumulation_time, grad_traffic), its mesh (tp, cp, dp, dp_replicate, pp, ep, etp), micro-
    batches (dp, mbs), zero, offload and pp; neither the schedule, the chunks, the recomputation nor the split.
    Candidates of one key (recompute-module sets, schedules) share their stages' weights (tests/test_search.py holds
    them equal to each layout's own)."""
    return (c.tp, c.cp, c.pp, c.dp, c.dp_replicate, c.mbs, c.zero, c.ep, c.etp, c.offload,
            c.layout().head_beside_embedding)


def body_key(c: Candidate) -> Key:
    """What the stage bodies of `c`'s layouts (cost_models.step.stage_body: every (embedding, head, layers) of them)
    read of it: every field but the schedule, with the schedule's two effects there, whether it interleaves and
    whether the embedding and the head share a rank. Proof, by what it reads: its stage weights (`weights_key`), the
    layer times and activations (of tp, cp, sp, mbs, recompute, ep, etp, modules), one layer's parameters (tp, ep,
    etp); of the layout, through cost_models.sync (stage_offload_exposed, sharded_dp_exposed, dp_reduce_exposed,
    optimizer_time) and compute.host.microbatch_sync_s, its mesh (tp, cp, dp, dp_replicate, pp, ep, etp), world,
    micro-batches (dp, mbs), zero, offload, pp and vpp, and the schedule in dp_reduce_exposed alone, as whether it
    interleaves; never the split (stage_layers, recompute_layers: the stage's layers are the caller's). Layouts of one
    key (ZB-V, DualPipeV and the two-chunk wave; 1F1B, ZB-H1 and ZB-H2) share their bodies (tests/test_search.py
    holds them equal to each layout's own)."""
    return (c.tp, c.cp, c.pp, c.dp, c.dp_replicate, c.mbs, c.vpp, c.zero, c.recompute, c.sp, c.ep, c.etp, c.modules,
            c.offload, spec_of(c.schedule).family is ScheduleFamily.INTERLEAVED, c.layout().head_beside_embedding)


def price(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: Candidate, spec: SearchSpec,
          solver: Solver, options: SolveOptions, times: LayerTimes,
          activations: LayerActivations | None = None, shared: Shared | None = None,
          balanced_may_fit: bool = True) -> Priced:
    """`price_split`, once for the ZeRO-2 and ZeRO-3 twins of a layout that prices both alike
    (cost_models.sync.gathered_alike: torchtitan's FSDP2 under a pipeline, where half the candidates a search prices
    are such twins): the other's found, its layouts at c's ZeRO stage (the same predictions, bit for bit; the split
    solver reads the same rows)."""
    twin = zero_twin(c, job) if shared is not None else None
    if shared is None or twin is None:
        return price_split(model, cluster, job, c, spec, solver, options, times, activations, shared,
                           balanced_may_fit)
    found = shared.alike.get((twin, balanced_may_fit))
    if found is None:
        found = shared.alike[twin, balanced_may_fit] = price_split(model, cluster, job, c, spec, solver, options,
                                                                   times, activations, shared, balanced_may_fit)
    return at_zero(found, c.zero)


def zero_twin(c: Candidate, job: JobSpec) -> Candidate | None:
    """`c` at ZeRO-2, the key it shares with its twin, where its ZeRO-2 and ZeRO-3 price alike
    (cost_models.sync.gathered_alike: a pipeline at either stage in a runtime `zero_alike`); else None."""
    if c.pp == 1 or c.zero < ZeroStage.GRADIENTS or not zero_alike(job):
        return None
    return c if c.zero is ZeroStage.GRADIENTS else c.but(zero=ZeroStage.GRADIENTS)


def at_zero(priced: Priced, zero: ZeroStage) -> Priced:
    """`priced` with its layouts at ZeRO stage `zero` (itself where they are there already, or there are none)."""
    if not priced.layouts or priced.layouts[0].layout.zero is zero:
        return priced

    def moved(r: Ranked) -> Ranked:
        return replace(r, layout=replace(r.layout, zero=zero))
    return replace(priced, ranked=None if priced.ranked is None else moved(priced.ranked),
                   layouts=tuple(moved(r) for r in priced.layouts))


def price_split(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, c: Candidate, spec: SearchSpec,
                solver: Solver, options: SolveOptions, times: LayerTimes,
                activations: LayerActivations | None = None, shared: Shared | None = None,
                balanced_may_fit: bool = True) -> Priced:
    """Split and price one candidate; ranked is None when nothing fits.

    With one chunk per rank the solved split competes with the balanced split (Megatron-LM's default), priced
    by the same cost model: the split solver optimises the pipeline term, the full model also prices the
    step's tail (gradient reduction, optimizer), so the plan is never slower than the plain even split.
    ZB-V and the wave are split the same way per rank (on a uniform stack a rank's cost depends only on how many
    layers it holds), each rank's layers then shared over its chunks; on a stack of mixed kinds the wave's chunks
    hold other kinds than the one-chunk split assumed, so there the split is a candidate that the cost model
    prices as it really falls, against the balanced chunks. Interleaved layouts stay balanced. `shared`: what the
    other candidates priced share with this one (the caller's). `balanced_may_fit` False: the balanced chunks'
    memory floor (`RankMemory.memory_exceeds`) exceeds the GPU, so they are not priced (they would not fit)."""
    balanced = c.layout()
    gap, optimal = 0.0, True
    costs = layout_costs(model, cluster, job, balanced, times, activations)
    if shared is not None:
        costs = costs.sharing(shared.bodies.setdefault(body_key(c), {}), shared.weights.setdefault(weights_key(c), {}))
    if balanced_only(c, spec):  # balanced chunks: stage 0 keeps the most in flight
        ids = rank_layer_ids(balanced, model.num_layers)[0]
        if stage_cost(costs, 0, rank_stage_layers(costs, 0, ids)).peak_memory_gib > cluster.gpu.memory_gib:
            return Priced(None, True, gap, optimal)
        layouts = [balanced]
    else:
        split, gap, optimal = solve_split(costs, spec, solver, options, None if shared is None else shared.splits)
        if split is None:
            return Priced(None, True, gap, optimal)
        chunks = v_chunks(split.layers, c.vpp) if c.schedule in WAVE_PLACED else split.layers
        solved = replace(balanced, stage_layers=chunks,
                         recompute_layers=split.recompute if any(split.recompute) else None)
        layouts = [solved] if model.num_layers < c.pp or not balanced_may_fit else [solved, balanced]
    fitting = [Ranked(layout, prediction) for layout in layouts
               for prediction in (evaluate_costs(costs.with_split(layout)),) if prediction.fits]
    best = min(fitting, key=lambda r: r.prediction.step_time_s, default=None)
    return Priced(best, best is None, gap, optimal, tuple(fitting))


def floored(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, r: Ranked, index: int
             ) -> tuple[float, int, Ranked, Durations]:
    """(the least simulated step `r` can have, its index, r, its simulator durations): the work and path bounds on
    its chunks' durations (`durations_floor`) plus the step's tail."""
    d, lay = durations(model, cluster, job, r.layout, r.prediction), r.layout
    floor = durations_floor(program(lay.schedule, lay.pp, r.prediction.num_microbatches, lay.vpp), d,
                            r.prediction.num_microbatches)
    return (floor + step_tail(r.prediction)) * (1 - ROUNDING), index, r, d
