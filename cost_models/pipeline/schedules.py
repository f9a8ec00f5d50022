"""Pipeline schedules, priced: the op order of each (for the simulator), its closed-form step time for uniform
stages and the activation memory it keeps in flight, each read from the schedule's entry in
cost_models.pipeline.registry (the closed forms and their sources: cost_models.pipeline.forms; the orders:
cost_models.pipeline.orders and the generator modules zero_bubble, dualpipe, controllable_memory). Stages of unequal
cost: cost_models.pipeline.stages.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import accumulate

from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.registry import pricing
from cost_models.pipeline.simulator import Program
from meshcore import Schedule


def closed_form(schedule: Schedule, pp: int, m: int, vpp: int, forward: float, backward: float) -> float:
    """Step time of the pipeline for uniform stages (per-device F and B per micro-batch, all chunks)."""
    return pricing(schedule).uniform(pp, m, vpp, forward, backward)


def in_flight(schedule: Schedule, device: int, pp: int, m: int, vpp: int) -> float:
    """Micro-batches of this device's activations alive at its peak (in units of the whole stage)."""
    count = pricing(schedule).in_flight
    if count is None:
        return order_peaks(schedule, pp, m, vpp)[device]
    return count(device, pp, m, vpp)


@lru_cache(maxsize=256)
def order_peaks(schedule: Schedule, pp: int, m: int, vpp: int = 1) -> tuple[float, ...]:
    """Per device, the most activations its order holds at once, in units of a whole stage: each F adds its chunk's
    share (1/chunks per rank), B frees all of it (the share without W_SHARE when the backward is split) and W the
    rest. The simulator's peaks are these (its memory changes at each op by the same amounts, in the same order)."""
    prog = program(schedule, pp, m, vpp)
    per = len(prog.placement) // pp
    frees = (1.0 - W_SHARE, W_SHARE) if prog.split_backward else (1.0, 0.0)
    change = (1.0 / per, -frees[0] / per, -frees[1] / per, -1.0 / per)  # by encoded kind: F, B, W, BW
    return tuple(max(0.0, max(accumulate(change[kind] for kind, _, _ in order), default=0.0))
                 for order in prog.encoded)


@lru_cache(maxsize=32)
def program(schedule: Schedule, pp: int, m: int, vpp: int = 1) -> Program:
    """The per-device op orders of `schedule` (cached: a search simulates many layouts of a few shapes)."""
    return pricing(schedule).program(pp, m, vpp)
