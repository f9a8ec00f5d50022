"""The bottom layer: the frozen specs every other part reads (model, cluster, job, layout and their enums),
the error types and the input bounds. It imports nothing from the rest of meshplan, so the cost model
(`cost_models`) can build on it alone.

The spec types are re-exported here (`from meshcore import Layout, Mesh, ModelSpec`); `errors`, `checks` and
`fileio` are imported as modules of their own.
"""

from meshcore.enums import (
    DEFAULT_RECOMPUTE_MODULES,
    GIB,
    Activation,
    AttentionKernel,
    Dtype,
    LayerKind,
    Norm,
    Offload,
    Recompute,
    RecomputeModule,
    Schedule,
    Target,
    ZeroStage,
    module_names,
    offload_names,
    wave_chunks,
    wave_rank,
    with_implied,
)
from meshcore.hardware import ClusterSpec, CollectiveSpec, EfficiencyCurve, Fabric, GpuSpec, HostSpec, LinkSpec
from meshcore.job import JobSpec, Runtime
from meshcore.layout import Layout, MemoryPolicy, Pipeline, non_default_modules
from meshcore.measured import MeasuredCosts, MeasuredLayer
from meshcore.mesh import DataGroups, Dim, Group, Mesh, Tier
from meshcore.model import MLASpec, ModelSpec, MoESpec, VisionSpec, check_expert_degrees
from meshcore.schedules import (
    DEFAULT_SCHEDULE,
    SCHEDULES,
    SPLIT_BACKWARD,
    V_SHAPED,
    WAVE_PLACED,
    ScheduleFamily,
    ScheduleSpec,
    default_schedule,
    spec_of,
)

__all__ = [
    "DEFAULT_RECOMPUTE_MODULES", "DEFAULT_SCHEDULE", "GIB", "SCHEDULES", "SPLIT_BACKWARD", "V_SHAPED", "WAVE_PLACED",
    "Activation", "AttentionKernel", "ClusterSpec", "CollectiveSpec", "DataGroups", "Dim", "Dtype", "EfficiencyCurve",
    "Fabric", "GpuSpec", "Group", "HostSpec", "JobSpec", "LayerKind", "Layout", "LinkSpec", "MLASpec",
    "MeasuredCosts", "MeasuredLayer", "MemoryPolicy", "Mesh", "MoESpec", "ModelSpec", "Norm", "Offload", "Pipeline",
    "Recompute", "RecomputeModule", "Runtime", "Schedule", "ScheduleFamily", "ScheduleSpec", "Target", "Tier",
    "VisionSpec", "ZeroStage", "check_expert_degrees", "default_schedule", "module_names", "non_default_modules",
    "offload_names", "spec_of", "wave_chunks", "wave_rank", "with_implied",
]
