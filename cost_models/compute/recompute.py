"""What selective recomputation of a decoder layer's modules adds to its backward (`module_recompute_time`), from what
`cost_models.compute.layer.decoder_layer_time` priced of the layer's forward (`RecomputeTime`)."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.compute.gemms import gemms_time, mlp_gemms
from cost_models.compute.kernels import Gemm, activation_bytes, memory_time
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.moe import routed_rows
from meshcore import AttentionKernel, ClusterSpec, JobSpec, ModelSpec, Recompute, RecomputeModule


@dataclass(frozen=True)
class RecomputeTime:
    """What `decoder_layer_time` already priced that a recomputed module runs again: the attention core's
    forward, one TP all-reduce-equivalent of the layer's hidden states, the MoE MLP's forward compute and its
    forward expert-parallel traffic."""

    core_f: float
    tp_collective: float
    moe_forward: float
    ep_forward: float


def module_recompute_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, moe: bool,
                          redo: RecomputeTime) -> tuple[float, float, float]:
    """(compute, TP, EP) seconds selective recomputation of `knobs.modules` adds to one layer's backward: the
    forward of what it recomputes (megatron-core 0.16.1, cost_models.memory.footprint for what each frees).
      core_attn      the unfused attention core's forward; a fused kernel recomputes its scores anyway: 0.
      layernorm      the separate norms (MLA's input norm, an MoE layer's pre-MLP norm): memory-bound, 4h·r
                     bytes per token each (read and write 2h·r).
      mla_up_proj    the q and kv up-projection GEMMs, their fused bottleneck norms 4(r_q + r_kv) and RoPE.
      moe_act        the routed experts' activation: reads the FC1 output, writes the FC2 input
                     ((6 gated | 4)·f_e/etp bytes per routed copy); no all-to-all is repeated.
      mlp            a dense layer's FC1 and FC2 GEMMs, its activation and its TP collective (SP gather/scatter).
      shared_experts the shared experts' GEMMs, activation and TP collective.
      moe            the whole MoE MLP forward: router, dispatch and combine all-to-alls, experts and shared
                     experts (moe_act and shared_experts are then included).
    """
    mods, gpu, t = knobs.modules, cluster.gpu, knobs.tp
    if knobs.recompute is not Recompute.SELECTIVE:
        return 0.0, 0.0, 0.0
    tokens = knobs.mbs * job.seq_len / knobs.cp
    h, r = model.hidden_size, (1.0 / t if knobs.sp else 1.0)
    gate_bytes = activation_bytes(model.mlp_activation)[0]
    compute = tp = ep = 0.0
    if RecomputeModule.CORE_ATTN in mods and job.runtime.attention is AttentionKernel.UNFUSED:
        compute += redo.core_f
    if RecomputeModule.LAYERNORM in mods:
        norms = (model.mla is not None) + (moe and model.moe is not None)
        compute += memory_time(tokens * norms * 4 * h * r, gpu)
    if RecomputeModule.MLA_UP_PROJ in mods and model.mla is not None:
        mla = model.mla
        heads = model.num_attention_heads / t
        ups = [Gemm(tokens, heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank)]
        if mla.q_lora_rank:
            ups.append(Gemm(tokens, heads * (mla.qk_nope_head_dim + mla.qk_rope_head_dim), mla.q_lora_rank))
        rope = 4 * (model.num_attention_heads / t + 1) * mla.qk_rope_head_dim
        compute += (gemms_time(ups, cluster, job)[0]
                    + memory_time(tokens * (4 * (mla.q_lora_rank + mla.kv_lora_rank) + rope), gpu))
    if moe and model.moe is not None:
        if RecomputeModule.MOE in mods:
            return compute + redo.moe_forward, (redo.tp_collective if model.moe.shared_ffn_hidden_size else 0.0), \
                redo.ep_forward
        if RecomputeModule.MOE_ACT in mods:
            copies = routed_rows(model, knobs, tokens, job.runtime.moe_load_factor)[1]
            compute += memory_time(copies * gate_bytes * model.moe.ffn_hidden_size / knobs.etp, gpu)
        shared = model.moe.shared_ffn_hidden_size
        if RecomputeModule.SHARED_EXPERTS in mods and shared:
            compute += (gemms_time(mlp_gemms(model, tokens, shared / t), cluster, job)[0]
                        + memory_time(tokens * gate_bytes * shared / t, gpu))
            tp += redo.tp_collective
    elif RecomputeModule.MLP in mods:
        f = model.ffn_hidden_size / t
        compute += gemms_time(mlp_gemms(model, tokens, f), cluster, job)[0] + memory_time(tokens * gate_bytes * f, gpu)
        tp += redo.tp_collective
    return compute, (tp if t > 1 else 0.0), ep
