"""Pipeline step time for stages of unequal cost, and the bubble, for each schedule, read from its entry in
cost_models.pipeline.registry (the forms and their sources: cost_models.pipeline.forms).

Per-stage times t_i (forward + backward of one micro-batch, all chunks of the rank), m micro-batches; e.g. GPipe and
1F1B T = Σ_i t_i + (m − 1)·max_i t_i (Narayanan et al. 2021 section 2.2). Each reduces to the uniform closed form of
cost_models.pipeline.schedules, which the discrete-event simulator reproduces (tests/test_schedules.py); for uneven
stages the simulator stays the reference.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.pipeline.registry import pricing
from meshcore import Schedule


def pipeline_time(stage_times: Sequence[float], num_microbatches: int, vpp: int, schedule: Schedule,
                  hidden_weight_grad: Sequence[float] = (), forward_times: Sequence[float] = ()) -> float:
    """Time from the first forward to the last backward of one step. The split-backward schedules also need each
    stage's forward time (`forward_times`) and weight-gradient time (`hidden_weight_grad`), the wave its forward
    time."""
    if not stage_times:
        return 0.0
    return pricing(schedule).uneven(stage_times, num_microbatches, vpp, hidden_weight_grad, forward_times)


def bubble_fraction(schedule: Schedule, pp: int, num_microbatches: int, vpp: int) -> float:
    """Idle share of an ideal uniform pipeline relative to its busy time: (p − 1)/m for GPipe and 1F1B,
    (p − 1)/(v·m) interleaved, (p − 1)/(3m) for ZB-H1 and ZB-H2 (F = B_in = W = t/3 with B = 2F and W = W_SHARE
    of it), (p − 1)/(6m) for ZB-V, 4(p − 1)/(3·v·m) for the wave (cost_models.pipeline.forms)."""
    return pricing(schedule).fraction(pp, num_microbatches, vpp)
