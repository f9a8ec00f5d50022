"""A discrete-event pipeline simulator: executes any schedule from per-chunk op durations.

A schedule is, per device, the order in which it runs forward (F), backward (B) and, for zero-bubble
schedules, weight-gradient (W) work of (micro-batch, model chunk) pairs; chunks are mapped to devices
(`placement`). An op starts when its device is free and its inputs exist:
  F(mb, c) after F(mb, c − 1), plus a send/recv when c − 1 ran on another device;
  B(mb, c) after B(mb, c + 1) (plus the hop) and after F(mb, c); the last chunk's B after its own F;
  W(mb, c) after B(mb, c).
A BW op (DualPipeV's full backwards beside its split ones) is a B and its W in one: the input gradient leaves when
both are done, and it frees all the chunk's activations. W ops that a schedule marks deferrable run when their
device would otherwise wait, or when more than `max_pending_w` are pending (zero-bubble schedules, Qi et al. 2023);
a program with `explicit_w` places every W in its orders instead (ZB-V). Memory: F allocates the chunk's
activations, B frees all of them, or (1 − w_share) when a W follows, and W the rest.
Where the orders fix every op (all schedules but ZB-H1's deferred W) each op's start is determined by its device's
previous op and its inputs alone, so the devices are advanced one at a time (`_sweep`, linear in the ops); deferred
W needs the event loop (`_simulate_deferred`). Both give the same times; a search asks `makespan` only.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cached_property


class OpKind(str, Enum):
    F = "F"
    B = "B"  # the whole backward, or its input gradient where the program splits it
    W = "W"
    BW = "BW"  # a whole backward (input and weight gradient in one op) inside a program that splits the others


@dataclass(frozen=True)
class Op:
    kind: OpKind
    microbatch: int
    chunk: int


@dataclass(frozen=True)
class Program:
    """What to simulate: per-device op orders over chunks placed on devices."""

    num_devices: int
    placement: tuple[int, ...]  # device of each model chunk, in model order
    orders: tuple[tuple[Op, ...], ...]  # per device, F and B ops (and W ops when not deferrable)
    split_backward: bool  # B is input-gradient only; a W per (mb, chunk) follows
    max_pending_w: tuple[int, ...] = ()  # per device, deferrable W's allowed to wait (split_backward only)
    explicit_w: bool = False  # the orders place every W themselves (none is deferred)

    @cached_property
    def encoded(self) -> tuple[tuple[tuple[int, int, int], ...], ...]:
        """Each device's order as (kind: 0 F, 1 B, 2 W; micro-batch; chunk), what the simulator reads."""
        kinds = {OpKind.F: 0, OpKind.B: 1, OpKind.W: 2, OpKind.BW: 3}
        return tuple(tuple((kinds[op.kind], op.microbatch, op.chunk) for op in order) for order in self.orders)


@dataclass(frozen=True)
class Durations:
    forward: tuple[float, ...]  # per chunk
    backward: tuple[float, ...]  # per chunk; the input-gradient part when split
    weight: tuple[float, ...]  # per chunk; 0 when backward is not split
    activation: tuple[float, ...]  # bytes (or any unit) a chunk keeps per micro-batch
    p2p_s: float = 0.0
    w_share: float = 0.5  # share of the activations only the weight gradient needs


@dataclass(frozen=True)
class Event:
    device: int
    op: Op
    start: float
    end: float


@dataclass(frozen=True)
class SimResult:
    makespan: float
    events: tuple[Event, ...]
    peak_activation: tuple[float, ...]  # per device
    busy: tuple[float, ...]  # per device

    @property
    def bubble_fraction(self) -> float:
        """Idle share of the busiest device's time (idle / busy)."""
        busiest = max(self.busy)
        return (self.makespan - busiest) / busiest

    @property
    def stage_spans(self) -> tuple[float, ...]:
        """Per device, the time from its first op's start to its last op's end: the zero-bubble papers' cost of a
        stage (Qi et al. 2024: with the optimizer step validated afterwards, a stage starts its next iteration when
        its own work ends, so the longest span, not the makespan, sets the throughput)."""
        first = [math.inf] * len(self.busy)
        last = [0.0] * len(self.busy)
        for e in self.events:
            first[e.device] = min(first[e.device], e.start)
            last[e.device] = max(last[e.device], e.end)
        return tuple(b - a for a, b in zip(first, last, strict=True))


def simulate(program: Program, durations: Durations) -> SimResult:
    """Run the program; raise ValueError if it deadlocks (an order that waits on itself)."""
    if program.split_backward and not program.explicit_w:
        return _simulate_deferred(program, durations)
    return _sweep(program, durations, record=True)


def makespan(program: Program, durations: Durations) -> float:
    """`simulate(program, durations).makespan` without recording the events (what a search needs)."""
    if program.split_backward and not program.explicit_w:
        return _simulate_deferred(program, durations, record=False).makespan
    return _sweep(program, durations, record=False).makespan


Encoded = tuple[tuple[tuple[int, int, int], ...], ...]  # per device, its ops as (kind, micro-batch, chunk)
Timeline = list[tuple[float, int, int, float, tuple[int, int, int]]]  # (start, device, rank, end, op) per op run
# What both loops start from: placement, hop, orders, chunks, devices, the last chunk, per-kind durations (`_steps`),
# end times of each (micro-batch, chunk)'s F and B (-1: not run), per device its clock and next op, and what F, B, W
# free of a chunk's activations
Setup = tuple[tuple[int, ...], float, Encoded, int, int, int, tuple[tuple[float, ...], ...], list[float], list[float],
              list[float], list[int], tuple[float, float, float]]


def _setup(program: Program, durations: Durations) -> Setup:
    """`Setup` of a program and its durations."""
    place, orders, devices = program.placement, program.encoded, program.num_devices
    chunks, w_share = len(place), durations.w_share
    width = chunks * (1 + max((mb for order in orders for _, mb, _ in order), default=0))
    frees = ((1 - w_share) if program.split_backward else 1.0, w_share, 1.0)
    return (place, durations.p2p_s, orders, chunks, devices, chunks - 1, _steps(durations), [-1.0] * width,
            [-1.0] * width, [0.0] * devices, [0] * devices, frees)


def _result(clock: list[float], record: bool, peak: list[float], busy: list[float], timeline: Timeline) -> SimResult:
    """The makespan alone (`record` False), or with the events in `timeline`'s order, the peaks and busy times."""
    if not record:
        return SimResult(max(clock, default=0.0), (), (), ())
    kinds = (OpKind.F, OpKind.B, OpKind.W, OpKind.BW)
    events = tuple(Event(d, Op(kinds[op[0]], op[1], op[2]), start, end) for start, d, _, end, op in timeline)
    return SimResult(max(clock, default=0.0), events, tuple(peak), tuple(busy))


def _sweep(program: Program, durations: Durations, record: bool) -> SimResult:
    """A program whose orders fix every op, W included: each op starts when its device has run the op before it and
    its inputs are there, whatever the other devices do meanwhile, so the devices are advanced one at a time, each
    as far as its inputs allow, and a device is looked at again when an op it may wait on has run (F(mb, c + 1)
    waits on F(mb, c), B(mb, c − 1) on B(mb, c)). The times are those of the event loop (`_simulate_deferred`), the
    same maxima and sums; the events are returned in its order (start, device)."""
    place, hop, orders, chunks, devices, last, steps, end_f, end_b, clock, at, frees = _setup(program, durations)
    memory, peak, busy = [0.0] * devices, [0.0] * devices, [0.0] * devices
    act = durations.activation
    timeline: Timeline = []
    todo = list(range(devices - 1, -1, -1))
    while todo:
        device = todo.pop()
        order, i, t = orders[device], at[device], clock[device]
        while i < len(order):
            kind, mb, c = op = order[i]
            k = mb * chunks + c
            if kind == 0:
                start = t
                if c:
                    ready = end_f[k - 1]
                    if ready < 0.0:
                        break
                    ready += hop if place[c - 1] != device else 0.0
                    start = ready if ready > start else start
                end = end_f[k] = start + steps[0][c]
                if c < last and place[c + 1] != device:
                    todo.append(place[c + 1])
            elif kind != 2:
                ready = end_f[k]
                if ready < 0.0:
                    break
                start = ready if ready > t else t
                if c < last:
                    ready = end_b[k + 1]
                    if ready < 0.0:
                        break
                    ready += hop if place[c + 1] != device else 0.0
                    start = ready if ready > start else start
                end = end_b[k] = start + steps[kind][c]
                if c and place[c - 1] != device:
                    todo.append(place[c - 1])
            else:
                ready = end_b[k]
                if ready < 0.0:
                    break
                start = ready if ready > t else t
                end = start + steps[2][c]
            if record:
                memory[device] += act[c] if kind == 0 else -act[c] * frees[kind - 1]
                peak[device] = max(peak[device], memory[device])
                busy[device] += end - start
                timeline.append((start, device, i, end, op))
            t = end
            i += 1
        at[device], clock[device] = i, t
    if any(at[d] < len(orders[d]) for d in range(devices)):
        raise ValueError("the schedule deadlocks: some device waits for work that can never be ready")
    timeline.sort(key=lambda e: e[:3])
    return _result(clock, record, peak, busy, timeline)


def _deferred_key(program: Program, setup: Setup, pending: list[deque[tuple[int, int, int]]]
                  ) -> Callable[[int], tuple[float, int, int] | None]:
    """The event loop's key of a device (`_simulate_deferred`), over the loop's own lists (`setup`, `pending`): the
    start of its next scheduled op when its inputs are there (rank 1), or of a pending weight gradient when it would
    otherwise wait (rank 2) or holds more than its limit (rank 0); None when it can run nothing yet."""
    place, hop, orders, chunks, devices, last, _, end_f, end_b, clock, at, _ = setup
    limits = program.max_pending_w or (0,) * devices

    def key(device: int) -> tuple[float, int, int] | None:
        t, order, i = clock[device], orders[device], at[device]
        head: float | None = None
        if i < len(order):
            kind, mb, c = order[i]
            k = mb * chunks + c
            if kind == 0:
                head = t
                if c:
                    ready = end_f[k - 1]
                    if ready < 0.0:
                        head = None
                    else:
                        ready += hop if place[c - 1] != device else 0.0
                        head = ready if ready > t else t
            elif kind == 2:  # a weight-gradient op the order places itself
                ready = end_b[k]
                head = None if ready < 0.0 else (ready if ready > t else t)
            else:
                ready = end_f[k]
                if ready >= 0.0:
                    head = ready if ready > t else t
                    if c < last:
                        ready = end_b[k + 1]
                        if ready < 0.0:
                            head = None
                        else:
                            ready += hop if place[c + 1] != device else 0.0
                            head = ready if ready > head else head
        waiting = pending[device]
        if waiting:
            forced = len(waiting) > limits[device]
            if forced or head is None or head > t:
                own = (t, device, 0 if forced else 2)
                if head is None or own < (head, device, 1):
                    return own
        return None if head is None else (head, device, 1)

    return key


def _simulate_deferred(program: Program, durations: Durations, record: bool = True) -> SimResult:
    """The event loop, for programs whose weight-gradient ops wait on their device until it would otherwise idle
    (zero-bubble schedules without explicit W): what a device runs next depends on when its inputs arrive.

    The next event is the least key over the devices, (start, device, rank) (`_deferred_key`). A device's key changes
    only when an op it may wait on has run: its own (its clock, queue and pending W) or a neighbouring chunk's
    (F(mb, c + 1) waits on F(mb, c) and B(mb, c − 1) on B(mb, c)), so only those devices' keys are looked at again
    after each event."""
    setup = _setup(program, durations)
    place, _, orders, chunks, devices, last, steps, end_f, end_b, clock, at, frees = setup
    pending: list[deque[tuple[int, int, int]]] = [deque() for _ in range(devices)]
    key = _deferred_key(program, setup, pending)
    memory, peak, busy = [0.0] * devices, [0.0] * devices, [0.0] * devices
    act = durations.activation
    defer = program.split_backward and not program.explicit_w
    timeline: Timeline = []
    keys = [key(d) for d in range(devices)]
    remaining = sum(len(order) for order in orders)
    while remaining or any(pending):
        best = min((k for k in keys if k is not None), default=None)
        if best is None:
            raise ValueError("the schedule deadlocks: some device waits for work that can never be ready")
        start, device, rank = best
        if rank != 1:
            op = pending[device].popleft()
        else:
            op = orders[device][at[device]]
            at[device] += 1
            remaining -= 1
        kind, mb, c = op
        end = start + steps[kind][c]
        if kind == 0:
            end_f[mb * chunks + c] = end
        elif kind != 2:
            end_b[mb * chunks + c] = end
            if defer and kind == 1:
                pending[device].append((2, mb, c))
        if record:
            memory[device] += act[c] if kind == 0 else -act[c] * frees[kind - 1]
            peak[device] = max(peak[device], memory[device])
            busy[device] += end - start
            timeline.append((start, device, 0, end, op))
        clock[device] = end
        keys[device] = key(device)
        if c and place[c - 1] != device:
            keys[place[c - 1]] = key(place[c - 1])
        if c < last and place[c + 1] != device:
            keys[place[c + 1]] = key(place[c + 1])
    return _result(clock, record, peak, busy, timeline)


def _steps(d: Durations) -> tuple[tuple[float, ...], ...]:
    """Per op kind (F, B, W, BW), its duration on each chunk."""
    return d.forward, d.backward, d.weight, tuple(b + w for b, w in zip(d.backward, d.weight, strict=True))
