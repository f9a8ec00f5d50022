"""The uniform stack's exact split (`planner.search.partition.solve_dp`) in plain Python, for small problems.

The same algorithm step for step: the per-(stage, layer count) tables, the bisection for the least bottleneck with a
split, then for each bottleneck bound from there (the distinct stage times) the min-plus DP over (stage, layer
boundary) for the least sum, stopped once (m − 1)·bound plus the unbounded least sum can no longer win. Every float is
computed by the same operations in the same order and every tie is broken the same way (the least previous boundary,
as numpy's argmin), so it returns the same `Split`, bit for bit (tests/test_partition.py holds the two equal on random
instances). A segment's cost depends only on its layer count, so the DP reads the count tables directly and visits
only the counts a stage may take. Small problems only (`SMALL`): there the numpy version spends more on importing
numpy (about 0.1 s of CPU, most of a small plan's start-up; issue 36) and on its array set-up than on the DP."""

from __future__ import annotations

import math
from bisect import bisect_right

from planner.search.split_model import Split, SplitProblem

_EPS = 1e-9  # as partition's
INF = math.inf
SMALL = 12_000  # stages x (layers + 1)^2 at most: a few milliseconds here


def small(p: SplitProblem) -> bool:
    """Whether `p` is small enough for the plain DP."""
    return p.num_stages * (p.num_layers + 1) ** 2 <= SMALL


def _fewest_recomputed(p: SplitProblem, stage: int, n: float) -> float:
    """partition.fewest_recomputed for one layer count."""
    plain = p.m0[stage] + (n - 1) * p.m1[stage]
    r = 0.0 if plain <= p.capacity + _EPS else INF
    if p.partial_recompute and p.mr[stage] > 0:
        need = float(math.ceil((plain + p.transient - p.capacity) / p.mr[stage] - _EPS))
        if math.isinf(r) and need <= n:
            r = max(need, 1.0)
    return r if n >= 1 else INF


def tables(p: SplitProblem) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """time[s][n], sum-term cost[s][n] (the time less the weight gradients ZB-H1 hides) and recomputed layers[s][n]
    for n = 0..L (partition.stage_tables and sum_costs)."""
    times, costs, recs = [], [], []
    for s in range(p.num_stages):
        rec = [_fewest_recomputed(p, s, float(n)) for n in range(p.num_layers + 1)]
        row = [p.t0[s] + (n - 1) * p.t1 + r * p.tr if r < INF else INF for n, r in zip(range(len(rec)), rec,
                                                                                      strict=True)]
        if p.w0 and s < p.num_stages - 1:
            costs.append([t - (p.w0[s] + (n - 1) * p.w1) for n, t in enumerate(row)])
        else:
            costs.append([t - 0.0 for t in row] if p.w0 else row)
        times.append(row)
        recs.append(rec)
    return times, costs, recs


def least_sum(costs: list[list[float]], counts: list[list[int]], width: int) -> tuple[float, list[int]] | None:
    """partition.least_sum over count tables: stage s may take the layer counts `counts[s]` (ascending)."""
    stages = len(costs)
    f = [INF] * width
    f[0] = 0.0
    picks = []
    for s in range(stages):
        row, ns = costs[s], counts[s][::-1]  # the largest count first: the least previous boundary first
        new, pick = [INF] * width, [0] * width
        lo, hi = s + 1, width - (stages - s)  # boundaries a complete split can have after this stage
        for j in range(lo, hi + 1):
            best, at = INF, 0
            for n in ns:
                if n <= j:
                    v = f[j - n] + row[n]
                    if v < best:
                        best, at = v, j - n
            new[j], pick[j] = best, at
        f = new
        picks.append(pick)
    if not f[-1] < INF:
        return None
    bounds, j = [width - 1], width - 1
    for pick in reversed(picks):
        j = pick[j]
        bounds.append(j)
    return f[-1], bounds[::-1]


def least_bottleneck(times: list[list[float]], counts: list[list[int]], width: int,
                     levels: list[float] | None = None) -> float:
    """partition.least_bottleneck over count tables: `monotone_bottleneck` where every stage's counts run 1 .. c_s
    with its times not falling (a `SplitProblem`'s always do: the module docstring of planner.search.partition), else
    the min-max DP. `levels`: the sorted distinct finite times, where the caller has them."""
    found = monotone_bottleneck(times, counts, width - 1, levels)
    if found is not None:
        return found
    f = [INF] * width
    f[0] = -INF
    for s, row in enumerate(times):
        f = [min((max(f[j - n], row[n]) for n in counts[s] if n <= j), default=INF) for j in range(width)]
    return f[-1]


def monotone_bottleneck(times: list[list[float]], counts: list[list[int]], layers: int,
                        levels: list[float] | None = None) -> float | None:
    """The least max_s times[s][n_s] over n_s in counts[s] summing to `layers`, where each counts[s] is 1 .. c_s and
    times[s][1 .. c_s] does not fall; None where they are not (the caller runs the DP). A bottleneck B admits a split
    iff every stage can take n <= c_s(B) = #{n : times[s][n] <= B} layers with c_s(B) >= 1 and Σ c_s(B) >= `layers`
    (any total from the stage count up is then reachable); the least B is one of the times (the DP's value is the
    time of some stage's count), so the least listed one that admits a split is the DP's value, bit for bit: no
    arithmetic, only comparisons. ∞ where no split exists, as the DP's."""
    rows = []
    for row, ns in zip(times, counts, strict=True):
        if ns != list(range(1, len(ns) + 1)):
            return None
        own = row[1:len(ns) + 1]
        if any(b < a for a, b in zip(own, own[1:], strict=False)):
            return None
        rows.append(own)
    if len(rows) > layers or not all(rows) or sum(map(len, rows)) < layers:
        return INF
    values = sorted({v for row in rows for v in row}) if levels is None else levels
    lo, hi = 0, len(values) - 1  # the largest admits a split: every stage takes all its counts
    while lo < hi:
        mid = (lo + hi) // 2
        caps = [bisect_right(row, values[mid]) for row in rows]
        if min(caps) >= 1 and sum(caps) >= layers:
            hi = mid
        else:
            lo = mid + 1
    return values[lo]


def solve_plain(p: SplitProblem) -> Split | None:
    """partition.solve_dp, in plain Python."""
    times, costs, recs = tables(p)
    width, m = p.num_layers + 1, p.num_microbatches
    if p.num_stages == 1:
        return _split(p, times, costs, recs, [p.num_layers]) if times[0][-1] < INF else None
    bounds = sorted({t for row in times for t in row if t < INF})
    if not bounds:
        return None
    lo, hi = 0, len(bounds) - 1
    while lo < hi:  # smallest bound with a split: every stage takes >= 1 layer and together >= L
        mid = (lo + hi) // 2
        caps = [_max_layers(row, bounds[mid]) for row in times]
        if min(caps) >= 1 and sum(caps) >= p.num_layers:
            hi = mid
        else:
            lo = mid + 1
    counts = [[n for n in range(1, width) if row[n] < INF] for row in times]
    unbounded = least_sum(costs, counts, width)
    if unbounded is None:
        return None
    start = max(bounds[lo], least_bottleneck(times, counts, width, bounds) * (1 - _EPS))
    best: tuple[list[int], float] | None = None
    for bound in sorted({row[n] for row, ns in zip(times, counts, strict=True) for n in ns if row[n] >= start}):
        if (m - 1) * bound + unbounded[0] >= (INF if best is None else min(best[1], INF)):
            break
        within = [[n for n in ns if row[n] <= bound * (1 + _EPS)] for row, ns in zip(times, counts, strict=True)]
        solved = least_sum(costs, within, width)
        if solved is None:
            continue
        pairs = list(zip(solved[1], solved[1][1:], strict=False))
        value = (m - 1) * max(times[s][b - a] for s, (a, b) in enumerate(pairs)) + solved[0]
        if value < INF and (best is None or value < best[1]):
            best = (solved[1], value)
    if best is None:
        return None
    return _split(p, times, costs, recs, [b - a for a, b in zip(best[0], best[0][1:], strict=False)])


def _max_layers(row: list[float], bound: float) -> int:
    """partition._max_layers for one stage: its layer counts from one up whose time is within `bound`."""
    x, n = bound + _EPS * max(1.0, bound), 0
    while n + 1 < len(row) and row[n + 1] <= x:
        n += 1
    return n


def _split(p: SplitProblem, times: list[list[float]], costs: list[list[float]], recs: list[list[float]],
           layers: list[int]) -> Split:
    """partition.make_split."""
    stage_times = tuple(times[s][n] for s, n in enumerate(layers))
    objective = (p.num_microbatches - 1) * max(stage_times) + sum(costs[s][n] for s, n in enumerate(layers))
    return Split(tuple(layers), tuple(int(recs[s][n]) for s, n in enumerate(layers)), stage_times, objective)
