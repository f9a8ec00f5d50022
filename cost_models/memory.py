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

from cost_models.flops import norm_params
from planner.specs import GIB, AttentionKernel, ModelSpec, Recompute, ZeroStage

# CUDA context, cuBLAS/NCCL workspaces and caching-allocator slack, per GPU. A fixed allowance in
# the range the PyTorch and Megatron-LM memory reports show for such runs (1.5-3 GiB).
BUFFER_ALLOWANCE_GIB = 2.0
ADAM_STATE_BYTES = 12.0
WEIGHT_BYTES = 2.0


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads held by one TP rank; when tp exceeds the KV heads they are replicated."""
    return max(1, model.num_kv_heads // tp)


def decoder_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Weights of one decoder layer on one TP rank: column/row-parallel matrices are split, norms and
    the biases added after a row-parallel matmul are replicated."""
    h, f, d = model.hidden_size, model.ffn_hidden_size, model.head_dim
    q_local, kv_local = model.q_dim / tp, kv_heads_per_rank(model, tp) * d
    attn = h * q_local + 2 * h * kv_local + q_local * h
    mlp = (3 if model.gated_mlp else 2) * h * f / tp
    bias = (q_local + 2 * kv_local) if (model.qkv_bias or model.linear_bias) else 0.0
    if model.linear_bias:
        bias += (2 if model.gated_mlp else 1) * f / tp + 2 * h  # fc1 bias split; proj and fc2 biases not
    return attn + mlp + bias + 2 * norm_params(model)


def embedding_params_per_rank(model: ModelSpec, tp: int) -> float:
    """Vocabulary-parallel word embedding (split over TP) + replicated learned positions."""
    return model.vocab_size * model.hidden_size / tp + model.learned_positions * model.hidden_size


def lm_head_params_per_rank(model: ModelSpec, tp: int, pp: int) -> float:
    """Output projection on the last stage; a tied head still keeps its own copy when pp > 1."""
    if model.tied_embeddings and pp == 1:
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


def largest_module_params(model: ModelSpec, tp: int) -> float:
    """The biggest weight matrix of a decoder layer on one TP rank (the ZeRO-3 gather unit)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    qkv = h * (model.q_dim / tp + 2 * kv_heads_per_rank(model, tp) * model.head_dim)
    fc1 = (2 if model.gated_mlp else 1) * h * f / tp
    return max(qkv, fc1, h * f / tp, model.q_dim * h / tp)


def zero3_working_bytes(model: ModelSpec, tp: int, grad_bytes: float) -> float:
    """Gathered weights of the current and the prefetched module, plus one module's full gradient."""
    unit = largest_module_params(model, tp)
    return 2 * unit * WEIGHT_BYTES + unit * grad_bytes


def layer_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool,
                           recompute: Recompute, attention: AttentionKernel) -> float:
    """Activation bytes one decoder layer keeps for backward, per micro-batch, on one GPU."""
    h, f, a = model.hidden_size, model.ffn_hidden_size, model.num_attention_heads
    tokens = mbs * seq_len / cp
    r = 1.0 / tp if sp else 1.0
    if recompute is Recompute.FULL:
        return tokens * 2 * h * r
    q_local = model.q_dim / tp
    kv_local = kv_heads_per_rank(model, tp) * model.head_dim
    replicated = (2 * h + 2 * h) * 2 + (2 * h if model.dropout else 0)
    sharded = 2 * (q_local + 2 * kv_local) + 2 * q_local + (4 if model.gated_mlp else 2) * f / tp + 2 * f / tp
    per_token = replicated * r + sharded
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


def to_gib(num_bytes: float) -> float:
    return num_bytes / GIB
