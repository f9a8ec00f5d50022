"""The exact search for per-layer strategies on a chain (`meshplan plan --costs chain.csv --per-layer`).

For each candidate (G, pp, dp, mbs) of the uniform chain search (planner.search.chain: the same TP degrees, stage
counts, data-parallel degrees and micro-batch sizes) it finds the split and every layer's TP degree and
recompute choice minimising the step of planner.search.layerwise's model, exactly:

1. Stage frontiers. For stage s starting at layer i, a DP over layers whose state is (TP of the previous layer,
   the set of TP degrees holding parameters so far) keeps every Pareto-optimal (memory, T, tail) of the
   assignments of layers i..l; memory is exact bytes (no discretisation: a point is dropped only when another
   with the same state has no more memory, time and tail, or when it no longer fits). The state is what the
   future depends on: the next layer's reshard needs the previous TP degree, the tail's per-degree latency is
   paid once per degree in use. The recompute transient (the largest recomputed activation) is not additive:
   the DP runs once per cap X on it (0 and every activation size), recomputing only layers of at most X bytes
   within a budget of capacity − X; every assignment is priced at its true X in one of these runs. When every
   assignment fits without recomputing, recomputation (more time, the same tail) cannot help: X = 0 only, and
   memory leaves the dominance test (the frontier is then over (T, tail) alone).
   Closing the stage after layer l gives the Pareto set of (T, tail) of the segment [i, l + 1) that fits.
   With one stage (pp 1) the step m·T + tail adds what each layer adds: a state keeps only the Pareto set of
   (memory, m·T + tail), one point where memory cannot bind.
2. The split. step = (m − 1)·max T + Σ T + max tail has two bottlenecks. For each tail cap C (the distinct
   tails of the frontiers, ascending) every segment takes its least T with tail <= C and the split DP of
   planner.search.partition (`best_boundaries`, exact for (m − 1)·max + Σ) gives the best pipeline; C plus
   it bounds the step of that plan from above and, at C = the optimum's largest tail, reaches the optimum.
   The scan stops once C plus the best pipeline with no cap cannot win.
3. Bounds (planner.search.layerwise_bounds). Candidates run one-stage first, each group in the order of their
   least step (any order is exact; quick one-stage plans set the k-th best early); once top_k plans
   are known, a candidate whose least step is above the k-th best is skipped, and the others drop frontier points
   no plan within it can hold (with one stage, also above the best plan found under an earlier cap X).
Every answer is re-priced by planner.search.layerwise.price, the plain cost model. The frontiers can grow with
the options per layer (k TP degrees x 2); chains of at most MAX_LAYERWISE_LAYERS layers are planned.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from cost_models.memory import footprint as M
from meshcore import GIB, ClusterSpec, ZeroStage
from meshcore.errors import InfeasibleError, InputError
from planner.search.chain import ChainPlan, ChainTable, LayerChoice
from planner.search.layerwise import (
    Priced,
    Setting,
    alive,
    price,
    send_in,
    send_out,
    setting,
    stored_bytes,
)
from planner.search.layerwise_bounds import SLACK, Cut, StepFloor, beaten, step_floor
from planner.search.partition import best_boundaries

MAX_LAYERWISE_LAYERS = 64  # the frontiers of every (stage, first layer) are kept: O(pp · L²) of them


class Point(NamedTuple):
    """One assignment of a stage's layers so far: memory bytes, per-micro-batch time, tail, choices (a named tuple:
    the frontiers make hundreds of thousands of them, a frozen dataclass takes three times as long to build)."""

    memory: float
    time: float
    tail: float
    choices: tuple[LayerChoice, ...]


def _pareto(points: list[Point], weight: int = 0) -> list[Point]:
    """The points no other point beats or equals in memory, time and tail at once; with a `weight` m (a plan of one
    stage, whose step m·T + tail adds what each layer adds), those no other beats or equals in memory and
    m·T + tail (the least time first among equals)."""
    if weight:
        return _least(points, weight)
    kept: list[Point] = []
    ordered = sorted(points, key=lambda q: q[:3])
    if ordered and ordered[0].memory == ordered[-1].memory:  # (T, tail) alone: every kept point is no slower
        least_tail = math.inf
        for p in ordered:
            if p.tail < least_tail:
                kept.append(p)
                least_tail = p.tail
        return kept
    for p in ordered:
        if not any(k.time <= p.time and k.tail <= p.tail for k in kept):
            kept.append(p)
    return kept


def _least(points: list[Point], m: int) -> list[Point]:
    kept: list[Point] = []
    least = math.inf
    for p in sorted(points, key=lambda q: (q.memory, m * q.time + q.tail, q.time, q.tail)):
        if m * p.time + p.tail < least:
            kept.append(p)
            least = m * p.time + p.tail
    return kept


@dataclass(frozen=True)
class _Move:
    """One choice for one layer on one stage, its parts that do not depend on the layers before it."""

    tp: int
    time: float  # forward + backward (+ forward when recomputed)
    memory: float  # states + in-flight micro-batches x stored bytes
    tail: float  # the tail's per-parameter part
    bit: int  # the TP degree's bit in the set of degrees in use (0 when the layer has no parameters)
    alpha: float  # the tail's fixed part, paid once per degree in use
    choice: LayerChoice
    activation: float  # bytes held while recomputed


def _moves(st: Setting, stage: int, layer: int) -> list[_Move]:
    """Every (option, recompute) of `layer` on `stage`, priced once per stage frontier (`_extend` adds what depends
    on the layers before)."""
    out = []
    for opt in st.options[layer]:
        term = st.term(opt.tp)
        for rc in (False, True):
            out.append(_Move(opt.tp, opt.time_s + (opt.forward_s if rc else 0.0),
                             opt.params * term.state_per_param + alive(st, stage) * stored_bytes(st, layer, opt, rc),
                             term.tail_per_param * opt.params,
                             (1 << st.terms.index(term)) if opt.params > 0 else 0, term.sync_alpha,
                             LayerChoice(opt.tp, st.dp * st.group // opt.tp, rc), opt.activation if rc else 0.0))
    return out


def _grow(st: Setting, cluster: ClusterSpec, stage: int, first: int, layer: int, moves: list[_Move],
          states: dict[tuple[int, int], list[Point]], budget: float, roomy: bool, cut: Cut | None
          ) -> dict[tuple[int, int], list[Point]]:
    """Every point of `states` (state: previous TP, degrees in use as a bit set) extended by every move of `layer`
    that fits and, with a `cut` (for layers [first, layer]), may lead to a plan within its limit (`Cut.drops`,
    written out: this loop is most of the search); `roomy`: memory cannot bind, so it is neither checked nor kept
    (0). What a move adds after a state is priced once per (state, move), not per point."""
    grown: dict[tuple[int, int], list[Point]] = {}
    for (before, used), points in states.items():
        steps = []
        for mv in moves:
            t = mv.time + (st.reshard(layer, before, mv.tp) if layer > first else (
                send_in(st, first, st.option(layer, mv.tp), cluster) if stage > 0 else 0.0))
            now = used | mv.bit
            steps.append((mv, t, mv.tail + (mv.alpha if now != used else 0.0), (mv.tp, now)))
        for p in points:
            for mv, t, add, key in steps:
                if not roomy and p.memory + mv.memory > budget:
                    continue
                time, tail = p.time + t, p.tail + add
                if cut is not None:
                    total = time + cut.rest
                    spread = total / cut.pp
                    if cut.m1 * (time if time > spread else spread) + total + (
                            tail if tail > cut.tail_floor else cut.tail_floor) > cut.bar:
                        continue
                grown.setdefault(key, []).append(Point(0.0 if roomy else p.memory + mv.memory, time, tail,
                                                       (*p.choices, mv.choice)))
    return grown


def stage_frontiers(st: Setting, cluster: ClusterSpec, stage: int, first: int, cap: float,
                    memo: dict[tuple[int, bool], dict[int, list[Point]]] | None = None,
                    floor: StepFloor | None = None) -> dict[int, list[Point]]:
    """For each end j: the Pareto set of (T, tail) over assignments of layers [first, j) that fit on `stage`
    (memory = the stage's peak bytes with its transient). Where memory cannot bind (`roomy`) the frontiers depend on
    the stage only through whether it is the last (no send after it): `memo` keeps them per (first layer, last
    stage or not), built to the furthest end any such stage may reach, and each stage takes its ends from it."""
    n = len(st.options)
    last = n - (st.pp - 1 - stage)  # later stages need a layer each
    most = sum(max(o.params * st.term(o.tp).state_per_param + alive(st, stage) * o.activation for o in opts)
               for opts in st.options[first:last])
    if most + M.BUFFER_ALLOWANCE_GIB * GIB <= cap:  # roomy: every assignment fits keeping its activations, so
        # recomputing only adds time and memory cannot bind
        key = (first, stage == st.pp - 1)
        if memo is None or key not in memo:
            found = _frontiers(st, cluster, stage, first, n if key[1] else n - 1, [0.0], math.inf, floor)
            if memo is None:
                return found
            memo[key] = found
        return {j: v for j, v in memo[key].items() if j <= last}
    caps = sorted({0.0} | {o.activation for layer in range(first, last) for o in st.options[layer]})
    return _frontiers(st, cluster, stage, first, last, caps, cap, floor)


def _frontiers(st: Setting, cluster: ClusterSpec, stage: int, first: int, last: int, caps: list[float],
               cap: float, floor: StepFloor | None) -> dict[int, list[Point]]:
    """`stage_frontiers` over ends up to `last`, one DP per cap on the recompute transient; memory is tracked
    against `cap` unless it is infinite (roomy); with a `floor`, points no plan within its limit holds are dropped
    (planner.search.layerwise_bounds: a dropped point dominates none that is kept, so the kept frontier is the
    whole one less those points). With one stage a whole plan is a point at the last end, its step m·T + tail: the
    best found under one cap X limits the DPs of the caps after it (a point above it cannot be the best)."""
    roomy, weight = math.isinf(cap), st.m if st.pp == 1 else 0
    ends: dict[int, list[Point]] = {}
    fixed = M.BUFFER_ALLOWANCE_GIB * GIB
    moves = [_moves(st, stage, layer) for layer in range(first, last)]
    for cap_x in caps:
        budget = cap - fixed - cap_x
        if budget < 0:
            break
        states: dict[tuple[int, int], list[Point]] = {(0, 0): [Point(0.0, 0.0, 0.0, ())]}
        for layer in range(first, last):
            cut = floor.cut(first, layer + 1) if floor is not None else None
            usable = [mv for mv in moves[layer - first]  # recompute only what the transient cap X admits
                      if not mv.choice.recompute or (cap_x != 0 and mv.activation <= cap_x)]
            grown = _grow(st, cluster, stage, first, layer, usable, states, budget, roomy, cut)
            states = {k: _pareto(v, weight) for k, v in grown.items()}
            if not states:
                break
            closing = ends.setdefault(layer + 1, [])
            for (tp, _), points in states.items():
                out = send_out(st, st.option(layer, tp), cluster) if stage < st.pp - 1 else 0.0
                closing += [Point(p.memory + fixed + cap_x, p.time + out, p.tail, p.choices) for p in points
                            if cut is None or not cut.drops(p.time + out, p.tail)]
        if st.pp == 1 and floor is not None and ends.get(last):
            floor = replace(floor, limit=min(floor.limit, min(st.m * p.time + p.tail for p in ends[last])))
    return {j: _pareto([Point(0.0, p.time, p.tail, p.choices) for p in v], weight) for j, v in ends.items() if v}


def _firsts(stage: int, pp: int, n: int) -> range:
    """The layers stage `stage` of `pp` may start at: the first stage at layer 0; a later one after each stage
    before it took a layer, and early enough to leave one to itself and to each after it."""
    return range(0, 1) if stage == 0 else range(stage, n - pp + stage + 1)


def frontier_count(pp: int, n: int) -> int:
    """How many stage frontiers a candidate of `pp` stages on `n` layers builds (at most: `stage_frontiers` shares
    those where memory cannot bind)."""
    return sum(len(_firsts(s, pp, n)) for s in range(pp))


def best_plan(st: Setting, cluster: ClusterSpec, cap: float, floor: StepFloor | None = None
              ) -> tuple[list[int], tuple[LayerChoice, ...], Priced] | None:
    """The exact best split and per-layer choices of one candidate (module docstring, step 2), or None; with a
    `floor` whose limit is finite, the exact best when its step is within the limit, else None or a plan above it."""
    n, pp = len(st.options), st.pp
    floor = step_floor(st) if floor is None else floor
    memo: dict[tuple[int, bool], dict[int, list[Point]]] = {}
    frontier = {(s, i, j): pts for s in range(pp) for i in _firsts(s, pp, n)
                for j, pts in stage_frontiers(st, cluster, s, i, cap, memo, floor).items()}
    if not frontier:
        return None
    if pp == 1:  # step = m·T + tail: the frontier's best point
        top = min(frontier.get((0, 0, n), []), key=lambda p: st.m * p.time + p.tail, default=None)
        return None if top is None else ([0, n], top.choices, price(st, cluster, [0, n], top.choices))
    cost = np.full((pp, n + 1, n + 1), np.inf)
    for (s, i, j), pts in frontier.items():
        cost[s, i, j] = min(p.time for p in pts)
    free = best_boundaries(cost, cost, np.isfinite(cost), st.m)
    if free is None:
        return None
    events = sorted((p.tail, key, p) for key, pts in frontier.items() for p in pts)
    cost[:] = np.inf
    chosen: dict[tuple[int, int, int], Point] = {}
    best: tuple[list[int], tuple[LayerChoice, ...], Priced] | None = None
    limit = math.inf if floor is None else floor.limit * (1 + SLACK)  # a plan above it is not wanted
    k = 0
    while k < len(events):
        cap_c = events[k][0]
        if free[1] + cap_c >= (limit if best is None else best[2].step_time_s):
            break
        changed = False
        while k < len(events) and events[k][0] == cap_c:
            _, (s, i, j), p = events[k]
            if p.time < cost[s, i, j]:
                cost[s, i, j], chosen[(s, i, j)], changed = p.time, p, True
            k += 1
        if not changed:  # no segment got faster: the same split as under the last cap, at a higher cap
            continue
        # only a pipeline under the best step less this cap can win (a plan whose largest tail is below the cap was
        # met at the cap equal to that tail, with a pipeline no slower)
        split = best_boundaries(cost, cost, np.isfinite(cost), st.m,
                                limit=(limit if best is None else best[2].step_time_s) - cap_c)
        if split is None:
            continue
        bounds = split[0]
        choices = tuple(c for s, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))
                        for c in chosen[(s, a, b)].choices)
        priced = price(st, cluster, bounds, choices)
        if best is None or priced.step_time_s < best[2].step_time_s:
            best = (list(bounds), choices, priced)
    return best


def plan_layerwise(table: ChainTable, cluster: ClusterSpec, global_batch: int, grad_bytes: int = 4,
                   top_k: int = 5, progress: Callable[[int, int], None] | None = None) -> list[ChainPlan]:
    """The fastest per-layer plans, one per (G, pp, dp, mbs) candidate of the uniform chain search, best first.
    Candidates are searched one-stage first, each group in the order of their least step
    (planner.search.layerwise_bounds); once top_k plans
    are known, a candidate whose least step is above the k-th best step is skipped and the others search only for
    plans within it (exact: a skipped or cut plan cannot enter the top k). `progress(done, total)` after each
    candidate, in stage frontiers (`frontier_count`: a candidate of pp stages on L layers builds
    1 + (pp − 1)·(L − pp + 1) of them, most of its work; a skipped candidate's count as done): the total is known
    before the first."""
    if table.num_layers > MAX_LAYERWISE_LAYERS:
        raise InputError(f"--per-layer plans chains of at most {MAX_LAYERWISE_LAYERS} layers (the exact search keeps "
                         f"a frontier per stage and first layer); this chain has {table.num_layers}")
    gpus, cap, n = cluster.num_gpus, cluster.gpu.memory_gib * GIB, table.num_layers
    todo = [(c[1], st, step_floor(st) if st is not None else None) for c in _candidates(table, cluster, global_batch)
            for st in [setting(table, cluster, *c, global_batch, grad_bytes)]]
    # one-stage candidates first (their search is quick and sets the k-th best for the rest), then by least step;
    # those without options (None) last
    todo.sort(key=lambda c: (c[0] > 1, math.inf if c[2] is None else c[2].candidate))
    total, done = sum(frontier_count(pp, n) for pp, _, _ in todo), 0
    results: list[ChainPlan] = []
    steps: list[float] = []  # the steps found, ascending: steps[top_k - 1] is the k-th best
    for pp, st, floor in todo:
        limit = steps[top_k - 1] if len(steps) >= top_k else math.inf
        found = None if st is None or floor is None or beaten(floor.candidate, limit) else best_plan(
            st, cluster, cap, replace(floor, limit=limit))
        if st is not None and found is not None and not beaten(found[2].step_time_s, limit):
            results.append(_chain_plan(st, *found, global_batch))
            bisect.insort(steps, found[2].step_time_s)
        done += frontier_count(pp, n)
        if progress is not None:
            progress(done, total)
    if not results:
        raise InfeasibleError(f"no per-layer plan of the {table.num_layers}-layer chain fits in "
                              f"{cluster.gpu.memory_gib:g} GiB per GPU on {gpus} GPUs")
    return sorted(results, key=lambda r: (r.step_time_s, r.tp, r.pp, r.mbs))[:top_k]


def _candidates(table: ChainTable, cluster: ClusterSpec, global_batch: int) -> list[tuple[int, int, int, int]]:
    """(G, pp, dp, mbs) of the uniform chain search: G a TP degree of the table within the scale-up domain, mbs a
    micro-batch some layer's rows reach at a degree dividing G."""
    gpus, n = cluster.num_gpus, table.num_layers
    tps = sorted({int(k[1]) for k in table.rows.index})
    sizes = sorted({int(k[2]) * g // int(k[1]) for k in table.rows.index for g in tps if g % int(k[1]) == 0})
    return [(group, pp, gpus // (group * pp), mbs)
            for group in (g for g in tps if gpus % g == 0 and g <= cluster.scale_up_size)
            for pp in (p for p in range(1, n + 1) if (gpus // group) % p == 0)
            if global_batch % (gpus // (group * pp)) == 0
            for mbs in (b for b in sizes if (global_batch // (gpus // (group * pp))) % b == 0)]


def _chain_plan(st: Setting, bounds: list[int], choices: tuple[LayerChoice, ...], priced: Priced,
                global_batch: int) -> ChainPlan:
    zero = ZeroStage.OPTIMIZER if any(c.dp > 1 for c in choices) else ZeroStage.NONE
    layers = tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))
    return ChainPlan(st.group, st.pp, st.dp, st.mbs, zero, layers, priced.stage_times,
                     tuple(x / GIB for x in priced.stage_memory_bytes), priced.step_time_s,
                     global_batch / priced.step_time_s, choices)
