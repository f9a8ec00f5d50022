"""What a search may choose: `SearchSpec`, the pins (a value fixes a dimension), the ranges and the switches of
one search, checked on construction (planner.search.space enumerates the layouts it allows)."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore import Offload, Recompute, RecomputeModule, Schedule, with_implied
from meshcore.checks import MAX_GLOBAL_BATCH, MAX_GPUS, choice, flag, integer, optional_integer
from meshcore.errors import InputError

MIN_TOKENS_PER_CP_RANK = 2048  # below this the per-step attention blocks are launch-bound (not modelled)
MAX_VPP = 16
MAX_TOP_K = 10_000  # alternatives a search keeps


@dataclass(frozen=True)
class SearchSpec:
    """Pins (a value fixes a dimension) and switches of the search; None leaves a dimension free."""

    tp: int | None = None
    pp: int | None = None
    cp: int | None = None
    vpp: int | None = None
    mbs: int | None = None
    zero: int | None = None
    zero_choices: tuple[int, ...] | None = None  # ZeRO stages a launcher supports (None: all)
    schedule: Schedule | None = None
    schedule_choices: tuple[Schedule, ...] | None = None  # schedules a launcher runs (None: all)
    recompute: Recompute | None = None
    sp: bool | None = None
    max_tp: int | None = None
    tp_choices: tuple[int, ...] | None = None  # e.g. the TP degrees a cost table measured
    mbs_choices: tuple[int, ...] | None = None
    max_mbs: int = 8
    no_cp: bool = False
    partial_recompute: bool = True  # per-stage counts of fully recomputed layers
    uneven_split: bool = True  # solve the layer split; False: only layouts whose layers split evenly
    top_k: int = 5
    ep: int | None = None
    etp: int | None = None
    max_ep: int | None = None  # e.g. 1 for a launcher without expert parallelism
    max_waves: int = 2  # waves the wave schedule may run unless vpp is pinned (torchtitan places one)
    recompute_modules: frozenset[RecomputeModule] | None = None  # pin: selective recomputation of these modules
    module_recompute: bool = True  # offer `module_sets` (a launcher without --recompute-modules: False)
    replicate_alone: bool = False  # ZeRO-0 (plain data parallelism) only with no tp, pp or cp beside it
    offload: frozenset[Offload] | None = None  # pin: these in host memory (None: nothing, unless offload_auto)
    offload_auto: bool = False  # search every offload choice (`OFFLOAD_SETS`) the ZeRO stage allows
    # What the runtime runs (planner.search.runtime_space.for_runtime sets these from its profile):
    kv_replication: bool = True  # TP may exceed the KV heads by replicating them (False: tp must divide them)
    pipeline_zero_choices: tuple[int, ...] | None = None  # ZeRO stages allowed beside a pipeline (None: all)
    offload_zero: tuple[tuple[Offload, tuple[int, ...]], ...] | None = None  # per offloaded state, its ZeRO stages
    checkpoints_only: bool = False  # activations are offloaded only as full recomputation's checkpoints (DeepSpeed)
    hsdp_zero_choices: tuple[int, ...] = ()  # ZeRO stages it may shard over part of the data-parallel ranks (HSDP)
    dp_replicate: int | None = None  # pin: HSDP's replicate factor (1: shard over every data-parallel rank)

    def __post_init__(self) -> None:
        """Types and ranges of every field (InputError naming it); enum values given as strings become members."""
        for name in ("tp", "pp", "cp", "vpp", "ep", "etp", "max_tp", "max_ep", "dp_replicate"):
            optional_integer(getattr(self, name), name, 1, MAX_GPUS)
        optional_integer(self.mbs, "mbs", 1, MAX_GLOBAL_BATCH)
        optional_integer(self.zero, "zero", 0, 3)
        integer(self.max_mbs, "max_mbs", 1, MAX_GLOBAL_BATCH)
        integer(self.top_k, "top_k", 1, MAX_TOP_K)
        integer(self.max_waves, "max_waves", 1, MAX_VPP // 2)
        for name in ("no_cp", "partial_recompute", "uneven_split", "module_recompute", "replicate_alone",
                     "offload_auto", "checkpoints_only"):
            flag(getattr(self, name), name)
        if self.offload is not None:
            offloaded = frozenset(choice(Offload, o, "offload entry") for o in _members(self.offload, "offload", ""))
            object.__setattr__(self, "offload", with_implied(offloaded))
            if self.offload_auto:
                raise InputError("offload pins what is offloaded and offload_auto searches it: give one of them")
            needs = 3 if Offload.PARAMS in offloaded else 1 if Offload.OPTIMIZER in offloaded else 0
            if self.zero is not None and self.zero < needs:
                why = "3 (each GPU streams its weight shard)" if needs == 3 else "1-3 (a shard to update)"
                raise InputError(f"offloading {', '.join(o.value for o in Offload if o in offloaded)} needs ZeRO "
                                 f"{why}, got --zero {self.zero}")
        if self.sp is not None:
            flag(self.sp, "sp")
        flag(self.kv_replication, "kv_replication")
        for name, low, high in (("tp_choices", 1, MAX_GPUS), ("mbs_choices", 1, MAX_GLOBAL_BATCH),
                                ("zero_choices", 0, 3), ("pipeline_zero_choices", 0, 3)):
            if getattr(self, name) is not None:
                values = _members(getattr(self, name), name, f"integers in [{low}, {high}]", non_empty=True)
                object.__setattr__(self, name, tuple(integer(v, f"{name} entry", low, high) for v in values))
        hsdp = _members(self.hsdp_zero_choices, "hsdp_zero_choices", "integers in [1, 3]")
        object.__setattr__(self, "hsdp_zero_choices", tuple(integer(v, "hsdp_zero_choices entry", 1, 3) for v in hsdp))
        if self.dp_replicate not in (None, 1) and self.zero == 0:
            raise InputError(f"dp_replicate {self.dp_replicate} replicates a ZeRO/FSDP shard (HSDP), and ZeRO-0 shards "
                             "nothing: pin --zero 1-3 or leave dp_replicate free")
        if self.schedule is not None:
            object.__setattr__(self, "schedule", choice(Schedule, self.schedule, "schedule"))
        if self.recompute is not None:
            object.__setattr__(self, "recompute", choice(Recompute, self.recompute, "recompute"))
        if self.schedule_choices is not None:
            schedules = _members(self.schedule_choices, "schedule_choices", "", non_empty=True)
            object.__setattr__(self, "schedule_choices", tuple(choice(Schedule, s, "schedule_choices entry")
                                                               for s in schedules))
        if self.recompute_modules is not None:
            object.__setattr__(self, "recompute_modules", frozenset(
                choice(RecomputeModule, m, "recompute_modules entry")
                for m in _members(self.recompute_modules, "recompute_modules", "")))


_MEMBER_KINDS = {"offload": Offload, "schedule_choices": Schedule, "recompute_modules": RecomputeModule}


def _members(values: object, name: str, what: str, non_empty: bool = False) -> tuple[object, ...]:
    """The entries of a SearchSpec field that holds several values (a tuple, list or set; not a string, a number or
    None), or an InputError naming the field and what its entries may be (`what`, or the values of its enum)."""
    kind = _MEMBER_KINDS.get(name)
    allowed = what or f"{kind.__name__} values ({', '.join(str(m.value) for m in kind)})"  # type: ignore[union-attr]
    if not isinstance(values, tuple | list | frozenset | set) or (non_empty and not values):
        raise InputError(f"{name} must be a {'non-empty ' if non_empty else ''}tuple or set of {allowed}, "
                         f"got {values!r}")
    return tuple(values)
