"""Data-parallel training on structures of different sizes: which replica trains which of a step's structures.

MACE deals a step's structures to the replicas by count (mace/cli/run_train.py: torch's DistributedSampler, rank r
takes structures r, r + R, r + 2R, ... of the shuffled order) and collates each replica's share into one graph, so
the step waits for the replica that drew the most atoms. Balancing by atoms instead (fairchem's
BalancedBatchSampler, facebookresearch/fairchem#267; metatrain's max-atom sampler) is the makespan problem P||Cmax
(NP-hard; Garey and Johnson 1979): split the sizes a_1..a_n into R groups minimising the largest sum.
- lower bound: max(max a_i, ceil(sum a_i / R)) (a group holds the largest structure; some group holds the mean);
- LPT (Graham 1969, "Bounds on multiprocessing timing anomalies"): largest first, each into the least loaded
  group; its largest sum is at most (4/3 - 1/(3R)) x the optimum;
- exact: branch and bound from LPT's answer over the structures in decreasing size, each put in every group
  whose sum differs from the groups tried before it (groups of equal sum are interchangeable) and keeps the sum
  below the best found; it stops at the lower bound, and after NODE_LIMIT placements (or above EXACT_MAX
  structures, where only LPT runs) returns the best found, marked not exact, within LPT's bound.
`brute_force` tries every assignment (tests compare on small instances).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

NODE_LIMIT = 200_000  # placements the exact search may try before it settles for the best found
EXACT_MAX = 256  # structures beyond which only LPT runs (the search recurses once per structure)


@dataclass(frozen=True)
class Partition:
    """Each group's structure sizes; `exact`: the largest sum is proven the least possible."""

    groups: tuple[tuple[int, ...], ...]
    exact: bool
    lower_bound: int

    @property
    def loads(self) -> tuple[int, ...]:
        return tuple(sum(g) for g in self.groups)

    @property
    def makespan(self) -> int:
        return max(self.loads)


def lower_bound(sizes: Sequence[int], replicas: int) -> int:
    return max(max(sizes), math.ceil(sum(sizes) / replicas))


def lpt_bound(replicas: int) -> float:
    """Graham's worst-case ratio of LPT to the optimum."""
    return 4 / 3 - 1 / (3 * replicas)


def by_count(sizes: Sequence[int], replicas: int) -> tuple[tuple[int, ...], ...]:
    """DistributedSampler's deal of `sizes` in the given order: group r takes r, r + R, r + 2R, ..."""
    return tuple(tuple(sizes[r::replicas]) for r in range(replicas))


def lpt(sizes: Sequence[int], replicas: int) -> Partition:
    groups: list[list[int]] = [[] for _ in range(replicas)]
    loads = [0] * replicas
    for a in sorted(sizes, reverse=True):
        j = loads.index(min(loads))
        groups[j].append(a)
        loads[j] += a
    bound = lower_bound(sizes, replicas)
    return Partition(tuple(tuple(g) for g in groups), max(loads) == bound, bound)


class _Search:
    """The branch and bound's state: the sizes in decreasing order, the groups being filled, the best found."""

    def __init__(self, order: list[int], replicas: int, start: Partition, node_limit: int) -> None:
        self.order, self.bound, self.node_limit = order, start.lower_bound, node_limit
        self.best, self.best_groups = start.makespan, [list(g) for g in start.groups]
        self.loads = [0] * replicas
        self.groups: list[list[int]] = [[] for _ in range(replicas)]
        self.nodes = 0

    def place(self, i: int) -> bool:
        """Put structure i and the rest; True to stop (the lower bound reached or the node budget spent)."""
        if i == len(self.order):
            self.best, self.best_groups = max(self.loads), [list(g) for g in self.groups]
            return self.best == self.bound
        size, tried = self.order[i], set()
        for j, load in enumerate(self.loads):
            if load in tried or load + size >= self.best:
                continue
            tried.add(load)
            self.nodes += 1
            if self.nodes > self.node_limit:
                return True
            self.loads[j] += size
            self.groups[j].append(size)
            stop = self.place(i + 1)
            self.loads[j] -= size
            self.groups[j].pop()
            if stop:
                return True
        return False


def balance(sizes: Sequence[int], replicas: int, node_limit: int = NODE_LIMIT) -> Partition:
    """The split of `sizes` over `replicas` groups with the least largest sum (module docstring)."""
    start = lpt(sizes, replicas)
    if start.exact or len(sizes) > EXACT_MAX:
        return start
    search = _Search(sorted(sizes, reverse=True), replicas, start, node_limit)
    search.place(0)
    exact = search.nodes <= node_limit or search.best == search.bound
    return Partition(tuple(tuple(g) for g in search.best_groups), exact, search.bound)


def brute_force(sizes: Sequence[int], replicas: int) -> int:
    """The least largest sum over every assignment of `sizes` to `replicas` groups (R^n of them)."""
    best = sum(sizes)
    for assignment in itertools.product(range(replicas), repeat=len(sizes)):
        loads = [0] * replicas
        for a, j in zip(sizes, assignment, strict=True):
            loads[j] += a
        best = min(best, max(loads))
    return best
