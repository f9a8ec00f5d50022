"""Exact layer-to-stage split, with per-stage full recomputation, by dynamic programming.

Stage s holding n decoder layers, r of them fully recomputed, costs per micro-batch (affine in n and
r, read off the cost model by `planner.search.exact`):
    T_s(n, r) = t0_s + (n − 1)·t1 + r·tr
    M_s(n, r) = m0_s + (n − 1)·m1_s − r·mr_s + transient·[r > 0]   <=  capacity
The first stage carries the embedding, the last the LM head and loss (in t0, m0), and stage s keeps
activations of more or fewer micro-batches (in m1, mr), so every stage has its own line.
The 1F1B step time is J = (m − 1)·max_s T_s + Σ_s T_s (cost_models.pipeline.stages); for ZB-H1 the sum
term of every stage but the last drops its weight-gradient time W_s = w0_s + (n − 1)·w1, which the
schedule hides in the cooldown.

For a fixed split the fewest recomputed layers that fit are best (T grows with r, M falls), so each
(stage, n) has one time T_s(n) (∞ where nothing fits); it grows with n and feasibility is a prefix.
Then: binary search gives the smallest bottleneck B* that admits a split (stage s can take at most
c_s(B) layers; a split exists iff every c_s >= 1 and Σ c_s >= L); for each bottleneck B >= B* in
increasing order a min-plus DP over (stage, layer boundary) gives the least Σ_s T_s with every
T_s <= B; the scan stops once (m − 1)·B + min Σ T can no longer win. O(P·L²) per DP, vectorised.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

from planner.search.split_model import KindSplitProblem, Split, SplitProblem

_EPS = 1e-9


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D array: np.unique without its masked-array check, whose first call
    imports numpy.ma (about 12 ms of a small plan's start-up)."""
    ordered = np.sort(values, axis=None)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if ordered.size else ordered


def fewest_recomputed(p: SplitProblem, stage: int, n: np.ndarray) -> np.ndarray:
    """Smallest r in [0, n] with M_s(n, r) <= capacity, as float; ∞ where none fits (or n < 1)."""
    plain = p.m0[stage] + (n - 1) * p.m1[stage]
    r = np.where(plain <= p.capacity + _EPS, 0.0, np.inf)
    if p.partial_recompute and p.mr[stage] > 0:
        need = np.ceil((plain + p.transient - p.capacity) / p.mr[stage] - _EPS)
        r = np.where(np.isinf(r) & (need <= n), np.maximum(need, 1.0), r)
    return np.where(n >= 1, r, np.inf)


def stage_tables(p: SplitProblem) -> tuple[np.ndarray, np.ndarray]:
    """time[s, n] and recompute[s, n] for n = 0..L (∞ where stage s cannot hold n layers)."""
    n = np.arange(p.num_layers + 1, dtype=float)
    times = np.empty((p.num_stages, n.size))
    recs = np.empty_like(times)
    for s in range(p.num_stages):
        r = fewest_recomputed(p, s, n)
        recs[s] = r
        times[s] = np.where(np.isfinite(r), p.t0[s] + (n - 1) * p.t1 + np.nan_to_num(r, posinf=0) * p.tr, np.inf)
    return times, recs


def sum_costs(p: SplitProblem, times: np.ndarray) -> np.ndarray:
    """What each (stage, n) adds to the Σ term: its time, less its hidden weight gradients (ZB-H1)."""
    if not p.w0:
        return times
    n = np.arange(p.num_layers + 1, dtype=float)
    hidden = np.array([p.w0[s] + (n - 1) * p.w1 if s < p.num_stages - 1 else 0 * n for s in range(p.num_stages)])
    costs: np.ndarray = times - hidden
    return costs


def least_sum(cost: np.ndarray, allowed: np.ndarray) -> tuple[float, list[int]] | None:
    """Least Σ_s cost[s, i_s, i_{s+1}] over boundaries 0 = i_0 < ... < i_P = L with every (s, i, j) allowed:
    a min-plus DP over (stage, layer boundary), vectorised over boundaries. The boundaries are read back from the
    stages' values (each stage's the first least of its column, as an argmin over the whole table would pick)."""
    stages, width = cost.shape[0], cost.shape[1]
    f = np.full(width, np.inf)
    f[0] = 0.0
    values = []  # f before each stage
    masked = np.where(allowed, cost, np.inf)
    for s in range(stages - 1):
        values.append(f)
        f = (f[:, None] + masked[s]).min(axis=0)  # [previous boundary i, boundary j] -> j
    values.append(f)
    bounds, j = [width - 1], width - 1
    for s in range(stages - 1, -1, -1):
        column = values[s] + masked[s, :, j]
        i = int(column.argmin())
        if s == stages - 1:
            value = float(column[i])
            if not math.isfinite(value):
                return None
        bounds.append(i)
        j = i
    return value, bounds[::-1]


def least_bottleneck(cost: np.ndarray, allowed: np.ndarray) -> float:
    """Least max_s cost[s, i_s, i_{s+1}] over boundaries 0 = i_0 < ... < i_P = L with every (s, i, j) allowed
    (∞ when none): a min-max DP over (stage, layer boundary), one pass where a bisection over the bottleneck
    would run a `least_sum` per step."""
    f = np.full(cost.shape[1], np.inf)
    f[0] = -np.inf
    for s in range(cost.shape[0]):
        f = np.maximum(f[:, None], np.where(allowed[s], cost[s], np.inf)).min(axis=0)
    return float(f[-1])


def best_boundaries(max_cost: np.ndarray, sum_cost: np.ndarray, allowed: np.ndarray, m: int,
                    start: float = 0.0, limit: float = np.inf, levels: np.ndarray | None = None,
                    least: float | None = None) -> tuple[list[int], float] | None:
    """Boundaries minimising (m − 1)·max_s max_cost + Σ_s sum_cost over allowed segments [stage, i, j], or None
    when no split's value is below `limit`.

    For each bottleneck bound B (the distinct segment costs, from `start` up) a DP finds the least sum with
    every stage within B; the scan stops once (m − 1)·B plus the unbounded least sum can no longer win (beat the
    best so far, or `limit`). `levels`: those distinct costs (sorted) where the caller knows them without sorting
    every segment's (a uniform stack: its count table's finite values, each the cost of some allowed segment);
    `least`: `least_bottleneck` of the allowed segments, where the caller has it."""
    allowed = allowed & np.isfinite(max_cost)
    unbounded = least_sum(sum_cost, allowed)
    if unbounded is None:
        return None
    least = least_bottleneck(max_cost, allowed) if least is None else least
    start = max(start, least * (1 - _EPS))  # no split exists under it
    best: tuple[list[int], float] | None = None
    levels = distinct(max_cost[allowed & (max_cost >= start)]) if levels is None else levels[levels >= start]
    for bound in levels:
        if (m - 1) * bound + unbounded[0] >= (limit if best is None else min(best[1], limit)):
            break
        solved = least_sum(sum_cost, allowed & (max_cost <= bound * (1 + _EPS)))
        if solved is None:
            continue
        pairs = list(zip(solved[1], solved[1][1:], strict=False))
        value = (m - 1) * max(float(max_cost[s, a, b]) for s, (a, b) in enumerate(pairs)) + solved[0]
        if value < limit and (best is None or value < best[1]):
            best = (solved[1], value)
    return best


def segment_index(width: int) -> np.ndarray:
    """[first, end] -> the layer count end − first of a non-empty segment, else `width` (a column of ∞ that
    `segments` appends): one gather turns a count table into segment costs."""
    ends = np.arange(width)
    count = ends[None, :] - ends[:, None]
    index: np.ndarray = np.where(count > 0, count, width)
    return index


def segments(table: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """A per-(stage, layer count) table as per-(stage, first, end) segment costs (∞ for empty segments); `index`:
    `segment_index` of the table's width, when the caller has it."""
    width = table.shape[1]
    index = segment_index(width) if index is None else index
    padded = np.concatenate([table, np.full((table.shape[0], 1), np.inf)], axis=1)
    costs: np.ndarray = padded[:, index]
    return costs


def _max_layers(times: np.ndarray, bound: float) -> np.ndarray:
    """Per stage, the most layers it can take within `bound` (each row grows with the count)."""
    caps: np.ndarray = (times[:, 1:] <= bound + _EPS * max(1.0, bound)).sum(axis=1)
    return caps


def least_bottleneck_bound(times: np.ndarray, num_layers: int) -> tuple[np.ndarray, int] | None:
    """(the distinct finite stage times, the index of the smallest of them under which some split exists: every
    stage takes at least one layer and together at least `num_layers`), by bisection; None when no time is finite.
    Shared by `solve_dp` and count_split.solve_counts."""
    bounds = distinct(times[np.isfinite(times)])
    if not len(bounds):
        return None
    lo, hi = 0, len(bounds) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        caps = _max_layers(times, bounds[mid])
        if caps.min() >= 1 and caps.sum() >= num_layers:
            hi = mid
        else:
            lo = mid + 1
    return bounds, lo


def solve_dp(p: SplitProblem) -> Split | None:
    """The split minimising (m − 1)·max_s T_s + Σ_s (T_s − hidden W_s), or None when no split fits."""
    times, recs = stage_tables(p)
    if p.num_stages == 1:
        return make_split(p, times, recs, [p.num_layers]) if np.isfinite(times[0, -1]) else None
    first = least_bottleneck_bound(times, p.num_layers)
    if first is None:
        return None
    bounds, lo = first
    index = segment_index(p.num_layers + 1)
    max_cost = segments(times, index)
    sums = max_cost if not p.w0 else segments(sum_costs(p, times), index)
    found = best_boundaries(max_cost, sums, np.isfinite(max_cost), p.num_microbatches, start=float(bounds[lo]),
                            levels=bounds)
    if found is None:
        return None
    layers = [b - a for a, b in zip(found[0], found[0][1:], strict=False)]
    return make_split(p, times, recs, layers)


def make_split(p: SplitProblem, times: np.ndarray, recs: np.ndarray, layers: list[int]) -> Split:
    stage_times = tuple(float(times[s, n]) for s, n in enumerate(layers))
    costs = sum_costs(p, times)
    objective = (p.num_microbatches - 1) * max(stage_times) + sum(float(costs[s, n]) for s, n in enumerate(layers))
    return Split(tuple(layers), tuple(int(recs[s, n]) for s, n in enumerate(layers)), stage_times, objective)


def brute_force(p: SplitProblem) -> Split | None:
    """Every split enumerated (small problems only): the reference the DP and ILP are tested against."""
    times, recs = stage_tables(p)
    best: Split | None = None
    for cuts in combinations(range(1, p.num_layers), p.num_stages - 1):
        bounds = (0, *cuts, p.num_layers)
        layers = [b - a for a, b in zip(bounds, bounds[1:], strict=False)]
        if any(not np.isfinite(times[s, n]) for s, n in enumerate(layers)):
            continue
        split = make_split(p, times, recs, layers)
        if best is None or split.objective < best.objective:
            best = split
    return best


def _prefix(values: tuple[float, ...], kinds: np.ndarray) -> np.ndarray:
    """P[l] = Σ_{l' < l} values[kinds[l']], for l = 0..L."""
    return np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=float)[kinds])])


def kind_segment_tables(p: KindSplitProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """time[s, i, j], sum-term cost[s, i, j] and recomputed layers[s, i, j] for segments [i, j) (∞ where
    stage s cannot hold them or j <= i), all stages at once. Which layers a segment recomputes depends on the stage's
    memory line (m0_s, m1_s, mr_s) alone: stages sharing one (a pipeline's middle ranks often do) share its tables."""
    kinds = np.asarray(p.kinds, dtype=int)
    width = p.num_layers + 1
    i, j = np.meshgrid(np.arange(width), np.arange(width), indexing="ij")
    time_prefix, rec_prefix = _prefix(p.t1, kinds), _prefix(p.tr, kinds)
    base_time = time_prefix[j] - time_prefix[i]
    lines = list(zip(p.m0, p.m1, p.mr, strict=True))
    distinct_lines = list(dict.fromkeys(lines))
    of_stage = np.array([distinct_lines.index(line) for line in lines])
    r = _recomputed(p, distinct_lines, kinds, i, j)
    finite = np.isfinite(r)
    recs = np.where(finite, r, 0)
    extra = np.zeros(r.shape)  # what the recomputed layers add: P(i + r) − P(i), 0.0 where r = 0 (P(i) − P(i))
    some = np.flatnonzero(recs)  # (recs >= 0)
    if some.size:
        first = some % (width * width) // width
        ends = np.minimum(first + recs.reshape(-1)[some].astype(int), width - 1)
        extra.reshape(-1)[some] = rec_prefix[ends] - rec_prefix[first]
    if len(distinct_lines) < len(lines):  # (else each stage has its own line: the tables are as they are)
        finite, extra, recs = finite[of_stage], extra[of_stage], recs[of_stage]
    times = np.where(finite, np.asarray(p.t0)[:, None, None] + base_time + extra, np.inf)
    hidden = np.zeros((p.num_stages, 1, 1))
    if p.w0:  # zero-bubble: the weight-gradient time of a segment, hidden by every stage but the last
        w_prefix = _prefix(p.w1, kinds)
        hidden = np.asarray(p.w0)[:, None, None] + (w_prefix[j] - w_prefix[i])
        hidden[-1] = 0.0
    return times, times - hidden, recs


MemoryLine = tuple[float, tuple[float, ...], tuple[float, ...]]  # (m0_s, m1_s, mr_s) of a KindSplitProblem


def _recomputed(p: KindSplitProblem, lines: list[MemoryLine], kinds: np.ndarray, i: np.ndarray,
                j: np.ndarray) -> np.ndarray:
    """r[line, i, j]: the fewest leading layers of segment [i, j) a stage of memory line `line` recomputes fully
    to fit (0 where it fits as it is), ∞ where nothing fits or j <= i."""
    mem_prefix = np.stack([_prefix(m1, kinds) for _, m1, _ in lines])  # [line, boundary]
    plain = np.asarray([m0 for m0, _, _ in lines])[:, None, None] + mem_prefix[:, None, :] - mem_prefix[:, :, None]
    fits = plain <= p.capacity + _EPS
    upper = j > i
    r = np.where(fits & upper, 0.0, np.inf)
    if p.partial_recompute:
        _fewest_recomputed(p, [mr for _, _, mr in lines], kinds, plain, ~fits & upper, r)
    return r


def _fewest_recomputed(p: KindSplitProblem, saves: list[tuple[float, ...]], kinds: np.ndarray, plain: np.ndarray,
                       over: np.ndarray, r: np.ndarray) -> None:
    """Into `r` (∞ where `over`: a segment [i, j), j > i, that does not fit as it is), the fewest leading layers to
    recompute fully where that makes it fit; `saves`: per line of `plain` and `r`, what recomputing a layer of each
    kind saves. Only those segments are searched (the rest of `r` is what it is either way)."""
    width = p.num_layers + 1
    flat = r.reshape(len(saves), -1)
    for s, mr in enumerate(saves):
        todo = np.flatnonzero(over[s])
        if not todo.size:
            continue
        first, last = np.divmod(todo, width)
        need = plain[s].reshape(-1)[todo] + p.transient - p.capacity
        saved = _prefix(mr, kinds)
        # smallest end e with saved[e] − saved[i] >= need: the first e − i layers are recomputed
        ends = np.searchsorted(saved, saved[first] + need - _EPS, side="left")
        ok = (ends <= last) & (saved[np.minimum(ends, width - 1)] - saved[first] >= need - _EPS)
        flat[s, todo] = np.where(ok, np.maximum(ends - first, 1), np.inf)


def kind_split(p: KindSplitProblem, times: np.ndarray, sums: np.ndarray, recs: np.ndarray,
                bounds: list[int]) -> Split:
    pairs = list(zip(bounds, bounds[1:], strict=False))
    stage_times = tuple(float(times[s, a, b]) for s, (a, b) in enumerate(pairs))
    total = sum(float(sums[s, a, b]) for s, (a, b) in enumerate(pairs))
    objective = (p.num_microbatches - 1) * max(stage_times) + total
    return Split(tuple(b - a for a, b in pairs), tuple(int(recs[s, a, b]) for s, (a, b) in enumerate(pairs)),
                 stage_times, objective)


def solve_kinds(p: KindSplitProblem) -> Split | None:
    """The exact split of a stack with layers of several kinds, or None when no split fits."""
    times, sums, recs = kind_segment_tables(p)
    allowed = np.isfinite(times)
    bounds = distinct(times[allowed])
    least = least_bottleneck(times, allowed)
    if not len(bounds) or not np.isfinite(least):
        return None
    # the smallest listed bottleneck b admitting a split within b·(1 + ε): the first with least <= b·(1 + ε)
    lo = int(np.argmax(least <= bounds * (1 + _EPS)))
    # the levels and least bottleneck best_boundaries would find again: those of the same finite segments
    found = best_boundaries(times, sums, allowed, p.num_microbatches, start=float(bounds[lo]), levels=bounds,
                            least=least)
    if found is None:
        return None
    return kind_split(p, times, sums, recs, found[0])


def brute_force_kinds(p: KindSplitProblem) -> Split | None:
    """Every split of a layer-kind problem enumerated (small problems only): the DP's reference."""
    times, sums, recs = kind_segment_tables(p)
    best: Split | None = None
    for cuts in combinations(range(1, p.num_layers), p.num_stages - 1):
        bounds = [0, *cuts, p.num_layers]
        if any(not np.isfinite(times[s, a, b]) for s, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))):
            continue
        split = kind_split(p, times, sums, recs, bounds)
        if best is None or split.objective < best.objective:
            best = split
    return best
