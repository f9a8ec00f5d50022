"""Pipeline schedules: the op order of each (for the simulator), closed-form step times for uniform
stages, activation memory in flight, and which launchers run them.

Uniform stages, p devices, m micro-batches, per device and micro-batch forward F, backward B (input and
weight gradient together; for zero-bubble schedules B = B_in + W):
  GPipe                T = (m + p − 1)(F + B)                      in flight: m micro-batches
  1F1B                 T = (m + p − 1)(F + B)                      in flight: p − d (Narayanan et al. 2021)
  interleaved, v       T = (m + (p − 1)/v)(F + B)                  in flight: p + (p − 1)/v micro-batches (d = 0)
  ZB-H1                T = m(F + B) + (p − 1)(F + B_in)            in flight: p − d, plus the weight-gradient
                                                                   share of one more (d < p − 1)
Interleaved needs m % p == 0. ZB-H1 (Qi et al. 2023) splits backward into input gradient B_in and
weight gradient W; here a device runs a W whenever it would otherwise wait and keeps at most p − d − 1
pending, so the weight gradients fill the cooldown bubble and memory stays that of 1F1B. The paper's
hand-placed ZB-H1 also trims the warm-up side, to (p − 1)(F + B_in − W); this simpler policy does not
claim that.
"""

from __future__ import annotations

from cost_models.simulator import Op, OpKind, Program
from planner.specs import Schedule

W_SHARE = 0.5  # weight-gradient share of backward time (dW and dX GEMMs have equal FLOPs)

LAUNCHERS: dict[Schedule, tuple[str, ...]] = {
    Schedule.GPIPE: ("torchtitan (GPipe)", "DeepSpeed (no)", "Megatron-LM (no)"),
    Schedule.ONE_F_ONE_B: ("Megatron-LM", "torchtitan (1F1B)", "DeepSpeed", "NeMo"),
    Schedule.INTERLEAVED_1F1B: ("Megatron-LM (with VPP)", "torchtitan (Interleaved1F1B)", "NeMo"),
    Schedule.ZB_H1: ("torchtitan (ZeroBubble schedules of torch.distributed.pipelining)",),
}
SPLIT_BACKWARD = {Schedule.ZB_H1}


def placement(pp: int, vpp: int) -> tuple[int, ...]:
    """Device of each model chunk, in model order (chunk k on device k mod pp)."""
    return tuple(k % pp for k in range(pp * vpp))


def closed_form(schedule: Schedule, pp: int, m: int, vpp: int, forward: float, backward: float) -> float:
    """Step time of the pipeline for uniform stages (per-device F and B per micro-batch, all chunks)."""
    f, b = forward, backward
    b_in = (1 - W_SHARE) * b
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        return (m + pp - 1) * (f + b)
    if schedule is Schedule.INTERLEAVED_1F1B:
        return (m + (pp - 1) / vpp) * (f + b)
    return m * (f + b) + (pp - 1) * (f + b_in)  # ZB-H1


def _one_f_one_b(device: int, pp: int, m: int, warmup: int, fwd: list[Op], bwd: list[Op]) -> tuple[Op, ...]:
    order: list[Op] = fwd[:warmup]
    for i in range(len(fwd) - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return tuple(order + bwd[len(fwd) - warmup:])


def in_flight(schedule: Schedule, device: int, pp: int, m: int, vpp: int) -> float:
    """Micro-batches of this device's activations alive at its peak (in units of the whole stage)."""
    if schedule is Schedule.GPIPE:
        return float(m)
    if schedule is Schedule.INTERLEAVED_1F1B and vpp > 1:
        return min(2 * (pp - device - 1) + (vpp - 1) * pp + 1, vpp * m) / vpp
    base = float(min(m, pp - device))
    if schedule is Schedule.ZB_H1 and device < pp - 1 and m > pp - device:
        base += W_SHARE
    return base


def program(schedule: Schedule, pp: int, m: int, vpp: int = 1) -> Program:
    """The per-device op orders of `schedule`."""
    v = vpp if schedule is Schedule.INTERLEAVED_1F1B else 1
    place = placement(pp, v)
    orders = []
    for d in range(pp):
        mine = [c for c in range(len(place)) if place[c] == d]  # this device's chunks in model order
        if schedule is Schedule.GPIPE:
            fwd = [Op(OpKind.F, i, mine[0]) for i in range(m)]
            orders.append(tuple(fwd + [Op(OpKind.B, i, mine[0]) for i in range(m)]))
            continue
        if v == 1:
            fwd = [Op(OpKind.F, i, mine[0]) for i in range(m)]
            bwd = [Op(OpKind.B, i, mine[0]) for i in range(m)]
            orders.append(_one_f_one_b(d, pp, m, min(pp - d - 1, m), fwd, bwd))
            continue
        # groups of pp micro-batches go through the device's chunks in model order (forward) and in
        # reverse (backward), as Megatron-LM's interleaved schedule does
        group = min(pp, m)
        fwd = [Op(OpKind.F, g * group + i, c) for g in range(m // group) for c in mine for i in range(group)]
        bwd = [Op(OpKind.B, g * group + i, c) for g in range(m // group) for c in reversed(mine)
               for i in range(group)]
        warmup = (pp - d - 1) * 2 + (v - 1) * pp
        orders.append(_one_f_one_b(d, pp, m, min(warmup, len(fwd)), fwd, bwd))
    pending = tuple(pp - d - 1 for d in range(pp)) if schedule in SPLIT_BACKWARD else ()
    return Program(pp, place, tuple(orders), schedule in SPLIT_BACKWARD, pending)
