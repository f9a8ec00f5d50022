"""The op orders meshplan builds itself for the schedules without a generator module of their own: GPipe, 1F1B,
Megatron-LM's interleaved 1F1B and the wave (cost_models.pipeline.zero_bubble, dualpipe and controllable_memory
build the others). Where the chunks sit: `placement`.

The wave (Hanayo, Liu et al. SC'23) places 2W chunks per rank in W waves, each down the ranks and back up
(`meshcore.wave_rank`): a micro-batch turns at either end without a send, and embedding and loss share rank
0. Hanayo's own runtime order is not reproduced here (its paper's figures are not to hand); this order is
meshplan's: every rank runs its chunks' F and B (backward not split) in the order a 1F1B pipeline of one
chunk per device over all v·p chunks reaches them in unit time slots (`wave_slot`; ties: backward first, then
the later chunk).
"""

from __future__ import annotations

from cost_models.pipeline.simulator import Op, OpKind, Program
from meshcore import wave_chunks, wave_rank


def placement(pp: int, vpp: int, wave_placed: bool = False) -> tuple[int, ...]:
    """Device of each model chunk, in model order: chunk k on device k mod pp, or sweeps down and back up
    (`wave_placed`: ZB-V's V of two, the wave's vpp)."""
    if wave_placed:
        return tuple(wave_rank(k, pp) for k in range(pp * vpp))
    return tuple(k % pp for k in range(pp * vpp))


def wave_slot(op: Op, chunks: int) -> int:
    """Unit time slot at which a 1F1B pipeline of `chunks` devices, one chunk each and every op one slot long,
    starts `op` (Narayanan et al. 2021 with F = B): chunk s's warm-up forwards run at s + i, its later forwards
    at s + 2i, its backwards at 2·chunks − 1 − s + 2i."""
    s, i = op.chunk, op.microbatch
    if op.kind is OpKind.B:
        return 2 * chunks - 1 - s + 2 * i
    return s + i if i < chunks - s else s + 2 * i


def wave_order(device: int, pp: int, m: int, vpp: int) -> tuple[Op, ...]:
    """The wave's order on `device` (module docstring): its chunks' ops by `wave_slot`, backward first on a tie
    (it frees memory), then the later chunk."""
    ops = [Op(kind, i, c) for c in wave_chunks(device, pp, vpp) for kind in (OpKind.F, OpKind.B) for i in range(m)]
    return tuple(sorted(ops, key=lambda op: (wave_slot(op, pp * vpp), op.kind is OpKind.F, -op.chunk)))


def wave_program(pp: int, m: int, vpp: int) -> Program:
    return Program(pp, placement(pp, vpp, True), tuple(wave_order(d, pp, m, vpp) for d in range(pp)),
                   split_backward=False)


def _one_f_one_b(warmup: int, fwd: list[Op], bwd: list[Op]) -> tuple[Op, ...]:
    order: list[Op] = fwd[:warmup]
    for i in range(len(fwd) - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return tuple(order + bwd[len(fwd) - warmup:])


def gpipe_program(pp: int, m: int, vpp: int = 1) -> Program:
    """Every forward, then every backward, one chunk per device."""
    return Program(pp, placement(pp, 1), tuple(tuple([Op(OpKind.F, i, d) for i in range(m)]
                                                     + [Op(OpKind.B, i, d) for i in range(m)]) for d in range(pp)),
                   False)


def one_f_one_b_program(pp: int, m: int, vpp: int = 1) -> Program:
    """1F1B (Narayanan et al. 2021): pp − d − 1 warm-up forwards on device d, then one forward and one backward."""
    orders = []
    for d in range(pp):
        fwd = [Op(OpKind.F, i, d) for i in range(m)]
        orders.append(_one_f_one_b(min(pp - d - 1, m), fwd, [Op(OpKind.B, i, d) for i in range(m)]))
    return Program(pp, placement(pp, 1), tuple(orders), False)


def interleaved_program(pp: int, m: int, vpp: int) -> Program:
    """Megatron-LM's interleaved 1F1B: groups of pp micro-batches go through the device's chunks in model order
    (forward) and in reverse (backward); (pp − d − 1)·2 + (vpp − 1)·pp warm-up forwards on device d."""
    if vpp == 1:
        return one_f_one_b_program(pp, m)
    place = placement(pp, vpp)
    orders = []
    for d in range(pp):
        mine = [c for c in range(len(place)) if place[c] == d]  # this device's chunks in model order
        group = min(pp, m)
        fwd = [Op(OpKind.F, g * group + i, c) for g in range(m // group) for c in mine for i in range(group)]
        bwd = [Op(OpKind.B, g * group + i, c) for g in range(m // group) for c in reversed(mine)
               for i in range(group)]
        warmup = (pp - d - 1) * 2 + (vpp - 1) * pp
        orders.append(_one_f_one_b(min(warmup, len(fwd)), fwd, bwd))
    return Program(pp, place, tuple(orders), False)
