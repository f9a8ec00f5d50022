"""Each schedule's closed forms: its step time on uniform stages, on stages of unequal cost, its bubble fraction and
the activations in flight of the schedules that are not counted off their order. cost_models.pipeline.registry
lists which schedule uses which.

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
  ZB-2p                T = m(F + B) + the simulator's idle time on the order the paper's heuristic lays out for
                       T_F = T_B_in = T_W (`zb_2p_time`; cost_models.pipeline.zb_auto): (p − 1)·F then, ZB-H2's,
                       from m = p; in flight at most 2p micro-batches (the paper's limit), off the order here
Interleaved needs m % p == 0. ZB-H1 and ZB-H2 (Qi et al. 2024) split backward into input gradient B_in and
weight gradient W = W_SHARE·B and fix every op in the order the paper's Figure 3 draws
(cost_models.pipeline.zero_bubble); their activations in flight, and DualPipeV's, are counted in closed form from
their orders' structure (`split_1f1b_peak`, `dualpipev_in_flight`; tests/test_schedules.py checks them against the
peaks counted off the orders, cost_models.pipeline.schedules.order_peaks, which is what the simulator's peaks are).
ZB-V (Qi et al. 2024, section 6) places two chunks per rank as a V (chunk k on rank k, then rank 2p − 1 − k:
the first rank holds the embedding and the loss) and fixes every F, B and W in the order
torch.distributed.pipelining's ScheduleZBVZeroBubble runs (torchtitan "ZBVZeroBubble").
V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024) place their two chunks
as ZB-V does and order the ops as the paper builds them (cost_models.pipeline.controllable_memory).
The wave's order is meshplan's (cost_models.pipeline.orders). Its bubble 2(p − 1)·B/v is the interleaved one,
(p − 1)(F + B)/v, when B = F and larger when B > F; it makes fewer sends than interleaving and every rank holds
about W·p + 1/2 stages of activations.

Stages of unequal cost, per-stage times t_i (forward + backward of one micro-batch, all chunks of the rank):
- GPipe, 1F1B:     T = Σ_i t_i + (m − 1)·max_i t_i            (Narayanan et al. 2021 section 2.2)
- interleaved, v:  T = (m − 1/v)·max_i t_i + (1/v)·Σ_i t_i
- ZB-H1, ZB-H2:    T = Σ_i t_i − Σ_{i<p−1} h_i + (m − 1)·max_i t_i, h_i what stage i hides (`zb_h1_hidden`,
                   `zb_h2_hidden`): on uniform stages the closed forms above, the paper's (p − 1)(F + B_in − W) and
                   (p − 1)·max(F, F + B_in − 2W) where W <= F (Qi et al. 2024 Figure 3)
- ZB-V:            T = m·max_i t_i + `zbv_bubble` on the largest per-chunk forward and input-gradient times
- DualPipeV:       T = m·max_i t_i + `dualpipev_bubble` on the largest per-chunk forward and 2b − w
- V-Half, V-Min:   T = m·max_i t_i + `v_memory_bubble` on the largest per-chunk F, B and W
- wave, v chunks:  T = m·max_i t_i + `wave_bubble` on the largest per-chunk forward and backward times
- ZB-2p:           T = m·max_i t_i + `zb_auto_bubble` on the largest F, B_in and W
Each reduces to the uniform closed form, which the discrete-event simulator reproduces (tests/test_schedules.py); for
uneven stages the simulator stays the reference (it re-prices the V and wave schedules' uneven stages).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from cost_models.pipeline.controllable_memory import VMemory, v_memory_order
from cost_models.pipeline.orders import placement
from cost_models.pipeline.simulator import Durations, Program, makespan
from cost_models.pipeline.zb_auto import zb_auto_bubble
from meshcore import wave_chunks

W_SHARE = 0.5  # weight-gradient share of backward time (dW and dX GEMMs have equal FLOPs)


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


@lru_cache(maxsize=32)
def v_memory_program(memory: VMemory, pp: int, m: int) -> Program:
    """V-Half's or V-Min's per-device orders (cost_models.pipeline.controllable_memory) on the V placement."""
    return Program(pp, placement(pp, 2, True), tuple(v_memory_order(memory, d, pp, m) for d in range(pp)),
                   split_backward=True, explicit_w=True)


def v_memory_bubble(memory: VMemory, pp: int, m: int, chunk_forward: float, chunk_input_grad: float,
                    chunk_weight_grad: float) -> float:
    """Idle time V-Half or V-Min adds to m(F + B) on uniform stages, from per-chunk times: the simulator on the order
    (its warm-up and cool-down are squeezed greedily, no closed form; about (p − 1)(F + B)/2 for V-Half and 2/3 of it
    for V-Min when F = B_in = W, the paper's)."""
    prog = v_memory_program(memory, pp, m)
    n = len(prog.placement)
    durations = Durations((chunk_forward,) * n, (chunk_input_grad,) * n, (chunk_weight_grad,) * n, (1.0,) * n)
    return makespan(prog, durations) - m * 2 * (chunk_forward + chunk_input_grad + chunk_weight_grad)


def wave_bubble(pp: int, chunk_forward: float, chunk_backward: float) -> float:
    """Idle time the wave order adds to m(F + B) on uniform stages, from per-chunk times: 2(p − 1)·max(f, b).
    Exact (the simulator on this order) for m >= v·p with b >= f; from 2p micro-batches an upper bound."""
    return 2 * (pp - 1) * max(chunk_forward, chunk_backward)


# Uniform stages: step time from (pp, m, vpp, F, B)

def one_f_one_b_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    return (m + pp - 1) * (f + b)


def interleaved_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    return (m + (pp - 1) / vpp) * (f + b)


def zb_h1_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    b_in = (1 - W_SHARE) * b
    w = b - b_in
    return m * (f + b) + (pp - 1) * max(f, b_in, f + b_in - w)


def zb_h2_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    b_in = (1 - W_SHARE) * b
    w = b - b_in
    return m * (f + b) + (pp - 1) * max(f, f + b_in - 2 * w)


def zbv_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    return m * (f + b) + zbv_bubble(pp, f / 2, (1 - W_SHARE) * b / 2)


def dualpipev_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    b_in = (1 - W_SHARE) * b
    return m * (f + b) + dualpipev_bubble(pp, f / 2, b_in / 2, (b - b_in) / 2)


def v_memory_time(memory: VMemory, pp: int, m: int, vpp: int, f: float, b: float) -> float:
    b_in = (1 - W_SHARE) * b
    return m * (f + b) + v_memory_bubble(memory, pp, m, f / 2, b_in / 2, (b - b_in) / 2)


def wave_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    return m * (f + b) + wave_bubble(pp, f / vpp, b / vpp)


# Stages of unequal cost: step time from the per-stage times, m, vpp, weight gradients and forwards

def one_f_one_b_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float],
                       forward: Sequence[float]) -> float:
    return sum(times) + (m - 1) * max(times)


def interleaved_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float],
                       forward: Sequence[float]) -> float:
    if vpp == 1:
        return one_f_one_b_uneven(times, m, vpp, weight, forward)
    return (m - 1.0 / vpp) * max(times) + sum(times) / vpp


def zb_h1_hidden(stage_time: float, forward: float, weight_grad: float) -> float:
    """What a stage but the last of ZB-H1 takes off the 1F1B sum: with input gradient b = t − f − w,
    t − max(f, b, f + b − w) (uniform: 2w when w <= f and w <= b, the paper's case; cost_models.pipeline.zero_bubble).
    At most 2w."""
    t, f, w = stage_time, forward, weight_grad
    b = t - f - w
    return t - max(f, b, f + b - w)


def zb_h2_hidden(stage_time: float, forward: float, weight_grad: float) -> float:
    """ZB-H2's `zb_h1_hidden`: t − max(f, f + b − 2w), at most 3w."""
    t, f, w = stage_time, forward, weight_grad
    b = t - f - w
    return t - max(f, f + b - 2 * w)


def zb_h1_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float], forward: Sequence[float]) -> float:
    hidden = sum(zb_h1_hidden(t, f, w) for t, f, w in zip(times[:-1], forward, weight, strict=False))
    return sum(times) - hidden + (m - 1) * max(times)


def zb_h2_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float], forward: Sequence[float]) -> float:
    hidden = sum(zb_h2_hidden(t, f, w) for t, f, w in zip(times[:-1], forward, weight, strict=False))
    return sum(times) - hidden + (m - 1) * max(times)


def zbv_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float], forward: Sequence[float]) -> float:
    chunk_f = max(f / 2 for f in forward)
    chunk_b = max((t - f - w) / 2 for t, f, w in zip(times, forward, weight, strict=True))
    return m * max(times) + zbv_bubble(len(times), chunk_f, chunk_b)


def dualpipev_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float],
                     forward: Sequence[float]) -> float:
    """The uniform bubble (p − 1)·max(f, 2b − w) per chunk with f the slowest chunk's forward and 2b − w the
    largest of any rank's chunks (b = (t − F − W)/2, w = W/2: each rank's own input and weight gradients)."""
    chunk_f = max(f / 2 for f in forward)
    worst = max((t - f - w) - w / 2 for t, f, w in zip(times, forward, weight, strict=True))
    return m * max(times) + (len(times) - 1) * max(chunk_f, worst)


def v_memory_uneven(memory: VMemory, times: Sequence[float], m: int, vpp: int, weight: Sequence[float],
                    forward: Sequence[float]) -> float:
    """The uniform order's idle time on the slowest chunk's F, B and W."""
    chunk_f = max(f / 2 for f in forward)
    chunk_w = max(w / 2 for w in weight)
    chunk_b = max((t - f - w) / 2 for t, f, w in zip(times, forward, weight, strict=True))
    return m * max(times) + v_memory_bubble(memory, len(times), m, chunk_f, chunk_b, chunk_w)


def wave_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float], forward: Sequence[float]) -> float:
    chunk = max(max(f, t - f) for t, f in zip(times, forward, strict=True)) / vpp
    return m * max(times) + wave_bubble(len(times), chunk, chunk)


# Bubble fractions: the idle share of an ideal uniform pipeline relative to its busy time, from (pp, m, vpp)

def one_f_one_b_fraction(pp: int, m: int, vpp: int) -> float:
    return (pp - 1) / m


def interleaved_fraction(pp: int, m: int, vpp: int) -> float:
    return (pp - 1) / (vpp * m)


def zero_bubble_fraction(pp: int, m: int, vpp: int) -> float:
    """ZB-H1 and ZB-H2: (p − 1)·max(F, F + B_in − kW) / (m·t) with F = B_in = W = t/3."""
    return (pp - 1) / (3 * m)


def zbv_fraction(pp: int, m: int, vpp: int) -> float:
    """Per-chunk forward f and input gradient (1 − W_SHARE)·2f: both f/2 here."""
    return zbv_bubble(pp, 0.5, (1 - W_SHARE) * 2 * 0.5) / (3 * m)


def dualpipev_fraction(pp: int, m: int, vpp: int) -> float:
    """Per-chunk forward 1/2, input and weight gradient 1/2 each (F = 1, B = 2)."""
    return dualpipev_bubble(pp, 0.5, 0.5, 0.5) / (3 * m)


def v_memory_fraction(memory: VMemory, pp: int, m: int, vpp: int) -> float:
    """Per-chunk forward 1/2, input and weight gradient 1/2 each (F = 1, B = 2)."""
    return v_memory_bubble(memory, pp, m, 0.5, 0.5, 0.5) / (3 * m)


def wave_fraction(pp: int, m: int, vpp: int) -> float:
    """Per-chunk forward 1/v and backward 2/v of a stage's F + B = 3."""
    return wave_bubble(pp, 1 / vpp, 2 / vpp) / (3 * m)


# Activations in flight at a device's peak, in units of the whole stage, from (device, pp, m, vpp)

def one_f_one_b_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    return float(min(m, pp - device))


def gpipe_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    return float(m)


def interleaved_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    if vpp == 1:
        return one_f_one_b_in_flight(device, pp, m, vpp)
    return min(2 * (pp - device - 1) + (vpp - 1) * pp + 1, vpp * m) / vpp


def zbv_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    """2p chunk activations at the peak of every rank."""
    return float(min(pp, m))


def split_1f1b_peak(m: int, warmup: int, pending: int, w_before_f: bool) -> float:
    """The most activations `zero_bubble.split_1f1b`'s order holds at once, in stages: each F adds 1, B frees
    1 − s and W s (s = W_SHARE). After its `warmup` forwards it holds w0 = warmup; its iteration b (b = 0 .. m − 1)
    runs F (while f < m), B, then a W once more than `pending` (q) wait (ZB-H1), or B, W, F (`w_before_f`, ZB-H2),
    and W passes only drain after. So its local peaks are w0 and, per iteration, the level right after its F:
    min(m, w0 + b + 1) − (1 − s)·b − s·(b − q)⁺ (F first; W passes done before iteration b: (b − q)⁺), or
    min(m, w0 + b + 1) − (1 − s)·(b + 1) − s·(b + 1 − q)⁺ (F last), which is the level ending that iteration even where
    no F runs. Either is continuous and piecewise linear in b with kinks at q (q − 1) and m − w0 − 1: its largest
    value over b in [0, m − 1] is at one of those or an end."""
    s, done = W_SHARE, int(w_before_f)  # B passes run before the iteration's F: b, or b + 1

    def level(b: int) -> float:
        return min(m, warmup + b + 1) - (1 - s) * (b + done) - s * max(0, b + done - pending)

    marks = {0, m - 1, pending - done, m - warmup - 1}
    return max([float(warmup)] + [level(b) for b in marks if 0 <= b < m])


def zb_h1_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    """ZB-H1's peak on stage d (`split_1f1b_peak` of its `zero_bubble.zb_h1_order`): p − d + s·d for m >= p."""
    return split_1f1b_peak(m, min(pp - 1 - device, m), device, False)


def zb_h2_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    """ZB-H2's peak on stage d (`split_1f1b_peak` of its `zero_bubble.zb_h2_order`): 2p − 1 − d for m >= 2p − 1."""
    return split_1f1b_peak(m, min(2 * (pp - device) - 1, m), 2 * device, True)


def dualpipev_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    """DualPipeV's peak on rank r (`dualpipe.dualpipev_order`; a chunk's forward adds 1/2 stage, its B and W free
    (1 − s)/2 and s/2, a full backward 1/2): its first two steps hold 2(P − r − 1) + 2(r + 1) chunks, P stages; each
    of step 3's B1, W, F1 returns there, each of step 4's F0&B1, F1&B0 (m − 2P + r + 1 of them) reaches P + 1/2 and
    returns, and steps 5 to 8 free more than they add (step 5's B1, F1, B0 reach P + s/2 at most, then less)."""
    return pp + (0.5 if m >= 2 * pp - device else 0.0)


def wave_in_flight(device: int, pp: int, m: int, vpp: int) -> float:
    """Each chunk peaks as its own 1F1B stage would, all at once (the simulator's peaks)."""
    return sum(min(pp * vpp - c, m) for c in wave_chunks(device, pp, vpp)) / vpp


# ZB-2p (Qi et al. 2024 section 3.1, its limit 2p·M_B): the order laid out per (p, m), priced by the simulator

ZB_2P_STAGES = 2  # activations of 2p micro-batches at most (section 5.1)


def zb_2p_time(pp: int, m: int, vpp: int, f: float, b: float) -> float:
    b_in = (1 - W_SHARE) * b
    return m * (f + b) + zb_auto_bubble(ZB_2P_STAGES, pp, m, f, b_in, b - b_in)


def zb_2p_uneven(times: Sequence[float], m: int, vpp: int, weight: Sequence[float], forward: Sequence[float]) -> float:
    """The uniform order's idle time on the slowest stage's F, B_in and W."""
    f, w = max(forward), max(weight)
    b_in = max(t - fw - ww for t, fw, ww in zip(times, forward, weight, strict=True))
    return m * max(times) + zb_auto_bubble(ZB_2P_STAGES, len(times), m, f, b_in, w)


def zb_2p_fraction(pp: int, m: int, vpp: int) -> float:
    """F = B_in = W = 1 (F = 1, B = 2)."""
    return zb_auto_bubble(ZB_2P_STAGES, pp, m, 1.0, 1.0, 1.0) / (3 * m)

