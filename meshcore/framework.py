"""The training runtime a plan is made for (Megatron-LM, NeMo, torchtitan, DeepSpeed, or `any`), and what that
runtime can run: its profile, read from hardware_profiles/runtimes/NAME.yaml (planner.inputs.runtimes).

The search space, the layout rules and the emitter of a plan all read the same profile, so that the best plan of
a search for a runtime is one that runtime launches. `any` is the research mode: every layout meshplan can price,
whether or not a launcher runs it (ZB-H1, the wave, KV heads replicated over TP, per-stage recomputation counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.enums import Offload, Schedule, Target
from meshcore.execution import Execution


class Framework(str, Enum):
    """A training runtime (the `--runtime` of the command line)."""

    MEGATRON = "megatron"
    NEMO = "nemo"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"
    ANY = "any"


DEFAULT_FRAMEWORK = Framework.MEGATRON  # the runtime of NVIDIA's published runs, the most common for large jobs


@dataclass(frozen=True)
class Capabilities:
    """What a runtime can run for a decoder-only model, as the search needs it (each field says where it bites).

    schedules: pipeline schedules it runs (1F1B without a pipeline is no schedule and always allowed);
    zero_stages: ZeRO stages (0 plain data parallelism, 1 distributed optimizer, 2/3 FSDP forms);
    pipeline_zero_stages: those it runs beside a pipeline (DeepSpeed's pipeline engine: 0 and 1);
    context_parallel, expert_parallel, expert_tensor_parallel, virtual_stages: whether cp, ep, etp, vpp may exceed 1;
    max_waves: waves of the wave schedule it can place;
    uneven_split: layer splits other than even ones; per_stage_recompute: a count of fully recomputed layers per
    pipeline rank; recompute_modules: Megatron's --recompute-modules sets;
    offload: what may be offloaded, each with the ZeRO stages it runs under;
    offload_checkpoints_only: activation offload moves only the checkpoints of fully recomputed layers (DeepSpeed's
    cpu_checkpointing): it needs recompute full;
    kv_heads_replicated: TP larger than the KV heads by replicating them (no runtime here does: each divides the
    KV heads by TP, megatron-core asserting num_query_groups % tp == 0);
    ddp_beside_others: plain data parallelism beside tp, pp or cp (torchtitan 0.2.2's DDP is one-dimensional);
    sp_with_tp: sequence parallelism whenever TP > 1 (torchtitan's TP plan always shards the norms' sequence);
    hsdp_zero_stages: the ZeRO stages under which it shards over part of the data-parallel ranks and replicates
    across the rest (Layout.dp_replicate > 1; empty: it shards over all of them or none).
    """

    schedules: tuple[Schedule, ...]
    zero_stages: tuple[int, ...]
    pipeline_zero_stages: tuple[int, ...]
    context_parallel: bool
    expert_parallel: bool
    expert_tensor_parallel: bool
    virtual_stages: bool
    max_waves: int
    uneven_split: bool
    per_stage_recompute: bool
    recompute_modules: bool
    offload: tuple[tuple[Offload, tuple[int, ...]], ...]
    kv_heads_replicated: bool
    ddp_beside_others: bool
    sp_with_tp: bool
    hsdp_zero_stages: tuple[int, ...]
    offload_checkpoints_only: bool = False

    def offload_stages(self, what: Offload) -> tuple[int, ...]:
        """The ZeRO stages under which `what` may be offloaded (empty: never)."""
        return next((stages for kind, stages in self.offload if kind is what), ())


@dataclass(frozen=True)
class RuntimeProfile:
    """One runtime at one version: who it is, what it runs, which launcher configuration it reads."""

    framework: Framework
    label: str  # "Megatron-LM"
    package: str  # the package whose version is pinned ("megatron-core")
    version: str  # the version meshplan's emitted configs are checked against
    target: Target | None  # the configuration `emit` writes for it; None for `any`
    capabilities: Capabilities
    source: str  # where the capabilities were read
    execution: Execution = Execution()  # how it runs a layout: what the cost model prices (meshcore.execution)

    @property
    def title(self) -> str:
        """How plans name it: 'Megatron-LM (megatron-core 0.16.1)'; `any` says it is the research mode."""
        if self.framework is Framework.ANY:
            return "any (research mode: every layout meshplan prices; not every one launches)"
        return f"{self.label} ({self.package} {self.version})"


__all__ = ["DEFAULT_FRAMEWORK", "Capabilities", "Framework", "RuntimeProfile"]
