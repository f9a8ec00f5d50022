"""ZB-1p and ZB-2p: the zero-bubble paper's automatically scheduled single-chunk pipelines (Qi, Wan, Huang, Lin,
"Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, arXiv 2401.10241, section 3.1 "The Heuristic Algorithm";
section 5.1 names the two memory limits: ZB-1p p·M_B, ZB-2p 2p·M_B).

Given p stages, m micro-batches, the pass times T_F, T_B (input gradient), T_W (weight gradient), the send time
T_comm and an activation limit, the heuristic lays the passes out stage by stage on a clock and keeps the order it
finds (section 3.1, in the paper's four steps):

1. Warm-up: the first micro-batch's F runs down the stages; then, from the last stage up, each stage runs as many
   more F as its memory allows before the first micro-batch's B comes back to it: while its clock is before that
   arrival, or (a knob) only those F that end by then, leaving a gap shorter than T_F. A stage always runs more
   F than the stage after it (step 3 of the paper).
2. Steady phase: micro-batch by micro-batch, each stage runs one F (top down) and one B (bottom up). Before each it
   fills the wait for its input with W passes that end in time; a wait shorter than T_W also gets a W when it
   would make this stage's accumulated idle time the largest of all stages (or always, a knob), and a W runs
   whenever the next F would pass the memory limit. Step 3's other knob: a stage two or more F ahead of the next
   one skips its F when running it (with the W it needs for memory) would delay that stage's next F and B.
3. Each stage runs its W passes left at the end.
4. The knobs are searched on a grid (all 8 combinations) and the layout with the shortest longest stage kept.

Memory (the paper's Table 1 and its repository's runtime): an F holds M_B, its B frees M_B − M_W, its W frees M_W;
limits here are in units of M_B, `w_share` = M_W / M_B. Costs (section 5.3): the longest stage's span from its first
F to its last W (the optimizer step is validated afterwards, section 4, so stages do not wait for one another at the
end), the bubble rate (cost − m(T_F + T_B + T_W)) / cost.

The result is per stage a tuple of `Op` (chunk = stage), which the simulator (cost_models.pipeline.simulator) runs
with any times; on the times it was built for the simulator reproduces the heuristic's clock.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache

from cost_models.pipeline.simulator import Durations, Op, OpKind, Program, makespan


@dataclass(frozen=True)
class PassTimes:
    """Per-stage times of one micro-batch's passes and of one send between neighbouring stages (any one unit)."""

    forward: float
    input_grad: float
    weight_grad: float
    comm: float = 0.0

    def of(self, kind: OpKind) -> float:
        return {OpKind.F: self.forward, OpKind.B: self.input_grad, OpKind.W: self.weight_grad}[kind]


@dataclass(frozen=True)
class Knobs:
    """The heuristic's binary hyper-parameters (section 3.1)."""

    short_gap_before_first_b: bool  # warm-up F only when it ends before the first B arrives
    skip_f_when_ahead: bool  # a stage 2+ F ahead of the next may skip an F that would delay the next stage
    fill_every_short_gap: bool  # a wait shorter than T_W always gets a W, not only when it would set the maximum


@dataclass(frozen=True)
class AutoSchedule:
    orders: tuple[tuple[Op, ...], ...]  # per stage
    cost: float  # the longest stage's span
    peak: tuple[float, ...]  # per stage, the most activations held, in M_B
    knobs: Knobs

    def bubble_rate(self, m: int, times: PassTimes) -> float:
        """The paper's bubble rate (section 5.3): (cost − m(T_F + T_B + T_W)) / cost."""
        busy = m * (times.forward + times.input_grad + times.weight_grad)
        return (self.cost - busy) / self.cost


class _Layout:
    """The heuristic's working state: per stage a clock, counts of F, B and W placed, activations held and the idle
    time accumulated since its first op; per pass its end time. Local to one `_lay_out` call."""

    def __init__(self, pp: int, m: int, times: PassTimes, limit: float, w_share: float) -> None:
        self.pp, self.m, self.times, self.limit, self.w_share = pp, m, times, limit, w_share
        self.clock = [0.0] * pp
        self.first = [0.0] * pp
        self.count = {kind: [0] * pp for kind in (OpKind.F, OpKind.B, OpKind.W)}
        self.held = [0.0] * pp
        self.peak = [0.0] * pp
        self.idle = [0.0] * pp
        self.worst_idle = 0.0  # max(self.idle), kept as it grows
        self.end = {kind: [[0.0] * m for _ in range(pp)] for kind in (OpKind.F, OpKind.B, OpKind.W)}
        self.cost = {kind: times.of(kind) for kind in (OpKind.F, OpKind.B, OpKind.W)}
        self.grows = {OpKind.F: 1.0, OpKind.B: w_share - 1.0, OpKind.W: -w_share}
        self.orders: list[list[Op]] = [[] for _ in range(pp)]

    def arrival(self, kind: OpKind, stage: int, mb: int) -> float:
        """When the input of `kind` for `mb` is on `stage` (its own F for the last stage's B; 0 for stage 0's F)."""
        comm = self.times.comm
        if kind is OpKind.F:
            return self.end[OpKind.F][stage - 1][mb] + comm if stage else 0.0
        if kind is OpKind.B:
            if stage == self.pp - 1:
                return self.end[OpKind.F][stage][mb]
            return self.end[OpKind.B][stage + 1][mb] + comm
        return self.end[OpKind.B][stage][mb]

    def put(self, stage: int, kind: OpKind) -> None:
        """Run the next `kind` pass of `stage` as early as its clock and its input allow."""
        mb = self.count[kind][stage]
        start = max(self.clock[stage], self.arrival(kind, stage, mb))
        if self.orders[stage]:
            self.idle[stage] += start - self.clock[stage]
            self.worst_idle = max(self.worst_idle, self.idle[stage])
        else:
            self.first[stage] = start
        self.clock[stage] = self.end[kind][stage][mb] = start + self.cost[kind]
        self.held[stage] += self.grows[kind]
        self.peak[stage] = max(self.peak[stage], self.held[stage])
        self.count[kind][stage] += 1
        self.orders[stage].append(Op(kind, mb, stage))

    def pending_w(self, stage: int) -> bool:
        return self.count[OpKind.W][stage] < self.count[OpKind.B][stage]

    def make_room(self, stage: int) -> None:
        """W passes until one more F fits under the memory limit."""
        while self.held[stage] + 1.0 > self.limit + 1e-9 and self.pending_w(stage):
            self.put(stage, OpKind.W)
        if self.held[stage] + 1.0 > self.limit + 1e-9:
            raise ValueError(f"an activation limit of {self.limit:g} M_B cannot hold this schedule's first F")

    def fill(self, stage: int, ready: float, every_short_gap: bool) -> None:
        """W passes into the wait until `ready` (section 3.1): those that end by then, then one more into a shorter
        wait when taking the wait would make this stage's idle time the largest, or always (`every_short_gap`)."""
        w = self.times.weight_grad
        while self.pending_w(stage) and self.clock[stage] + w <= ready:
            self.put(stage, OpKind.W)
        gap = ready - self.clock[stage]
        if self.pending_w(stage) and gap > 0 and (every_short_gap or self.idle[stage] + gap > self.worst_idle):
            self.put(stage, OpKind.W)

    def span(self, stage: int) -> float:
        return self.clock[stage] - self.first[stage]


def _warm_up(lay: _Layout, knobs: Knobs) -> None:
    """Step 1: micro-batch 0's F on every stage, the extra warm-up F each stage can hold before micro-batch 0's B
    comes back to it, then micro-batch 0's B up the stages."""
    pp, t = lay.pp, lay.times
    for stage in range(pp):
        lay.put(stage, OpKind.F)
    extra = [0] * pp
    back = lay.clock[pp - 1] + t.input_grad  # when micro-batch 0's B leaves the last stage
    for stage in range(pp - 2, -1, -1):
        cursor, arrive = lay.clock[stage], back + t.comm
        while 1 + extra[stage] < lay.m and lay.held[stage] + extra[stage] + 1.0 <= lay.limit + 1e-9:
            late = cursor + t.forward > arrive if knobs.short_gap_before_first_b else cursor >= arrive
            if late:
                break
            cursor += t.forward
            extra[stage] += 1
        back = max(cursor, arrive) + t.input_grad
    for stage in range(1, pp):  # stage i runs more F than stage i + 1 (unless all m are out)
        while extra[stage] > 0 and extra[stage] >= extra[stage - 1] and 1 + extra[stage] < lay.m:
            extra[stage] -= 1
    for stage in range(pp):
        for _ in range(extra[stage]):
            lay.put(stage, OpKind.F)
    for stage in range(pp - 1, -1, -1):
        lay.put(stage, OpKind.B)


def _skips_f(lay: _Layout, stage: int) -> bool:
    """Step 3's knob: `stage` is two or more F ahead of the next and its F (with the W needed to make room) would
    end after the next stage could use it, or the wait it leaves is no larger than the slack to the worst idle."""
    nxt, t, f = stage + 1, lay.times, lay.count[OpKind.F]
    if nxt >= lay.pp or f[stage] < f[nxt] + 2:
        return False
    wanted = lay.clock[nxt] + t.forward + t.input_grad + t.comm
    if lay.clock[stage] >= wanted:
        return True
    room, extra_w = lay.held[stage] + 1.0, 0
    while room > lay.limit + 1e-9 and lay.count[OpKind.W][stage] + extra_w < lay.count[OpKind.B][stage]:
        room -= lay.w_share
        extra_w += 1
    if lay.clock[stage] + t.forward + extra_w * t.weight_grad <= wanted:
        return False
    return wanted - lay.clock[stage] <= lay.worst_idle - lay.idle[stage]


def _steady(lay: _Layout, mb: int, knobs: Knobs) -> None:
    """Step 2 for micro-batch `mb` >= 1: one F per stage top down (a stage runs it only if the next one does), W
    passes for memory and into waits, then micro-batch mb's B bottom up."""
    pp, f = lay.pp, lay.count[OpKind.F]
    wants = [f[s] < lay.m and not (knobs.skip_f_when_ahead and _skips_f(lay, s)) for s in range(pp)]
    for stage in range(pp - 2, -1, -1):
        wants[stage] = wants[stage] and wants[stage + 1]
    for stage in range(pp):
        if not wants[stage]:
            continue
        lay.make_room(stage)
        if stage:
            lay.fill(stage, lay.arrival(OpKind.F, stage, f[stage]), knobs.fill_every_short_gap)
        lay.put(stage, OpKind.F)
    for stage in range(pp - 1, -1, -1):
        if stage < pp - 1:
            lay.fill(stage, lay.arrival(OpKind.B, stage, mb), knobs.fill_every_short_gap)
        if stage == 0 and f[0] == lay.m:
            while lay.pending_w(0):
                lay.put(0, OpKind.W)
        lay.put(stage, OpKind.B)


def _lay_out(pp: int, m: int, times: PassTimes, limit: float, w_share: float, knobs: Knobs) -> AutoSchedule:
    lay = _Layout(pp, m, times, limit, w_share)
    _warm_up(lay, knobs)
    for mb in range(1, m):
        _steady(lay, mb, knobs)
    for stage in range(pp):
        while lay.pending_w(stage):
            lay.put(stage, OpKind.W)
    cost = max(lay.span(stage) for stage in range(pp))
    return AutoSchedule(tuple(tuple(order) for order in lay.orders), cost, tuple(lay.peak), knobs)


def auto_schedule(pp: int, m: int, times: PassTimes, limit: float, w_share: float = 0.5) -> AutoSchedule:
    """The heuristic's best layout over its knobs (2401.10241 section 3.1): `limit` activations of a stage's
    micro-batch (M_B) at most on any stage, W holding `w_share` of them. ZB-1p is limit p, ZB-2p limit 2p."""
    if pp < 1 or m < 1:
        raise ValueError(f"the automatic zero-bubble schedule needs p >= 1 and m >= 1 (got p {pp}, m {m})")
    if limit < 1.0:
        raise ValueError(f"an activation limit of {limit:g} M_B is below one micro-batch: no schedule fits")
    best: AutoSchedule | None = None
    for flags in itertools.product((True, False), repeat=3):
        try:
            found = _lay_out(pp, m, times, limit, w_share, Knobs(*flags))
        except ValueError:
            continue
        if best is None or found.cost < best.cost - 1e-9:
            best = found
    if best is None:
        raise ValueError(f"an activation limit of {limit:g} M_B is too small for p {pp}, m {m}: no schedule fits")
    return best


def zb_auto_order(stage: int, pp: int, m: int, memory_stages: int, times: PassTimes | None = None,
                  w_share: float = 0.5) -> tuple[Op, ...]:
    """`stage`'s order in the automatic schedule with a limit of `memory_stages` × p micro-batches (1: ZB-1p, 2:
    ZB-2p), laid out for `times` (default T_F = T_B = T_W, no send time: the paper's Figure 3 setting)."""
    return auto_schedule(pp, m, times or PassTimes(1.0, 1.0, 1.0), memory_stages * pp, w_share).orders[stage]


@lru_cache(maxsize=64)
def zb_auto_program(memory_stages: int, pp: int, m: int) -> Program:
    """The automatic schedule's per-stage orders with a limit of `memory_stages` × p micro-batches (1: ZB-1p, 2:
    ZB-2p), laid out once per (p, m) for T_F = T_B = T_W and no send time (the paper's Figure 3 setting; the
    search runs the orders with its own times in the simulator, it does not lay them out again for them)."""
    orders = auto_schedule(pp, m, PassTimes(1.0, 1.0, 1.0), memory_stages * pp).orders
    return Program(pp, tuple(range(pp)), orders, split_backward=True, explicit_w=True)


def zb_auto_bubble(memory_stages: int, pp: int, m: int, forward: float, input_grad: float,
                   weight_grad: float) -> float:
    """Idle time the automatic schedule's order adds to m(T_F + T_B + T_W) on uniform stages, the optimizer step
    synchronised (the makespan, as meshplan's runtimes run it): the simulator on `zb_auto_program`. With T_F = T_B
    = T_W ZB-2p's is (p − 1)·T_F, ZB-H2's, each stage's own span having none."""
    prog = zb_auto_program(memory_stages, pp, m)
    durations = Durations((forward,) * pp, (input_grad,) * pp, (weight_grad,) * pp, (1.0,) * pp)
    return makespan(prog, durations) - m * (forward + input_grad + weight_grad)


def trailing_weight_ops(order: tuple[Op, ...]) -> int:
    """How many weight-gradient ops a stage's order runs after its last input gradient (what the search's path bounds
    through that input gradient leave out)."""
    last = max((i for i, op in enumerate(order) if op.kind is OpKind.B), default=-1)
    return sum(1 for op in order[last + 1:] if op.kind is OpKind.W)
