"""The path bounds of a candidate whose split is solved, over every split of its layers (`SplitPaths`: whether some
split keeps every stage's path at or below x, and the least such x), and the search for that least x one feasibility
test at a time (`FloorSearch`), so that the exact search refines a candidate's bound only as far as its place in the
best-first order needs (planner.search.exact). The rows come from planner.search.sim_bounds (`split_rows`), whose
module docstring gives the path bounds."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import accumulate

from planner.search.floors import recompute_cost
from planner.search.held_kinds import HeldKinds
from planner.search.memory_floors import affine_rows

Row = tuple[float, float, float, float]  # (c, s, s2, u): path_d >= c + s·P(l_d) + s2·l_d + u·(P(l_d + n_d) − P(l_d))


def layer_prefix(kinds: Sequence[bool], value: Callable[[bool], float], held: HeldKinds | None) -> list[float]:
    """What `SplitPaths` reads of `value` of each decoder layer's kind (MoE or not). Where every rank holds one run of
    consecutive layers (held None) its prefix sums in model order: rank d holding layers [l, j) adds P(j) − P(l). A V
    or wave rank holds two or more runs apart (its chunks), so its n layers are not those of any [l, l + n); there
    (`SplitPaths` counted) P(n) is the least n layers of such a rank add over every placement of its chunks
    (`HeldKinds.least`, proved in planner.search.held_kinds), below what any of its splits' ranks take."""
    if held is None:
        return list(accumulate((value(bool(k)) for k in kinds), initial=0.0))
    return held.least(value(False), value(True))


@dataclass(frozen=True)
class SplitMemory:
    """What a rank's memory adds to its time in `split_feasible` (`SearchBounds.fitting_slowest`'s f_r): rank d holding
    layers [l, j) keeps fixed[d] + state(j) − state(l) + alive[d]·(act(j) − act(l)) bytes, the excess over `capacity`
    saved by full recomputation at no less than rho/alive[d] seconds a byte, and cannot hold them if even fully
    recomputed (`least_act`) they exceed it; and whole layers recomputed, each freeing at most `frees` bytes per
    micro-batch in flight and adding at least `adds` seconds (floors.recompute_cost). state, act and least_act are
    prefix sums over the layers, or, where the paths are counted (`layer_prefix`), each the least over where n layers
    can lie (read as [0, n)): each below what every placement takes, so their sums (bytes kept, and the seconds their
    excess costs plus the time) are too."""

    fixed: tuple[float, ...]
    alive: tuple[float, ...]
    state: tuple[float, ...]
    act: tuple[float, ...]
    least_act: tuple[float, ...]
    capacity: float
    rho: float
    frees: float = 0.0
    adds: float = 0.0

    def time(self, d: int, start: int, end: int) -> float | None:
        """The least recomputation seconds of rank d holding layers [start, end), None if they cannot fit."""
        base = self.fixed[d] + self.state[end] - self.state[start]
        if base + self.alive[d] * (self.least_act[end] - self.least_act[start]) > self.capacity:
            return None
        over = base + self.alive[d] * (self.act[end] - self.act[start]) - self.capacity
        return recompute_cost(over, self.rho / self.alive[d], self.frees * self.alive[d], self.adds)


class SplitPaths:
    """The path bounds of a candidate whose split is solved, over every split (`split_feasible`, `floor`)."""

    def __init__(self, rows: Sequence[Sequence[Row]], prefix: Sequence[float], memory: SplitMemory | None = None,
                 counted: bool = False) -> None:
        self.rows, self.prefix, self.memory, self.counted = rows, list(prefix), memory, counted
        if memory is not None:  # per rank: bytes kept and bytes at the least for the first j layers, and the time
            # with the recomputation per byte kept; each a function of the rank's alive alone, so ranks alike in it
            # (a V or wave pipeline's but the first) share one row, computed once
            scales = list(dict.fromkeys(memory.alive))
            kept, least = affine_rows(memory.state, scales, memory.act), affine_rows(memory.state, scales,
                                                                                    memory.least_act)
            self.kept = [kept[scales.index(a)] for a in memory.alive]
            self.least = [least[scales.index(a)] for a in memory.alive]
            self.rho = [memory.rho / a for a in memory.alive]
            self._mixed: dict[float, list[float]] = {}  # `mixed` by alive, built where needed

    def mixed(self, d: int) -> list[float]:
        """Rank d's layer-time prefix plus its recomputation per byte kept (rho[d]·kept[d]), once per alive (of which
        alone both are functions): `feasible` reads it only for a rank whose layers would keep more than fits."""
        assert self.memory is not None
        alive = self.memory.alive[d]
        row = self._mixed.get(alive)
        if row is None:
            row = self._mixed[alive] = [p + self.rho[d] * k for p, k in zip(self.prefix, self.kept[d], strict=True)]
        return row

    def whole_end(self, d: int, plain: int, end: int, free: float, reach: float) -> int:
        """The most layers j in plain .. end whose time with their excess over `free` recomputed in whole layers
        (`recompute_cost`) reaches no further than `reach`, plain − 1 if none: each grows with j, so a bisection."""
        assert self.memory is not None
        prefix, kept, per_byte = self.prefix, self.kept[d], self.rho[d]
        frees, adds = self.memory.frees * self.memory.alive[d], self.memory.adds
        return plain - 1 + bisect_right(range(plain, end + 1), reach, key=lambda j: prefix[j] + recompute_cost(
            kept[j] - free, per_byte, frees, adds))

    def feasible(self, x: float) -> bool:
        """Whether some split keeps every row of every stage at or below `x` (False: every split that pricing can
        return has a path above x). P = `prefix`, P(l) the least time of the first l layers; l_d the layers before
        stage d, n_d its own (relaxed to zero or more), stage d's own time at least P(l + n) − P(l), or P(n) where
        `counted` (`layer_prefix`: then every row has s = 0), plus what `memory` adds (the stages before it at least
        P(l_d)); each row has u > 0, s <= u and s2 <= u·(least layer time), and P(n + 1) − P(n) >= that time.

        A stage may start at l only if its rows hold with no layer of its own, c + s·P(l) + s2·l + u·(its memory's
        time) <= x, which holds on a prefix of l; it may end at any j up to the largest for which its rows hold, which
        does not fall with l (a later start leaves it fewer layers to hold, which costs more than the layers before
        it add). So the layers reachable after each stage are 0 .. the greedy most: feasible iff that reaches every
        layer. Each limit is a bisection of a prefix sum; comparisons lean towards feasible (a bound stays below)."""
        prefix, memory, layers = self.prefix, self.memory, len(self.prefix) - 1
        slack = 1 + 1e-12
        hi = 0
        for d, row in enumerate(self.rows):
            pen0 = 0.0
            if memory is not None:
                if memory.fixed[d] > memory.capacity * slack:
                    return False
                pen0 = self.rho[d] * max(memory.fixed[d] - memory.capacity, 0.0)
            start = hi  # the largest start in 0 .. hi that holds with no layer
            for c, s, s2, u in row:
                room = x - c - u * pen0
                if room < -1e-12 * abs(x):
                    return False
                if math.isinf(room):
                    continue
                if s > 0:
                    start = min(start, bisect_right(prefix, room / s * slack + 1e-300) - 1)
                elif s2 > 0:
                    start = min(start, math.floor(room / s2 * slack + 1e-12))
            start = max(start, 0)
            at = 0 if self.counted else start  # where stage d's own layers are read from
            budget = min((x - c - s * prefix[start] - s2 * start) / u for c, s, s2, u in row)
            reach = prefix[at] + budget
            end = bisect_right(prefix, reach * slack + 1e-300) - 1  # the layers' times alone
            if memory is not None:
                free = memory.capacity - memory.fixed[d] + self.kept[d][at]  # bytes before recomputation
                plain = bisect_right(self.kept[d], free * slack) - 1
                if end > plain:  # past it each byte kept costs rho[d] seconds, and whole layers at least
                    end = max(plain, bisect_right(self.mixed(d), (reach + self.rho[d] * free) * slack + 1e-300) - 1)
                    if memory.adds > 0 and end > plain:
                        end = max(plain, self.whole_end(d, plain, end, free, reach * slack + 1e-300))
                room = memory.capacity - memory.fixed[d] + self.least[d][at]
                end = min(end, bisect_right(self.least[d], room * slack) - 1)
            hi = max(start, min(end + start - at, layers))
        return hi >= layers

    def floor(self, above: float = 0.0) -> float:
        """The least x `feasible` accepts, from below to a relative 1e-3 (bisection keeps an x it refuses: a true
        lower bound); `above` where it accepts that (a bound the caller has already), ∞ where no split fits."""
        search = FloorSearch(self, above)
        search.finish()
        return search.low


class FloorSearch:
    """`SplitPaths.floor` one feasibility test at a time: `low` is a lower bound on the floor from the start (an x that
    `feasible` refuses, or the floor itself once `done`) and only grows, so a caller may order by it and refine only
    what it must; the tests, and the final `low`, are those of `floor`. The first two (nothing fits: ∞; `above` is
    accepted: above) are made at once; then `high` grows until accepted, and [low, high] halves to a relative 1e-3 (an
    order to price candidates in needs no more)."""

    def __init__(self, paths: SplitPaths, above: float) -> None:
        self.paths, self.growing = paths, True
        if not paths.feasible(math.inf):
            self.low = self.high = math.inf
        elif paths.feasible(above):
            self.low = self.high = above
        else:
            self.low, self.high = above, 1.25 * above + 1e-12
        self.done = self.low == self.high

    def step(self) -> None:
        """One more test: while growing, of `high` (accepted: the bisection starts; else [high, 3·high − 2·low]);
        then of the middle of [low, high]."""
        low, high = self.low, self.high
        if self.growing:
            if self.paths.feasible(high):
                self.growing = False
            else:
                self.low, self.high = high, high + 2 * (high - low)
                return
        else:
            mid = (low + high) / 2
            self.low, self.high = (low, mid) if self.paths.feasible(mid) else (mid, high)
        self.done = not self.high - self.low > 1e-3 * self.high

    def finish(self) -> None:
        while not self.done:
            self.step()


def split_feasible(rows: Sequence[Sequence[Row]], prefix: Sequence[float], x: float,
                   memory: SplitMemory | None = None) -> bool:
    """`SplitPaths.feasible`."""
    return SplitPaths(rows, prefix, memory).feasible(x)


def split_floor(rows: Sequence[Sequence[Row]], prefix: Sequence[float], memory: SplitMemory | None = None,
                above: float = 0.0) -> float:
    """`SplitPaths.floor`."""
    return SplitPaths(rows, prefix, memory).floor(above)
