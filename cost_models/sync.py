"""Data-parallel synchronisation and the optimizer step of one pipeline rank.

Gradient reduction over the n = dp·cp ranks (Megatron-LM reduces over DP x CP):
  ZeRO-0 all-reduce of grad_bytes·P; ZeRO-1 reduce-scatter of grad_bytes·P + all-gather of 2·P (1·P with fp8
  parameter gathers); ZeRO-2 the all-gather only (its reduce-scatter runs per micro-batch); with
  overlap_grad_reduce it hides behind the last micro-batch's backward, with overlap_param_gather the gather
  behind the first forward; ZeRO-3 gathers weights before each forward and backward and reduce-scatters
  gradients after each backward, module by module, overlapped with compute per phase. Expert weights do the
  same over their own expert-data-parallel group.
Optimizer: Adam is bandwidth-bound, about 38 bytes per locally updated parameter (read fp32
  grad, master, m, v; write master, m, v, bf16 weight; grad-norm read; buffer reset)."""

from __future__ import annotations

from cost_models import memory as M
from cost_models.comm import Collective, collective_time
from cost_models.compute import memory_time
from cost_models.knobs import LayerTime
from cost_models.params import StageParams
from planner.core import (
    ClusterSpec,
    JobSpec,
    Layout,
    ZeroStage,
)

OPTIMIZER_BYTES_PER_PARAM = 38.0


ZERO3_UNITS_PER_LAYER = 4  # QKV, output projection, FC1, FC2: one gather / reduce-scatter each


def gather_bytes(job: JobSpec, cluster: ClusterSpec) -> float:
    """Bytes per parameter of ZeRO's weight all-gathers: bf16, or fp8 when the job trains in fp8 with
    `Runtime.fp8_param_gather` on a GPU with fp8 tensor cores."""
    fp8 = job.runtime.fp8_param_gather and cluster.gpu.has_fp8(job.dtype)
    return 1.0 if fp8 else M.WEIGHT_BYTES


def grad_sync_times(params: float, zero: ZeroStage, n: int, stride: int, cluster: ClusterSpec, grad_bytes: float,
                    multi_rail: bool, weight_bytes: float = M.WEIGHT_BYTES) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds per step over n data-parallel ranks, unhidden:
    ZeRO-0 all-reduces the gradients; ZeRO-1 reduce-scatters them and all-gathers the updated weights
    (`weight_bytes` each: bf16, or fp8 with fp8 parameter gathers); ZeRO-2 only gathers (its reduce-scatter
    runs per micro-batch); ZeRO-3 does both per module."""
    if zero >= ZeroStage.WEIGHTS:
        return 0.0, 0.0
    reduce = 0.0
    if zero is not ZeroStage.GRADIENTS:
        kind = Collective.ALL_REDUCE if zero is ZeroStage.NONE else Collective.REDUCE_SCATTER
        reduce = collective_time(kind, params * grad_bytes, n, stride, cluster, multi_rail)
    gather = 0.0 if zero is ZeroStage.NONE else collective_time(
        Collective.ALL_GATHER, params * weight_bytes, n, stride, cluster, multi_rail)
    return reduce, gather


def _groups(params: StageParams, layout: Layout) -> tuple[tuple[float, int, int], ...]:
    """(parameters, ranks, stride) of each gradient-reduction group: dense over dp·cp (stride tp), experts
    over tp·cp·dp/(etp·ep) (stride etp·ep on the folded expert mesh)."""
    dense = (params.dense, layout.dp * layout.cp, layout.tp)
    if params.expert:
        return dense, (params.expert, layout.expert_dp, layout.etp * layout.ep)
    return (dense,)


def stage_states(params: StageParams, layout: Layout, grad_bytes: float) -> M.StateBytes:
    """Weights, gradients and Adam state of a stage, each group sharded over its own data-parallel ranks."""
    parts = [M.state_bytes(p, layout.zero, n, grad_bytes) for p, n, _ in _groups(params, layout)]
    return M.StateBytes(sum(x.weights for x in parts), sum(x.gradients for x in parts),
                        sum(x.optimizer for x in parts))


def dp_reduce_exposed(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                      bwd_last: float, fwd_first: float) -> float:
    """Exposed seconds of the per-step gradient reduction (ZeRO 0-2) of one stage, both groups."""
    rt = job.runtime
    reduce = gather = 0.0
    for p, n, stride in _groups(params, layout):
        r, g = grad_sync_times(p, layout.zero, n, stride, cluster, rt.grad_reduce_bytes, rt.multi_rail,
                               gather_bytes(job, cluster))
        reduce, gather = reduce + r, gather + g
    gpu = cluster.gpu
    exposed_reduce = gpu.exposed(reduce, bwd_last) if rt.overlap_grad_reduce else reduce
    hide_gather = rt.overlap_param_gather and rt.overlap_grad_reduce
    exposed_gather = gpu.exposed(gather, fwd_first) if hide_gather else gather
    return exposed_reduce + exposed_gather


def adam_step_time(local_params: float, cluster: ClusterSpec) -> float:
    """Adam over `local_params` parameters updated on one GPU: bandwidth-bound."""
    return memory_time(local_params * OPTIMIZER_BYTES_PER_PARAM, cluster.gpu)


def optimizer_time(params: StageParams, layout: Layout, cluster: ClusterSpec) -> float:
    """Adam step over the parameters this GPU updates (each group's 1/ranks share from ZeRO-1 on)."""
    local = sum(p / (n if layout.zero >= ZeroStage.OPTIMIZER else 1) for p, n, _ in _groups(params, layout))
    return adam_step_time(local, cluster)


def sharded_dp_exposed(params: StageParams, n_layers: float, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                       time: LayerTime) -> float:
    """Per micro-batch communication of sharded data parallelism not hidden by compute.

    ZeRO-2 reduce-scatters the gradients after every micro-batch's backward (a sharded gradient
    buffer cannot accumulate unreduced gradients). ZeRO-3 also all-gathers the weights before each
    forward and backward (the recomputed forward reuses the backward's gather), module by module
    (four weight matrices per decoder layer). Expert weights do the same over their own group."""
    if layout.zero < ZeroStage.GRADIENTS:
        return 0.0
    gpu, rails = cluster.gpu, job.runtime.multi_rail
    backward = time.backward + time.recompute
    units = max(1, ZERO3_UNITS_PER_LAYER * n_layers)
    scatter = gather = 0.0
    for p, n, stride in _groups(params, layout):
        grad_bytes = p * job.runtime.grad_reduce_bytes
        if layout.zero is ZeroStage.GRADIENTS:
            scatter += collective_time(Collective.REDUCE_SCATTER, grad_bytes, n, stride, cluster, rails)
            continue
        gather += units * collective_time(Collective.ALL_GATHER, p * gather_bytes(job, cluster) / units, n, stride,
                                          cluster, rails)
        scatter += units * collective_time(Collective.REDUCE_SCATTER, grad_bytes / units, n, stride, cluster, rails)
    if layout.zero is ZeroStage.GRADIENTS:
        return gpu.exposed(scatter, backward)
    return gpu.exposed(gather, time.forward) + gpu.exposed(gather + scatter, backward)
