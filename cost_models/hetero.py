"""One training step of a pipeline across node groups of different hardware (meshcore.cluster.HeteroLayout).

Each stage is priced by the homogeneous cost model on its own group's ClusterSpec (cost_models.step: `layout_costs`
of the group layout with the stage's TP degree, `stage_cost` at the stage's pipeline rank), so its layers, the
embedding or LM head it holds, its activations in flight, its ZeRO traffic, gradient reduction (the stage's dp
ranks all sit in its group) and optimizer step are the model's usual ones. What changes is the pipeline send:

    hop(a, b) = same group:  p2p_time on that group, stride tp·dp          (cost_models.comm.collectives, as
    homogeneous)
                across:      α_link + S / min(link, scale-up of a, scale-up of b) bus bandwidth,
                             S = mbs·seq·hidden·2 / min(tp_a, tp_b) bytes
Across groups every GPU of the narrower stage (fewer TP ranks) sends or receives its 1/min(tp_a, tp_b) share of
the bf16 activation over its own NIC share; with equal TP degrees and the default link this is the homogeneous
send of a stage whose tp·dp ranks fill a scale-up domain. A stage's send time per micro-batch is its hop in plus
its hop out (cost_models.step.pipeline_hops for one chunk per rank).

The step is the homogeneous one (cost_models.predict, `predict`): 1F1B over the uneven stage times
(cost_models.pipeline.stages), plus the slowest stage's gradient reduction and optimizer step, plus the tied-embedding
all-reduce across the first and last stage. MFU divides by the peaks of the GPUs the layout uses, group by group.
"""

from __future__ import annotations

from dataclasses import replace

from cost_models.comm.collectives import Collective, collective_time, p2p_time
from cost_models.compute import flops as F
from cost_models.compute.knobs import LayerActivations, LayerTimes
from cost_models.pipeline.stages import bubble_fraction, pipeline_time
from cost_models.prediction import Prediction, StageCost, StageLayers, step_breakdown
from cost_models.step import LayoutCosts, layout_costs, stage_cost
from meshcore import DEFAULT_SCHEDULE, ClusterSpec, JobSpec, ModelSpec
from meshcore.cluster import HeteroCluster, HeteroLayout


def activation_bytes(model: ModelSpec, job: JobSpec, mbs: int, tp: int) -> float:
    """Bytes of one micro-batch's bf16 activation [mbs, seq, hidden] held by one of `tp` ranks (sequence-parallel
    shards, or the share each rank sends)."""
    return mbs * job.seq_len * model.hidden_size * 2 / tp


def link_cluster(cluster: HeteroCluster, a: str, b: str) -> ClusterSpec:
    """Group `a`'s ClusterSpec with the a-b link as its scale-out network and the slower scale-up of the two: a send
    priced on it with a stride past the scale-up domain crosses the link (cost_models.comm.collectives.group_link)."""
    ca, cb = cluster.group(a).cluster, cluster.group(b).cluster
    up = min(ca.scale_up, cb.scale_up, key=lambda link: link.bus_bytes_per_s)
    return replace(ca, scale_out=cluster.link(a, b), scale_up=up)


def hop_time(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout, a: int, b: int) -> float:
    """One send/recv of one micro-batch's activation from stage `a` to stage `b` (formula in the module docstring)."""
    sa, sb = layout.stages[a], layout.stages[b]
    tp = min(sa.tp, sb.tp)
    nbytes = activation_bytes(model, job, layout.mbs, tp)
    if sa.group == sb.group:
        return p2p_time(nbytes, sa.tp * layout.dp, cluster.group(sa.group).cluster)
    link = link_cluster(cluster, sa.group, sb.group)
    return p2p_time(nbytes, max(link.scale_up_size, 1), link)


def stage_hops(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout, s: int) -> float:
    """Send time per micro-batch and direction of stage `s`: its hop in and its hop out."""
    hops = hop_time(model, job, cluster, layout, s - 1, s) if s > 0 else 0.0
    return hops + (hop_time(model, job, cluster, layout, s, s + 1) if s < layout.pp - 1 else 0.0)


def group_costs(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout, group: str, tp: int,
                times: LayerTimes | None = None, activations: LayerActivations | None = None) -> LayoutCosts:
    """What every stage of TP degree `tp` on `group` shares (`layout_costs` on the group's ClusterSpec)."""
    return layout_costs(model, cluster.group(group).cluster, job, layout.group_layout(tp), times, activations)


def hetero_stage(costs: LayoutCosts, s: int, layers: StageLayers, hops_s: float,
                 layer_ids: tuple[int, int] = (-1, -1)) -> StageCost:
    """Stage `s` holding `layers`, priced on its group's costs, with its cross-group send time `hops_s`."""
    return replace(stage_cost(costs, s, layers, layer_ids), p2p_s=hops_s)


def hetero_stages(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout,
                  costs: dict[tuple[str, int], LayoutCosts] | None = None) -> list[StageCost]:
    """Every stage of `layout` priced (`costs` caches group costs by (group, tp))."""
    costs = {} if costs is None else costs
    out, first = [], 0
    for s, st in enumerate(layout.stages):
        key = (st.group, st.tp)
        if key not in costs:
            costs[key] = group_costs(model, job, cluster, layout, st.group, st.tp)
        layers = costs[key].uniform(st.layers, st.layers if layout.recompute.value == "full" else st.full)
        ids = (first, first + st.layers - 1) if st.layers else (-1, -1)
        out.append(hetero_stage(costs[key], s, layers, stage_hops(model, job, cluster, layout, s), ids))
        first += st.layers
    return out


def predict_hetero(model: ModelSpec, job: JobSpec, cluster: HeteroCluster, layout: HeteroLayout,
                   costs: dict[tuple[str, int], LayoutCosts] | None = None) -> Prediction:
    """Step time, throughput, MFU and per-stage memory of `layout` (composition in the module docstring)."""
    stages = hetero_stages(model, job, cluster, layout, costs)
    m = layout.num_microbatches(job)
    pipe = pipeline_time([s.compute_s for s in stages], m, 1, DEFAULT_SCHEDULE)
    tail = max(stages, key=lambda s: s.dp_exposed_s + s.optimizer_s)
    emb_sync = 0.0
    if model.tied_embeddings and layout.pp > 1:
        first, last = layout.stages[0], layout.stages[-1]
        tp = min(first.tp, last.tp)
        nbytes = model.vocab_size * model.hidden_size / tp * job.runtime.grad_reduce_bytes
        where = link_cluster(cluster, first.group, last.group)
        emb_sync = collective_time(Collective.ALL_REDUCE, nbytes, 2, where.scale_up_size, where)
    step = pipe + tail.dp_exposed_s + tail.optimizer_s + emb_sync
    breakdown = step_breakdown(stages, m, pipe, emb_sync)
    model_flops = F.model_flops_per_sequence(model, job.seq_len) * job.global_batch
    full_layers = sum(s.layers.dense_full for s in stages)
    hw_flops = model_flops + full_layers * F.decoder_matmul_flops(model, job.seq_len) * job.global_batch
    peaks = sum(st.tp * layout.dp * cluster.group(st.group).cluster.gpu.peak(job.dtype) for st in layout.stages)
    capacity = [cluster.group(st.group).cluster.gpu.memory_gib for st in layout.stages]
    tightest = max(range(layout.pp), key=lambda s: stages[s].peak_memory_gib / capacity[s])
    world = layout.world
    return Prediction(
        step_time_s=step, tokens_per_s=job.tokens_per_step / step,
        model_tflops_per_gpu=model_flops / step / world / 1e12, hardware_tflops_per_gpu=hw_flops / step / world / 1e12,
        mfu=model_flops / step / peaks, hfu=hw_flops / step / peaks,
        peak_memory_gib=stages[tightest].peak_memory_gib, memory_capacity_gib=capacity[tightest],
        fits=all(s.peak_memory_gib <= c for s, c in zip(stages, capacity, strict=True)),
        bubble_fraction=bubble_fraction(DEFAULT_SCHEDULE, layout.pp, m, 1), num_microbatches=m,
        breakdown=breakdown, stages=tuple(stages))
