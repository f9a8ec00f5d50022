"""Data-parallel synchronisation and the optimizer step of one pipeline rank.

Gradient reduction over the groups the mesh gives (planner.core.mesh: `Mesh.dense_data`, `Mesh.expert_data`):
  ZeRO-0 all-reduce of grad_bytes·P over the dp·cp ranks (Megatron-LM reduces over DP x CP); ZeRO-1
  reduce-scatter of grad_bytes·P over the shard group + all-gather of 2·P (1·P with fp8 parameter gathers);
  ZeRO-2 the all-gather only (its reduce-scatter runs per micro-batch); with overlap_grad_reduce it hides behind
  the last micro-batch's backward, with overlap_param_gather the gather behind the first forward; ZeRO-3 gathers
  weights before each forward and backward and reduce-scatters gradients after each backward, module by module,
  overlapped with compute per phase. Expert weights do the same over their own expert-data-parallel group.
HSDP (dp = dp_shard x dp_replicate; PyTorch FSDP2's HYBRID_SHARD, torchtitan's data_parallel_replicate_degree x
  data_parallel_shard_degree, Megatron-core's partial distributed optimizer): the shard group is the cp·dp_shard
  ranks of one replica, so the reduce-scatters and gathers above run inside it, weights, gradients and state
  divide by n_s = cp·dp_shard (not dp·cp), and once per step each rank all-reduces its 1/n_s gradient shard over
  the dp_replicate replicas (grad_bytes·P/n_s; FSDP2 skips it on all but the last micro-batch,
  `set_requires_all_reduce`). With dp_replicate 1 that all-reduce is over one rank and costs nothing.
Optimizer: Adam is bandwidth-bound, about 38 bytes per locally updated parameter (read fp32
  grad, master, m, v; write master, m, v, bf16 weight; grad-norm read; buffer reset)."""

from __future__ import annotations

from cost_models import memory as M
from cost_models.comm import Collective, collective
from cost_models.compute import memory_time
from cost_models.knobs import LayerActivations, LayerTime, LayerTimes
from cost_models.offload import (
    HOST_OPTIMIZER_BYTES,
    HOST_WEIGHT_BYTES,
    exposed_copy,
    layer_offload_exposed,
    offloaded_optimizer_step,
)
from cost_models.params import StageParams
from cost_models.prediction import StageLayers
from planner.core import (
    ClusterSpec,
    JobSpec,
    Layout,
    Offload,
    ZeroStage,
)
from planner.core.mesh import DataGroups

OPTIMIZER_BYTES_PER_PARAM = 38.0


ZERO3_UNITS_PER_LAYER = 4  # QKV, output projection, FC1, FC2: one gather / reduce-scatter each


def gather_bytes(job: JobSpec, cluster: ClusterSpec) -> float:
    """Bytes per parameter of ZeRO's weight all-gathers: bf16, or fp8 when the job trains in fp8 with
    `Runtime.fp8_param_gather` on a GPU with fp8 tensor cores."""
    fp8 = job.runtime.fp8_param_gather and cluster.gpu.has_fp8(job.dtype)
    return 1.0 if fp8 else M.WEIGHT_BYTES


def grad_sync_times(params: float, zero: ZeroStage, groups: DataGroups, cluster: ClusterSpec, grad_bytes: float,
                    multi_rail: bool, weight_bytes: float = M.WEIGHT_BYTES) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds per step of `params` parameters, unhidden:
    ZeRO-0 all-reduces the gradients over `groups.full`; ZeRO-1 reduce-scatters them over the shard group and
    all-gathers the updated weights there (`weight_bytes` each: bf16, or fp8 with fp8 parameter gathers); ZeRO-2
    only gathers (its reduce-scatter runs per micro-batch); ZeRO-3 does both per module. From ZeRO-1 on, the
    reduction adds HSDP's all-reduce of the rank's grad_bytes·P/n_s shard over the replicate group (module
    docstring; none without HSDP)."""
    if zero is ZeroStage.NONE:
        return collective(Collective.ALL_REDUCE, params * grad_bytes, groups.full, cluster, multi_rail), 0.0
    shard = groups.shard
    reduce = collective(Collective.ALL_REDUCE, params * grad_bytes / shard.size, groups.replicate, cluster,
                        multi_rail)
    if zero >= ZeroStage.WEIGHTS:
        return reduce, 0.0
    if zero is ZeroStage.OPTIMIZER:
        reduce += collective(Collective.REDUCE_SCATTER, params * grad_bytes, shard, cluster, multi_rail)
    return reduce, collective(Collective.ALL_GATHER, params * weight_bytes, shard, cluster, multi_rail)


def _groups(params: StageParams, layout: Layout) -> tuple[tuple[float, DataGroups], ...]:
    """(parameters, data-parallel groups) of each kind of weight: dense (`Mesh.dense_data`: dp·cp, sharded over
    cp·dp_shard) and routed experts (`Mesh.expert_data`: the folded expert mesh's tp·cp·dp/(etp·ep) ranks)."""
    mesh = layout.mesh
    dense = (params.dense, mesh.dense_data)
    if params.expert:
        return dense, (params.expert, mesh.expert_data)
    return (dense,)


def stage_states(params: StageParams, layout: Layout, job: JobSpec) -> M.StateBytes:
    """Weights, gradients and Adam state a stage keeps on its GPUs, each group sharded over its own data-parallel
    ranks (gradients and state for the job's trainable share); offloaded state lives on the host instead
    (`host_state_bytes`)."""
    grad, share = job.runtime.grad_reduce_bytes, job.trainable_fraction
    parts = [M.state_bytes(p, layout.zero, g.shard.size, grad, share) for p, g in _groups(params, layout)]
    weights = 0.0 if Offload.PARAMS in layout.offload else sum(x.weights for x in parts)
    optimizer = 0.0 if Offload.OPTIMIZER in layout.offload else sum(x.optimizer for x in parts)
    return M.StateBytes(weights, sum(x.gradients for x in parts), optimizer)


def local_params(params: StageParams, layout: Layout) -> float:
    """Parameters whose optimizer state this GPU holds: each group's 1/ranks share from ZeRO-1 on."""
    return sum(p / (g.shard.size if layout.zero >= ZeroStage.OPTIMIZER else 1) for p, g in _groups(params, layout))


def shard_params(params: StageParams, layout: Layout) -> float:
    """Parameters of `params` in this GPU's ZeRO-3 shard (each group over its own data-parallel ranks)."""
    return sum(p / g.shard.size for p, g in _groups(params, layout))


def dp_reduce_exposed(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                      bwd_last: float, fwd_first: float) -> float:
    """Exposed seconds of the per-step gradient reduction of one stage, both groups: ZeRO 0-2's collectives and,
    with HSDP, every stage's all-reduce of the gradient shard over the replicas (`grad_sync_times`)."""
    rt = job.runtime
    reduce = gather = 0.0
    for p, groups in _groups(params, layout):  # only the trained weights change: gather what was updated
        r, g = grad_sync_times(p * job.trainable_fraction, layout.zero, groups, cluster, rt.grad_reduce_bytes,
                               rt.multi_rail, gather_bytes(job, cluster))
        reduce, gather = reduce + r, gather + g
    gpu = cluster.gpu
    exposed_reduce = gpu.exposed(reduce, bwd_last) if rt.overlap_grad_reduce else reduce
    hide_gather = rt.overlap_param_gather and rt.overlap_grad_reduce
    exposed_gather = gpu.exposed(gather, fwd_first) if hide_gather else gather
    to_host = 0.0
    if Offload.OPTIMIZER in layout.offload and Offload.PARAMS not in layout.offload:
        # the reduced gradient shard goes to the host beside the last backward (with the weights offloaded each
        # layer's shard already went in its backward)
        to_host = exposed_copy(local_params(params, layout) * job.trainable_fraction * rt.grad_reduce_bytes,
                               bwd_last, cluster)
    return exposed_reduce + exposed_gather + to_host


def adam_step_time(local_params: float, cluster: ClusterSpec) -> float:
    """Adam over `local_params` parameters updated on one GPU: bandwidth-bound."""
    return memory_time(local_params * OPTIMIZER_BYTES_PER_PARAM, cluster.gpu)


def optimizer_time(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec) -> float:
    """Adam step over the trained parameters this GPU updates (each group's 1/ranks share from ZeRO-1 on): on the
    GPU, or on the host with the optimizer offloaded (cost_models/offload.py)."""
    local = local_params(params, layout) * job.trainable_fraction
    if Offload.OPTIMIZER in layout.offload:
        return offloaded_optimizer_step(local, Offload.PARAMS in layout.offload, cluster)
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
    for p, groups in _groups(params, layout):  # within the shard group (HSDP's replicas all-reduce once per step)
        grad_bytes = p * job.trainable_fraction * job.runtime.grad_reduce_bytes  # frozen weights have none
        shard = groups.shard
        if layout.zero is ZeroStage.GRADIENTS:
            scatter += collective(Collective.REDUCE_SCATTER, grad_bytes, shard, cluster, rails)
            continue
        gather += units * collective(Collective.ALL_GATHER, p * gather_bytes(job, cluster) / units, shard, cluster,
                                     rails)
        scatter += units * collective(Collective.REDUCE_SCATTER, grad_bytes / units, shard, cluster, rails)
    if layout.zero is ZeroStage.GRADIENTS:
        return gpu.exposed(scatter, backward)
    return gpu.exposed(gather, time.forward) + gpu.exposed(gather + scatter, backward)


def host_state_bytes(params: StageParams, layout: Layout, job: JobSpec) -> float:
    """Host bytes per GPU of an offloaded optimizer (fp32 master, moments, gradient of the trained share) and
    offloaded weights."""
    host = 0.0
    if Offload.OPTIMIZER in layout.offload:
        host += local_params(params, layout) * job.trainable_fraction * HOST_OPTIMIZER_BYTES
    if Offload.PARAMS in layout.offload:
        host += shard_params(params, layout) * HOST_WEIGHT_BYTES
    return host


def stage_offload_exposed(times: LayerTimes, acts: LayerActivations, dense: StageParams, moe: StageParams,
                          layers: StageLayers, layout: Layout, cluster: ClusterSpec) -> float:
    """Per micro-batch exposed host copies of a stage's layers (`offload.layer_offload_exposed` of each layer: its
    ZeRO-3 weight shard with parameter offload, its stored activations with activation offload), from one layer
    of each kind (`dense`, `moe`: its parameters on one rank): affine in the stage's layers, as the split search
    needs."""
    weights, stored = Offload.PARAMS in layout.offload, Offload.ACTIVATIONS in layout.offload
    if not (weights or stored):
        return 0.0

    def one(time: LayerTime, params: StageParams, act: float) -> float:
        w = shard_params(params, layout) * M.WEIGHT_BYTES if weights else 0.0
        return layer_offload_exposed(time, w, act if stored else 0.0, cluster)

    total = ((layers.dense - layers.dense_full) * one(times.decoder, dense, acts.dense)
             + layers.dense_full * one(times.decoder_full, dense, acts.full))
    if layers.moe and times.moe is not None and times.moe_full is not None:
        total += ((layers.moe - layers.moe_full) * one(times.moe, moe, acts.moe)
                  + layers.moe_full * one(times.moe_full, moe, acts.full))
    return total
