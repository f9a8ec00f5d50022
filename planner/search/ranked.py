"""What a search returns: each priced layout (`Ranked`), the certificate that says how the search ended and why its
answer is optimal within the modelled space, and the result that holds both."""

from __future__ import annotations

from dataclasses import dataclass

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
