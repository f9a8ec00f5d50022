"""The pipeline schedules' registry: what each `Schedule` is, as data (`ScheduleSpec`), in one table (`SCHEDULES`).

A schedule's traits live here: its family (how its ranks hold and run their model chunks, which sets its layout rules
and the form of its search bounds), the least micro-batches it runs, whether the search offers it or only runs it
when pinned, the launchers that run it and its names in torchtitan. How it is priced (its op order, closed forms and
activations in flight) is the table of cost_models.pipeline.registry, keyed by the same members. Every other module
reads these two tables instead of naming schedules; tests/test_schedule_registry.py holds that.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType

from meshcore.enums import Schedule
from meshcore.errors import LayoutError


class ScheduleFamily(Enum):
    """How a schedule's ranks hold and run their model chunks."""

    ONE_CHUNK = "one chunk per rank, the backward whole"  # GPipe, 1F1B
    ORDERED_W = "one chunk per rank, the backward split, every weight gradient placed by the order"  # ZB-H1, ZB-H2
    INTERLEAVED = "several chunks per rank, chunk k on rank k mod pp (Megatron-LM's virtual stages)"
    V = "two chunks per rank placed as a V, the backward split"  # ZB-V, DualPipeV, V-Half, V-Min
    WAVE = "an even number of chunks per rank in waves down and back up the ranks, the backward whole"  # Hanayo


TORCH_ACTIONS = "running the action list of meshplan emit --to torch-actions"
ACTION_RUNTIME = "torch.distributed.pipelining's _PipelineScheduleRuntime (that action list)"


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule's traits. `least_microbatches` (a, b): it runs at least a·pp − b micro-batches when pp > 1;
    `searched`: the search offers it unpinned (else only when `--schedule` names it); `launchers`: who runs it, as a
    plan prints it; `torchtitan`: its pipeline_parallel_schedule name, or None; `torchtitan_cli`: torchtitan 0.3's
    command-line target writes it; `by_actions`: torchtitan runs it from meshplan's action list with the stage
    placement of this named schedule; `pending_w`: weight-gradient ops a stage d of an ORDERED_W order keeps pending
    per stage before it (ZB-H1 d, ZB-H2 2d: cost_models.pipeline.zero_bubble; 0: no rule, its order is laid out per
    (p, m), ZB-2p's, and the search counts them off the order)."""

    schedule: Schedule
    family: ScheduleFamily
    launchers: tuple[str, ...]
    least_microbatches: tuple[int, int] = (0, 0)
    searched: bool = True
    torchtitan: str | None = None
    torchtitan_cli: bool = False
    by_actions: Schedule | None = None
    pending_w: int = 0

    @property
    def name(self) -> str:
        return self.schedule.value

    @property
    def wave_placed(self) -> bool:
        """Chunk k on rank k going down, then back up (`meshcore.wave_rank`), not k mod pp."""
        return self.family in (ScheduleFamily.V, ScheduleFamily.WAVE)

    @property
    def v_shaped(self) -> bool:
        return self.family is ScheduleFamily.V

    @property
    def split_backward(self) -> bool:
        """The backward runs as an input gradient and a weight gradient (W_SHARE of it)."""
        return self.family in (ScheduleFamily.ORDERED_W, ScheduleFamily.V)

    @property
    def one_chunk(self) -> bool:
        """One model chunk per rank (vpp 1)."""
        return self.family in (ScheduleFamily.ONE_CHUNK, ScheduleFamily.ORDERED_W)

    def least(self, pp: int) -> int:
        """The fewest micro-batches it runs on `pp` ranks."""
        a, b = self.least_microbatches
        return a * pp - b if pp > 1 else 0

    def chunks_run(self, vpp: int) -> bool:
        """Whether it runs `vpp` model chunks per rank."""
        if self.one_chunk:
            return vpp == 1
        if self.family is ScheduleFamily.V:
            return vpp == 2
        return vpp > 1 and (self.family is not ScheduleFamily.WAVE or vpp % 2 == 0)

    def runs(self, pp: int, vpp: int, microbatches: int | None) -> bool:
        """What the search asks: it runs `vpp` chunks per rank and `microbatches` (None: not known yet)."""
        m = microbatches
        return self.chunks_run(vpp) and (m is None or (m >= self.least(pp) and (
            self.family is not ScheduleFamily.INTERLEAVED or m % pp == 0)))

    def check(self, pp: int, vpp: int, m: int) -> None:
        """LayoutError naming the rule of this schedule that (pp, vpp, m) breaks."""
        name = self.name
        if self.one_chunk and vpp != 1:
            raise LayoutError(f"the {name} schedule runs one model chunk per rank: it needs vpp 1, got vpp {vpp}")
        if self.family is ScheduleFamily.V and (vpp != 2 or pp == 1):
            raise LayoutError(f"{name} runs two model chunks per rank: it needs vpp 2 and pp > 1, got vpp {vpp}, "
                              f"pp {pp}")
        if self.family is ScheduleFamily.WAVE and (vpp % 2 or pp == 1):
            raise LayoutError(f"the {name} schedule runs waves down and back up the ranks: it needs an even vpp (2 per "
                              f"wave) and pp > 1, got vpp {vpp}, pp {pp}")
        if self.family is ScheduleFamily.INTERLEAVED:
            if vpp == 1:
                raise LayoutError(f"the {name} schedule needs vpp > 1 (several chunks per rank); with vpp 1 use 1f1b")
            if pp == 1:
                raise LayoutError("virtual pipeline stages (vpp > 1) need pp > 1")
            if m % pp:
                raise LayoutError(f"interleaved schedule needs micro-batches {m} divisible by pp {pp}")
        least = self.least(pp)
        if m < least:
            a, b = self.least_microbatches
            raise LayoutError(f"{name} needs at least {least} micro-batches ({a} * pp{f' - {b}' if b else ''}), "
                              f"got {m}")


ONE_STAGE_ACTIONS = "torchtitan (the action list of meshplan emit --to torch-actions, one stage per rank)"
V_ACTIONS = f"torchtitan (ZBVZeroBubble's V placement, {TORCH_ACTIONS})"
_SPECS = (
    ScheduleSpec(Schedule.GPIPE, ScheduleFamily.ONE_CHUNK,
                 launchers=("torchtitan (GPipe)", "DeepSpeed (no)", "Megatron-LM (no)"),
                 searched=False, torchtitan="GPipe", torchtitan_cli=True),
    ScheduleSpec(Schedule.ONE_F_ONE_B, ScheduleFamily.ONE_CHUNK,
                 launchers=("Megatron-LM", "torchtitan (1F1B)", "DeepSpeed", "NeMo"),
                 torchtitan="1F1B", torchtitan_cli=True),
    ScheduleSpec(Schedule.INTERLEAVED_1F1B, ScheduleFamily.INTERLEAVED,
                 launchers=("Megatron-LM (with VPP)", "torchtitan (Interleaved1F1B)", "NeMo"),
                 torchtitan="Interleaved1F1B", torchtitan_cli=True),
    ScheduleSpec(Schedule.ZB_H1, ScheduleFamily.ORDERED_W, launchers=(ONE_STAGE_ACTIONS, ACTION_RUNTIME),
                 by_actions=Schedule.ONE_F_ONE_B, pending_w=1),
    ScheduleSpec(Schedule.ZB_H2, ScheduleFamily.ORDERED_W, launchers=(ONE_STAGE_ACTIONS, ACTION_RUNTIME),
                 least_microbatches=(2, 1), by_actions=Schedule.ONE_F_ONE_B, pending_w=2),
    ScheduleSpec(Schedule.ZB_2P, ScheduleFamily.ORDERED_W, launchers=(ONE_STAGE_ACTIONS, ACTION_RUNTIME),
                 searched=False, by_actions=Schedule.ONE_F_ONE_B),
    ScheduleSpec(Schedule.ZB_V, ScheduleFamily.V, launchers=("torchtitan (ZBVZeroBubble)",),
                 least_microbatches=(2, 1), torchtitan="ZBVZeroBubble", torchtitan_cli=True),
    ScheduleSpec(Schedule.DUALPIPE_V, ScheduleFamily.V,
                 launchers=("torchtitan (DualPipeV)", "torch.distributed.pipelining's ScheduleDualPipeV"),
                 least_microbatches=(2, 0), torchtitan="DualPipeV"),
    ScheduleSpec(Schedule.V_HALF, ScheduleFamily.V, launchers=(V_ACTIONS, ACTION_RUNTIME), searched=False,
                 by_actions=Schedule.ZB_V),
    ScheduleSpec(Schedule.V_MIN, ScheduleFamily.V, launchers=(V_ACTIONS, ACTION_RUNTIME), searched=False,
                 by_actions=Schedule.ZB_V),
    ScheduleSpec(Schedule.WAVE, ScheduleFamily.WAVE,
                 launchers=(f"torchtitan with one wave (ZBVZeroBubble's V placement, {TORCH_ACTIONS})", ACTION_RUNTIME),
                 least_microbatches=(2, 0), by_actions=Schedule.ZB_V),
)
SCHEDULES = MappingProxyType({s.schedule: s for s in _SPECS})  # every Schedule's traits, in the enum's order

DEFAULT_SCHEDULE = Schedule.ONE_F_ONE_B  # one chunk per rank, what every runtime runs and what pp 1 means
# chunk k on rank k going down, then back up, ...
WAVE_PLACED = frozenset(s for s, spec in SCHEDULES.items() if spec.wave_placed)
# two chunks per rank as a V, the backward split (ZB-V, DualPipeV and the controllable-memory V schedules)
V_SHAPED = frozenset(s for s, spec in SCHEDULES.items() if spec.v_shaped)
SPLIT_BACKWARD = frozenset(s for s, spec in SCHEDULES.items() if spec.split_backward)


def spec_of(schedule: Schedule) -> ScheduleSpec:
    """The traits of `schedule`."""
    return SCHEDULES[schedule]


def default_schedule(vpp: int) -> Schedule:
    """The schedule a layout of `vpp` chunks per rank gets when none is named: 1F1B, or Megatron-LM's interleaved."""
    if vpp == 1:
        return DEFAULT_SCHEDULE
    return next(s for s, spec in SCHEDULES.items() if spec.family is ScheduleFamily.INTERLEAVED)
