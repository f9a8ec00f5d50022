"""A discrete-event pipeline simulator: executes any schedule from per-chunk op durations.

A schedule is, per device, the order in which it runs forward (F), backward (B) and, for zero-bubble
schedules, weight-gradient (W) work of (micro-batch, model chunk) pairs; chunks are mapped to devices
(`placement`). An op starts when its device is free and its inputs exist:
  F(mb, c) after F(mb, c − 1), plus a send/recv when c − 1 ran on another device;
  B(mb, c) after B(mb, c + 1) (plus the hop) and after F(mb, c); the last chunk's B after its own F;
  W(mb, c) after B(mb, c).
W ops that a schedule marks deferrable run when their device would otherwise wait, or when more than
`max_pending_w` are pending (zero-bubble schedules, Qi et al. 2023); a program with `explicit_w` places every
W in its orders instead (ZB-V). Memory: F allocates the chunk's
activations, B frees all of them, or (1 − w_share) when a W follows, and W the rest.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum


class OpKind(str, Enum):
    F = "F"
    B = "B"
    W = "W"


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


def _duration(d: Durations, op: Op) -> float:
    return {OpKind.F: d.forward, OpKind.B: d.backward, OpKind.W: d.weight}[op.kind][op.chunk]


def simulate(program: Program, durations: Durations) -> SimResult:
    """Run the program; raise ValueError if it deadlocks (an order that waits on itself)."""
    chunks = len(program.placement)
    place = program.placement
    done: dict[tuple[str, int, int], float] = {}  # (kind "F" / "B" / "W", micro-batch, chunk) -> end
    clock = [0.0] * program.num_devices
    queues = [deque(order) for order in program.orders]
    pending_w: list[deque[Op]] = [deque() for _ in range(program.num_devices)]
    memory = [0.0] * program.num_devices
    peak = [0.0] * program.num_devices
    busy = [0.0] * program.num_devices
    events: list[Event] = []
    hop = durations.p2p_s

    def ready_at(op: Op, device: int) -> float | None:
        """When `op` could start on `device`: its device free and its inputs there; None while one is missing."""
        mb, c, start = op.microbatch, op.chunk, clock[device]
        if op.kind is OpKind.F:
            if c > 0:
                end = done.get(("F", mb, c - 1))
                if end is None:
                    return None
                start = max(start, end + (hop if place[c - 1] != device else 0.0))
            return start
        if op.kind is OpKind.B:
            end = done.get(("F", mb, c))
            if end is None:
                return None
            start = max(start, end)
            if c < chunks - 1:
                end = done.get(("B", mb, c + 1))
                if end is None:
                    return None
                start = max(start, end + (hop if place[c + 1] != device else 0.0))
            return start
        end = done.get(("B", mb, c))
        return None if end is None else max(start, end)

    def run(device: int, op: Op, start: float) -> None:
        end = start + _duration(durations, op)
        act = durations.activation[op.chunk]
        if op.kind is OpKind.F:
            memory[device] += act
        elif op.kind is OpKind.B:
            memory[device] -= act * ((1 - durations.w_share) if program.split_backward else 1.0)
        else:
            memory[device] -= act * durations.w_share
        peak[device] = max(peak[device], memory[device])
        busy[device] += end - start
        clock[device] = end
        done[(op.kind.value, op.microbatch, op.chunk)] = end
        events.append(Event(device, op, start, end))
        if op.kind is OpKind.B and program.split_backward and not program.explicit_w:
            pending_w[device].append(Op(OpKind.W, op.microbatch, op.chunk))

    def device_key(device: int) -> tuple[float, int, int] | None:
        """The device's earliest possible event, keyed (start, device, rank): its next scheduled op (rank 1) when its
        inputs are there, or a pending weight-gradient op when it would otherwise wait (rank 2) or holds more of
        them than its limit (rank 0, first); None when it can do nothing yet."""
        queue, pending = queues[device], pending_w[device]
        head = ready_at(queue[0], device) if queue else None
        best = None if head is None else (head, device, 1)
        if pending:
            forced = len(pending) > (program.max_pending_w[device] if program.max_pending_w else 0)
            if forced or head is None or head > clock[device]:
                key = (clock[device], device, 0 if forced else 2)
                if best is None or key < best:
                    best = key
        return best

    # The next event is the least key over the devices. A device's key changes only when an op it may wait on has
    # run: its own (its clock, queue and pending W) or a neighbouring chunk's (F(mb, c + 1) waits on F(mb, c) and
    # B(mb, c − 1) on B(mb, c)), so only those devices' keys are looked at again after each event.
    keys = [device_key(d) for d in range(program.num_devices)]
    remaining = sum(len(q) for q in queues)
    while remaining or any(pending_w):
        best = min((k for k in keys if k is not None), default=None)
        if best is None:
            raise ValueError("the schedule deadlocks: some device waits for work that can never be ready")
        start, device, rank = best
        if rank != 1:
            op = pending_w[device].popleft()
        else:
            op = queues[device].popleft()
            remaining -= 1
        run(device, op, start)
        keys[device] = device_key(device)
        for c in (op.chunk - 1, op.chunk + 1):
            if 0 <= c < chunks and place[c] != device:
                keys[place[c]] = device_key(place[c])
    return SimResult(max(clock), tuple(events), tuple(peak), tuple(busy))
