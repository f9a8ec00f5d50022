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
from dataclasses import dataclass, field, replace

from cost_models import flops as F
from cost_models import memory as M
from cost_models.comm import Collective, collective_time, p2p_time
from cost_models.compute import Gemm, gemm_fwd_bwd_time, memory_time
from cost_models.layer import (
    LayerKnobs,
    LayerTime,
    decoder_layer_time,
    embedding_time,
    head_time,
    vision_time,
)
from cost_models.pipeline import bubble_fraction, pipeline_time
from cost_models.schedules import W_SHARE, in_flight
from planner.specs import (
    GIB,
    AttentionKernel,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    ModelSpec,
    Recompute,
    RecomputeModule,
    ZeroStage,
)

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
    layers: StageLayers = field(default_factory=lambda: StageLayers())

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
    ep_comm_s: float
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


@dataclass(frozen=True)
class StageParams:
    """Parameters of one pipeline rank by the group that reduces their gradients: `dense` over the dp·cp
    data-parallel ranks, `expert` (routed experts) over the expert-data-parallel ranks."""

    dense: float
    expert: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: StageParams) -> StageParams:
        return StageParams(self.dense + other.dense, self.expert + other.expert)

    def scaled(self, k: float) -> StageParams:
        return StageParams(self.dense * k, self.expert * k)


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


def pipeline_hop_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, layout: Layout) -> float:
    """One pipeline send/recv of one micro-batch's activations (bf16, sharded over tp and cp); 0 without PP."""
    if layout.pp == 1:
        return 0.0
    nbytes = layout.mbs * job.seq_len / layout.cp * model.hidden_size * 2 / layout.tp
    return p2p_time(nbytes, layout.tp * layout.cp * layout.dp, cluster)


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


@dataclass(frozen=True)
class StageLayers:
    """Decoder layers of one pipeline rank by kind, and how many of each are fully recomputed."""

    dense: int = 0
    moe: int = 0
    dense_full: int = 0
    moe_full: int = 0

    @property
    def total(self) -> int:
        return self.dense + self.moe

    @property
    def full(self) -> int:
        return self.dense_full + self.moe_full

    @staticmethod
    def of(kinds: tuple[bool, ...], n_full: int) -> StageLayers:
        """Counts for the layers with MoE flags `kinds` (in order), the first `n_full` fully recomputed."""
        moe = sum(kinds)
        moe_full = sum(kinds[:n_full])
        return StageLayers(len(kinds) - moe, moe, n_full - moe_full, moe_full)


def _stage_memory(costs: LayoutCosts, rank: int, layers: StageLayers, params: StageParams, first: bool,
                  last: bool) -> tuple[M.StateBytes, float, float]:
    """(states, stored decoder activations, other activations and working buffers) in bytes."""
    model, job, layout = costs.model, costs.job, costs.layout
    rt, s, b = job.runtime, job.seq_len, layout.mbs
    acts = costs.activations
    states = stage_states(params, layout, rt.grad_reduce_bytes)
    stored = ((layers.dense - layers.dense_full) * acts.dense + (layers.moe - layers.moe_full) * acts.moe
              + layers.full * acts.full)
    alive = in_flight(layout.schedule, rank, layout.pp, costs.num_microbatches, layout.vpp)
    activations = stored * alive
    in_flight_mb = math.ceil(alive)
    other = 0.0
    if first:
        other += M.embedding_activation_bytes(model, s, b, layout.tp, layout.cp, layout.sp) * in_flight_mb
        other += costs.activations.vision * in_flight_mb
    if last:
        other += M.logits_bytes(model, s, b, layout.tp, layout.cp) * (1 + model.mtp_layers)
        other += model.mtp_layers * (acts.moe if costs.mtp_moe else acts.dense) * in_flight_mb
    if layers.full:  # the layer being recomputed holds all its activations until its backward is done
        other += acts.moe if layers.moe_full else acts.dense
    if layout.zero is ZeroStage.WEIGHTS and layers.total:
        other += M.zero3_working_bytes(model, layout.tp, rt.grad_reduce_bytes, layout.ep, layout.etp)
    return states, activations, other


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one decoder layer stores per micro-batch: dense and MoE layers at the layout's recomputation,
    and a fully recomputed layer (its input only)."""

    dense: float
    moe: float
    full: float
    vision: float = 0.0  # the vision encoder and projector (first stage), per micro-batch


@dataclass(frozen=True)
class LayerTimes:
    """The per-layer times a layout needs; they depend only on `LayerKnobs`. `head` includes the
    multi-token-prediction modules; `moe`/`moe_full` are None for dense models."""

    decoder: LayerTime
    decoder_full: LayerTime
    embedding: LayerTime
    head: LayerTime
    moe: LayerTime | None = None
    moe_full: LayerTime | None = None


def mtp_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs) -> LayerTime:
    """Multi-token-prediction modules (DeepSeek-V3 section 2.2): per module a [T, 2h]x[2h, h/t] projection of
    the normed hidden state and next-token embedding, one decoder layer and the shared LM head again."""
    if not model.mtp_layers:
        return LayerTime()
    tokens = knobs.mbs * job.seq_len / knobs.cp
    gf, gb = gemm_fwd_bwd_time(Gemm(tokens, model.hidden_size / knobs.tp, 2 * model.hidden_size), cluster.gpu,
                               job.dtype)
    moe = model.moe is not None and model.moe.is_moe_layer(model.num_layers)
    one = (LayerTime(gf, gb) + decoder_layer_time(model, job, cluster, knobs, moe)
           + head_time(model, job, cluster, knobs))
    return one.scaled(model.mtp_layers)


def layer_times(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs) -> LayerTimes:
    full = replace(knobs, recompute=Recompute.FULL)
    moe = moe_full = None
    if any(model.moe_layers()):
        moe = decoder_layer_time(model, job, cluster, knobs, moe=True)
        moe_full = decoder_layer_time(model, job, cluster, full, moe=True)
    return LayerTimes(decoder_layer_time(model, job, cluster, knobs), decoder_layer_time(model, job, cluster, full),
                      embedding_time(model, job, cluster, knobs) + vision_time(model, job, cluster, knobs),
                      head_time(model, job, cluster, knobs) + mtp_time(model, job, cluster, knobs), moe, moe_full)


def decoder_params(model: ModelSpec, job: JobSpec, tp: int, moe: bool = False) -> float:
    """Parameters of one decoder layer on one TP rank reduced over the dense data-parallel group (for an MoE
    layer without its routed experts): measured when the job has a cost table."""
    measured = job.runtime.measured
    return measured.params("decoder", tp) if measured else M.decoder_params_per_rank(model, tp, moe)


def one_layer_params(model: ModelSpec, job: JobSpec, tp: int, ep: int, etp: int, moe: bool) -> StageParams:
    """One decoder layer's parameters on one rank, by reduction group."""
    return StageParams(decoder_params(model, job, tp, moe), M.expert_params_per_rank(model, ep, etp) if moe else 0.0)


def embedding_params(model: ModelSpec, job: JobSpec, tp: int) -> float:
    """The first stage's extra parameters: the embedding (and a vision encoder with its projector)."""
    measured = job.runtime.measured
    if measured:
        return measured.params("embedding", tp)
    return M.embedding_params_per_rank(model, tp) + M.vision_params_per_rank(model, tp)


def head_params(model: ModelSpec, job: JobSpec, tp: int, beside_embedding: bool, ep: int = 1,
                etp: int = 1) -> StageParams:
    """LM head and final norm on the last stage, with the multi-token-prediction modules (three norms, the
    2h x h projection split over TP, one decoder layer each)."""
    measured = job.runtime.measured
    if measured:
        return StageParams(measured.params("lm_head", tp))
    head = StageParams(M.lm_head_params_per_rank(model, tp, beside_embedding) + F.norm_params(model))
    if model.mtp_layers:
        moe = model.moe is not None and model.moe.is_moe_layer(model.num_layers)
        per = StageParams(3 * F.norm_params(model) + 2 * model.hidden_size**2 / tp) + one_layer_params(
            model, job, tp, ep, etp, moe)
        head = head + per.scaled(model.mtp_layers)
    return head


def rank_params(model: ModelSpec, job: JobSpec, tp: int, head_beside_embedding: bool, ep: int = 1,
                etp: int = 1) -> StageParams:
    """Parameters of one rank of the tp (and expert) mesh summed over all pipeline stages: decoder layers,
    embedding, head and multi-token prediction."""
    n_dense, n_moe = F.decoder_layer_counts(model)
    layers = one_layer_params(model, job, tp, ep, etp, False).scaled(n_dense)
    if n_moe:
        layers = layers + one_layer_params(model, job, tp, ep, etp, True).scaled(n_moe)
    return (layers + StageParams(embedding_params(model, job, tp))
            + head_params(model, job, tp, head_beside_embedding, ep, etp))


def decoder_activation(model: ModelSpec, job: JobSpec, tp: int, cp: int, sp: bool, mbs: int,
                       recompute: Recompute, moe: bool = False, etp: int = 1,
                       modules: frozenset[RecomputeModule] | None = None, fp8: bool = False) -> float:
    """Bytes one decoder layer keeps per micro-batch: measured (no recomputation) when the job has a cost
    table, analytical otherwise; full recomputation keeps only the layer input either way. `fp8`: the GPU runs
    the job's FP8 GEMMs (Transformer Engine keeps FP8 copies of their inputs)."""
    measured = job.runtime.measured
    if measured and recompute is not Recompute.FULL:
        return measured.get("decoder", tp, mbs).activation_bytes
    return M.layer_activation_bytes(model, job.seq_len, mbs, tp, cp, sp, recompute, job.runtime.attention, moe, etp,
                                    job.runtime.moe_load_factor, modules, fp8)


@dataclass(frozen=True)
class LayoutCosts:
    """What every stage of one layout shares: per-layer times (computed once), the pipeline hop, per-layer
    parameters and activations by layer kind. `stage_cost` composes a stage from it."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    layout: Layout
    num_microbatches: int
    times: LayerTimes
    p2p_s: float  # one pipeline send/recv of one micro-batch
    dense_params: StageParams  # one dense decoder layer on one rank
    moe_params: StageParams  # one MoE decoder layer on one rank
    activations: LayerActivations
    kinds: tuple[bool, ...]  # per decoder layer: MoE or not
    mtp_moe: bool  # the multi-token-prediction layer has an MoE MLP

    def uniform(self, n: int, n_full: int) -> StageLayers:
        """Counts for `n` layers of a homogeneous stack (all dense or all MoE), `n_full` recomputed."""
        if self.kinds and all(self.kinds):
            return StageLayers(moe=n, moe_full=n_full)
        return StageLayers(dense=n, dense_full=n_full)

    def layer_time(self, layers: StageLayers) -> LayerTime:
        t = self.times
        time = t.decoder.scaled(layers.dense - layers.dense_full) + t.decoder_full.scaled(layers.dense_full)
        if layers.moe:
            assert t.moe is not None and t.moe_full is not None
            time = time + t.moe.scaled(layers.moe - layers.moe_full) + t.moe_full.scaled(layers.moe_full)
        return time

    def stage_params(self, layers: StageLayers) -> StageParams:
        return self.dense_params.scaled(layers.dense) + self.moe_params.scaled(layers.moe)


def layout_costs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                 times: LayerTimes | None = None) -> LayoutCosts:
    """Everything the stages of `layout` share; `times` may come from a cache (they depend only on the
    layout's LayerKnobs)."""
    if times is None:
        times = layer_times(model, cluster, job, layout_knobs(layout))
    t, ep, etp = layout.tp, layout.ep, layout.etp

    fp8 = job.dtype is Dtype.FP8 and bool(cluster.gpu.peak_fp8_tflops)

    def act(rc: Recompute, moe: bool) -> float:
        return decoder_activation(model, job, t, layout.cp, layout.sp, layout.mbs, rc, moe, etp,
                                  layout.recompute_modules, fp8)

    kinds = model.moe_layers()
    has_moe = any(kinds)
    acts = LayerActivations(act(layout.recompute, False), act(layout.recompute, True) if has_moe else 0.0,
                            act(Recompute.FULL, False),
                            M.vision_activation_bytes(model, layout.mbs, t, layout.sp, layout.recompute,
                                                      job.runtime.attention))
    return LayoutCosts(model, cluster, job, layout, layout.num_microbatches(job), times,
                       p2p_s=pipeline_hop_time(model, job, cluster, layout),
                       dense_params=one_layer_params(model, job, t, ep, etp, False),
                       moe_params=one_layer_params(model, job, t, ep, etp, True) if has_moe else StageParams(0.0),
                       activations=acts, kinds=kinds,
                       mtp_moe=model.moe is not None and model.moe.is_moe_layer(model.num_layers))


def layout_knobs(layout: Layout) -> LayerKnobs:
    return LayerKnobs(layout.tp, layout.cp, layout.sp, layout.mbs, layout.recompute, layout.ep, layout.etp,
                      layout.recompute_modules)


def stage_cost(costs: LayoutCosts, rank: int, layers: StageLayers,
               layer_ids: tuple[int, int] = (-1, -1)) -> StageCost:
    """Pipeline rank `rank` holding `layers` (decoder layers by kind, some fully recomputed)."""
    model, cluster, job, layout = costs.model, costs.cluster, costs.job, costs.layout
    first, last = rank == layout.embedding_rank, rank == layout.head_rank
    time = costs.layer_time(layers)
    params = costs.stage_params(layers)
    if first:
        time, params = time + costs.times.embedding, params + StageParams(embedding_params(model, job, layout.tp))
    if last:
        time = time + costs.times.head
        params = params + head_params(model, job, layout.tp, layout.head_beside_embedding, layout.ep, layout.etp)
    hops = pipeline_hops(layout, rank)
    sharded = sharded_dp_exposed(params, layers.total, layout, job, cluster, time)
    dp = dp_reduce_exposed(params, layout, job, cluster, time.backward / layout.vpp, time.forward / layout.vpp)
    opt = optimizer_time(params, layout, cluster)
    states, acts, other = _stage_memory(costs, rank, layers, params, first, last)
    return StageCost(
        pp_rank=rank, first_layer=layer_ids[0], last_layer=layer_ids[1], num_layers=layers.total,
        has_embedding=first, has_lm_head=last, time=time,
        p2p_s=hops * costs.p2p_s * p2p_exposure(layout, job, cluster),
        sharded_dp_exposed_s=sharded, dp_exposed_s=dp, optimizer_s=opt,
        weights_gib=states.weights / GIB, gradients_gib=states.gradients / GIB,
        optimizer_state_gib=states.optimizer / GIB, activations_gib=acts / GIB,
        other_gib=other / GIB, buffers_gib=M.BUFFER_ALLOWANCE_GIB, layers=layers)


def p2p_exposure(layout: Layout, job: JobSpec, cluster: ClusterSpec) -> float:
    """Share of a rank's pipeline send/recv time on its critical path. Chunked schedules (vpp > 1) with
    `Runtime.overlap_p2p_comm` run each transfer beside another chunk's compute, so only the contention
    remains, κ = 1 − overlap_efficiency of it (`GpuSpec.exposed` when the compute is the longer, which a
    chunk's layers are against one activation transfer in any layout worth running; pricing it without the
    max keeps stage times affine in their layers, as the exact split search needs). Otherwise all of it."""
    if layout.vpp > 1 and job.runtime.overlap_p2p_comm:
        return 1.0 - cluster.gpu.overlap_efficiency
    return 1.0


def pipeline_hops(layout: Layout, rank: int) -> int:
    """Sends and receives of activations (or their gradients) `rank` makes per micro-batch and direction: one
    into each of its chunks from a chunk on another rank, one out of it to the next chunk on another rank."""
    chunks = layout.pp * layout.vpp
    hops = 0
    for c in layout.rank_chunks(rank):
        hops += c > 0 and layout.chunk_rank(c - 1) != rank
        hops += c < chunks - 1 and layout.chunk_rank(c + 1) != rank
    return hops


def rank_layer_ids(layout: Layout, num_layers: int) -> list[list[int]]:
    """Decoder layer indices held by each pipeline rank, over all its model chunks, in order."""
    chunk_layers = layout.chunk_layers(num_layers)
    starts = [sum(chunk_layers[:i]) for i in range(len(chunk_layers))]
    return [[i for c in layout.rank_chunks(rank) for i in range(starts[c], starts[c] + chunk_layers[c])]
            for rank in range(layout.pp)]


def rank_stage_layers(costs: LayoutCosts, rank: int, ids: list[int]) -> StageLayers:
    """Rank `rank`'s decoder layers `ids` by kind, the first ones fully recomputed as the layout says."""
    return StageLayers.of(tuple(costs.kinds[i] for i in ids),
                          costs.layout.fully_recomputed(rank, costs.model.num_layers))


def evaluate_layout(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                    times: LayerTimes | None = None) -> Prediction:
    """Predict step time, throughput and per-GPU memory of `layout` (validated by the caller)."""
    costs = layout_costs(model, cluster, job, layout, times)
    stages: list[StageCost] = []
    for rank, ids in enumerate(rank_layer_ids(layout, model.num_layers)):
        stages.append(stage_cost(costs, rank, rank_stage_layers(costs, rank, ids),
                                 (min(ids, default=-1), max(ids, default=-1))))
    return _predict(model, cluster, job, layout, stages, costs.num_microbatches)


def _predict(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
             stages: list[StageCost], m: int) -> Prediction:
    per_mb = [s.compute_s for s in stages]
    hidden = [W_SHARE * s.time.backward for s in stages]  # weight gradients zero-bubble schedules move around
    pipe = pipeline_time(per_mb, m, layout.vpp, layout.schedule, hidden, [s.time.forward for s in stages])
    tail = max(stages, key=lambda s: s.dp_exposed_s + s.optimizer_s)
    emb_sync = 0.0
    if model.tied_embeddings and not layout.head_beside_embedding:
        nbytes = model.vocab_size * model.hidden_size / layout.tp * job.runtime.grad_reduce_bytes
        emb_sync = collective_time(Collective.ALL_REDUCE, nbytes, 2,
                                   layout.tp * layout.cp * layout.dp * (layout.pp - 1), cluster)
    step = pipe + tail.dp_exposed_s + tail.optimizer_s + emb_sync
    worst = max(stages, key=lambda s: s.compute_s)
    t = worst.time
    breakdown = Breakdown(
        compute_s=m * (t.forward + t.backward), recompute_s=m * t.recompute, tp_comm_s=m * t.tp_comm,
        cp_comm_s=m * t.cp_comm, ep_comm_s=m * t.ep_comm, pp_p2p_s=m * worst.p2p_s,
        sharded_dp_comm_s=m * worst.sharded_dp_exposed_s,
        bubble_s=pipe - m * worst.compute_s, dp_comm_s=tail.dp_exposed_s, optimizer_s=tail.optimizer_s,
        embedding_sync_s=emb_sync)
    world = layout.world
    model_flops = F.model_flops_per_sequence(model, job.seq_len) * job.global_batch
    n_full = sum(s.layers.full for s in stages)
    recompute_per_seq = sum(s.layers.dense_full for s in stages) * F.decoder_matmul_flops(model, job.seq_len)
    if model.moe is not None:
        recompute_per_seq += sum(s.layers.moe_full for s in stages) * F.moe_decoder_matmul_flops(model, job.seq_len)
    if RecomputeModule.CORE_ATTN in layout.recompute_modules and job.runtime.attention is AttentionKernel.UNFUSED:
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
