"""The answer of a search: the model, cluster and job it was made for, the best layout with its prediction, the
ranked alternatives and the search certificate, with the model's error band around each step time."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from meshcore import ClusterSpec, JobSpec, ModelSpec
from planner.outputs.bands import StepBand, band_for, load_bands, step_band
from planner.search.ranked import Certificate, Ranked


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    best: Ranked
    alternatives: tuple[Ranked, ...]
    certificate: Certificate | None  # None for a plan written by hand

    @cached_property
    def bands(self) -> tuple[StepBand, ...]:
        """Model error band of the best layout (index 0) and of each alternative, around the step time the
        ranking uses (`Ranked.step_time_s`: simulated when there is one), from planner/outputs/error_bands.yaml."""
        band = band_for(load_bands(), self.model, self.cluster, self.job)
        return tuple(step_band(r.step_time_s, band) for r in (self.best, *self.alternatives))

    @property
    def indistinguishable(self) -> tuple[bool, ...]:
        """Per alternative: its band overlaps the best's, so the model cannot say which is faster."""
        best, *others = self.bands
        return tuple(b.overlaps(best) for b in others)
