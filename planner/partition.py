"""Exact layer-to-stage split by dynamic programming over (stage, layer boundary).

For 1F1B and interleaved 1F1B the step time is Σ_i t_i + (m − 1)·max_i t_i (cost_models.pipeline);
Σ_i t_i is the same for every split (each layer is on exactly one stage, and the per-stage extras
are fixed), so the best split minimises the bottleneck max_i t_i under each stage's memory cap.
Stages differ: the first carries the embedding, the last the LM head and loss, and stage i keeps
activations of `in_flight[i]` micro-batches, so the caps are per stage.

    f[s][j] = min over k < j of max(f[s−1][k], T(k, j) + extra_time[s−1])
              subject to  W(k, j) + A(k, j)·in_flight[s−1] + extra_bytes[s−1] <= capacity
with T, W, A prefix sums over the layers (time, static bytes, activation bytes per micro-batch).
O(P·L²) work, vectorised over k with numpy; ties go to the earliest boundary, so it is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np


@dataclass(frozen=True)
class ChainCosts:
    """Per-layer costs of a chain of layers (one micro-batch, one GPU of the stage)."""

    time: tuple[float, ...]
    static_bytes: tuple[float, ...]  # weights, gradients, optimizer state
    activation_bytes: tuple[float, ...]  # stored per micro-batch in flight

    def __post_init__(self) -> None:
        if not len(self.time) == len(self.static_bytes) == len(self.activation_bytes):
            raise ValueError("time, static_bytes and activation_bytes need one entry per layer")


@dataclass(frozen=True)
class StageBudget:
    """What each pipeline stage adds and may hold, in pipeline order."""

    extra_time: tuple[float, ...]
    extra_bytes: tuple[float, ...]
    in_flight: tuple[float, ...]
    capacity_bytes: float

    @property
    def num_stages(self) -> int:
        return len(self.in_flight)


@dataclass(frozen=True)
class Split:
    """Layers per stage (in order) and the resulting bottleneck stage time."""

    layers: tuple[int, ...]
    bottleneck: float


def _stage_ok(costs: ChainCosts, budget: StageBudget, stage: int, lo: int, hi: int) -> tuple[bool, float]:
    t = sum(costs.time[lo:hi]) + budget.extra_time[stage]
    mem = (sum(costs.static_bytes[lo:hi]) + sum(costs.activation_bytes[lo:hi]) * budget.in_flight[stage]
           + budget.extra_bytes[stage])
    return mem <= budget.capacity_bytes, t


def best_split(costs: ChainCosts, budget: StageBudget, min_layers: int = 1) -> Split | None:
    """The split with the smallest bottleneck that fits every stage, or None when none fits."""
    n, p = len(costs.time), budget.num_stages
    if n < p * min_layers:
        return None
    zero = np.zeros(1)
    t_pre = np.concatenate([zero, np.cumsum(costs.time)])
    w_pre = np.concatenate([zero, np.cumsum(costs.static_bytes)])
    a_pre = np.concatenate([zero, np.cumsum(costs.activation_bytes)])
    f = np.full((p + 1, n + 1), np.inf)
    arg = np.full((p + 1, n + 1), -1, dtype=np.int64)
    f[0, 0] = 0.0
    ks = np.arange(n + 1)
    for s in range(1, p + 1):
        lo_j, hi_j = s * min_layers, n - (p - s) * min_layers
        for j in range(lo_j, hi_j + 1):
            k = ks[: j - min_layers + 1]
            mem = (w_pre[j] - w_pre[k]) + (a_pre[j] - a_pre[k]) * budget.in_flight[s - 1] + budget.extra_bytes[s - 1]
            cand = np.maximum(f[s - 1, k], t_pre[j] - t_pre[k] + budget.extra_time[s - 1])
            cand = np.where(mem <= budget.capacity_bytes, cand, np.inf)
            best = int(np.argmin(cand))
            f[s, j], arg[s, j] = cand[best], best
    if not np.isfinite(f[p, n]):
        return None
    bounds, j = [n], n
    for s in range(p, 0, -1):
        j = int(arg[s, j])
        bounds.append(j)
    bounds.reverse()
    layers = tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))
    return Split(layers, float(f[p, n]))


def brute_force_split(costs: ChainCosts, budget: StageBudget, min_layers: int = 1) -> Split | None:
    """Every split enumerated: the reference the DP is tested against (small chains only)."""
    n, p = len(costs.time), budget.num_stages
    best: Split | None = None
    for cuts in combinations(range(1, n), p - 1):
        bounds = (0, *cuts, n)
        sizes = tuple(b - a for a, b in zip(bounds, bounds[1:], strict=False))
        if min(sizes) < min_layers:
            continue
        worst, ok = 0.0, True
        for s in range(p):
            fits, t = _stage_ok(costs, budget, s, bounds[s], bounds[s + 1])
            ok, worst = ok and fits, max(worst, t)
        if ok and (best is None or worst < best.bottleneck):
            best = Split(sizes, worst)
    return best
