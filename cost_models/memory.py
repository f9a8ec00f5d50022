"""Memory per GPU: weights, gradients and optimizer state under ZeRO 0-3, and activations.

Model states (mixed-precision Adam, Rajbhandari et al. 2020 section 3; Megatron-LM defaults):
bf16 weights 2 B, gradient buffer `grad_bytes` (4 B fp32 in Megatron with bf16, 2 B in DeepSpeed
fp16), fp32 master weights + Adam m + v 12 B. ZeRO-1 (distributed optimizer) shards the 12 B over
the n = dp·cp ranks that reduce gradients, ZeRO-2 the gradients as well, ZeRO-3 (FSDP) everything;
ZeRO-3 also holds gathered weights of the module being computed and the next one (prefetch) and
that module's full gradient before it is reduce-scattered.

Activations stored per decoder layer and micro-batch, 16-bit, derived term by term as in
Korthikanti et al. 2022 section 4.1 (Table 2) and generalised to GQA, gated MLPs, any FFN width,
fused attention and context parallelism. Per token, with r = 1/t under sequence parallelism (else 1):
    norm inputs 2·2h·r, QKV and FC1 inputs 2·2h·r, dropout masks 2·h·r (if the model has dropout),
    Q, K, V 2(a·d + 2·g·d)/t, attention output 2·a·d/t, FC1 output 2·f/t (4·f/t gated),
    FC2 input 2·f/t, unfused attention 5·a·s/t (softmax 2, its dropout mask 1, dropout output 2),
    fused attention instead keeps its log-sum-exp 4·a/t.
For an MHA GPT with f = 4h this is s·b·h·(10 + 24/t + 5·a·s/(h·t)), the paper's TP row.
Selective recomputation drops the s² term; full recomputation keeps only the layer input 2·h·r,
plus, transiently, one layer's activations while that layer is recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.flops import mlp_params_of_width, norm_params, projector_weights_and_biases, vision_outer_params
from planner.specs import AttentionKernel, ModelSpec, Recompute, ZeroStage

# CUDA context, cuBLAS/NCCL workspaces and caching-allocator slack, per GPU. A fixed allowance in
# the range the PyTorch and Megatron-LM memory reports show for such runs (1.5-3 GiB).
BUFFER_ALLOWANCE_GIB = 2.0
ADAM_STATE_BYTES = 12.0
WEIGHT_BYTES = 2.0


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads held by one TP rank; when tp exceeds the KV heads they are replicated."""
    return max(1, model.num_kv_heads // tp)


def attention_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Attention weights of one TP rank. Column/row-parallel matrices are split; MLA's down projections
    (h x r_q, h x (r_kv + d_rope)) and its bottleneck norms are replicated, as Megatron-core runs them."""
    h, d, mla = model.hidden_size, model.head_dim, model.mla
    qk_norms = 2 * d if model.qk_norm else 0
    if mla is None:
        q_local, kv_local = model.q_dim / tp, kv_heads_per_rank(model, tp) * d
        bias = (q_local + 2 * kv_local) if (model.qkv_bias or model.linear_bias) else 0.0
        return h * q_local + 2 * h * kv_local + q_local * h + bias + qk_norms
    heads = model.num_attention_heads / tp
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    q = (h * mla.q_lora_rank + mla.q_lora_rank * heads * qk) if mla.q_lora_rank else h * heads * qk
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * heads * (mla.qk_nope_head_dim
                                                                                      + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * h + mla.q_lora_rank + mla.kv_lora_rank + qk_norms


def decoder_params_per_rank(model: ModelSpec, tp: int, moe: bool = False) -> float:
    """Weights of one decoder layer on one TP rank that reduce over the dense data-parallel group: attention,
    norms, biases and the MLP (dense layers) or the router and shared experts (MoE layers, shared experts
    split over TP like a dense MLP); the routed experts are `expert_params_per_rank`."""
    h, f = model.hidden_size, model.ffn_hidden_size
    if moe and model.moe is not None:
        mlp = h * model.moe.num_experts + mlp_params_of_width(model, model.moe.shared_ffn_hidden_size) / tp
        mlp += model.moe.num_experts if model.moe.router_bias else 0
    else:
        mlp = mlp_params_of_width(model, f) / tp
        if model.linear_bias:
            mlp += (2 if model.gated_mlp else 1) * f / tp + 2 * h  # fc1 bias split; proj and fc2 biases not
    return attention_params_per_rank(model, tp) + mlp + 2 * norm_params(model)


def expert_params_per_rank(model: ModelSpec, ep: int, etp: int) -> float:
    """Routed-expert weights of one MoE layer on one rank: E/ep experts, each split etp ways."""
    if model.moe is None:
        return 0.0
    moe = model.moe
    return moe.num_experts / ep * mlp_params_of_width(model, moe.ffn_hidden_size) / etp


def embedding_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Vocabulary-parallel word embedding (split over TP) + replicated learned positions."""
    return model.vocab_size * model.hidden_size / tp + model.learned_positions * model.hidden_size


def lm_head_params_per_rank(model: ModelSpec, tp: int, beside_embedding: bool) -> float:
    """Output projection on the head's rank; a tied head keeps its own copy unless the embedding is on that
    rank too."""
    if model.tied_embeddings and beside_embedding:
        return 0.0
    return model.vocab_size * model.hidden_size / tp


@dataclass(frozen=True)
class StateBytes:
    weights: float
    gradients: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer


def state_bytes(params: float, zero: ZeroStage, shard: int, grad_bytes: float) -> StateBytes:
    """Bytes of weights, gradients and Adam state for `params` parameters sharded `shard` ways."""
    w = params * WEIGHT_BYTES / (shard if zero >= ZeroStage.WEIGHTS else 1)
    g = params * grad_bytes / (shard if zero >= ZeroStage.GRADIENTS else 1)
    o = params * ADAM_STATE_BYTES / (shard if zero >= ZeroStage.OPTIMIZER else 1)
    return StateBytes(w, g, o)


def largest_module_params(model: ModelSpec, tp: int, ep: int = 1, etp: int = 1) -> float:
    """The biggest weight matrix of a decoder layer on one rank (the ZeRO-3 gather unit); an MoE layer's
    local routed experts are gathered as one grouped module per projection (E/ep experts, width f_e/etp)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    gate = 2 if model.gated_mlp else 1
    qkv = h * (model.q_dim / tp + 2 * kv_heads_per_rank(model, tp) * model.head_dim)
    fc1 = gate * h * f / tp
    experts = (model.moe.num_experts / ep * gate * h * model.moe.ffn_hidden_size / etp) if model.moe else 0.0
    return max(qkv, fc1, h * f / tp, model.q_dim * h / tp, attention_params_per_rank(model, tp) / 3, experts)


def zero3_working_bytes(model: ModelSpec, tp: int, grad_bytes: float, ep: int = 1, etp: int = 1) -> float:
    """Gathered weights of the current and the prefetched module, plus one module's full gradient."""
    unit = largest_module_params(model, tp, ep, etp)
    return 2 * unit * WEIGHT_BYTES + unit * grad_bytes


def _attention_activation_per_token(model: ModelSpec, tp: int, r: float) -> float:
    """Bytes per token the attention block keeps (without the s² scores): its norm input and QKV input
    2·2h·r, Q, K, V and the attention output; MLA instead keeps its down-projection outputs, the
    bottleneck norms' inputs and outputs (2·2·r_q, 2·2·r_kv), and Q, K, V of widths a·(d_nope + d_rope),
    a·(d_nope + d_rope), a·d_v per rank."""
    hidden = 2 * 2 * model.hidden_size * r
    mla = model.mla
    if mla is None:
        q_local = model.q_dim / tp
        kv_local = kv_heads_per_rank(model, tp) * model.head_dim
        return hidden + 2 * (q_local + 2 * kv_local) + 2 * q_local
    heads = model.num_attention_heads / tp
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    bottleneck = 2 * 2 * (mla.q_lora_rank + mla.kv_lora_rank) + 2 * mla.qk_rope_head_dim
    return hidden + bottleneck + 2 * heads * (2 * qk + mla.v_head_dim) + 2 * heads * mla.v_head_dim


def _mlp_activation_per_token(model: ModelSpec, width: float) -> float:
    """FC1 output (gate and up, 4·f with a gated MLP) and FC2 input 2·f for an MLP of local width f."""
    return (4 if model.gated_mlp else 2) * width + 2 * width


def _moe_activation_per_token(model: ModelSpec, tp: int, r: float, etp: int, load: float) -> float:
    """Bytes per token (of the layer's T tokens) an MoE MLP keeps on one rank: norm and router input 2·2h·r,
    fp32 router probabilities 4·E·r; per routed copy (k·r per token, gathered over etp and scaled by the
    busiest rank's load) the expert input 2h, its FC1 output and FC2 input of width f_e/etp and the expert
    output the combine weights 2h; the shared experts as a dense MLP of width f_s/tp on gathered tokens."""
    assert model.moe is not None
    moe, h = model.moe, model.hidden_size
    router = 2 * 2 * h * r + 4 * moe.num_experts * r
    copies = moe.top_k * r * etp * load
    routed = copies * (2 * h + _mlp_activation_per_token(model, moe.ffn_hidden_size / etp) + 2 * h)
    shared = (2 * h + _mlp_activation_per_token(model, moe.shared_ffn_hidden_size / tp)
              if moe.shared_ffn_hidden_size else 0.0)
    return router + routed + shared


def layer_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool,
                           recompute: Recompute, attention: AttentionKernel, moe: bool = False, etp: int = 1,
                           load: float = 1.0) -> float:
    """Activation bytes one decoder layer keeps for backward, per micro-batch, on one GPU."""
    h, f, a = model.hidden_size, model.ffn_hidden_size, model.num_attention_heads
    tokens = mbs * seq_len / cp
    r = 1.0 / tp if sp else 1.0
    if recompute is Recompute.FULL:
        return tokens * 2 * h * r
    per_token = _attention_activation_per_token(model, tp, r) + (2 * h * r if model.dropout else 0)
    if moe and model.moe is not None:
        per_token += _moe_activation_per_token(model, tp, r, etp, load)
    else:
        per_token += 2 * 2 * h * r + _mlp_activation_per_token(model, f / tp)
    if attention is AttentionKernel.UNFUSED:
        if recompute is Recompute.NONE:
            per_token += 5 * a / tp * seq_len  # scores of local queries against all s keys
    else:
        per_token += 4 * a / tp  # fp32 log-sum-exp per head and query
    return tokens * per_token


def logits_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int) -> float:
    """Last stage: bf16 logits and the fp32 softmax the vocabulary-parallel cross-entropy keeps."""
    return mbs * seq_len / cp * model.vocab_size / tp * (2 + 4)


def embedding_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool) -> float:
    """First stage: the embedding dropout mask (GPT-style models), per micro-batch."""
    if not model.dropout:
        return 0.0
    return mbs * seq_len / cp * model.hidden_size / (tp if sp else 1)

def vision_params_per_rank(model: ModelSpec, tp: int) -> float:
    """The vision encoder and projector on one TP rank of the first stage: encoder layers split like decoder
    layers, patch embedding, class token, positions and the two outer LayerNorms replicated, projector weights
    split (column then row parallel) with their biases replicated."""
    vision = model.vision
    if vision is None:
        return 0.0
    weights, biases = projector_weights_and_biases(model)
    layers = vision.num_layers * decoder_params_per_rank(vision.as_model(), tp)
    return layers + vision_outer_params(model) + weights / tp + biases


def vision_activation_bytes(model: ModelSpec, mbs: int, tp: int, sp: bool, recompute: Recompute,
                            attention: AttentionKernel) -> float:
    """Bytes the vision encoder and projector keep per micro-batch: every encoder layer on images·tokens
    (as a decoder layer would, bidirectional), and the projector's input, GELU input and output and second
    input (2·h_v + 3·2·p/t per patch token)."""
    vision = model.vision
    if vision is None:
        return 0.0
    images = mbs * vision.images
    per_layer = layer_activation_bytes(vision.as_model(), vision.tokens, images, tp, 1, sp, recompute, attention)
    width = vision.projector_hidden or model.hidden_size
    projector = images * vision.patches * (2 * vision.hidden_size + 3 * 2 * width / tp)
    return vision.num_layers * per_layer + projector
