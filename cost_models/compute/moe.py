"""A mixture-of-experts MLP on one GPU: the router, the routed experts' grouped GEMMs on the copies this rank
computes, the shared experts, and the expert-parallel dispatch and combine."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.comm.collectives import (
    Collective,
    all_to_all,
    collective,
    dedup_dispatch,
)
from cost_models.compute.gemms import counted_gemms_time, mlp_gemms
from cost_models.compute.kernels import ELEMENTWISE_BACKWARD, Gemm, activation_bytes, memory_time
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.moe_kernels import expert_gemm_groups, expert_gemms_concurrent, permutation_bytes
from meshcore import ClusterSpec, Dtype, JobSpec, ModelSpec
from meshcore.execution import ExpertGemms
from meshcore.mesh import Group, Mesh


@dataclass(frozen=True)
class MoETime:
    """One MoE MLP per micro-batch: compute forward/backward and the forward's expert-parallel traffic."""

    forward: float
    backward: float
    comm_forward: float  # dispatch + combine all-to-alls (+ expert-TP gather and scatter); backward repeats it


def routed_rows(model: ModelSpec, knobs: LayerKnobs, tokens: float, load: float) -> tuple[float, float]:
    """(tokens a rank routes, routed copies it computes): T·r of the layer's T tokens (r = 1/t under SP), and
    k·T·r·etp·load copies (gathered over the etp ranks, scaled to the busiest rank's load)."""
    assert model.moe is not None
    local = tokens / knobs.tp if knobs.sp else tokens
    return local, local * model.moe.top_k * knobs.etp * load


def moe_gemms(model: ModelSpec, knobs: LayerKnobs, tokens: float, load: float = 1.0,
              issue: ExpertGemms = ExpertGemms.SEQUENTIAL) -> list[tuple[Gemm, float]]:
    """(GEMM, how many) of one MoE MLP on one rank (see `moe_mlp_time`): the router on the rank's T·r tokens,
    per local expert FC1 and FC2 on its share of the k·T·r·etp·load routed copies, grouped as the runtime issues
    them (`moe_kernels.expert_gemm_groups`), the shared experts."""
    assert model.moe is not None
    moe, t = model.moe, knobs.tp
    local, copies = routed_rows(model, knobs, tokens, load)
    local_experts = moe.num_experts / knobs.ep
    concurrent = expert_gemms_concurrent(issue, local_experts)
    out = [(Gemm(local, moe.num_experts, model.hidden_size), 1.0)]
    out += [expert_gemm_groups(g, local_experts, concurrent)
            for g in mlp_gemms(model, copies / local_experts, moe.ffn_hidden_size / knobs.etp)]
    if moe.shared_ffn_hidden_size:
        out += [(g, 1.0) for g in mlp_gemms(model, tokens, moe.shared_ffn_hidden_size / t)]
    return out


def node_limit(model: ModelSpec, ep: int, etp: int, cluster: ClusterSpec) -> int:
    """`dispatch_domain_limit` of the EP group of a layer's (ep, etp) mesh (`Mesh.for_layer`)."""
    return dispatch_domain_limit(model, Mesh.for_layer(1, 1, ep, etp).ep_group, cluster)


def dispatch_domain_limit(model: ModelSpec, ep_group: Group, cluster: ClusterSpec) -> int:
    """Scale-up domains a token may reach under group-limited routing (0: no limit). Experts sit on the ep
    ranks in order, so each of the D domains the group spans holds E/D experts and each routing group E/G:
    with whole groups per domain (G % D == 0) a token reaches at most min(group limit, D) domains
    (DeepSeek-V3: 8 groups on 8 nodes, 4 per token); with each group spread over D/G domains, at most
    group limit x D/G; otherwise the groups give no bound."""
    moe = model.moe
    if moe is None or not moe.group_top_k:
        return 0
    domains = -(-ep_group.size // ep_group.per_domain(cluster))
    if domains <= 1:
        return 0
    if moe.groups % domains == 0:
        return min(moe.group_top_k, domains)
    if domains % moe.groups == 0:
        return moe.group_top_k * (domains // moe.groups)
    return 0


def moe_mlp_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, tokens: float) -> MoETime:
    """Router, routed experts and shared experts of one MoE layer on one GPU (Fedus et al. 2021; Megatron-core
    MoE with the all-to-all token dispatcher and parallel folding).

    The layer's T tokens reach it sequence-sharded (T·r per rank, r = 1/t with SP). Each rank routes its
    tokens (router GEMM [T·r, h]x[h, E]), sends k copies of each to the ranks holding their experts
    (all-to-all over the ep group; with etp > 1 the copies are all-gathered over the etp ranks that split
    each expert) and combines the results the same way back. With balanced routing each rank then computes
    k·T·r·etp copies over its E/ep experts, each expert's GEMMs on k·T·r·etp·ep/E rows against its f_e/etp-wide
    matrices, issued as the runtime issues them (`moe_kernels.expert_gemm_groups`: Transformer Engine's grouped
    linear on 4 streams for Megatron-core); the busiest rank's load is `Runtime.moe_load_factor` x that (dropless
    skew or capacity padding), and it sets the pace. The copies are permuted into expert order and back around the
    all-to-alls at HBM speed (`moe_kernels.permutation_bytes`). Shared experts run as a dense MLP of width f_s/t on
    the T tokens. Backward moves the same bytes again (gradients of the dispatched and combined tokens)."""
    assert model.moe is not None
    moe, h, gpu = model.moe, model.hidden_size, cluster.gpu
    rt, etp, mesh = job.runtime, knobs.etp, knobs.mesh
    load = rt.moe_load_factor
    local, copies = routed_rows(model, knobs, tokens, load)
    local_experts = moe.num_experts / knobs.ep
    router, *experts = moe_gemms(model, knobs, tokens, load, rt.priced_execution.expert_gemms)
    # the router stays bf16 in fp8 training (Transformer Engine quantises only its own linear layers; DeepSeek-V3
    # section 3.3.1 keeps the gating module in its original precision)
    fwd, bwd = counted_gemms_time(experts, cluster, job)
    rf, rb = counted_gemms_time([router], cluster, job, Dtype.BF16)
    fwd, bwd = fwd + rf, bwd + rb
    # the token permutations around the all-to-alls (`permutation_bytes`); the activation reads and writes the FC1
    # output (`activation_bytes`); the fused router's score function and top-k over the fp32 scores (read the
    # logits, write the probabilities and routing map, the load-balancing loss reads them: 12 bytes per score)
    act_f, act_b = (x * moe.ffn_hidden_size / etp for x in activation_bytes(model.mlp_activation))
    perm_f, perm_b = permutation_bytes(copies, h, local_experts, rt.moe_dedup_dispatch)
    router_bytes = local * moe.num_experts * 4 * 3
    fwd = fwd + memory_time(perm_f + router_bytes + copies * act_f, gpu)
    bwd = bwd + memory_time(perm_b + ELEMENTWISE_BACKWARD * router_bytes + copies * act_b, gpu)
    sent = local * moe.top_k * load * h * 2  # bytes of routed copies one rank sends (bf16)
    if rt.moe_dedup_dispatch:
        comm = 2 * dedup_dispatch(local * load * h * 2, moe.top_k, mesh.ep_group, cluster,
                                  dispatch_domain_limit(model, mesh.ep_group, cluster))
    else:
        comm = 2 * all_to_all(sent, mesh.ep_group, cluster)
    if etp > 1:
        comm += (collective(Collective.ALL_GATHER, sent * etp, mesh.etp_group, cluster, rt.multi_rail)
                 + collective(Collective.REDUCE_SCATTER, sent * etp, mesh.etp_group, cluster, rt.multi_rail))
    return MoETime(fwd, bwd, comm)
