"""The layer-to-stage split of one candidate: the split problems the cost model poses (uniform stacks, stacks of
several layer kinds, ZB-V's two chunks per rank) and their exact solution by DP or integer programming."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.memory.held import StageHeld
from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.hops import RankPlace
from cost_models.pipeline.registry import pricing
from cost_models.pipeline.schedules import in_flight
from cost_models.prediction import StageCost, StageLayers
from cost_models.step import (
    LayoutCosts,
    held_alive,
    stage_cost,
)
from meshcore import (
    GIB,
    Recompute,
    ScheduleFamily,
    spec_of,
    wave_chunks,
)
from planner.search.ilp import SolveOptions, Solver, solve_ilp
from planner.search.ilp_kinds import solve_kinds_ilp
from planner.search.plain_split import small, solve_plain
from planner.search.space import SearchSpec
from planner.search.split_model import KindSplitProblem, Split, SplitProblem

# ZB-H1 and ZB-H2 are split for the closed form of cost_models.pipeline.stages with each stage but the last hiding
# `hides` of its weight gradients (2 and 3: cost_models.pipeline.registry), the most forms.zb_h1_hidden and
# zb_h2_hidden take off: ZB-H1's where T_W <= T_F (the paper's case), ZB-H2's where T_B >= 2T_W; elsewhere the split
# solved is that of this objective, below the closed form.


def split_problem(costs: LayoutCosts, partial_recompute: bool) -> SplitProblem:
    """Read the affine stage model of planner.search.partition off the cost model itself (`stage_cost` at one
    and two layers, with and without full recomputation). Middle ranks share rank 1's times; their
    activations scale with the micro-batches each keeps in flight."""
    layout, model = costs.layout, costs.model
    pp, m, full_base = layout.pp, costs.num_microbatches, layout.recompute is Recompute.FULL
    two = min(2, model.num_layers)

    def at(rank: int, n: int, f: int) -> tuple[float, float, float]:
        st = stage_cost(costs, rank, costs.uniform(n, n if full_base else f))
        return st.compute_s, st.activations_gib * GIB, (st.peak_memory_gib - st.activations_gib) * GIB

    def weight_grad(rank: int, n: int) -> float:  # what the stage hides: `hides` weight gradients
        backward = stage_cost(costs, rank, costs.uniform(n, n if full_base else 0)).time.backward
        return pricing(layout.schedule).hides * W_SHARE * backward

    zero_bubble = spec_of(layout.schedule).family is ScheduleFamily.ORDERED_W
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


@dataclass(frozen=True)
class KindRow:
    """One rank's line of a `KindSplitProblem`: its empty stage's time, memory and hidden weight gradients, and per
    layer kind (dense, MoE) what a layer adds, what recomputing it fully adds in time and saves in memory."""

    t0: float
    m0: float
    w0: float
    t1: tuple[float, ...]
    tr: tuple[float, ...]
    w1: tuple[float, ...]
    m1: tuple[float, ...]
    mr: tuple[float, ...]
    transient: float


def kind_row(costs: LayoutCosts, rank: int) -> KindRow:
    """`rank`'s line read off the cost model: its stage priced empty and with one and two layers of each kind, none
    or all of them fully recomputed. Memory: the DP gives every stage one layer or more, so what a stage's first
    layer brings once (ZeRO-3's gathered working set, FSDP's gathered unit) is in m0, not in the per-layer terms: a
    layer adds two layers' bytes less one's; a fully recomputed layer saves s and the first of a stage holds the
    transient W while it runs, read as s − W off one layer and 2s − W off two (each the exact bytes of `stage_cost`
    for every stage of one layer or more). m0 is the larger the two kinds give (they agree where a stage's fixed bytes
    do not depend on its first layer's kind). Time: a layer adds one layer's time less the empty stage's (exact but
    for the exposed ZeRO-2/3 traffic, which the full model prices when it re-checks the split)."""
    return kind_rows(costs, rank, (costs.places[rank].alive,))[0]


def kind_rows(costs: LayoutCosts, rank: int, alives: tuple[float, ...]) -> list[KindRow]:
    """`kind_row` of `rank` for each of `alives`, micro-batches in flight, from one set of probes: `stage_cost` of a
    rank depends on its micro-batches in flight only through its activations (`StageHeld.in_flight`, the same
    `StageHeld` for every rank that `LayoutCosts.held` keys alike), so each row's peak is the probe's with those
    activations, summed as `StageCost.peak_memory_gib` sums (the same bytes, bit for bit, as `stage_cost` at a rank
    of that place)."""
    full_base = costs.layout.recompute is Recompute.FULL
    hides = pricing(costs.layout.schedule).hides
    place = costs.places[rank]

    def at(moe: bool, n: int, full: int) -> tuple[StageCost, StageHeld]:
        layers = StageLayers(moe=n, moe_full=full) if moe else StageLayers(dense=n, dense_full=full)
        return stage_cost(costs, rank, layers), costs.held(place, layers)

    def peak(probe: tuple[StageCost, StageHeld], alive: float) -> float:
        return probe[0].peak_with(probe[1].in_flight(alive)[0] / GIB) * GIB

    base = at(False, 0, 0)[0]
    base_t, base_b = base.compute_s, base.time.backward
    probes = [(at(moe, 1, int(full_base)), at(moe, 2, 2 * int(full_base)),
               None if full_base else (at(moe, 1, 1), at(moe, 2, 2))) for moe in (False, True)]
    rows = []
    for alive in alives:
        m0, transient = [], 0.0
        t1, tr, w1, row_m, row_r = [], [], [], [], []
        for one, two, recomputed in probes:
            time1, mem1, mem2 = one[0].compute_s, peak(one, alive), peak(two, alive)
            t1.append(max(time1 - base_t, 1e-12))
            row_m.append(mem2 - mem1)
            w1.append(hides * W_SHARE * (one[0].time.backward - base_b))
            m0.append(mem1 - row_m[-1])
            if recomputed is None:
                tr.append(0.0)
                row_r.append(0.0)
                continue
            one_full, two_full = recomputed
            time_f, mem_f, mem_both = one_full[0].compute_s, peak(one_full, alive), peak(two_full, alive)
            tr.append(max(time_f - time1, 0.0))
            once = mem1 - mem_f  # s − W: one layer saves s, the first recomputed holds W; two save 2s − W
            row_r.append(max(mem2 - mem_both - once, 0.0))
            transient = max(transient, row_r[-1] - once)
        rows.append(KindRow(base_t, max(m0), hides * W_SHARE * base_b, tuple(t1), tuple(tr), tuple(w1), tuple(row_m),
                            tuple(row_r), transient))
    return rows


def kind_split_problem(costs: LayoutCosts, partial_recompute: bool) -> KindSplitProblem:
    """The layer-kind split model (dense and MoE layers) read off the cost model, a `kind_row` per rank: once per
    rank place (ends held, sends, micro-batches in flight), on which alone a rank's stage costs depend (exposed
    ZeRO-2/3 traffic is linearised, and the full model re-checks the split); the places that differ only in
    micro-batches in flight read one set of probes (`kind_rows`). The rows' t1, tr and w1 are the last rank's."""
    layout = costs.layout
    full_base = layout.recompute is Recompute.FULL
    places: dict[tuple[bool, bool, float, int], list[RankPlace]] = {}
    for place in costs.places:  # keyed as `LayoutCosts.held` keys a rank's StageHeld, with its sends
        places.setdefault((place.first, place.last, place.p2p_s, held_alive(place)), []).append(place)
    rows: dict[tuple[bool, bool, float, float], KindRow] = {}
    for alike in places.values():
        alives = tuple(dict.fromkeys(p.alive for p in alike))
        for alive, row in zip(alives, kind_rows(costs, alike[0].rank, alives), strict=True):
            rows[(alike[0].first, alike[0].last, alike[0].p2p_s, alive)] = row
    ranks = [rows[(p.first, p.last, p.p2p_s, p.alive)] for p in costs.places]
    last = ranks[-1]
    zero_bubble = spec_of(layout.schedule).family is ScheduleFamily.ORDERED_W
    return KindSplitProblem(
        kinds=tuple(int(k) for k in costs.kinds), num_microbatches=costs.num_microbatches,
        t0=tuple(r.t0 for r in ranks), t1=last.t1, tr=last.tr, m0=tuple(r.m0 for r in ranks),
        m1=tuple(r.m1 for r in ranks), mr=tuple(r.mr for r in ranks), transient=max(r.transient for r in ranks),
        capacity=costs.cluster.gpu.memory_gib * GIB, partial_recompute=partial_recompute and not full_base,
        w0=tuple(r.w0 for r in ranks) if zero_bubble else (), w1=last.w1 if zero_bubble else ())


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


def solve_uniform(problem: SplitProblem) -> Split | None:
    """The exact split of a uniform stack: plain Python where the problem is small, else the count-table DP vectorised
    (`count_split`; both return partition.solve_dp's split bit for bit)."""
    if small(problem):
        return solve_plain(problem)
    from planner.search.count_split import solve_counts

    return solve_counts(problem)


Solved = dict[SplitProblem | KindSplitProblem, Split | None]  # the DP's splits by problem


def solve_split(costs: LayoutCosts, spec: SearchSpec, solver: Solver, options: SolveOptions,
                solved: Solved | None = None) -> tuple[Split | None, float, bool]:
    """(split, gap, optimal): the exact per-stage split of the layout's layers, by the DP or, when asked, the
    MILP seeded with it; stacks whose layers differ in kind take the segment DP and the per-layer MILP. A small
    uniform stack's DP runs in plain Python (`plain_split`, the same answer); numpy loads only for a larger one.
    `solved`: the DP's splits of problems posed before (the caller's; each a function of its problem alone, which
    candidates of other degrees or schedules often pose alike)."""
    if costs.model.heterogeneous:
        kinds = kind_split_problem(costs, spec.partial_recompute)
        split = _dp(kinds, solved)
        if solver is Solver.DP or split is None:
            return split, 0.0, True
        result = solve_kinds_ilp(kinds, solver, options, hint=split)
    else:
        problem = split_problem(costs, spec.partial_recompute)
        split = _dp(problem, solved)
        if solver is Solver.DP or split is None:
            return split, 0.0, True
        result = solve_ilp(problem, solver, options, hint=split)
    return result.split, result.gap, result.optimal


def _dp(problem: SplitProblem | KindSplitProblem, solved: Solved | None) -> Split | None:
    """The DP's split of `problem` (partition.solve_kinds or `solve_uniform`), from `solved` where it is there."""
    if solved is not None and problem in solved:
        return solved[problem]
    if isinstance(problem, KindSplitProblem):
        from planner.search.partition import solve_kinds

        split = solve_kinds(problem)
    else:
        split = solve_uniform(problem)
    if solved is not None:
        solved[problem] = split
    return split
