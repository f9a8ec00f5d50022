"""Pipeline step time for stages of unequal cost, and the bubble, for each schedule.

Per-stage times t_i (forward + backward of one micro-batch, all chunks of the rank), m micro-batches:
- GPipe, 1F1B:     T = Σ_i t_i + (m − 1)·max_i t_i            (Narayanan et al. 2021 section 2.2)
- interleaved, v:  T = (m − 1/v)·max_i t_i + (1/v)·Σ_i t_i
- ZB-H1, ZB-H2:    T = Σ_i t_i − Σ_{i<p−1} h_i + (m − 1)·max_i t_i, h_i what stage i hides
                   (`zero_bubble_hidden`): on uniform stages the closed forms of cost_models.pipeline.schedules, the
                   paper's
                   (p − 1)(F + B_in − W) and (p − 1)·max(F, F + B_in − 2W) where W <= F (Qi et al. 2024 Figure 3)
- ZB-V:            T = m·max_i t_i + the uniform bubble of cost_models.pipeline.schedules.zbv_bubble on the largest
                   per-chunk forward and input-gradient times (the simulator re-prices uneven stages)
- DualPipeV:       T = m·max_i t_i + cost_models.pipeline.schedules.dualpipev_bubble on the largest per-chunk forward
and
                   2b − w (b, w the per-chunk input and weight gradients)
- V-Half, V-Min:   T = m·max_i t_i + cost_models.pipeline.schedules.v_memory_bubble on the largest per-chunk F, B
                   and W (the simulator on the uniform order; it re-prices uneven stages)
- wave, v chunks:  T = m·max_i t_i + cost_models.pipeline.schedules.wave_bubble on the largest per-chunk forward and
                   backward times (the slowest chunk paces every hand-off; the simulator re-prices)
Each reduces to the uniform closed form of cost_models.pipeline.schedules, which the discrete-event simulator
reproduces (tests/test_schedules.py); for uneven stages the simulator stays the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.pipeline.schedules import V_MEMORY, W_SHARE, dualpipev_bubble, v_memory_bubble, wave_bubble, zbv_bubble
from meshcore import Schedule


def pipeline_time(stage_times: Sequence[float], num_microbatches: int, vpp: int, schedule: Schedule,
                  hidden_weight_grad: Sequence[float] = (), forward_times: Sequence[float] = ()) -> float:
    """Time from the first forward to the last backward of one step. ZB-V also needs each stage's forward
    time (`forward_times`) and weight-gradient time (`hidden_weight_grad`), the wave its forward time."""
    if not stage_times:
        return 0.0
    m, worst, total = num_microbatches, max(stage_times), sum(stage_times)
    if schedule is Schedule.ZB_V:
        chunk_f = max(f / 2 for f in forward_times)
        chunk_b = max((t - f - w) / 2 for t, f, w in zip(stage_times, forward_times, hidden_weight_grad, strict=True))
        return m * worst + zbv_bubble(len(stage_times), chunk_f, chunk_b)
    if schedule is Schedule.DUALPIPE_V:
        chunk_f = max(f / 2 for f in forward_times)
        worst_b = max((2 * (t - f - w) - w) / 2 for t, f, w in zip(stage_times, forward_times, hidden_weight_grad,
                                                                   strict=True))
        return m * worst + dualpipev_bubble(len(stage_times), chunk_f, worst_b, 0.0)
    if schedule in V_MEMORY:  # the uniform order's idle time on the slowest chunk's F, B and W
        chunk_f = max(f / 2 for f in forward_times)
        chunk_w = max(w / 2 for w in hidden_weight_grad)
        chunk_b = max((t - f - w) / 2 for t, f, w in zip(stage_times, forward_times, hidden_weight_grad, strict=True))
        return m * worst + v_memory_bubble(schedule, len(stage_times), m, chunk_f, chunk_b, chunk_w)
    if schedule is Schedule.WAVE:
        chunk = max(max(f, t - f) for t, f in zip(stage_times, forward_times, strict=True)) / vpp
        return m * worst + wave_bubble(len(stage_times), chunk, chunk)
    if schedule is Schedule.INTERLEAVED_1F1B and vpp > 1:
        return (m - 1.0 / vpp) * worst + total / vpp
    if schedule in (Schedule.ZB_H1, Schedule.ZB_H2):
        total -= sum(zero_bubble_hidden(schedule, t, f, w) for t, f, w in zip(
            stage_times[:-1], forward_times, hidden_weight_grad, strict=False))
    return total + (m - 1) * worst


ZB_HIDES = {Schedule.ZB_H1: 2, Schedule.ZB_H2: 3}  # `zero_bubble_hidden` is at most this many weight gradients


def zero_bubble_hidden(schedule: Schedule, stage_time: float, forward: float, weight_grad: float) -> float:
    """What a stage but the last of ZB-H1 or ZB-H2 takes off the 1F1B sum: with input gradient b = t − f − w, ZB-H1
    t − max(f, b, f + b − w) and ZB-H2 t − max(f, f + b − 2w) (uniform: 2w when w <= f and w <= b, the papers'
    case; cost_models.pipeline.zero_bubble). At most 2w (ZB-H1) and 3w (ZB-H2)."""
    t, f, w = stage_time, forward, weight_grad
    b = t - f - w
    if schedule is Schedule.ZB_H2:
        return t - max(f, f + b - 2 * w)
    return t - max(f, b, f + b - w)


def bubble_fraction(schedule: Schedule, pp: int, num_microbatches: int, vpp: int) -> float:
    """Idle share of an ideal uniform pipeline relative to its busy time: (p − 1)/m for GPipe and 1F1B,
    (p − 1)/(v·m) interleaved, (p − 1)/(3m) for ZB-H1 and ZB-H2 (F = B_in = W = t/3 with B = 2F and W = W_SHARE
    of it), (p − 1)/(6m) for ZB-V, 4(p − 1)/(3·v·m) for the wave."""
    if schedule is Schedule.INTERLEAVED_1F1B:
        return (pp - 1) / (vpp * num_microbatches)
    if schedule in (Schedule.ZB_H1, Schedule.ZB_H2):  # (p − 1)·max(F, F + B_in − kW) / (m·t): F = B_in = W = t/3
        return (pp - 1) / (3 * num_microbatches)
    if schedule is Schedule.ZB_V:  # per-chunk forward f and input gradient (1 − W_SHARE)·2f: both f/2 here
        return zbv_bubble(pp, 0.5, (1 - W_SHARE) * 2 * 0.5) / (3 * num_microbatches)
    if schedule is Schedule.DUALPIPE_V:  # per-chunk forward 1/2, input and weight gradient 1/2 each (F = 1, B = 2)
        return dualpipev_bubble(pp, 0.5, 0.5, 0.5) / (3 * num_microbatches)
    if schedule in V_MEMORY:  # per-chunk forward 1/2, input and weight gradient 1/2 each (F = 1, B = 2)
        return v_memory_bubble(schedule, pp, num_microbatches, 0.5, 0.5, 0.5) / (3 * num_microbatches)
    if schedule is Schedule.WAVE:  # per-chunk forward 1/v and backward 2/v of a stage's F + B = 3
        return wave_bubble(pp, 1 / vpp, 2 / vpp) / (3 * num_microbatches)
    return (pp - 1) / num_microbatches
