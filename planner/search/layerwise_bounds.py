"""Lower bounds on the step of a per-layer chain plan (planner.search.layerwise's model), for pruning the exact
search (planner.search.layerwise_dp) against the k-th best step found so far.

With stage times T_s, step = (m − 1)·max_s T_s + Σ_s T_s + max_s tail_s. Every part of T_s is non-negative
(layer times, reshards, sends), so with t_l the least time of layer l over its TP degrees (forward + backward, not
recomputed) and R the sum of t_l over the layers outside a given set:
  - a plan whose stage s holds layers [i, j) at time T (its own choices, reshards and sends) has
        Σ_s T_s >= T + R,   max_s T_s >= max(T, (T + R) / pp),
    and the same holds for a stage's first layers [i, l] at time T, the rest of the stage counted in R;
  - every layer l with parameters sits in some stage, whose tail holds at least its least
        α_t + β_t · params_l (the per-degree latency and per-parameter term of planner.search.layerwise.TpTerms),
    so max_s tail_s >= max_l of that when every α_t, β_t >= 0; then a stage's tail only grows with its layers, so
    the tail of a stage's first layers bounds it too (with a negative α_t or β_t nothing is pruned).
Then step >= (m − 1)·max(T, (T + R)/pp) + T + R + max(tail floor, that tail). With nothing chosen (T = 0, R the
whole chain) it bounds a candidate before its search.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

from planner.search.layerwise import Setting

SLACK = 1e-9  # relative: a bound summed in another order than the priced step may exceed an equal step by rounding


class Cut(NamedTuple):
    """`StepFloor`'s bound for one stage's layers [first, end), in the parts the search's inner loop reads (a named
    tuple: it is read hundreds of thousands of times per search)."""

    m1: int  # m − 1
    pp: int
    bar: float  # the limit with its slack: a plan above it is not wanted
    tail_floor: float
    rest: float  # R: the least time of the layers outside [first, end)

    def drops(self, time: float, tail: float) -> bool:
        """True when no plan whose stage holds these layers at `time` and `tail` can beat or equal the limit."""
        total = time + self.rest
        spread = total / self.pp
        return (self.m1 * (time if time > spread else spread) + total
                + (tail if tail > self.tail_floor else self.tail_floor)) > self.bar


@dataclass(frozen=True)
class StepFloor:
    """The lower bounds of one candidate (module docstring)."""

    m: int
    pp: int
    least: tuple[float, ...]  # prefix sums of the per-layer least times, least[l] = Σ_{l' < l} t_l'
    tail_floor: float  # -inf unless every α_t, β_t >= 0 (a stage's tail then grows with its layers)
    limit: float = math.inf  # the k-th best step so far: a plan above it is not wanted

    def cut(self, first: int, end: int) -> Cut | None:
        """The test for a stage's layers [first, end), or None when nothing can be cut (no limit, or a tail that
        may shrink)."""
        if math.isinf(self.limit) or self.tail_floor == -math.inf:
            return None
        return Cut(self.m - 1, self.pp, self.limit * (1 + SLACK), self.tail_floor,
                   self.least[-1] - (self.least[end] - self.least[first]))

    @property
    def candidate(self) -> float:
        """The least step of any plan of the candidate (nothing chosen: R is the whole chain)."""
        total = self.least[-1]
        return (self.m - 1) * total / self.pp + total + self.tail_floor


def step_floor(st: Setting) -> StepFloor:
    """The candidate's bounds: least time and least tail per layer over its options."""
    least = [min(o.time_s for o in opts) for opts in st.options]
    tails = [min(st.term(o.tp).sync_alpha + st.term(o.tp).tail_per_param * o.params for o in opts)
             for opts in st.options if all(o.params > 0 for o in opts)]
    monotone = all(t.sync_alpha >= 0 and t.tail_per_param >= 0 for t in st.terms)
    return StepFloor(st.m, st.pp, tuple(accumulate(least, initial=0.0)),
                     max(tails, default=0.0) if monotone else -math.inf)


def beaten(floor: float, limit: float) -> bool:
    """True when a plan of at least `floor` cannot beat or equal `limit` (the k-th best step so far)."""
    return floor > limit * (1 + SLACK)
