"""How meshplan prices each pipeline schedule: one `SchedulePricing` per `Schedule` in one table (`PRICING`), beside
its traits in meshcore.schedules. cost_models.pipeline.schedules and stages dispatch through it; a new schedule adds
its op-order generator (a module of its own, like zero_bubble.py), its closed forms (forms.py) and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

from cost_models.pipeline import forms
from cost_models.pipeline.controllable_memory import VMemory
from cost_models.pipeline.dualpipe import dualpipev_order
from cost_models.pipeline.orders import gpipe_program, interleaved_program, one_f_one_b_program, placement, wave_program
from cost_models.pipeline.simulator import Op, Program
from cost_models.pipeline.zb_auto import zb_auto_program
from cost_models.pipeline.zero_bubble import zb_h1_order, zb_h2_order, zbv_order
from meshcore import SCHEDULES, Schedule

UniformTime = Callable[[int, int, int, float, float], float]  # (pp, m, vpp, F, B) -> step
UnevenTime = Callable[[Sequence[float], int, int, Sequence[float], Sequence[float]], float]
# (per-stage times, m, vpp, per-stage weight gradients, per-stage forwards) -> step
Fraction = Callable[[int, int, int], float]  # (pp, m, vpp) -> idle share of the busy time
InFlight = Callable[[int, int, int, int], float]  # (device, pp, m, vpp) -> stages of activations at the peak
Builder = Callable[[int, int, int], Program]  # (pp, m, vpp) -> per-device op orders


@dataclass(frozen=True)
class SchedulePricing:
    """A schedule's pricing functions: its op orders (`program`, what the simulator runs), its step time on uniform
    stages (`uniform`) and on stages of unequal cost (`uneven`), its bubble fraction, and its activations in flight
    (`in_flight`; None: counted off its order, cost_models.pipeline.schedules.order_peaks). `hides`: a stage but the
    last hides at most this many weight gradients (ZB-H1 2, ZB-H2 3: forms.zb_h1_hidden); `waits_input_grad`: its
    bubble's first term waits on the chunk's input gradient as on its forward (ZB-V's (p − 1)·max(f, b)), which the
    search's bounds may count; `laid_out`: its order is laid out by a heuristic per (p, m) (ZB-2p), no closed form
    bounds it, and the search's bounds count only each rank's own m micro-batches of work."""

    program: Builder
    uniform: UniformTime
    uneven: UnevenTime
    fraction: Fraction
    in_flight: InFlight | None = None
    hides: int = 0
    waits_input_grad: bool = False
    laid_out: bool = False
    paired_backward: bool = False  # its bubble's second term is 2b − w per chunk (DualPipeV's F&B pairs, forms)


def _one_chunk_orders(build: Callable[[int, int, int], tuple[Op, ...]], pp: int, m: int, vpp: int = 1) -> Program:
    """An order of one chunk per rank that places every W itself (ZB-H1, ZB-H2)."""
    return Program(pp, placement(pp, 1), tuple(build(d, pp, m) for d in range(pp)), split_backward=True,
                   explicit_w=True)


def _v_orders(build: Callable[[int, int, int], tuple[Op, ...]], pp: int, m: int, vpp: int = 2) -> Program:
    """An order of two chunks per rank as a V that places every W itself (ZB-V, DualPipeV)."""
    return Program(pp, placement(pp, 2, True), tuple(build(d, pp, m) for d in range(pp)), split_backward=True,
                   explicit_w=True)


def _v_memory(memory: VMemory) -> SchedulePricing:
    return SchedulePricing(program=lambda pp, m, vpp: forms.v_memory_program(memory, pp, m),
                           uniform=partial(forms.v_memory_time, memory), uneven=partial(forms.v_memory_uneven, memory),
                           fraction=partial(forms.v_memory_fraction, memory))


PRICING = MappingProxyType({
    Schedule.GPIPE: SchedulePricing(gpipe_program, forms.one_f_one_b_time, forms.one_f_one_b_uneven,
                                    forms.one_f_one_b_fraction, forms.gpipe_in_flight),
    Schedule.ONE_F_ONE_B: SchedulePricing(one_f_one_b_program, forms.one_f_one_b_time, forms.one_f_one_b_uneven,
                                          forms.one_f_one_b_fraction, forms.one_f_one_b_in_flight),
    Schedule.INTERLEAVED_1F1B: SchedulePricing(interleaved_program, forms.interleaved_time, forms.interleaved_uneven,
                                               forms.interleaved_fraction, forms.interleaved_in_flight),
    Schedule.ZB_H1: SchedulePricing(partial(_one_chunk_orders, zb_h1_order), forms.zb_h1_time, forms.zb_h1_uneven,
                                    forms.zero_bubble_fraction, forms.zb_h1_in_flight, hides=2),
    Schedule.ZB_H2: SchedulePricing(partial(_one_chunk_orders, zb_h2_order), forms.zb_h2_time, forms.zb_h2_uneven,
                                    forms.zero_bubble_fraction, forms.zb_h2_in_flight, hides=3),
    Schedule.ZB_2P: SchedulePricing(lambda pp, m, vpp: zb_auto_program(forms.ZB_2P_STAGES, pp, m), forms.zb_2p_time,
                                    forms.zb_2p_uneven, forms.zb_2p_fraction, laid_out=True),
    Schedule.ZB_V: SchedulePricing(partial(_v_orders, zbv_order), forms.zbv_time, forms.zbv_uneven, forms.zbv_fraction,
                                   forms.zbv_in_flight, waits_input_grad=True),
    Schedule.DUALPIPE_V: SchedulePricing(partial(_v_orders, dualpipev_order), forms.dualpipev_time,
                                         forms.dualpipev_uneven, forms.dualpipev_fraction, forms.dualpipev_in_flight,
                                         paired_backward=True),
    Schedule.V_HALF: _v_memory(VMemory.HALF),
    Schedule.V_MIN: _v_memory(VMemory.MIN),
    Schedule.WAVE: SchedulePricing(wave_program, forms.wave_time, forms.wave_uneven, forms.wave_fraction,
                                   forms.wave_in_flight),
})
assert set(PRICING) == set(SCHEDULES) == set(Schedule), "every schedule has its traits and its pricing"


def pricing(schedule: Schedule) -> SchedulePricing:
    """How `schedule` is priced."""
    return PRICING[schedule]
