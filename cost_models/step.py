"""One training step of a layout: per-stage time and memory, the pipeline, data-parallel
reduction, optimizer, and the headline figures (tokens/s, model and hardware TFLOP/s, MFU, HFU).

Step time = pipeline(stage times per micro-batch)                       (cost_models.pipeline.stages)
          + max over stages of (exposed gradient reduction + optimizer step)
          + tied-embedding gradient all-reduce between first and last stage (pp > 1).
Stage time per micro-batch = Σ its layers' LayerTime + 2 pipeline send/recv per model chunk
          (+ exposed ZeRO-2 gradient reduce-scatters, ZeRO-3 weight gathers as well).
Data-parallel reduction, weight gathers and the optimizer: cost_models.sync; parameters per rank:
cost_models.memory.params; the step from the stages: cost_models.predict; the result types: cost_models.prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import accumulate

from cost_models.compute.host import microbatch_sync_s, step_sync_s
from cost_models.compute.kernels import Gemm, gemm_fwd_bwd_time
from cost_models.compute.knobs import LayerActivations as LayerActivations  # re-exported: the search imports both
from cost_models.compute.knobs import LayerKnobs, LayerTime
from cost_models.compute.knobs import LayerTimes as LayerTimes
from cost_models.compute.layer import decoder_layer_time, embedding_time, head_time, vision_time
from cost_models.compute.sac import per_op_sac, sac_activation_bytes
from cost_models.memory import footprint as M
from cost_models.memory import held as H
from cost_models.memory.gathered import fsdp_block, gathered_form, gathered_weight_bytes
from cost_models.memory.offload import offload_working_bytes
from cost_models.memory.params import StageParams, embedding_params, head_params, one_layer_params
from cost_models.pipeline.hops import RankPlace, rank_places
from cost_models.pipeline.hops import p2p_exposure as p2p_exposure  # re-exported: the search and outputs import these
from cost_models.pipeline.hops import pipeline_hop_time as pipeline_hop_time
from cost_models.pipeline.hops import pipeline_hops as pipeline_hops
from cost_models.predict import predict
from cost_models.prediction import Prediction, StageCost, StageLayers
from cost_models.sync import (
    dp_reduce_exposed,
    grad_accumulation_time,
    grad_traffic,
    host_state_bytes,
    optimizer_time,
    sharded_dp_exposed,
    stage_offload_exposed,
    stage_states,
)
from meshcore import (
    GIB,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    ModelSpec,
    Offload,
    Recompute,
    RecomputeModule,
)


def stage_held(costs: LayoutCosts, layers: StageLayers, first: bool, last: bool, in_flight_mb: int) -> H.StageHeld:
    """`StageHeld` of a stage holding `layers` (and the embedding, the LM head) on a rank that keeps `in_flight_mb`
    micro-batches in flight, rounded up (counted only on a rank with the embedding or the head)."""
    model, job, layout = costs.model, costs.job, costs.layout
    rt, s, b = job.runtime, job.seq_len, layout.mbs
    ex, acts = rt.priced_execution, costs.activations
    stored = ((layers.dense - layers.dense_full) * acts.dense + (layers.moe - layers.moe_full) * acts.moe
              + layers.full * acts.full)
    offloaded = 2 * max(acts.dense, acts.moe) if Offload.ACTIVATIONS in layout.offload and layers.total else None
    other = loss = working = accumulated = 0.0
    if first:
        other += M.embedding_activation_bytes(model, s, b, layout.tp, layout.cp, layout.sp) * in_flight_mb
        other += costs.activations.vision * in_flight_mb
    if last:
        per_logit = H.loss_logit_bytes(layout.tp, ex.logit_bytes, ex.memory)
        loss = M.logits_bytes(model, s, b, layout.tp, layout.cp, per_logit) * (1 + model.mtp_layers)
        other += model.mtp_layers * (acts.moe if costs.mtp_moe else acts.dense) * in_flight_mb
        if layout.pp > 1:
            other += H.kept_logits_bytes(model, s, b, layout.tp, layout.cp, costs.num_microbatches, ex.memory)
    if layers.full or per_op_sac(layout.recompute, job):
        working = acts.working  # the layer being recomputed holds all its activations until its backward is done
    other += H.held_at_peak(loss, working, ex.memory)
    form = gathered_form(model, job, costs.cluster, layout, costs.block_params()) if layers.total else None
    if form is not None:
        params = costs.weights(first, last, layers).params
        other += gathered_weight_bytes(params, form, job)
        accumulated = params.total * form.grad * job.trainable_fraction
        if form.root:
            end = embedding_params(model, job, layout.tp) if first else 0.0
            end += head_params(model, job, layout.tp, layout.head_beside_embedding).total if last else 0.0
            other += end * form.root
    other += offload_working_bytes(layout, job)  # the gradient buckets with gradient offload
    return H.StageHeld(stored, other, H.allocator_reserve(loss + working + accumulated, ex.memory), offloaded)


def mtp_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs,
             layers: tuple[LayerTime, LayerTime | None, LayerTime] | None = None) -> LayerTime:
    """Multi-token-prediction modules (DeepSeek-V3 section 2.2): per module a [T, 2h]x[2h, h/t] projection of
    the normed hidden state and next-token embedding, one decoder layer and the shared LM head again. `layers`:
    the (dense, MoE, head) times of `knobs` when the caller has them."""
    if not model.mtp_layers:
        return LayerTime()
    tokens = knobs.mbs * job.seq_len / knobs.cp
    gf, gb = gemm_fwd_bwd_time(Gemm(tokens, model.hidden_size / knobs.tp, 2 * model.hidden_size), cluster.gpu,
                               job.dtype)
    moe = model.moe is not None and model.moe.is_moe_layer(model.num_layers)
    known = None if layers is None else (layers[1] if moe else layers[0])
    if layers is not None and known is not None:
        layer, head = known, layers[2]
    else:
        layer, head = decoder_layer_time(model, job, cluster, knobs, moe), head_time(model, job, cluster, knobs)
    one = LayerTime(gf, gb) + layer + head
    return one.scaled(model.mtp_layers)


def layer_times(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs,
                full: LayerTimes | None = None) -> LayerTimes:
    """The per-layer times of `knobs`. Fully recomputed layers are priced with `knobs` at full recomputation: taken
    from `full` when the caller has those times already (`layer_times` of those knobs), the same layers when `knobs`
    recompute fully themselves."""
    has_moe = model.moe is not None and model.moe.count_moe_layers(model.num_layers) > 0
    decoder = decoder_layer_time(model, job, cluster, knobs)
    moe = decoder_layer_time(model, job, cluster, knobs, moe=True) if has_moe else None
    if knobs.recompute is Recompute.FULL:
        decoder_full, moe_full = decoder, moe
    elif full is not None:
        decoder_full, moe_full = full.decoder, full.moe
    else:
        full_knobs = replace(knobs, recompute=Recompute.FULL)
        decoder_full = decoder_layer_time(model, job, cluster, full_knobs)
        moe_full = decoder_layer_time(model, job, cluster, full_knobs, moe=True) if has_moe else None
    head = head_time(model, job, cluster, knobs)
    return LayerTimes(decoder, decoder_full,
                      embedding_time(model, job, cluster, knobs) + vision_time(model, job, cluster, knobs),
                      head + mtp_time(model, job, cluster, knobs, (decoder, moe, head)), moe, moe_full)


def decoder_activation(model: ModelSpec, job: JobSpec, tp: int, cp: int, sp: bool, mbs: int,
                       recompute: Recompute, moe: bool = False, etp: int = 1,
                       modules: frozenset[RecomputeModule] | None = None, fp8: bool = False) -> float:
    """Bytes one decoder layer keeps per micro-batch: measured (no recomputation) when the job has a cost
    table, analytical otherwise; full recomputation keeps only the layer input either way. `fp8`: the GPU runs
    the job's FP8 GEMMs (Transformer Engine keeps FP8 copies of their inputs)."""
    measured = job.runtime.measured
    if measured and recompute is not Recompute.FULL:
        return measured.get("decoder", tp, mbs).activation_bytes
    if per_op_sac(recompute, job) and not moe:
        return sac_activation_bytes(model, job.seq_len, mbs, tp, cp, sp)
    return M.layer_activation_bytes(model, job.seq_len, mbs, tp, cp, sp, recompute, job.runtime.attention, moe, etp,
                                    job.runtime.moe_load_factor, modules, fp8)


def held_alive(place: RankPlace) -> int:
    """What a rank's `StageHeld` reads of its micro-batches in flight: their count rounded up at an end (the
    embedding's or the head's buffers), nothing elsewhere; ranks alike in it and in their ends share one."""
    return math.ceil(place.alive) if place.first or place.last else 0


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
    places: tuple[RankPlace, ...]  # per pipeline rank: ends held, sends, micro-batches in flight
    # per (holds the embedding, holds the head, layers): one object's caches (and those of its `with_split`
    # copies), never compared or copied by `replace`; `_held`'s key adds the micro-batches in flight at an end
    _bodies: dict[tuple[bool, bool, StageLayers], StageBody] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _held: dict[tuple[bool, bool, StageLayers, int], H.StageHeld] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    _weights: dict[tuple[bool, bool, int, int], StageWeights] = field(  # per (embedding, head, dense, MoE layers)
        default_factory=dict, init=False, repr=False, compare=False)

    def body(self, first: bool, last: bool, layers: StageLayers) -> StageBody:
        """`stage_body`, once per (embedding, head, layers): the split search prices the same layers on
        many ranks, and ranks differ only in pipeline sends and activations in flight."""
        key = (first, last, layers)
        if key not in self._bodies:
            self._bodies[key] = stage_body(self, first, last, layers)
        return self._bodies[key]

    def weights(self, first: bool, last: bool, layers: StageLayers) -> StageWeights:
        """`stage_weights`, once per (embedding, head, dense layers, MoE layers): stages that differ only in the
        layers they recompute share it."""
        key = (first, last, layers.dense, layers.moe)
        if key not in self._weights:
            self._weights[key] = stage_weights(self, first, last, layers)
        return self._weights[key]

    def held(self, place: RankPlace, layers: StageLayers) -> H.StageHeld:
        """`stage_held` of `layers` at `place`, once per (embedding, head, layers, micro-batches in flight at an
        end): ranks holding neither end differ only in activations in flight, which `StageHeld.in_flight` scales."""
        key = (place.first, place.last, layers, held_alive(place))
        if key not in self._held:
            self._held[key] = stage_held(self, layers, place.first, place.last, key[3])
        return self._held[key]

    def with_split(self, layout: Layout) -> LayoutCosts:
        """These costs for `layout`, which differs from `self.layout` in its split alone (stage_layers,
        recompute_layers): nothing here depends on the split, so the stages cached so far carry over."""
        costs = replace(self, layout=layout)
        object.__setattr__(costs, "_bodies", self._bodies)  # frozen: set as dataclasses' own __init__ does
        object.__setattr__(costs, "_held", self._held)
        object.__setattr__(costs, "_weights", self._weights)
        return costs

    def sharing(self, bodies: dict[tuple[bool, bool, StageLayers], StageBody],
                weights: dict[tuple[bool, bool, int, int], StageWeights]) -> LayoutCosts:
        """These costs with `bodies` and `weights` as their stage caches: a caller's, shared with other layouts
        whose `stage_body` (or `stage_weights`) provably equal these for every (embedding, head, layers); it proves
        it (planner.search.pricing.body_key, weights_key)."""
        object.__setattr__(self, "_bodies", bodies)
        object.__setattr__(self, "_weights", weights)
        return self

    def block_params(self) -> float:
        """Parameters of the block FSDP2 gathers and reduces at once: an MoE layer's on this rank where the model has
        MoE layers, else a dense layer's (`gathered_form`)."""
        return fsdp_block(self.dense_params, self.moe_params)

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


def layer_activations(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs) -> LayerActivations:
    """Bytes a decoder layer of each kind stores per micro-batch under `knobs` (they depend on nothing else)."""
    fp8 = job.dtype is Dtype.FP8 and bool(cluster.gpu.peak_fp8_tflops)

    def act(rc: Recompute, moe: bool) -> float:
        return decoder_activation(model, job, knobs.tp, knobs.cp, knobs.sp, knobs.mbs, rc, moe, knobs.etp,
                                  knobs.modules, fp8)

    has_moe = model.moe is not None and model.moe.count_moe_layers(model.num_layers) > 0
    working = H.working_bytes(model, job.seq_len, knobs.mbs, knobs.tp, knobs.cp, knobs.sp, knobs.recompute,
                              job.runtime.priced_execution.memory)
    return LayerActivations(act(knobs.recompute, False), act(knobs.recompute, True) if has_moe else 0.0,
                            act(Recompute.FULL, False),
                            M.vision_activation_bytes(model, knobs.mbs, knobs.tp, knobs.sp, knobs.recompute,
                                                      job.runtime.attention),
                            max(act(Recompute.NONE, False), act(Recompute.NONE, True) if has_moe else 0.0)
                            if working is None else working)


def layout_costs(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                 times: LayerTimes | None = None, activations: LayerActivations | None = None) -> LayoutCosts:
    """Everything the stages of `layout` share; `times` and `activations` may come from a cache (they depend
    only on the layout's LayerKnobs)."""
    if times is None:
        times = layer_times(model, cluster, job, layout_knobs(layout))
    if activations is None:
        activations = layer_activations(model, cluster, job, layout_knobs(layout))
    t, ep, etp = layout.tp, layout.ep, layout.etp
    kinds = model.moe_layers()
    has_moe = any(kinds)
    hop_s = pipeline_hop_time(model, job, cluster, layout)
    return LayoutCosts(model, cluster, job, layout, layout.num_microbatches(job), times, p2p_s=hop_s,
                       dense_params=one_layer_params(model, job, t, ep, etp, False),
                       moe_params=one_layer_params(model, job, t, ep, etp, True) if has_moe else StageParams(0.0),
                       activations=activations, kinds=kinds,
                       mtp_moe=model.moe is not None and model.moe.is_moe_layer(model.num_layers),
                       places=rank_places(layout, job, cluster, layout.num_microbatches(job), hop_s))


def layout_knobs(layout: Layout) -> LayerKnobs:
    return LayerKnobs(layout.tp, layout.cp, layout.sp, layout.mbs, layout.recompute, layout.ep, layout.etp,
                      layout.recompute_modules)


@dataclass(frozen=True)
class StageBody:
    """What a stage's layers and end pieces (embedding, LM head) cost on whichever rank holds them: time per
    micro-batch, parameters, exposed ZeRO traffic, gradient reduction, optimizer step and states."""

    time: LayerTime
    params: StageParams
    sharded_s: float
    dp_s: float
    optimizer_s: float
    states: M.StateBytes
    offload_s: float = 0.0  # per micro-batch: host copies of offloaded weights and activations not hidden
    host_states: float = 0.0  # bytes per GPU of offloaded optimizer state and weights
    offload_forward_s: float = 0.0  # the part of offload_s in the forward passes


@dataclass(frozen=True)
class StageWeights:
    """What a stage's parameters alone decide, whichever of its layers are recomputed: the parameters (its layers',
    the embedding's and LM head's where it holds them), their states on the GPU and on the host, autograd's gradient
    accumulation per micro-batch and the per-step data-parallel reduce and gather before overlap (`grad_traffic`)."""

    params: StageParams
    states: M.StateBytes
    host_states: float
    accumulation_s: float
    traffic: tuple[float, float]


def stage_weights(costs: LayoutCosts, first: bool, last: bool, layers: StageLayers) -> StageWeights:
    """`StageWeights` of a stage holding `layers` (`LayoutCosts.weights` caches it)."""
    model, cluster, job, layout = costs.model, costs.cluster, costs.job, costs.layout
    params = costs.stage_params(layers)
    if first:
        params = params + StageParams(embedding_params(model, job, layout.tp))
    if last:
        params = params + head_params(model, job, layout.tp, layout.head_beside_embedding, layout.ep, layout.etp)
    return StageWeights(params, stage_states(params, layout, job), host_state_bytes(params, layout, job),
                        grad_accumulation_time(params, layout, job, cluster),
                        grad_traffic(params, layout, job, cluster))


def stage_body(costs: LayoutCosts, first: bool, last: bool, layers: StageLayers) -> StageBody:
    """The rank-independent part of `stage_cost` (`LayoutCosts.body` caches it)."""
    cluster, job, layout = costs.cluster, costs.job, costs.layout
    weights = costs.weights(first, last, layers)
    time, params = costs.layer_time(layers), weights.params
    if first:
        time = time + costs.times.embedding
    if last:
        time = time + costs.times.head
    ex = job.runtime.priced_execution
    offload = stage_offload_exposed(costs.times, costs.activations, costs.dense_params, costs.moe_params, layers,
                                    layout, job, cluster)
    # the runtime's host cost per micro-batch and stage, blocking pipeline sends' host syncs, autograd's gradient adds
    sync = microbatch_sync_s(cluster, layout.pp, layout.vpp, job.runtime.overlap_p2p_comm)
    time += LayerTime(backward=weights.accumulation_s, host=ex.host_microbatch_s + sync)
    return StageBody(
        time, params, sharded_s=sharded_dp_exposed(params, layers.total, layout, job, cluster, time),
        dp_s=dp_reduce_exposed(params, layout, job, cluster, time.backward, time.forward, traffic=weights.traffic),
        optimizer_s=optimizer_time(params, layout, job, cluster, time) + ex.host_step_s + step_sync_s(cluster),
        states=weights.states, offload_s=sum(offload), offload_forward_s=offload[0], host_states=weights.host_states)


def stage_cost(costs: LayoutCosts, rank: int, layers: StageLayers,
               layer_ids: tuple[int, int] = (-1, -1)) -> StageCost:
    """Pipeline rank `rank` holding `layers` (decoder layers by kind, some fully recomputed)."""
    place = costs.places[rank]
    first, last = place.first, place.last
    body, held = costs.body(first, last, layers), costs.held(place, layers)
    states = body.states
    acts, acts_on_host = held.in_flight(place.alive)
    return StageCost(
        pp_rank=rank, first_layer=layer_ids[0], last_layer=layer_ids[1], num_layers=layers.total,
        has_embedding=first, has_lm_head=last, time=body.time, p2p_s=place.p2p_s,
        sharded_dp_exposed_s=body.sharded_s, dp_exposed_s=body.dp_s, optimizer_s=body.optimizer_s,
        weights_gib=states.weights / GIB, gradients_gib=states.gradients / GIB,
        optimizer_state_gib=states.optimizer / GIB, activations_gib=acts / GIB,
        other_gib=held.other / GIB, buffers_gib=costs.job.runtime.priced_execution.memory.outside_allocator_gib,
        layers=layers, reserve_gib=held.reserve / GIB, offload_s=body.offload_s,
        offload_forward_s=body.offload_forward_s, host_gib=(body.host_states + acts_on_host) / GIB)


def rank_layer_ids(layout: Layout, num_layers: int) -> list[list[int]]:
    """Decoder layer indices held by each pipeline rank, over all its model chunks, in order."""
    chunk_layers = layout.chunk_layers(num_layers)
    starts = (0, *accumulate(chunk_layers))
    return [[i for c in layout.rank_chunks(rank) for i in range(starts[c], starts[c + 1])] for rank in range(layout.pp)]


def rank_stage_layers(costs: LayoutCosts, rank: int, ids: list[int]) -> StageLayers:
    """Rank `rank`'s decoder layers `ids` by kind, the first ones fully recomputed as the layout says."""
    return StageLayers.of(tuple(costs.kinds[i] for i in ids),
                          costs.layout.fully_recomputed(rank, costs.model.num_layers))


def evaluate_layout(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                    times: LayerTimes | None = None) -> Prediction:
    """Predict step time, throughput and per-GPU memory of `layout` (validated by the caller)."""
    return evaluate_costs(layout_costs(model, cluster, job, layout, times))


def evaluate_costs(costs: LayoutCosts) -> Prediction:
    """`evaluate_layout` of `costs.layout` from its shared costs (a search prices a solved split with the costs of
    its balanced layout: they differ only in the split, which the shared costs do not depend on)."""
    model, cluster, job, layout = costs.model, costs.cluster, costs.job, costs.layout
    stages: list[StageCost] = []
    for rank, ids in enumerate(rank_layer_ids(layout, model.num_layers)):
        stages.append(stage_cost(costs, rank, rank_stage_layers(costs, rank, ids),
                                 (min(ids, default=-1), max(ids, default=-1))))
    return predict(model, cluster, job, layout, stages, costs.num_microbatches)
