"""LLM serving on one replica (engine) of tp x pp (x dp attention ranks) GPUs: weights and paged KV cache per GPU,
prefill time (compute-bound), decode step time (memory-bandwidth-bound), and the per-layer collectives.

Roofline per layer (Williams et al. 2009; applied to LLM inference by Pope et al. 2023, "Efficiently scaling
transformer inference", section 2, and Yuan et al. 2024, "LLM inference unveiled: survey and roofline model"):
    t_layer = max(FLOPs / (peak · η(FLOPs per GEMM)), bytes / (HBM · η_mem))
A decode step reads every weight of the stage once and the KV cache of every sequence in the batch, and does
2 FLOPs per weight per token: at batch sizes below peak/HBM (~300 on H100) it is bandwidth-bound. A prefill
does 2·s FLOPs per weight: compute-bound from a few hundred tokens. Tensor parallelism adds two all-reduces of
the tokens' hidden states per layer (Shoeybi et al. 2019, Megatron-LM section 3) on the scale-up domain;
expert parallelism a dispatch and a combine all-to-all per MoE layer (Lepikhin et al. 2021, GShard).
Pipeline parallelism keeps min(batch, pp) micro-batches in flight (vLLM's and SGLang's PP runtime).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.comm.collectives import Collective, all_to_all_time, collective_time, p2p_time
from cost_models.compute.flops import attention_weight_params, kv_heads_per_rank, mlp_params_of_width
from cost_models.compute.kernels import flash_attention_time, gemm_efficiency, memory_time
from cost_models.memory.footprint import (
    BUFFER_ALLOWANCE_GIB,
    decoder_params_per_rank,
    embedding_params_per_rank,
    expert_params_per_rank,
    lm_head_params_per_rank,
)
from meshcore import GIB, ClusterSpec, Dtype, GpuSpec, ModelSpec
from meshcore.inference import KvFormat, ReplicaLayout, WeightFormat

ACT_BYTES = 2.0  # activations and the tensors collectives move are 16-bit


def stage_layers(num_layers: int, pp: int) -> tuple[int, ...]:
    """Decoder layers per pipeline stage, as even as possible, earlier stages taking the remainder (vLLM's
    get_pp_indices)."""
    base, extra = divmod(num_layers, pp)
    return tuple(base + (1 if i < extra else 0) for i in range(pp))


def stage_kinds(model: ModelSpec, pp: int) -> tuple[tuple[int, int], ...]:
    """(dense, MoE) decoder layers on each stage."""
    kinds, out, start = model.moe_layers(), [], 0
    for n in stage_layers(model.num_layers, pp):
        moe = sum(kinds[start:start + n])
        out.append((n - moe, moe))
        start += n
    return tuple(out)


def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv: KvFormat) -> float:
    """KV-cache bytes one token leaves in one layer on one TP rank. GQA: K and V of the rank's KV heads,
    2·max(1, g/tp)·d (heads replicated when tp > g, as vLLM does). MLA (DeepSeek-V2, Liu et al. 2024, section
    2.1.2): the compressed latent and the shared rope key, r_kv + d_rope, held whole by every TP rank."""
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv.bytes
    return 2.0 * kv_heads_per_rank(model, tp) * model.head_dim * kv.bytes


def _expert_split(model: ModelSpec, r: ReplicaLayout) -> tuple[int, int]:
    """(ep, etp) of the routed experts: spread over ep GPUs whole, or tensor-split over tp."""
    return (r.ep, 1) if r.ep > 1 else (1, r.tp)


def layer_weight_bytes(model: ModelSpec, r: ReplicaLayout, moe: bool, weights: WeightFormat) -> float:
    """Bytes of one decoder layer's weights on one GPU (dense part + its routed experts)."""
    params = decoder_params_per_rank(model, r.tp, moe)
    if moe:
        params += expert_params_per_rank(model, *_expert_split(model, r))
    return params * weights.bytes_per_param


def stage_weight_bytes(model: ModelSpec, r: ReplicaLayout, weights: WeightFormat) -> tuple[float, ...]:
    """Weight bytes per GPU on each stage; the embedding on the first, the LM head on the last, both kept 16-bit
    (quantised checkpoints leave them unquantised: AWQ, GPTQ, vLLM's fp8)."""
    out = []
    for i, (dense, moe) in enumerate(stage_kinds(model, r.pp)):
        b = dense * layer_weight_bytes(model, r, False, weights) + moe * layer_weight_bytes(model, r, True, weights)
        if i == 0:
            b += embedding_params_per_rank(model, r.tp) * 2.0
        if i == r.pp - 1:
            b += lm_head_params_per_rank(model, r.tp, beside_embedding=r.pp == 1) * 2.0
        out.append(b)
    return tuple(out)


def activation_workspace_bytes(model: ModelSpec, r: ReplicaLayout, chunk: int) -> float:
    """Peak activations of a prefill chunk of `chunk` tokens on one GPU (what vLLM's profiling run measures):
    the residual stream, QKV, attention output and the widest MLP intermediate, 16-bit:
        chunk · (4·h + (q + 2·kv)/tp + 3·f/tp) · 2 bytes, f the dense or k x expert width."""
    h, f = model.hidden_size, model.ffn_hidden_size
    if model.moe is not None:
        f = max(f, model.moe.top_k * model.moe.ffn_hidden_size + model.moe.shared_ffn_hidden_size)
    width = 4 * h + (model.q_dim + 2 * model.kv_dim) / r.tp + 3 * f / r.tp
    return chunk * width * ACT_BYTES


@dataclass(frozen=True)
class ServingMemory:
    """Per GPU on the fullest stage, bytes: weights, activation workspace (+ the fixed allowance), and what the
    engine's memory share leaves for the KV cache; `kv_per_sequence` is one finished request's pages."""

    capacity: float
    weights: float
    workspace: float
    kv_budget: float
    kv_per_sequence: float

    @property
    def max_batch(self) -> int:
        """Largest number of sequences per attention rank whose pages fit (0: the weights do not fit)."""
        if self.kv_budget <= 0:
            return 0
        return int(self.kv_budget // self.kv_per_sequence)


def replica_memory(model: ModelSpec, gpu: GpuSpec, r: ReplicaLayout, context_len: int, weights: WeightFormat,
                   kv: KvFormat, block_size: int, utilization: float, chunk: int) -> ServingMemory:
    """Paged KV cache (Kwon et al. 2023, vLLM, section 4.2): a request holds ceil(context / block) pages of
    block tokens; the cache gets what remains of utilization x memory after weights and the workspace."""
    capacity = utilization * gpu.memory_gib * GIB
    stage_w = stage_weight_bytes(model, r, weights)
    layers = stage_layers(model.num_layers, r.pp)
    workspace = activation_workspace_bytes(model, r, chunk) + BUFFER_ALLOWANCE_GIB * GIB
    pages = math.ceil(context_len / block_size) * block_size
    per_layer = pages * kv_bytes_per_token_layer(model, r.tp, kv)
    # the binding stage: the fewest sequences fit in what its weights leave
    worst = min(range(r.pp), key=lambda i: (capacity - stage_w[i] - workspace) / (layers[i] * per_layer))
    return ServingMemory(capacity, stage_w[worst], workspace, capacity - stage_w[worst] - workspace,
                         layers[worst] * per_layer)


def _roofline(flops: float, nbytes: float, gpu: GpuSpec, weights: WeightFormat, gemms: int = 4) -> float:
    """max(compute, memory) of a layer's GEMMs at the efficiency of one of its `gemms` GEMMs (`gemm_efficiency`, as
    training prices them: fp8 weights at the fp8 peak, on the curve point of the equally long bf16 GEMM, x
    fp8_matmul_ratio); int8/int4 weight-only at the 16-bit peak."""
    if flops <= 0:
        return memory_time(nbytes, gpu)
    dtype = Dtype.FP8 if weights is WeightFormat.FP8 else Dtype.BF16
    return max(flops / (gpu.peak(dtype) * gemm_efficiency(flops / gemms, gpu, dtype)), memory_time(nbytes, gpu))


def _active_matmul_params(model: ModelSpec, moe: bool) -> tuple[float, float]:
    """(attention + dense MLP or shared experts, routed experts a token goes through) matmul weights per layer."""
    attn = float(attention_weight_params(model))
    if not moe or model.moe is None:
        return attn + mlp_params_of_width(model, model.ffn_hidden_size), 0.0
    shared = mlp_params_of_width(model, model.moe.shared_ffn_hidden_size) + model.hidden_size * model.moe.num_experts
    return attn + shared, model.moe.top_k * mlp_params_of_width(model, model.moe.ffn_hidden_size)


def touched_expert_share(model: ModelSpec, tokens: float) -> float:
    """Share of the routed experts at least one of `tokens` tokens picks, uniform top-k routing:
    1 − (1 − k/E)^tokens. A decode step reads only those experts' weights."""
    if model.moe is None:
        return 1.0
    return 1.0 - float((1.0 - model.moe.top_k / model.moe.num_experts) ** max(tokens, 0.0))


def _collectives(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: float, moe: bool) -> float:
    """Two TP all-reduces of the tokens' hidden states per layer (attention output, MLP output) inside the
    scale-up domain; a MoE layer with ep > 1 also dispatches and combines k copies of each token (all-to-all)."""
    h = model.hidden_size
    t = 2.0 * collective_time(Collective.ALL_REDUCE, tokens * h * ACT_BYTES, r.tp, 1, cluster)
    if moe and r.ep > 1 and model.moe is not None:
        t += 2.0 * all_to_all_time(tokens * model.moe.top_k * h * ACT_BYTES, r.ep, 1, cluster)
    return t


def decode_layer_time(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, batch: float, context: float,
                      moe: bool, weights: WeightFormat, kv: KvFormat) -> float:
    """One decode step of one layer for `batch` sequences per attention rank with `context` keys each:
    bytes = dense weights/tp + touched experts + batch·context·KV bytes; FLOPs = 2·batch·active weights/tp
    + 4·batch·context·a·d/tp (one query against the cached keys and values), plus the collectives."""
    gpu = cluster.gpu
    dense, routed = _active_matmul_params(model, moe)
    nbytes = decoder_params_per_rank(model, r.tp, moe) * weights.bytes_per_param
    if moe:
        share = touched_expert_share(model, batch * r.dp)
        nbytes += expert_params_per_rank(model, *_expert_split(model, r)) * weights.bytes_per_param * share
    nbytes += batch * context * kv_bytes_per_token_layer(model, r.tp, kv)
    flops = 2.0 * batch * (dense / r.tp + routed / (r.tp * r.dp))
    flops += 4.0 * batch * context * model.q_dim / r.tp
    return _roofline(flops, nbytes, gpu, weights) + _collectives(model, cluster, r, batch, moe)


def _head_time(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: float) -> float:
    """LM head for `tokens` tokens: V·h/tp 16-bit weights read, 2·tokens·h·V/tp FLOPs."""
    params = model.vocab_size * model.hidden_size / r.tp
    return _roofline(2.0 * tokens * params, params * 2.0, cluster.gpu, WeightFormat.BF16, gemms=1)


def decode_stage_times(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, batch: float, context: float,
                       weights: WeightFormat, kv: KvFormat) -> tuple[float, ...]:
    """Seconds of one decode step of `batch` sequences (per attention rank) on each pipeline stage."""
    dense_t = decode_layer_time(model, cluster, r, batch, context, False, weights, kv)
    moe_t = decode_layer_time(model, cluster, r, batch, context, True, weights, kv) if model.moe else 0.0
    times = [d * dense_t + m * moe_t for d, m in stage_kinds(model, r.pp)]
    times[-1] += _head_time(model, cluster, r, batch)
    return tuple(times)


def _hop(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: float) -> float:
    """One pipeline send of `tokens` hidden states between stages tp GPUs apart."""
    return p2p_time(tokens * model.hidden_size * ACT_BYTES / r.tp, r.tp, cluster) if r.pp > 1 else 0.0


def decode_step_time(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, batch: int, context: float,
                     weights: WeightFormat, kv: KvFormat) -> float:
    """Time per output token of `batch` sequences per attention rank. With pp stages the batch runs as
    m = min(batch, pp) micro-batches; a token of a sequence takes the longer of its trip through the stages and
    m turns of the slowest stage: TPOT = max(Σ t_s + (pp − 1)·hop, m · max t_s) at batch/m per micro-batch."""
    m = min(batch, r.pp)
    micro = batch / m
    stages = decode_stage_times(model, cluster, r, micro, context, weights, kv)
    return max(sum(stages) + (r.pp - 1) * _hop(model, cluster, r, micro), m * max(stages))


@dataclass(frozen=True)
class PrefillCost:
    """One request's prompt: `latency` through all stages, and `busy` the slowest stage's time (the pipeline
    admits a new prompt that often)."""

    latency: float
    busy: float


def prefill_layer_time(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: int, moe: bool,
                       weights: WeightFormat, prompts: float = 1.0) -> float:
    """One layer over `tokens` prompt tokens in one batch of `prompts` equal prompts: 2·tokens·active weights/tp
    GEMM FLOPs (routed experts over tp·dp GPUs), causal attention 2·s²·a·d/tp FLOPs per prompt of s = tokens/prompts
    at the fused-attention rate for s keys, the collectives."""
    gpu = cluster.gpu
    dense, routed = _active_matmul_params(model, moe)
    flops = 2.0 * tokens * (dense / r.tp + routed / (r.tp * r.dp))
    nbytes = layer_weight_bytes(model, r, moe, weights)
    s = tokens / prompts
    attn_flops = 2.0 * s**2 * model.num_attention_heads * model.head_dim / r.tp
    attn = prompts * flash_attention_time(attn_flops, round(s), model.head_dim, gpu)[0]
    return _roofline(flops, nbytes, gpu, weights) + attn + _collectives(model, cluster, r, tokens, moe)


def prefill_cost(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: int,
                 weights: WeightFormat, prompts: float = 1.0) -> PrefillCost:
    """Prefill of one prompt of `tokens` tokens, or of one batch of `prompts` such prompts; the first output
    tokens come from the last stage's LM head."""
    total = round(tokens * prompts)
    dense_t = prefill_layer_time(model, cluster, r, total, False, weights, prompts)
    moe_t = prefill_layer_time(model, cluster, r, total, True, weights, prompts) if model.moe else 0.0
    stages = [d * dense_t + m * moe_t for d, m in stage_kinds(model, r.pp)]
    stages[-1] += _head_time(model, cluster, r, prompts)
    latency = sum(stages) + (r.pp - 1) * _hop(model, cluster, r, total)
    return PrefillCost(latency, max(stages))


def kv_transfer_time(model: ModelSpec, cluster: ClusterSpec, r: ReplicaLayout, tokens: int, kv: KvFormat) -> float:
    """Disaggregated serving: a prompt's KV cache moves from the prefill to the decode replica over the scale-out
    network, every prefill GPU sending its share through its own NIC (DistServe section 4; Mooncake):
        t = α + tokens · L · (KV bytes per token and layer, whole model) / (tp·pp) / NIC bus bandwidth."""
    total = tokens * model.num_layers * kv_bytes_per_token_layer(model, 1, kv)
    link = cluster.scale_out
    return link.latency_us * 1e-6 + total / (r.tp * r.pp) / link.bus_bytes_per_s
