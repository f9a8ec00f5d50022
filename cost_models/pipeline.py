"""Pipeline schedules: step time from per-stage times, bubble fraction, micro-batches in flight.

Closed forms (Narayanan et al. 2021 section 2.2; Megatron-LM schedules.py warm-up counts):
- 1F1B, p stages, m micro-batches, per-micro-batch stage times t_i (forward + backward):
    T = Σ_i t_i + (m − 1) · max_i t_i         (uniform: (m + p − 1)·t, bubble (p − 1)/m)
- Interleaved 1F1B with v model chunks per stage (t_i summed over the stage's chunks):
    T = (m − 1/v) · max_i t_i + (1/v) · Σ_i t_i   (uniform: (m + (p − 1)/v)·t, bubble (p − 1)/(v·m))
- Activations alive on stage r at its peak: 1F1B min(m, p − r) micro-batches; interleaved
  min(2(p − r − 1) + (v − 1)·p + 1, v·m) model chunks (for r = 0 this is Korthikanti et al. 2022's
  p·(1 + (p − 1)/(p·v)) micro-batches of the whole stage).
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.specs import Schedule


def pipeline_time(stage_times: Sequence[float], num_microbatches: int, vpp: int, schedule: Schedule) -> float:
    """Time from the first forward to the last backward of one step."""
    if not stage_times:
        return 0.0
    m, worst, total = num_microbatches, max(stage_times), sum(stage_times)
    if schedule is Schedule.INTERLEAVED_1F1B and vpp > 1:
        return (m - 1.0 / vpp) * worst + total / vpp
    return total + (m - 1) * worst


def bubble_fraction(pp: int, num_microbatches: int, vpp: int) -> float:
    """Idle share of an ideal uniform pipeline: (p − 1) / (v · m), relative to the busy time."""
    return (pp - 1) / (vpp * num_microbatches)


def chunks_in_flight(pp_rank: int, pp: int, vpp: int, num_microbatches: int) -> int:
    """Model chunks (each 1/vpp of the stage) whose activations are alive on `pp_rank` at its peak."""
    if vpp == 1:
        return min(num_microbatches, pp - pp_rank)
    return min(2 * (pp - pp_rank - 1) + (vpp - 1) * pp + 1, vpp * num_microbatches)
