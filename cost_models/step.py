"""One training step of a layout: per-stage time and memory, the pipeline, data-parallel
reduction, optimizer, and the headline figures (tokens/s, model and hardware TFLOP/s, MFU, HFU).

Step time = pipeline(stage times per micro-batch)                       (cost_models.pipeline)
          + max over stages of (exposed gradient reduction + optimizer step)
          + tied-embedding gradient all-reduce between first and last stage (pp > 1).
Stage time per micro-batch = Σ its layers' LayerTime + 2 pipeline send/recv per model chunk
          (+ exposed ZeRO-2 gradient reduce-scatters, ZeRO-3 weight gathers as well).
Gradient reduction over the n = dp·cp ranks (Megatron-LM reduces over DP x CP):
  ZeRO-0 all-reduce of grad_bytes·P; ZeRO-1 reduce-scatter of grad_bytes·P + all-gather of 2·P;
  ZeRO-2 the all-gather only (its reduce-scatter runs per micro-batch);
  with overlap_grad_reduce it hides behind the last micro-batch's backward, with
  overlap_param_gather the gather behind the first forward; ZeRO-3 gathers bf16 weights before each
  forward and backward and reduce-scatters gradients after each backward, module by module,
  overlapped with compute per phase.
Optimizer: Adam is bandwidth-bound, about 38 bytes per locally updated parameter (read fp32
  grad, master, m, v; write master, m, v, bf16 weight; grad-norm read; buffer reset).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from cost_models import flops as F
from cost_models import memory as M
from cost_models.comm import Collective, collective_time, p2p_time
from cost_models.compute import memory_time
from cost_models.layer import LayerKnobs, LayerTime, decoder_layer_time, embedding_time, head_time
from cost_models.pipeline import bubble_fraction, pipeline_time
from cost_models.schedules import W_SHARE, in_flight
from planner.specs import GIB, AttentionKernel, ClusterSpec, JobSpec, Layout, ModelSpec, Recompute, ZeroStage

OPTIMIZER_BYTES_PER_PARAM = 38.0
ZERO3_UNITS_PER_LAYER = 4  # QKV, output projection, FC1, FC2: one gather / reduce-scatter each


@dataclass(frozen=True)
class StageCost:
    """One pipeline rank: its layers, time per micro-batch and peak memory per GPU."""

    pp_rank: int
    first_layer: int  # decoder layer indices, inclusive; -1/-1 when the stage holds none
    last_layer: int
    num_layers: int
    has_embedding: bool
    has_lm_head: bool
    time: LayerTime  # per micro-batch, all model chunks of this rank
    p2p_s: float  # per micro-batch
    sharded_dp_exposed_s: float  # per micro-batch (ZeRO-2/3)
    dp_exposed_s: float  # per step
    optimizer_s: float  # per step
    weights_gib: float
    gradients_gib: float
    optimizer_state_gib: float
    activations_gib: float  # stored decoder-layer activations at the stage's peak
    other_gib: float  # embedding/logits activations, recompute and ZeRO-3 working buffers
    buffers_gib: float

    @property
    def compute_s(self) -> float:
        """Forward + backward (+ recompute) seconds per micro-batch, communication included."""
        return self.time.total + self.p2p_s + self.sharded_dp_exposed_s

    @property
    def peak_memory_gib(self) -> float:
        return (self.weights_gib + self.gradients_gib + self.optimizer_state_gib + self.activations_gib
                + self.other_gib + self.buffers_gib)


@dataclass(frozen=True)
class Breakdown:
    """Seconds of one step by cause, along the critical path; they add up to the step time."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    pp_p2p_s: float
    sharded_dp_comm_s: float
    bubble_s: float
    dp_comm_s: float
    optimizer_s: float
    embedding_sync_s: float

    def as_dict(self) -> dict[str, float]:
        return {k.removesuffix("_s"): v for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    peak_memory_gib: float
    memory_capacity_gib: float
    fits: bool
    bubble_fraction: float
    num_microbatches: int
    breakdown: Breakdown
    stages: tuple[StageCost, ...]


def grad_sync_times(params: float, zero: ZeroStage, n: int, stride: int, cluster: ClusterSpec, grad_bytes: float,
                    multi_rail: bool) -> tuple[float, float]:
    """(gradient reduction, weight gather) seconds per step over n data-parallel ranks, unhidden:
    ZeRO-0 all-reduces the gradients; ZeRO-1 reduce-scatters them and all-gathers the updated bf16 weights;
    ZeRO-2 only gathers (its reduce-scatter runs per micro-batch); ZeRO-3 does both per module."""
    if zero >= ZeroStage.WEIGHTS:
        return 0.0, 0.0
    reduce = 0.0
    if zero is not ZeroStage.GRADIENTS:
        kind = Collective.ALL_REDUCE if zero is ZeroStage.NONE else Collective.REDUCE_SCATTER
        reduce = collective_time(kind, params * grad_bytes, n, stride, cluster, multi_rail)
    gather = 0.0 if zero is ZeroStage.NONE else collective_time(
        Collective.ALL_GATHER, params * M.WEIGHT_BYTES, n, stride, cluster, multi_rail)
    return reduce, gather


def dp_reduce_exposed(params: float, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                      bwd_last: float, fwd_first: float) -> float:
    """Exposed seconds of the per-step gradient reduction (ZeRO 0-2) of one stage."""
    rt = job.runtime
    reduce, gather = grad_sync_times(params, layout.zero, layout.dp * layout.cp, layout.tp, cluster,
                                     rt.grad_reduce_bytes, rt.multi_rail)
    gpu = cluster.gpu
    exposed_reduce = gpu.exposed(reduce, bwd_last) if rt.overlap_grad_reduce else reduce
    hide_gather = rt.overlap_param_gather and rt.overlap_grad_reduce
    exposed_gather = gpu.exposed(gather, fwd_first) if hide_gather else gather
    return exposed_reduce + exposed_gather


def optimizer_time(params: float, zero: ZeroStage, dp_ranks: int, cluster: ClusterSpec) -> float:
    """Adam step over the parameters this GPU updates (its 1/dp_ranks share from ZeRO-1 on)."""
    shard = dp_ranks if zero >= ZeroStage.OPTIMIZER else 1
    return memory_time(params / shard * OPTIMIZER_BYTES_PER_PARAM, cluster.gpu)


def pipeline_hop_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, layout: Layout) -> float:
    """One pipeline send/recv of one micro-batch's activations (bf16, sharded over tp and cp); 0 without PP."""
    if layout.pp == 1:
        return 0.0
    nbytes = layout.mbs * job.seq_len / layout.cp * model.hidden_size * 2 / layout.tp
    return p2p_time(nbytes, layout.tp * layout.cp * layout.dp, cluster)


def sharded_dp_exposed(params: float, n_layers: float, layout: Layout, job: JobSpec, cluster: ClusterSpec,
                     time: LayerTime) -> float:
    """Per micro-batch communication of sharded data parallelism not hidden by compute.

    ZeRO-2 reduce-scatters the gradients after every micro-batch's backward (a sharded gradient
    buffer cannot accumulate unreduced gradients). ZeRO-3 also all-gathers the weights before each
    forward and backward (the recomputed forward reuses the backward's gather), module by module
    (four weight matrices per decoder layer)."""
    if layout.zero < ZeroStage.GRADIENTS:
        return 0.0
    n, stride, gpu, rails = layout.dp * layout.cp, layout.tp, cluster.gpu, job.runtime.multi_rail
    grad_bytes = params * job.runtime.grad_reduce_bytes
    backward = time.backward + time.recompute
    if layout.zero is ZeroStage.GRADIENTS:
        return gpu.exposed(collective_time(Collective.REDUCE_SCATTER, grad_bytes, n, stride, cluster, rails), backward)
    units = max(1, ZERO3_UNITS_PER_LAYER * n_layers)
    gather = units * collective_time(Collective.ALL_GATHER, params * M.WEIGHT_BYTES / units, n, stride, cluster, rails)
    scatter = units * collective_time(Collective.REDUCE_SCATTER, grad_bytes / units, n, stride, cluster, rails)
    return gpu.exposed(gather, time.forward) + gpu.exposed(gather + scatter, backward)


def _stage_memory(model: ModelSpec, job: JobSpec, layout: Layout, rank: int, n_layers: int, n_full: int,
                  params: float, m: int, first: bool, last: bool) -> tuple[M.StateBytes, float, float]:
    """(states, stored decoder activations, other activations and working buffers) in bytes;
    `n_full` of the stage's layers are fully recomputed, the rest use the layout's granularity."""
    rt, s, b = job.runtime, job.seq_len, layout.mbs

    def per_layer(rc: Recompute) -> float:
        return decoder_activation(model, job, layout.tp, layout.cp, layout.sp, b, rc)

    states = M.state_bytes(params, layout.zero, layout.dp * layout.cp, rt.grad_reduce_bytes)
    stored = (n_layers - n_full) * per_layer(layout.recompute) + n_full * per_layer(Recompute.FULL)
    alive = in_flight(layout.schedule, rank, layout.pp, m, layout.vpp)
    activations = stored * alive
    in_flight_mb = math.ceil(alive)
    other = 0.0
    if first:
        other += M.embedding_activation_bytes(model, s, b, layout.tp, layout.cp, layout.sp) * in_flight_mb
    if last:
        other += M.logits_bytes(model, s, b, layout.tp, layout.cp)
    if n_full:  # the layer being recomputed holds all its activations until its backward is done
        other += per_layer(Recompute.NONE)
    if layout.zero is ZeroStage.WEIGHTS and n_layers:
        other += M.zero3_working_bytes(model, layout.tp, rt.grad_reduce_bytes)
    return states, activations, other


@dataclass(frozen=True)
class LayoutCosts:
    """What every stage of one layout shares: per-layer times (computed once), the pipeline hop and
    the per-layer parameter count. `stage_cost` composes a stage from it."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    layout: Layout
    num_microbatches: int
    decoder: LayerTime
    decoder_full: LayerTime  # the same layer fully recomputed
    embedding: LayerTime
    head: LayerTime
    p2p_s: float  # one pipeline send/recv of one micro-batch
    decoder_params: float  # per TP rank


@dataclass(frozen=True)
class LayerTimes:
    """The four per-layer times a layout needs; they depend only on `LayerKnobs`."""

    decoder: LayerTime
    decoder_full: LayerTime
    embedding: LayerTime
    head: LayerTime


def layer_times(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs) -> LayerTimes:
    return LayerTimes(decoder_layer_time(model, job, cluster, knobs),
                      decoder_layer_time(model, job, cluster, replace(knobs, recompute=Recompute.FULL)),
                      embedding_time(model, job, cluster, knobs), head_time(model, job, cluster, knobs))


def rank_params(model: ModelSpec, job: JobSpec, tp: int, pp: int) -> float:
    """Parameters of one TP rank summed over all pipeline stages: decoder layers, embedding and head."""
    return (model.num_layers * decoder_params(model, job, tp) + embedding_params(model, job, tp)
            + head_params(model, job, tp, pp))


def decoder_params(model: ModelSpec, job: JobSpec, tp: int) -> float:
    """Parameters of one decoder layer on one TP rank: measured when the job has a cost table."""
    measured = job.runtime.measured
    return measured.params("decoder", tp) if measured else M.decoder_params_per_rank(model, tp)


def embedding_params(model: ModelSpec, job: JobSpec, tp: int) -> float:
    measured = job.runtime.measured
    return measured.params("embedding", tp) if measured else M.embedding_params_per_rank(model, tp)


def head_params(model: ModelSpec, job: JobSpec, tp: int, pp: int) -> float:
    """LM head (and final norm) on the last stage."""
    measured = job.runtime.measured
    if measured:
        return measured.params("lm_head", tp)
    return M.lm_head_params_per_rank(model, tp, pp) + F.norm_params(model)


def decoder_activation(model: ModelSpec, job: JobSpec, tp: int, cp: int, sp: bool, mbs: int,
                       recompute: Recompute) -> float:
    """Bytes one decoder layer keeps per micro-batch: measured (no recomputation) when the job has a cost
    table, analytical otherwise; full recomputation keeps only the layer input either way."""
    measured = job.runtime.measured
    if measured and recompute is not Recompute.FULL:
        return measured.get("decoder", tp, mbs).activation_bytes
    return M.layer_activation_bytes(model, job.seq_len, mbs, tp, cp, sp, recompute, job.runtime.attention)


def layout_costs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                 times: LayerTimes | None = None) -> LayoutCosts:
    """Everything the stages of `layout` share; `times` may come from a cache (they depend only on the
    layout's LayerKnobs)."""
    if times is None:
        times = layer_times(model, cluster, job, LayerKnobs(layout.tp, layout.cp, layout.sp, layout.mbs,
                                                            layout.recompute))
    return LayoutCosts(model, cluster, job, layout, layout.num_microbatches(job), decoder=times.decoder,
                       decoder_full=times.decoder_full, embedding=times.embedding, head=times.head,
                       p2p_s=pipeline_hop_time(model, job, cluster, layout),
                       decoder_params=decoder_params(model, job, layout.tp))


def stage_cost(costs: LayoutCosts, rank: int, n_layers: int, n_full: int,
               layer_ids: tuple[int, int] = (-1, -1)) -> StageCost:
    """Pipeline rank `rank` holding `n_layers` decoder layers, `n_full` of them fully recomputed."""
    model, cluster, job, layout = costs.model, costs.cluster, costs.job, costs.layout
    first, last = rank == 0, rank == layout.pp - 1
    time = costs.decoder.scaled(n_layers - n_full) + costs.decoder_full.scaled(n_full)
    params = costs.decoder_params * n_layers
    if first:
        time, params = time + costs.embedding, params + embedding_params(model, job, layout.tp)
    if last:
        time = time + costs.head
        params += head_params(model, job, layout.tp, layout.pp)
    hops = (2 * layout.vpp - (1 if first else 0) - (1 if last else 0)) if layout.pp > 1 else 0
    sharded = sharded_dp_exposed(params, n_layers, layout, job, cluster, time)
    dp = dp_reduce_exposed(params, layout, job, cluster, time.backward / layout.vpp, time.forward / layout.vpp)
    opt = optimizer_time(params, layout.zero, layout.dp * layout.cp, cluster)
    states, acts, other = _stage_memory(model, job, layout, rank, n_layers, n_full, params,
                                        costs.num_microbatches, first, last)
    return StageCost(
        pp_rank=rank, first_layer=layer_ids[0], last_layer=layer_ids[1], num_layers=n_layers,
        has_embedding=first, has_lm_head=last, time=time, p2p_s=hops * costs.p2p_s,
        sharded_dp_exposed_s=sharded, dp_exposed_s=dp, optimizer_s=opt,
        weights_gib=states.weights / GIB, gradients_gib=states.gradients / GIB,
        optimizer_state_gib=states.optimizer / GIB, activations_gib=acts / GIB,
        other_gib=other / GIB, buffers_gib=M.BUFFER_ALLOWANCE_GIB)


def evaluate_layout(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                    times: LayerTimes | None = None) -> Prediction:
    """Predict step time, throughput and per-GPU memory of `layout` (validated by the caller)."""
    costs = layout_costs(model, cluster, job, layout, times)
    chunk_layers = layout.chunk_layers(model.num_layers)
    starts = [sum(chunk_layers[:i]) for i in range(len(chunk_layers))]
    stages: list[StageCost] = []
    for rank in range(layout.pp):
        mine = range(rank, len(chunk_layers), layout.pp)
        ids = [i for c in mine for i in range(starts[c], starts[c] + chunk_layers[c])]
        stages.append(stage_cost(costs, rank, len(ids), layout.fully_recomputed(rank, model.num_layers),
                                 (min(ids, default=-1), max(ids, default=-1))))
    return _predict(model, cluster, job, layout, stages, costs.num_microbatches)


def _predict(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
             stages: list[StageCost], m: int) -> Prediction:
    per_mb = [s.compute_s for s in stages]
    hidden = [W_SHARE * s.time.backward for s in stages]  # weight gradients ZB-H1 moves into the cooldown
    pipe = pipeline_time(per_mb, m, layout.vpp, layout.schedule, hidden)
    tail = max(stages, key=lambda s: s.dp_exposed_s + s.optimizer_s)
    emb_sync = 0.0
    if model.tied_embeddings and layout.pp > 1:
        nbytes = model.vocab_size * model.hidden_size / layout.tp * job.runtime.grad_reduce_bytes
        emb_sync = collective_time(Collective.ALL_REDUCE, nbytes, 2,
                                   layout.tp * layout.cp * layout.dp * (layout.pp - 1), cluster)
    step = pipe + tail.dp_exposed_s + tail.optimizer_s + emb_sync
    worst = max(stages, key=lambda s: s.compute_s)
    t = worst.time
    breakdown = Breakdown(
        compute_s=m * (t.forward + t.backward), recompute_s=m * t.recompute, tp_comm_s=m * t.tp_comm,
        cp_comm_s=m * t.cp_comm, pp_p2p_s=m * worst.p2p_s, sharded_dp_comm_s=m * worst.sharded_dp_exposed_s,
        bubble_s=pipe - m * worst.compute_s, dp_comm_s=tail.dp_exposed_s, optimizer_s=tail.optimizer_s,
        embedding_sync_s=emb_sync)
    world = layout.world
    model_flops = F.model_flops_per_sequence(model, job.seq_len) * job.global_batch
    n_full = sum(layout.fully_recomputed(r, model.num_layers) for r in range(layout.pp))
    recompute_per_seq = n_full * F.decoder_matmul_flops(model, job.seq_len)
    if layout.recompute is Recompute.SELECTIVE and job.runtime.attention is AttentionKernel.UNFUSED:
        recompute_per_seq += (model.num_layers - n_full) * F.attention_core_flops(model, job.seq_len)
    hw_flops = model_flops + recompute_per_seq * job.global_batch
    peak = cluster.gpu.peak(job.dtype)
    peak_mem = max(s.peak_memory_gib for s in stages)
    return Prediction(
        step_time_s=step,
        tokens_per_s=job.tokens_per_step / step,
        model_tflops_per_gpu=model_flops / step / world / 1e12,
        hardware_tflops_per_gpu=hw_flops / step / world / 1e12,
        mfu=model_flops / step / world / peak,
        hfu=hw_flops / step / world / peak,
        peak_memory_gib=peak_mem,
        memory_capacity_gib=cluster.gpu.memory_gib,
        fits=peak_mem <= cluster.gpu.memory_gib,
        bubble_fraction=bubble_fraction(layout.schedule, layout.pp, m, layout.vpp),
        num_microbatches=m,
        breakdown=breakdown,
        stages=tuple(stages),
    )
