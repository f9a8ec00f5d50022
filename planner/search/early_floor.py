"""The families' first floor: below `ReportedBounds.family_floor` without the per-layer times of any recomputation.

The search queues every family (the candidates sharing `floor_key`) before its first pop, and most never come up: on
DeepSeek-V3's research space 1,952 settings of the layer knobs over 878 of the degrees (tp, cp, sp, mbs, ep, etp),
whose per-layer times (`layer_times`: each recomputation's own passes, host waits, recomputed modules) were most of
what the queue cost. This floor reads only what every recomputation of the same degrees shares
(`decoder_layer_floor`: the layer's passes, remembered per degrees), so a family is queued at it and its own floor is
computed when it comes up (planner.search.exact: level -2). Proof that it is below `family_floor`, with A, b̄ the
average stage's layer time and backward (`SearchBounds._average`) and A', b̄' the same sums of the floors here:
  A = A' + δ and b̄ = b̄' + δ_b with 0 <= δ_b <= δ: every field of every part here is at most the search's (the decoder
  layers by `decoder_layer_floor`; the embedding without the vision encoder, the head with the multi-token-prediction
  modules on the floors of their layers, `mtp_time` being sums and scalings of its layers' fields), and the backward
  is one of the fields of the total.
  `least_pipe` takes the least over the shapes of a pipeline at least m·A where simulated (the work bound), else
  (m − 1)·A + `closed_fill` (more where the slowest rank is above A): a fill >= A for V schedules and ZB-2p,
  >= A·(1 + (p − 1)/v) for the one-chunk and interleaved schedules and the wave (its 2(p − 1)·max(f̄, A − f̄)/v,
  max(f̄, A − f̄) >= A/2), and for ZB-H1 and ZB-H2 p·A − k·W_SHARE·p·b̄, which may be below A; m·A >= m·A', and so
  for the others. For ZB-H1/H2 (k hidden weight gradients),
  (m − 1 + p)·A − kW·p·b̄ = (m − 1 + p)·A' − kW·p·b̄' + (m − 1 + p)·δ − kW·p·δ_b >= (m − 1 + p)·A' − kW·p·b̄' when
  m − 1 + p·(1 − kW) >= 0 (δ_b <= δ).
Rounding: A' and b̄' are summed from the parts' totals (another order than `_average`'s, field by field: sums of
products of at most 28 non-negative terms, so within a few dozen 2⁻⁵³ of each other relatively, against the 1e-6 kept
off the floor); the ZB-H difference is used only when its first term is at least twice the second (so it is at least
half of the first term and its rounding error is far below that 1e-6, as `family_floor`'s (1 − 1e-9)² is); else the
floor is −∞ (the family's own floor is computed at its first pop)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cost_models.compute.knobs import LayerKnobs, LayerTime
from cost_models.compute.layer import decoder_layer_floor, embedding_time, head_time
from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.registry import pricing
from cost_models.step import mtp_time
from meshcore import Recompute, Schedule
from meshcore.schedules import ScheduleFamily, spec_of
from planner.search.sim_bounds import ReportedBounds
from planner.search.simulate import simulable
from planner.search.space import Candidate

MARGIN = 1e-6  # kept off the floor for rounding (module docstring)


class EarlyFloors:
    """`floor` of a search's families, from the per-layer floors of each (tp, cp, sp, mbs, ep, etp, full
    recomputation or not)."""

    def __init__(self, bounds: ReportedBounds) -> None:
        self.bounds = bounds
        self._layers: dict[tuple[object, ...], tuple[LayerTime, LayerTime, LayerTime, LayerTime | None] | None] = {}
        self._ends: dict[tuple[object, ...], tuple[LayerTime, LayerTime]] = {}
        self._sums: dict[tuple[object, ...], tuple[float, float] | None] = {}
        self._kinds: dict[tuple[object, ...], tuple[float, int]] = {}

    def layers(self, c: Candidate) -> tuple[LayerTime, LayerTime, LayerTime, LayerTime | None] | None:
        """(dense decoder, embedding, head, MoE decoder) at most `layer_times` of any recomputation of `c`'s degrees
        (full or not); None with a cost table."""
        full = c.recompute is Recompute.FULL
        key = (c.tp, c.cp, c.sp, c.mbs, c.ep, c.etp, full)
        if key not in self._layers:
            model, job, cluster = self.bounds.model, self.bounds.job, self.bounds.cluster
            knobs = LayerKnobs(c.tp, c.cp, c.sp, c.mbs, Recompute.FULL if full else Recompute.NONE, c.ep, c.etp)
            n_dense = self.bounds.layer_counts[0]  # no dense layer (Qwen3's stack): 0 is below their times
            decoder = decoder_layer_floor(model, job, cluster, knobs) if n_dense or model.mtp_layers else LayerTime()
            moe = decoder_layer_floor(model, job, cluster, knobs, moe=True) if self.bounds.layer_counts[1] else None
            if decoder is None or (self.bounds.layer_counts[1] and moe is None):
                self._layers[key] = None
            else:
                if key[:-1] not in self._ends:  # neither reads the recomputation
                    self._ends[key[:-1]] = (embedding_time(model, job, cluster, knobs),
                                            head_time(model, job, cluster, knobs))
                embedding, head = self._ends[key[:-1]]
                mtp_moe = moe if moe is not None else decoder_layer_floor(model, job, cluster, knobs, moe=True)
                head = head + mtp_time(model, job, cluster, knobs, (decoder, mtp_moe, head))
                self._layers[key] = (decoder, embedding, head, moe)
        return self._layers[key]

    def floor(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]]) -> float:
        """At most `ReportedBounds.family_floor(first, shapes)` (module docstring)."""
        sums = self.sums(first)
        if sums is None:
            return -math.inf
        p = first.pp
        a, b = sums[0] / p, sums[1] / p
        m = self.bounds.job.global_batch // (first.dp * first.mbs)
        plain, hides = self.kinds(p, m, tuple(shapes))
        least = plain * a if plain < math.inf else math.inf
        if hides:  # the most hidden weight gradients give the least
            whole, hidden = (m - 1 + p) * a, hides * W_SHARE * p * b
            if m - 1 + p * (1 - hides * W_SHARE) < 0 or whole < 2 * hidden:
                return -math.inf
            least = min(least, whole - hidden)
        return least * (1 - MARGIN)

    def sums(self, c: Candidate) -> tuple[float, float] | None:
        """p·(A', b̄') of the module docstring (the total and backward of all layers, the embedding and the head on the
        floors of `layers`), once per degrees and full recomputation or not; None with a cost table."""
        key = (c.tp, c.cp, c.sp, c.mbs, c.ep, c.etp, c.recompute is Recompute.FULL)
        if key not in self._sums:
            layers = self.layers(c)
            if layers is None:
                self._sums[key] = None
            else:
                n_dense, n_moe = self.bounds.layer_counts
                parts = [(t, n) for t, n in zip(layers, (n_dense, 1, 1, n_moe), strict=True) if t is not None]
                self._sums[key] = (sum(n * t.total for t, n in parts), sum(n * t.backward for t, n in parts))
        return self._sums[key]

    def kinds(self, p: int, m: int, shapes: tuple[tuple[Schedule, int], ...]) -> tuple[float, int]:
        """(the least multiple of A that the pipelines of the shapes not hiding weight gradients are at least (∞ if
        none): m where simulated and for V schedules and ZB-2p, m + (p − 1)/v for the others; the most weight gradients
        the others hide: 0 if none), once per (pp, micro-batches, shapes)."""
        key = (p, m, shapes)
        if key not in self._kinds:
            plain, hides = math.inf, 0
            for schedule, v in shapes:
                costs, sim = pricing(schedule), simulable(p, v, m)
                if costs.hides and not (sim or costs.laid_out):
                    hides = max(hides, costs.hides)
                elif sim or costs.laid_out or spec_of(schedule).family is ScheduleFamily.V:
                    plain = min(plain, m)
                else:
                    plain = min(plain, m + (p - 1) / v)
            self._kinds[key] = (plain, hides)
        return self._kinds[key]
