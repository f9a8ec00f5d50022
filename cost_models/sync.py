"""Data-parallel synchronisation and the optimizer step of one pipeline rank.

Gradient reduction over the groups the mesh gives (meshcore.mesh: `Mesh.dense_data`, `Mesh.expert_data`):
  ZeRO-0 all-reduce of grad_bytes·P over the dp·cp ranks (Megatron-LM reduces over DP x CP); ZeRO-1
  reduce-scatter of grad_bytes·P over the shard group + all-gather of 2·P (1·P with fp8 parameter gathers);
  ZeRO-2 the all-gather only (its reduce-scatter runs per micro-batch); with overlap_grad_reduce it hides behind
  the last micro-batch's backward, with overlap_param_gather the gather behind the first forward, and under the
  interleaved schedule chunk by chunk across the pipeline's drain and warm-up (`staggered_exposed`); ZeRO-3 gathers
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

import math
from dataclasses import replace

from cost_models.comm.collectives import Collective, collective
from cost_models.compute.kernels import memory_time
from cost_models.compute.knobs import LayerActivations, LayerTime, LayerTimes
from cost_models.memory import footprint as M
from cost_models.memory.offload import (
    HOST_GRADIENT_BYTES,
    HOST_OPTIMIZER_BYTES,
    HOST_WEIGHT_BYTES,
    NVME_STATE_BYTES,
    HostCopies,
    exposed_copy,
    layer_offload_parts,
    offloaded_optimizer_step,
    optimizer_beside_backward,
)
from cost_models.memory.params import StageParams
from cost_models.prediction import StageLayers
from meshcore import (
    ClusterSpec,
    GpuSpec,
    JobSpec,
    Layout,
    Offload,
    ScheduleFamily,
    ZeroStage,
    spec_of,
)
from meshcore.execution import FsdpForm
from meshcore.mesh import DataGroups

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


def weight_groups(params: StageParams, layout: Layout) -> tuple[tuple[float, DataGroups], ...]:
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
    (`host_state_bytes`). FSDP2 shards the weights at rest under ZeRO-2 too (torchtitan's reshard_after_forward
    "never" keeps them gathered only between a forward and its backward: cost_models.memory.gathered)."""
    grad, share, ex = job.runtime.grad_reduce_bytes, job.trainable_fraction, job.runtime.priced_execution
    zero = ZeroStage.WEIGHTS if per_block(job) and layout.zero is ZeroStage.GRADIENTS else layout.zero
    parts = [M.state_bytes(p, zero, g.shard.size, grad, share, ex.sharded_weight_bytes, ex.optimizer_bytes)
             for p, g in weight_groups(params, layout)]
    weights = 0.0 if Offload.PARAMS in layout.offload else sum(x.weights for x in parts)
    optimizer = 0.0 if Offload.OPTIMIZER in layout.offload else sum(x.optimizer for x in parts)
    # offloaded gradients leave bucket by bucket during the backward: the buckets are working memory
    # (offload.offload_working_bytes)
    gradients = 0.0 if Offload.GRADIENTS in layout.offload else sum(x.gradients for x in parts)
    return M.StateBytes(weights, gradients, optimizer)


def local_params(params: StageParams, layout: Layout) -> float:
    """Parameters whose optimizer state this GPU holds: each group's 1/ranks share from ZeRO-1 on."""
    sharded = layout.zero >= ZeroStage.OPTIMIZER
    return sum(p / (g.shard.size if sharded else 1) for p, g in weight_groups(params, layout))


def shard_params(params: StageParams, layout: Layout) -> float:
    """Parameters of `params` in this GPU's ZeRO-3 shard (each group over its own data-parallel ranks)."""
    return sum(p / g.shard.size for p, g in weight_groups(params, layout))


def staggered_exposed(comm: float, chunks: float, own: float, gap: float, gpu: GpuSpec) -> float:
    """Exposed seconds of `comm` seconds of collectives cut in `chunks` equal pieces (one per model chunk) on one
    communication stream, where piece k (k = 0 .. chunks − 1, in the order they are issued) may run `k · gap` seconds
    before it is needed and, bucket by bucket, beside its own chunk's pass (`own` seconds):

        late = max(0, comm/chunks − own, comm − (chunks − 1)·gap − own),   exposed = late + κ·(comm − late)

    (κ = 1 − overlap_efficiency: `GpuSpec.exposed` of `comm` beside a window of comm − late). A stream that never
    idles ends piece k at (k + 1)·comm/chunks, so piece k is (k + 1)·comm/chunks − k·gap − own late, greatest at the
    first or the last piece (linear in k); idling only makes pieces earlier. One chunk is `GpuSpec.exposed(comm,
    own)`. chunks = inf is the limit of ever finer chunks whose gaps add up to `gap`: late = max(0, comm − gap)."""
    if comm <= 0.0:
        return 0.0
    if math.isinf(chunks):
        late = max(0.0, comm - gap)
    else:
        late = max(0.0, comm / chunks - own, comm - (chunks - 1) * gap - own)
    return gpu.exposed(comm, comm - late)


def dp_reduce_exposed(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                      backward: float, forward: float, chunks: float | None = None,
                      traffic: tuple[float, float] | None = None) -> float:
    """Exposed seconds of the per-step gradient reduction of one stage, both groups: ZeRO 0-2's collectives and,
    with HSDP, every stage's all-reduce of the gradient shard over the replicas (`grad_sync_times`). `backward` and
    `forward`: the stage's passes of one micro-batch (all its chunks, v = vpp of them).

    Without interleaving the reduction hides behind the last micro-batch's backward and the weight gather behind the
    first forward. Megatron-core's interleaved schedule (megatron/core/pipeline_parallel/schedules.py,
    forward_backward_pipelining_with_interleaving, with the distributed optimizer's overlap) does both chunk by chunk
    (`staggered_exposed`, n = min(pp, m) micro-batches per group):
      gradients  with overlap_grad_reduce, `grad_sync_func` launches a chunk's reduce-scatter (all-reduce without the
                 distributed optimizer) after its last micro-batch's backward, not bucket by bucket during it (grad
                 sync stays disabled in the backward itself; the launch waits for the pipeline rank's offset, so every
                 stage launches with the first), and the drain runs the chunks' last backwards in reverse order, a
                 group of n backwards of one chunk apart: gap n·b/v, own 0 (the last chunk's piece is exposed);
      weights    with overlap_param_gather, `param_sync_func` launches chunks 0 and 1's all-gathers at the start and
                 chunk c + 1's when chunk c starts its first forward; the warm-up runs the chunks' first forwards a
                 group of n forwards of one chunk apart: gap n·f/v, own f/v.
    The drain and warm-up bubbles' idle time would hide more; it is not counted. `chunks` replaces v (math.inf: the
    limit, gaps adding up to n·b and n·f: a floor over every vpp, what the search's bounds take)."""
    rt, gpu = job.runtime, cluster.gpu
    v = float(layout.vpp) if chunks is None else chunks
    finite = not math.isinf(v)
    if kept_gathered(layout, job):
        return kept_gathered_sync(params, layout, job, cluster, forward / v if finite else forward)
    reduce, gather = grad_traffic(params, layout, job, cluster) if traffic is None else traffic
    if spec_of(layout.schedule).family is not ScheduleFamily.INTERLEAVED and chunks is None:
        v = 1.0
    n = min(layout.pp, layout.num_microbatches(job)) if v > 1 else 0
    own_b, own_f = (backward / v, forward / v) if finite else (0.0, 0.0)
    gap_b, gap_f = (n * own_b, n * own_f) if finite else (n * backward, n * forward)
    # one chunk (1F1B) overlaps its reduction bucket by bucket with the last backward (grad sync enabled in it on the
    # first stage, the last to finish); interleaved chunks launch theirs after their last backward (own 0)
    own_r = own_b if v == 1 else 0.0
    exposed_reduce = staggered_exposed(reduce, v, own_r, gap_b, gpu) if rt.overlap_grad_reduce else reduce
    hide_gather = rt.overlap_param_gather and rt.overlap_grad_reduce
    exposed_gather = staggered_exposed(gather, v, own_f, gap_f, gpu) if hide_gather else gather
    to_host = 0.0
    if Offload.OPTIMIZER in layout.offload and Offload.GRADIENTS not in layout.offload:
        # the reduced gradient shard goes to the host beside the last backward (with the gradients offloaded each
        # layer's went in every backward: stage_offload_exposed)
        to_host = exposed_copy(local_params(params, layout) * job.trainable_fraction * rt.grad_reduce_bytes,
                               backward / v if finite else backward, cluster)
    return exposed_reduce + exposed_gather + to_host


def grad_traffic(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec) -> tuple[float, float]:
    """(reduction, weight gather) seconds per step of one stage, both groups (`grad_sync_times`): what
    `dp_reduce_exposed` hides (its `traffic`, where a caller has it). They read the parameters, the mesh and the ZeRO
    stage, not the passes, the schedule or the micro-batches."""
    rt = job.runtime
    reduce = gather = 0.0
    for p, groups in weight_groups(params, layout):  # only the trained weights change: gather what was updated
        r, g = grad_sync_times(p * job.trainable_fraction, layout.zero, groups, cluster, rt.grad_reduce_bytes,
                               rt.multi_rail, gather_bytes(job, cluster))
        reduce, gather = reduce + r, gather + g
    return reduce, gather


def per_block(job: JobSpec) -> bool:
    """The runtime shards with FSDP2, one transformer block at a time (Execution.fsdp)."""
    return job.runtime.priced_execution.fsdp is FsdpForm.PER_BLOCK


def kept_gathered(layout: Layout, job: JobSpec) -> bool:
    """ZeRO-2 or -3 under a pipeline in a runtime that keeps weights gathered across micro-batches (Execution
    .reshard_under_pp false: torchtitan's apply_fsdp sets reshard_after_forward False with PP, as its "never" does
    anyway, and torch's pipelining skips gradient sync on every micro-batch but the last)."""
    return (layout.zero >= ZeroStage.GRADIENTS and layout.pp > 1
            and not job.runtime.priced_execution.reshard_under_pp)


def gathered_alike(layout: Layout, job: JobSpec) -> bool:
    """Whether ZeRO-2 and ZeRO-3 of this layout price alike, to the bit: FSDP2 per block (`stage_states` shards
    ZeRO-2's weights at rest as ZeRO-3's) keeping every weight gathered under the pipeline (`kept_gathered`: the
    gathered form, `dp_reduce_exposed` and `sharded_dp_exposed` take that path at either stage, before anything
    reads the stage itself); `grad_accumulation_time` and `local_params` read only zero >= 2 and zero >= 1. Of what
    differs, `grad_traffic` (ZeRO-2's weight gather), nothing priced reads it there: `dp_reduce_exposed` returns
    `kept_gathered_sync` first. The search prices one of the two (planner.search.pricing.price) and tries one's group
    floor (planner.search.group_floor)."""
    return zero_alike(job) and kept_gathered(layout, job)


def zero_alike(job: JobSpec) -> bool:
    """Whether the runtime prices ZeRO-2 and ZeRO-3 alike wherever they sit under a pipeline (`gathered_alike`, of
    every layout with pp > 1 and ZeRO-2 or -3): FSDP2 per block, not resharding under PP."""
    return per_block(job) and not job.runtime.priced_execution.reshard_under_pp


def kept_gathered_sync(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                       fwd_first: float) -> float:
    """Exposed seconds per step of ZeRO-3 when a stage keeps its weights gathered (`kept_gathered`): one all-gather
    of its weights (fp8 with FP8 all-gathers), block by block ahead of the first micro-batch's forward, which hides
    it as far as it is long, and one reduce-scatter of its gradients in the reduce dtype after the last micro-batch's
    backward, when torch's pipelining runs every block's post-backward at once: nothing of the stage is left to hide
    it. With HSDP the shard's all-reduce over the replicas follows."""
    rt, gpu = job.runtime, cluster.gpu
    gather = reduce = 0.0
    for p, groups in weight_groups(params, layout):
        trained = p * job.trainable_fraction
        gather += collective(Collective.ALL_GATHER, trained * gather_bytes(job, cluster), groups.shard, cluster,
                             rt.multi_rail)
        reduce += collective(Collective.REDUCE_SCATTER, trained * rt.grad_reduce_bytes, groups.shard, cluster,
                             rt.multi_rail)
        reduce += grad_sync_times(trained, ZeroStage.WEIGHTS, groups, cluster, rt.grad_reduce_bytes,
                                  rt.multi_rail)[0]
    return gpu.exposed(gather, fwd_first) + reduce


def adam_step_time(local_params: float, cluster: ClusterSpec) -> float:
    """Adam over `local_params` parameters updated on one GPU: bandwidth-bound."""
    return memory_time(local_params * OPTIMIZER_BYTES_PER_PARAM, cluster.gpu)


def optimizer_time(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                   time: LayerTime | None = None) -> float:
    """Adam step over the trained parameters this GPU updates (each group's 1/ranks share from ZeRO-1 on): on the
    GPU, or on the host with the optimizer offloaded (cost_models/memory/offload.py). A runtime that steps the
    offloaded optimizer group by group beside the backward (Execution.optimizer_group_params) exposes only what the
    stage's last backward, `time`'s backward and recomputation, leaves (`optimizer_beside_backward`); without `time`
    the least it can expose, one group's step (the search's bounds)."""
    local = local_params(params, layout) * job.trainable_fraction
    if Offload.OPTIMIZER not in layout.offload:
        return adam_step_time(local, cluster)
    off = layout.offload
    step = offloaded_optimizer_step(local, Offload.PARAMS in off, cluster, Offload.NVME in off)
    group = job.runtime.priced_execution.optimizer_group_params
    if not group or not local:
        return step
    window = math.inf if time is None else time.backward + time.recompute
    return optimizer_beside_backward(step, window, math.ceil(local / group))


def grad_accumulation_time(params: StageParams, layout: Layout, job: JobSpec, cluster: ClusterSpec) -> float:
    """Seconds per micro-batch of adding its weight gradients into those accumulated so far, where the runtime leaves
    that to autograd (Execution.grad_accumulation_bytes b > 0: DeepSpeed's engine below ZeRO-2 keeps each fp16/bf16
    gradient in the parameter's `.grad`; PyTorch's AccumulateGrad, torch/csrc/autograd/functions/accumulate_grad.h,
    adds every later micro-batch's gradient in place, reading both and writing one, b = 2 + 2 + 2 = 6, and takes the
    first micro-batch's without a copy, the step having set `.grad` to None). Over m micro-batches, at HBM speed:
        t = (m − 1)/m · P · f · b / (HBM · η_mem)    per micro-batch
    P the stage's parameters (all of them on every rank below ZeRO-2), f the trained share (LoRA). ZeRO-2 and -3
    reduce each micro-batch's gradients into their shard (`sharded_dp_exposed`) and gradients offloaded to the host
    accumulate there (cost_models/memory/offload.py): none here. Megatron's gradient_accumulation_fusion writes the
    weight-gradient GEMM's result into the fp32 main_grad with beta = 1 (b = 0)."""
    b = job.runtime.priced_execution.grad_accumulation_bytes
    if b == 0 or layout.zero >= ZeroStage.GRADIENTS or Offload.GRADIENTS in layout.offload:
        return 0.0
    m = layout.num_microbatches(job)
    return (m - 1) / m * memory_time(params.total * job.trainable_fraction * b, cluster.gpu)


def sharded_dp_exposed(params: StageParams, n_layers: float, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                       time: LayerTime) -> float:
    """Per micro-batch communication of sharded data parallelism not hidden by compute.

    ZeRO-2 reduce-scatters the gradients after every micro-batch's backward (a sharded gradient buffer cannot
    accumulate unreduced gradients; DeepSpeed all-reduces its buckets, Execution.bucket_allreduce). ZeRO-3 also
    all-gathers the weights before each forward and backward (the recomputed forward reuses the backward's gather),
    module by module: four weight matrices per decoder layer (Megatron-FSDP), or one block per layer (FSDP2,
    Execution.fsdp per-block). Expert weights do the same over their own group. A runtime that keeps weights
    gathered under a pipeline gathers and reduce-scatters once per step instead (`kept_gathered_sync`). Prefetch one
    unit ahead leaves one unit's gather (forward) and reduce-scatter (backward) exposed per micro-batch. Without
    overlap_grad_reduce (DeepSpeed's `overlap_comm: false`, its default below ZeRO-3: the backward hook reduces each
    full bucket on the compute stream and waits for it) every reduce-scatter is exposed."""
    if layout.zero < ZeroStage.GRADIENTS or kept_gathered(layout, job):
        return 0.0
    gpu, rails = cluster.gpu, job.runtime.multi_rail
    backward = time.backward + time.recompute
    per_layer = ZERO3_UNITS_PER_LAYER if job.runtime.priced_execution.fsdp is FsdpForm.PER_MODULE else 1
    units = max(1, per_layer * n_layers)
    scatter = gather = 0.0
    for p, groups in weight_groups(params, layout):  # within the shard group (HSDP's replicas all-reduce once per step)
        grad_bytes = p * job.trainable_fraction * job.runtime.grad_reduce_bytes  # frozen weights have none
        shard = groups.shard
        if layout.zero is ZeroStage.GRADIENTS:
            kind = (Collective.ALL_REDUCE if job.runtime.priced_execution.bucket_allreduce
                    else Collective.REDUCE_SCATTER)
            scatter += collective(kind, grad_bytes, shard, cluster, rails)
            continue
        gather += units * collective(Collective.ALL_GATHER, p * gather_bytes(job, cluster) / units, shard, cluster,
                                     rails)
        scatter += units * collective(Collective.REDUCE_SCATTER, grad_bytes / units, shard, cluster, rails)
    # prefetching one unit ahead (FSDP2's forward and backward prefetch, Megatron-FSDP's and DeepSpeed's prefetch
    # buckets), each unit's gather hides behind the unit before it and each reduce-scatter behind the unit after it:
    # the first unit's gather of the forward and the last unit's reduce-scatter of the backward have nothing beside them
    first, last = gather / units, scatter / units
    if not job.runtime.overlap_grad_reduce:
        if layout.zero is ZeroStage.GRADIENTS:
            return scatter
        return first + gpu.exposed(gather - first, time.forward) + gpu.exposed(gather, backward) + scatter
    if layout.zero is ZeroStage.GRADIENTS:
        return last + gpu.exposed(scatter - last, backward)
    return first + gpu.exposed(gather - first, time.forward) + last + gpu.exposed(gather + scatter - last, backward)


def host_state_bytes(params: StageParams, layout: Layout, job: JobSpec) -> float:
    """Host bytes per GPU of an offloaded optimizer (fp32 master, moments, gradient of the trained share) and
    offloaded weights; with the NVMe tier only the fp32 gradients (the rest is on NVMe: `nvme_state_bytes`)."""
    host = 0.0
    nvme = Offload.NVME in layout.offload
    if Offload.OPTIMIZER in layout.offload:
        per = HOST_GRADIENT_BYTES if nvme else HOST_OPTIMIZER_BYTES
        host += local_params(params, layout) * job.trainable_fraction * per
    if Offload.PARAMS in layout.offload and not nvme:
        host += shard_params(params, layout) * HOST_WEIGHT_BYTES
    return host


def nvme_state_bytes(params: StageParams, layout: Layout, job: JobSpec) -> float:
    """NVMe bytes per GPU with the NVMe tier: the fp32 master weights and moments of its trained share, and its
    16-bit weight shard with parameter offload."""
    if Offload.NVME not in layout.offload:
        return 0.0
    nvme = local_params(params, layout) * job.trainable_fraction * NVME_STATE_BYTES
    if Offload.PARAMS in layout.offload:
        nvme += shard_params(params, layout) * HOST_WEIGHT_BYTES
    return nvme


def layer_copy_bytes(params: StageParams, layout: Layout, job: JobSpec) -> tuple[float, float]:
    """(weight bytes in, gradient bytes out) of one layer of `params` per pass with parameter and gradient
    offload: its 16-bit ZeRO-3 weight shard, its trained gradient share in the reduce dtype."""
    w = shard_params(params, layout) * M.WEIGHT_BYTES if Offload.PARAMS in layout.offload else 0.0
    g = (shard_params(params, layout) * job.trainable_fraction * job.runtime.grad_reduce_bytes
         if Offload.GRADIENTS in layout.offload else 0.0)
    return w, g


def stage_offload_exposed(times: LayerTimes, acts: LayerActivations, dense: StageParams, moe: StageParams,
                          layers: StageLayers, layout: Layout, job: JobSpec, cluster: ClusterSpec
                          ) -> tuple[float, float]:
    """Per micro-batch exposed host copies of a stage's layers, (in the forward, in the backward)
    (`offload.layer_offload_parts` of each layer: its ZeRO-3 weight shard with parameter offload, its gradients with
    gradient offload and, in (m − 1) of a step's m micro-batches, the gradients accumulated so far coming back to
    be added on the GPU; its stored activations with activation offload; `layer_copy_bytes`; which copies are
    synchronous or on the compute stream, `offload.HostCopies`, from the runtime's switches and, for the
    checkpoints, its `Execution.sync_checkpoint_copies`), from one layer of each kind (`dense`, `moe`: its
    parameters on one rank): affine in the stage's layers, as the split search needs."""
    stored = Offload.ACTIVATIONS in layout.offload
    if not (stored or Offload.PARAMS in layout.offload or Offload.GRADIENTS in layout.offload):
        return 0.0, 0.0
    nvme = Offload.NVME in layout.offload
    m = layout.num_microbatches(job)
    back = (m - 1) / m  # the first micro-batch of a step has nothing accumulated to bring back
    run = job.runtime
    copies = HostCopies(gradients_pageable=not run.pinned_offload, gradients_in_stream=not run.overlap_grad_reduce,
                        checkpoints_sync=run.priced_execution.sync_checkpoint_copies,
                        weights_pageable=not run.pinned_param_offload)
    reuse = run.priced_execution.param_reuse_params

    def one(time: LayerTime, params: StageParams, act: float) -> tuple[float, float]:
        w, g = layer_copy_bytes(params, layout, job)
        kept = replace(copies, weights_reused=params.total <= reuse)
        return layer_offload_parts(time, w, act if stored else 0.0, cluster, g, nvme, back * g, kept)

    kinds = [(layers.dense - layers.dense_full, one(times.decoder, dense, acts.dense)),
             (layers.dense_full, one(times.decoder_full, dense, acts.full))]
    if layers.moe and times.moe is not None and times.moe_full is not None:
        kinds += [(layers.moe - layers.moe_full, one(times.moe, moe, acts.moe)),
                  (layers.moe_full, one(times.moe_full, moe, acts.full))]
    return sum(n * f for n, (f, _) in kinds), sum(n * b for n, (_, b) in kinds)
