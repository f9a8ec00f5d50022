"""What a search returns: each priced layout (`Ranked`), the certificate that says how the search ended and why its
answer is optimal within the modelled space, and the result that holds both; and what a part of a split search reads
of the others' (`Incumbent`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from cost_models.prediction import Prediction
from meshcore import (
    Layout,
)
from planner.search.ilp import Solver


@dataclass(frozen=True)
class Ranked:
    layout: Layout
    prediction: Prediction
    simulated_step_time_s: float | None = None  # the pipeline priced by the discrete-event simulator

    @property
    def step_time_s(self) -> float:
        """What the ranking uses: the simulated step when there is one, else the closed form."""
        return self.simulated_step_time_s if self.simulated_step_time_s is not None else self.prediction.step_time_s


@dataclass(frozen=True)
class Certificate:
    method: str
    solver: Solver
    candidates: int  # valid degree tuples enumerated
    evaluated: int  # priced with a stage split
    pruned_memory: int  # dropped by the memory bound
    pruned_time: int  # dropped by the time bound
    infeasible: int  # priced, but no split fits in memory
    solve_time_s: float
    optimal: bool
    gap: float
    simulated: int = 0  # layouts whose pipeline the simulator ran (the others it could not improve on)


@dataclass(frozen=True)
class SearchResult:
    best: Ranked
    alternatives: tuple[Ranked, ...]
    certificate: Certificate


class Incumbent(Protocol):
    """The k best reported steps found by searches of other parts of the space (planner.search.parallel)."""

    def kth(self) -> float: ...

    def offer(self, step: float) -> None: ...


def certified(top: list[tuple[float, tuple[int, ...], Ranked]], tally: Mapping[str, int], solver: Solver,
              optimal: bool, gap: float, seconds: float) -> SearchResult:
    """The result of a best-first search (planner.search.exact) from its top-k (entries (−step, −sort key, layout)) and
    its counts, logged."""
    t = tally
    total, evaluated, expanded, floored_ = t["total"], t["evaluated"], t["expanded"], t["floored"]
    ranked = [e[2] for e in sorted(top, key=lambda e: (-e[0], tuple(-x for x in e[1])))]
    cert = Certificate(
        method="enumerate + memory/time bounds (best-first) + exact stage split, ranked and bounded by the "
               "reported step (the discrete-event pipeline simulator's where it runs)", solver=solver,
        candidates=total + expanded, evaluated=evaluated, pruned_memory=t["held"] - t["fitting"] + floored_,
        pruned_time=total - t["held"] + t["fitting"] + expanded - evaluated - floored_,
        infeasible=t["infeasible"], solve_time_s=seconds, optimal=optimal, gap=gap, simulated=t["simulated"])
    logging.getLogger("planner.search.exact").info(
        "searched %d candidates: %d priced (%d simulated), %d pruned by memory, %d by the time bound, %d did not fit",
        cert.candidates, cert.evaluated, cert.simulated, cert.pruned_memory, cert.pruned_time, cert.infeasible)
    return SearchResult(ranked[0], tuple(ranked[1:]), cert)
