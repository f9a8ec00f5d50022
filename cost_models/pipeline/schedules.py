"""Pipeline schedules: the op order of each (for the simulator), closed-form step times for uniform
stages, activation memory in flight, and which launchers run them.

Uniform stages, p devices, m micro-batches, per device and micro-batch forward F, backward B (input and
weight gradient together; for zero-bubble schedules B = B_in + W):
  GPipe                T = (m + p − 1)(F + B)                      in flight: m micro-batches
  1F1B                 T = (m + p − 1)(F + B)                      in flight: p − d (Narayanan et al. 2021)
  interleaved, v       T = (m + (p − 1)/v)(F + B)                  in flight: p + (p − 1)/v micro-batches (d = 0)
  ZB-H1                T = m(F + B) + (p − 1)·max(F, B_in, F + B_in − W)        in flight: p − d, plus the
                       weight-gradient share of d more (m >= p; Qi et al. 2024 Figure 3: (p − 1)(F + B_in − W))
  ZB-H2                T = m(F + B) + (p − 1)·max(F, F + B_in − 2W)             in flight: 2(p − d) − 1, plus the
                       weight-gradient share of 2d more (m >= 2p − 1; each stage's own span has the paper's
                       bubble (p − 1)(F + B_in − 2W), zero when F = B_in = W: cost_models.pipeline.zero_bubble)
  ZB-V (2 chunks)      T = m(F + B) + (p − 1)·max(f, b) + (p − 2)·max(f − b, 0)     in flight: p on every rank
                       with f = F/2 and b = B_in/2 the per-chunk forward and input-gradient times, for m >= 2p − 1
                       and f <= 2b (found exactly by the simulator on this order; beyond it the simulator rules)
  V-Half, V-Min        T = m(F + B) + the idle time of the simulator on the order (`v_memory_bubble`): about
                       (p − 1)(F + B)/2 and 2/3 of that when F = B_in = W; in flight (p + 2)//2 and (p + 4)//3
                       micro-batches where W frees the activations (the paper's count), off the order here
  wave, v = 2W chunks  T = m(F + B) + 2(p − 1)·max(F, B)/v                  in flight: Σ over the rank's chunks
                       exact for m >= v·p, an upper bound from 2p          c of min(v·p − c, m), over v
Interleaved needs m % p == 0. ZB-H1 and ZB-H2 (Qi et al. 2024) split backward into input gradient B_in and
weight gradient W = W_SHARE·B and fix every op in the order the paper's Figure 3 draws
(cost_models.pipeline.zero_bubble); the
activations in flight of every order that fixes its W passes are counted off the order itself (`order_peaks`), which
is what the simulator's peaks are.
ZB-V (Qi et al. 2024, section 6) places two chunks per rank as a V (chunk k on rank k, then rank 2p − 1 − k:
the first rank holds the embedding and the loss) and fixes every F, B and W in the order
torch.distributed.pipelining's ScheduleZBVZeroBubble runs (torchtitan "ZBVZeroBubble"): 2(p − d) − 1
forwards of the down chunk, d pairs of up/down forwards, p − d up-chunk F/B/W triples, then F-B-W on
either chunk in turn, and a cool-down that drains the input gradients before the weight gradients.
V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024) place their two chunks
as ZB-V does and order the ops as the paper builds them: a building block repeated, squeezed at both ends within its
peak memory, W passes in the free slots (cost_models.pipeline.controllable_memory).
The wave (Hanayo, Liu et al. SC'23) places 2W chunks per rank in W waves, each down the ranks and back up
(`meshcore.wave_rank`): a micro-batch turns at either end without a send, and embedding and loss share rank
0. Hanayo's own runtime order is not reproduced here (its paper's figures are not to hand); this order is
meshplan's: every rank runs its chunks' F and B (backward not split) in the order a 1F1B pipeline of one
chunk per device over all v·p chunks reaches them in unit time slots (`wave_slot`; ties: backward first, then
the later chunk). Its bubble 2(p − 1)·B/v is the interleaved one, (p − 1)(F + B)/v, when B = F and larger when
B > F; it makes fewer sends than interleaving and every rank holds about W·p + 1/2 stages of activations.
"""

from __future__ import annotations

from functools import lru_cache

from cost_models.pipeline.controllable_memory import VMemory, v_memory_order
from cost_models.pipeline.dualpipe import dualpipev_order
from cost_models.pipeline.simulator import Durations, Op, OpKind, Program, makespan
from cost_models.pipeline.zero_bubble import zb_h1_order, zb_h2_order, zbv_order
from meshcore import WAVE_PLACED, Schedule, wave_chunks, wave_rank

W_SHARE = 0.5  # weight-gradient share of backward time (dW and dX GEMMs have equal FLOPs)

LAUNCHERS: dict[Schedule, tuple[str, ...]] = {
    Schedule.GPIPE: ("torchtitan (GPipe)", "DeepSpeed (no)", "Megatron-LM (no)"),
    Schedule.ONE_F_ONE_B: ("Megatron-LM", "torchtitan (1F1B)", "DeepSpeed", "NeMo"),
    Schedule.INTERLEAVED_1F1B: ("Megatron-LM (with VPP)", "torchtitan (Interleaved1F1B)", "NeMo"),
    Schedule.ZB_H1: ("torchtitan (the action list of meshplan emit --to torch-actions, one stage per rank)",
                     "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"),
    Schedule.ZB_H2: ("torchtitan (the action list of meshplan emit --to torch-actions, one stage per rank)",
                     "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"),
    Schedule.ZB_V: ("torchtitan (ZBVZeroBubble)",),
    Schedule.DUALPIPE_V: ("torchtitan (DualPipeV)", "torch.distributed.pipelining's ScheduleDualPipeV"),
    Schedule.V_HALF: ("torchtitan (ZBVZeroBubble's V placement, running the action list of meshplan emit --to "
                      "torch-actions)", "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"),
    Schedule.V_MIN: ("torchtitan (ZBVZeroBubble's V placement, running the action list of meshplan emit --to "
                     "torch-actions)", "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"),
    Schedule.WAVE: ("torchtitan with one wave (ZBVZeroBubble's V placement, running the action list of meshplan emit "
                    "--to torch-actions)",
                    "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"),
}
SPLIT_BACKWARD = frozenset({Schedule.ZB_H1, Schedule.ZB_H2, Schedule.ZB_V, Schedule.DUALPIPE_V, Schedule.V_HALF,
                            Schedule.V_MIN})
ORDERED_W = frozenset({Schedule.ZB_H1, Schedule.ZB_H2})  # one chunk per rank, every W placed by the order
V_MEMORY = {Schedule.V_HALF: VMemory.HALF, Schedule.V_MIN: VMemory.MIN}  # cost_models.pipeline.controllable_memory
# activations in flight counted off the order (`order_peaks`)
PEAKS_OF_ORDER = ORDERED_W | {Schedule.DUALPIPE_V, Schedule.V_HALF, Schedule.V_MIN}


def placement(pp: int, vpp: int, schedule: Schedule = Schedule.INTERLEAVED_1F1B) -> tuple[int, ...]:
    """Device of each model chunk, in model order: chunk k on device k mod pp, or sweeps down and back up for
    ZB-V (two) and the wave (vpp)."""
    if schedule in WAVE_PLACED:
        return tuple(wave_rank(k, pp) for k in range(pp * (vpp if schedule is Schedule.WAVE else 2)))
    return tuple(k % pp for k in range(pp * vpp))


def closed_form(schedule: Schedule, pp: int, m: int, vpp: int, forward: float, backward: float) -> float:
    """Step time of the pipeline for uniform stages (per-device F and B per micro-batch, all chunks)."""
    f, b = forward, backward
    b_in = (1 - W_SHARE) * b
    if schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B):
        return (m + pp - 1) * (f + b)
    if schedule is Schedule.INTERLEAVED_1F1B:
        return (m + (pp - 1) / vpp) * (f + b)
    if schedule is Schedule.ZB_V:
        return m * (f + b) + zbv_bubble(pp, f / 2, b_in / 2)
    if schedule is Schedule.DUALPIPE_V:
        return m * (f + b) + dualpipev_bubble(pp, f / 2, b_in / 2, (b - b_in) / 2)
    if schedule is Schedule.WAVE:
        return m * (f + b) + wave_bubble(pp, f / vpp, b / vpp)
    if schedule in V_MEMORY:
        return m * (f + b) + v_memory_bubble(schedule, pp, m, f / 2, b_in / 2, (b - b_in) / 2)
    w = b - b_in
    if schedule is Schedule.ZB_H2:
        return m * (f + b) + (pp - 1) * max(f, f + b_in - 2 * w)
    return m * (f + b) + (pp - 1) * max(f, b_in, f + b_in - w)  # ZB-H1


def zbv_bubble(pp: int, chunk_forward: float, chunk_input_grad: float) -> float:
    """Idle time ZB-V adds to m(F + B) on uniform stages (per-chunk times; valid while forward <= 2 x input
    gradient, which backward >= forward always gives)."""
    f, b = chunk_forward, chunk_input_grad
    return (pp - 1) * max(f, b) + (pp - 2) * max(f - b, 0.0)


def dualpipev_bubble(pp: int, chunk_forward: float, chunk_input_grad: float, chunk_weight_grad: float) -> float:
    """Idle time DualPipeV adds to m(F + B) on uniform stages, from per-chunk times: (p − 1)·max(f, 2b − w). Exact
    (the simulator on this order) where 2b − w <= f, an upper bound on every case tests/test_schedules.py runs; the
    simulator prices any other."""
    return (pp - 1) * max(chunk_forward, 2 * chunk_input_grad - chunk_weight_grad)


def v_memory_bubble(schedule: Schedule, pp: int, m: int, chunk_forward: float, chunk_input_grad: float,
                    chunk_weight_grad: float) -> float:
    """Idle time V-Half or V-Min adds to m(F + B) on uniform stages, from per-chunk times: the simulator on the order
    (its warm-up and cool-down are squeezed greedily, no closed form; about (p − 1)(F + B)/2 for V-Half and 2/3 of it
    for V-Min when F = B_in = W, the paper's)."""
    prog = program(schedule, pp, m, 2)
    n = len(prog.placement)
    durations = Durations((chunk_forward,) * n, (chunk_input_grad,) * n, (chunk_weight_grad,) * n, (1.0,) * n)
    return makespan(prog, durations) - m * 2 * (chunk_forward + chunk_input_grad + chunk_weight_grad)


def wave_bubble(pp: int, chunk_forward: float, chunk_backward: float) -> float:
    """Idle time the wave order adds to m(F + B) on uniform stages, from per-chunk times: 2(p − 1)·max(f, b).
    Exact (the simulator on this order) for m >= v·p with b >= f; from 2p micro-batches an upper bound."""
    return 2 * (pp - 1) * max(chunk_forward, chunk_backward)


def wave_slot(op: Op, chunks: int) -> int:
    """Unit time slot at which a 1F1B pipeline of `chunks` devices, one chunk each and every op one slot long,
    starts `op` (Narayanan et al. 2021 with F = B): chunk s's warm-up forwards run at s + i, its later forwards
    at s + 2i, its backwards at 2·chunks − 1 − s + 2i."""
    s, i = op.chunk, op.microbatch
    if op.kind is OpKind.B:
        return 2 * chunks - 1 - s + 2 * i
    return s + i if i < chunks - s else s + 2 * i


def _wave_order(device: int, pp: int, m: int, vpp: int) -> tuple[Op, ...]:
    """The wave's order on `device` (module docstring): its chunks' ops by `wave_slot`, backward first on a tie
    (it frees memory), then the later chunk."""
    ops = [Op(kind, i, c) for c in wave_chunks(device, pp, vpp) for kind in (OpKind.F, OpKind.B) for i in range(m)]
    return tuple(sorted(ops, key=lambda op: (wave_slot(op, pp * vpp), op.kind is OpKind.F, -op.chunk)))


def _one_f_one_b(device: int, pp: int, m: int, warmup: int, fwd: list[Op], bwd: list[Op]) -> tuple[Op, ...]:
    order: list[Op] = fwd[:warmup]
    for i in range(len(fwd) - warmup):
        order += [fwd[warmup + i], bwd[i]]
    return tuple(order + bwd[len(fwd) - warmup:])


def in_flight(schedule: Schedule, device: int, pp: int, m: int, vpp: int) -> float:
    """Micro-batches of this device's activations alive at its peak (in units of the whole stage)."""
    if schedule is Schedule.GPIPE:
        return float(m)
    if schedule is Schedule.ZB_V:  # 2p chunk activations at the peak of every rank
        return float(min(pp, m))
    if schedule is Schedule.WAVE:  # each chunk peaks as its own 1F1B stage would, all at once (the simulator's peaks)
        return sum(min(pp * vpp - c, m) for c in wave_chunks(device, pp, vpp)) / vpp
    if schedule is Schedule.INTERLEAVED_1F1B and vpp > 1:
        return min(2 * (pp - device - 1) + (vpp - 1) * pp + 1, vpp * m) / vpp
    if schedule in PEAKS_OF_ORDER:
        return order_peaks(schedule, pp, m, vpp)[device]
    return float(min(m, pp - device))


@lru_cache(maxsize=256)
def order_peaks(schedule: Schedule, pp: int, m: int, vpp: int = 1) -> tuple[float, ...]:
    """Per device, the most activations its order holds at once, in units of a whole stage: each F adds its chunk's
    share (1/chunks per rank), B frees all of it (the share without W_SHARE when the backward is split) and W the
    rest. The simulator's peaks are these (its memory changes at each op by the same amounts, in the same order)."""
    prog = program(schedule, pp, m, vpp)
    per = len(prog.placement) // pp
    frees = (1.0 - W_SHARE, W_SHARE) if prog.split_backward else (1.0, 0.0)
    peaks = []
    for order in prog.orders:
        held = peak = 0.0
        for op in order:
            freed = 1.0 if op.kind is OpKind.BW else frees[op.kind is OpKind.W]
            held += 1.0 / per if op.kind is OpKind.F else -freed / per
            peak = max(peak, held)
        peaks.append(peak)
    return tuple(peaks)


@lru_cache(maxsize=32)
def program(schedule: Schedule, pp: int, m: int, vpp: int = 1) -> Program:
    """The per-device op orders of `schedule` (cached: a search simulates many layouts of a few shapes)."""
    if schedule is Schedule.ZB_V:
        return Program(pp, placement(pp, 2, schedule), tuple(zbv_order(d, pp, m) for d in range(pp)),
                       split_backward=True, explicit_w=True)
    if schedule is Schedule.DUALPIPE_V:
        return Program(pp, placement(pp, 2, schedule), tuple(dualpipev_order(d, pp, m) for d in range(pp)),
                       split_backward=True, explicit_w=True)
    if schedule in V_MEMORY:
        return Program(pp, placement(pp, 2, schedule),
                       tuple(v_memory_order(V_MEMORY[schedule], d, pp, m) for d in range(pp)), split_backward=True,
                       explicit_w=True)
    if schedule in ORDERED_W:
        build = zb_h1_order if schedule is Schedule.ZB_H1 else zb_h2_order
        return Program(pp, placement(pp, 1), tuple(build(d, pp, m) for d in range(pp)), split_backward=True,
                       explicit_w=True)
    if schedule is Schedule.WAVE:
        return Program(pp, placement(pp, vpp, schedule), tuple(_wave_order(d, pp, m, vpp) for d in range(pp)),
                       split_backward=False)
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
    return Program(pp, place, tuple(orders), False)
