"""The uniform stack's exact split (`planner.search.partition.solve_dp`) over layer-count tables, vectorised.

A uniform stack's segment costs depend only on its layer count, so the min-plus DP over (stage, layer boundary) needs
only the counts a stage may take: f_s(j) = min over allowed n <= j of f_{s−1}(j − n) + cost_s(n), and likewise the
min-max of the least bottleneck. `planner.search.plain_split` runs that in plain Python for small problems; this is
the same algorithm with each stage's step as one numpy operation over (allowed count, boundary), O(counts x layers) a
stage where partition's segment tables take O(layers²) (a stage of a large model holds a few layers: Qwen3-235B's 94
layers over 16 or 32 stages, each 12 to 28 at the most its memory allows). The same floats by the same operations,
ties broken alike (the largest count, i.e. the least previous boundary, as numpy's argmin over boundaries), so it
returns partition.solve_dp's `Split` bit for bit (tests/test_partition.py holds the three equal)."""

from __future__ import annotations

import numpy as np

from planner.search.partition import _EPS, distinct, least_bottleneck_bound, make_split, sum_costs
from planner.search.split_model import Split, SplitProblem


def least_sum(costs: np.ndarray, counts: list[np.ndarray], width: int) -> tuple[float, list[int]] | None:
    """plain_split.least_sum: stage s may take the layer counts `counts[s]` (descending: the first minimum found is
    the largest count, the least previous boundary)."""
    stages = costs.shape[0]
    # f behind `width` boundaries of ∞: f[end − n] for n > end reads ∞, which no finite cost makes less
    f = np.full(2 * width, np.inf)
    f[width] = 0.0
    picks, columns = [], np.arange(width)
    for s in range(stages):
        new, pick = np.full(2 * width, np.inf), np.zeros(width, dtype=int)
        lo, hi = s + 1, width - (stages - s)  # boundaries a complete split can have after this stage
        ns = counts[s]
        if len(ns) and hi >= lo:
            ends = columns[lo:hi + 1]
            cand = f[width + ends[None, :] - ns[:, None]] + costs[s, ns][:, None]
            best = cand.argmin(axis=0)
            new[width + lo:width + hi + 1] = cand[best, columns[:len(ends)]]
            pick[lo:hi + 1] = ends - ns[best]
        f = new
        picks.append(pick)
    f = f[width:]
    if not f[-1] < np.inf:
        return None
    bounds, j = [width - 1], width - 1
    for row in reversed(picks):
        j = int(row[j])
        bounds.append(j)
    return float(f[-1]), bounds[::-1]


def least_bottleneck(times: np.ndarray, counts: list[np.ndarray], width: int, levels: np.ndarray | None = None
                     ) -> float:
    """plain_split.least_bottleneck: the least max_s time over splits with the allowed counts (`levels`: the sorted
    distinct finite times, where the caller has them); by `plain_split.monotone_bottleneck`'s bisection where every
    stage's counts run 1 .. c_s with its times not falling, else the min-max DP."""
    rows = [times[s, 1:len(ns) + 1] for s, ns in enumerate(counts)]
    if all(len(ns) and ns[0] == len(ns) and ns[-1] == 1 and not (row[1:] < row[:-1]).any()
           for ns, row in zip(counts, rows, strict=True)):
        layers = width - 1
        if len(rows) > layers or sum(map(len, rows)) < layers:
            return float(np.inf)
        values = distinct(np.concatenate(rows)) if levels is None else levels
        lo, hi = 0, len(values) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            caps = [int(np.searchsorted(row, values[mid], side="right")) for row in rows]
            if min(caps) >= 1 and sum(caps) >= layers:
                hi = mid
            else:
                lo = mid + 1
        return float(values[lo])
    # f behind `width` boundaries of ∞ (least_sum's band): f[end − n] for n > end reads ∞, as masking it gave
    f = np.full(2 * width, np.inf)
    f[width] = -np.inf
    ends = np.arange(width)
    for s in range(times.shape[0]):
        ns = counts[s]
        if not len(ns):
            return float(np.inf)
        f[width:] = np.maximum(f[width + ends[None, :] - ns[:, None]], times[s, ns][:, None]).min(axis=0)
    return float(f[-1])


def count_tables(p: SplitProblem) -> tuple[np.ndarray, np.ndarray]:
    """partition.stage_tables for every stage at once: the same operations on each element, so the same floats."""
    n = np.arange(p.num_layers + 1, dtype=float)[None, :]
    m0, m1, mr = (np.asarray(v, dtype=float)[:, None] for v in (p.m0, p.m1, p.mr))
    plain = m0 + (n - 1) * m1
    r = np.where(plain <= p.capacity + _EPS, 0.0, np.inf)
    if p.partial_recompute:
        saves = mr > 0
        need = np.ceil((plain + p.transient - p.capacity) / np.where(saves, mr, 1.0) - _EPS)
        r = np.where(saves & np.isinf(r) & (need <= n), np.maximum(need, 1.0), r)
    r = np.where(n >= 1, r, np.inf)
    finite = np.isfinite(r)
    t0 = np.asarray(p.t0, dtype=float)[:, None]
    times = np.where(finite, t0 + (n - 1) * p.t1 + np.where(finite, r, 0.0) * p.tr, np.inf)
    return times, r


def solve_counts(p: SplitProblem) -> Split | None:
    """partition.solve_dp over count tables."""
    times, recs = count_tables(p)
    if p.num_stages == 1:
        return make_split(p, times, recs, [p.num_layers]) if np.isfinite(times[0, -1]) else None
    first = least_bottleneck_bound(times, p.num_layers)
    if first is None:
        return None
    bounds, lo = first
    width, m = p.num_layers + 1, p.num_microbatches
    costs = sum_costs(p, times)
    finite = np.isfinite(times)
    finite[:, 0] = False

    def allowed(mask: np.ndarray) -> list[np.ndarray]:
        return [np.flatnonzero(row)[::-1] for row in mask]

    counts = allowed(finite)
    unbounded = least_sum(costs, counts, width)
    if unbounded is None:
        return None
    start = max(float(bounds[lo]), least_bottleneck(times, counts, width, bounds) * (1 - _EPS))
    best: tuple[list[int], float] | None = None
    for bound in bounds[bounds >= start]:
        if (m - 1) * bound + unbounded[0] >= (np.inf if best is None else best[1]):
            break
        solved = least_sum(costs, allowed(finite & (times <= bound * (1 + _EPS))), width)
        if solved is None:
            continue
        pairs = list(zip(solved[1], solved[1][1:], strict=False))
        value = (m - 1) * max(float(times[s, b - a]) for s, (a, b) in enumerate(pairs)) + solved[0]
        if value < np.inf and (best is None or value < best[1]):
            best = (solved[1], value)
    if best is None:
        return None
    return make_split(p, times, recs, [b - a for a, b in zip(best[0], best[0][1:], strict=False)])
