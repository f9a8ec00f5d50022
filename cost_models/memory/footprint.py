"""Memory per GPU: weights, gradients and optimizer state under ZeRO 0-3, and activations.

Model states (mixed-precision Adam, Rajbhandari et al. 2020 section 3; Megatron-LM defaults):
bf16 weights 2 B, gradient buffer `grad_bytes` (4 B fp32 in Megatron with bf16, 2 B in DeepSpeed
fp16), fp32 master weights + Adam m + v 12 B. ZeRO-1 (distributed optimizer) shards the 12 B over
the n = dp·cp ranks that reduce gradients (with HSDP the n = cp·dp_shard ranks of the mesh's shard group, the
shard replicated dp_replicate times: cost_models.sync), ZeRO-2 the gradients as well, ZeRO-3 (FSDP) everything;
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

Where the terms sit in megatron-core 0.16.1 (TE layer spec, gpt_layer_specs.py) and what Megatron's
`--recompute-modules` free (`TokenBytes`): a dense layer fuses its norms into the QKV and FC1 GEMMs
(TELayerNormColumnParallelLinear keeps the norm output as its GEMM input), so `layernorm` frees nothing there;
MLA layers have a separate input norm feeding the q and kv down projections, MoE layers a separate pre-MLP norm
feeding the router and the shared experts: `layernorm` discards those outputs after use and recomputes them
(output-discarding checkpoint: every saved reference to the storage goes). `mla_up_proj` does the same for the
fused bottleneck-norm + up-projection GEMMs' inputs and their outputs Q, K, V (the checkpoint keeps the down-
projection outputs). `moe_act` discards the experts' activation output (the FC2 input) and keeps its input, the
FC1 output. `mlp`, `moe` and `shared_experts` checkpoint their block and keep its input (`moe` re-runs the
router, both all-to-alls and the experts). MoE layers keep no expert output for the combine: megatron-core
multiplies the routing weights inside the expert activation (TEGroupedMLP bias_act_func with permuted_probs)
and unpermutes without them, and the router input and the shared experts' input are one tensor in bf16.

FP8 (Transformer Engine, `fp8`): a Linear in FP8 saves for its wgrad GEMM the quantised copy of its input it
multiplied with, 1 B per element, not the bf16 input (TE docs, "save_original_input": by default the cast
tensor is saved, True saves the original instead; TE PR 1596: LayerNormLinear keeps the quantised ln_out with
column-wise usage "needed for wgrad GEMM"). Found through the reference search; Megatron uses
save_original_input exactly where an output-discarding checkpoint owns the bf16 tensor. So FP8 makes 1 B: the QKV
(or each MLA down projection's), FC1, expert FC1 and FC2, shared FC1/FC2 and MLA up-projection inputs and the
output projection's input copy; 2 B stay: norm inputs (the residual stream), Q, K, V and the attention output
the fused kernel keeps for its own backward (so the output costs 2 + 1 B), the router input (a bf16 GEMM) and
the FC1 outputs the activation's backward reads (DeepSeek-V3 stores those in FP8 too, section 3.3.2; Megatron
only with --activation-func-fp8-input-store, not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from cost_models.compute.flops import (
    kv_heads_per_rank,
    mlp_params_of_width,
    norm_params,
    projector_weights_and_biases,
    vision_outer_params,
)
from meshcore import (
    DEFAULT_RECOMPUTE_MODULES,
    AttentionKernel,
    ModelSpec,
    Recompute,
    RecomputeModule,
    ZeroStage,
)

# CUDA context, cuBLAS/NCCL workspaces and caching-allocator slack, per GPU. A fixed allowance in
# the range the PyTorch and Megatron-LM memory reports show for such runs (1.5-3 GiB).
BUFFER_ALLOWANCE_GIB = 2.0
ADAM_STATE_BYTES = 12.0
WEIGHT_BYTES = 2.0


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


def state_bytes(params: float, zero: ZeroStage, shard: int, grad_bytes: float, trainable: float = 1.0,
                weight_bytes: float = WEIGHT_BYTES, optimizer_bytes: float = ADAM_STATE_BYTES) -> StateBytes:
    """Bytes of weights, gradients and Adam state for `params` parameters sharded `shard` ways, of which the
    `trainable` share has gradients and optimizer state (the rest is frozen: its 16-bit weights only). The runtime
    sets the bytes per parameter (Execution.sharded_weight_bytes, optimizer_bytes): Megatron keeps bf16 weights
    and an fp32 master copy in the optimizer (2 + 12), FSDP2 fp32 weights that are the master copy (4 + 8)."""
    w = params * weight_bytes / (shard if zero >= ZeroStage.WEIGHTS else 1)
    g = params * trainable * grad_bytes / (shard if zero >= ZeroStage.GRADIENTS else 1)
    o = params * trainable * optimizer_bytes / (shard if zero >= ZeroStage.OPTIMIZER else 1)
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


def zero3_working_bytes(model: ModelSpec, tp: int, grad_bytes: float, ep: int = 1, etp: int = 1,
                        unit: float | None = None) -> float:
    """Gathered weights of the current and the prefetched module, plus one module's full gradient; `unit`: the
    gathered module's parameters (default the largest weight matrix, `largest_module_params`; FSDP2 gathers a
    whole transformer block)."""
    unit = largest_module_params(model, tp, ep, etp) if unit is None else unit
    return 2 * unit * WEIGHT_BYTES + unit * grad_bytes


@dataclass(frozen=True)
class TokenBytes:
    """Bytes per token (of the layer's T tokens) one decoder layer keeps for backward on one rank, grouped by
    the recompute module that frees them (module docstring: the derivation and the megatron-core sources)."""

    kept: float = 0.0  # residual-stream norm inputs, fused-norm outputs, attention Q/K/V/out, LSE, dropout masks
    norm_out: float = 0.0  # outputs of separate norm modules (MLA input norm, MoE pre-MLP norm): layernorm
    mla_up: float = 0.0  # MLA up-projection inputs (bottleneck-norm outputs) and their outputs Q, K, V: mla_up_proj
    core_attn: float = 0.0  # unfused attention's s x s scores, softmax and dropout: core_attn
    mlp: float = 0.0  # dense MLP: FC1 input copy, FC1 output, FC2 input: mlp
    moe_act: float = 0.0  # routed experts' FC2 inputs (the activation's outputs): moe_act or moe
    routed: float = 0.0  # router probabilities, routed copies' FC1 inputs and outputs: moe
    shared: float = 0.0  # shared experts' FC1 output and FC2 input: shared_experts or moe
    shared_in: float = 0.0  # fp8: the shared experts' FP8 copy of their input: layernorm, shared_experts or moe

    def freed(self, modules: frozenset[RecomputeModule]) -> float:
        """Bytes per token that recomputing `modules` no longer keeps."""
        moe = RecomputeModule.MOE in modules
        out = self.core_attn if RecomputeModule.CORE_ATTN in modules else 0.0
        out += self.norm_out if RecomputeModule.LAYERNORM in modules else 0.0
        out += self.mla_up if RecomputeModule.MLA_UP_PROJ in modules else 0.0
        out += self.mlp if RecomputeModule.MLP in modules else 0.0
        out += self.moe_act if moe or RecomputeModule.MOE_ACT in modules else 0.0
        out += self.routed if moe else 0.0
        out += self.shared if moe or RecomputeModule.SHARED_EXPERTS in modules else 0.0
        freed_in = moe or modules & {RecomputeModule.LAYERNORM, RecomputeModule.SHARED_EXPERTS}
        return out + (self.shared_in if freed_in else 0.0)

    @property
    def total(self) -> float:
        return (self.kept + self.norm_out + self.mla_up + self.core_attn + self.mlp + self.moe_act + self.routed
                + self.shared + self.shared_in)


def gemm_input_bytes(fp8: bool) -> float:
    """Bytes per element of a GEMM input saved for the weight gradient: 2 (bf16), or 1 when Transformer Engine
    runs the layer in FP8 and keeps the quantised copy it multiplied with (module docstring)."""
    return 1.0 if fp8 else 2.0


def attention_token_bytes(model: ModelSpec, tp: int, r: float, seq_len: int, attention: AttentionKernel,
                          fp8: bool = False) -> TokenBytes:
    """The attention block (module docstring, "attention"). Standard attention: norm input 2h·r, the fused
    norm-QKV GEMM's input q·h·r, Q, K, V 2(a·d + 2·g·d)/t and the output 2·a·d/t for the kernel (+ the output
    projection's FP8 copy a·d/t). MLA: its separate input norm's output feeds two down projections (2·h·r as
    one bf16 tensor, 2·q·h·r as two FP8 copies); the down-projection outputs 2(r_q + r_kv) and k_rope 2·d_rope
    stay; the fused bottleneck norm-up-projections keep their GEMM inputs q(r_q + r_kv) and produce Q, K, V
    2·a/t·(2·(d_nope + d_rope) + d_v). Fused kernels keep a 4 B log-sum-exp per head, unfused ones the 5·a·s/t
    score terms (core_attn)."""
    h, q, mla = model.hidden_size, gemm_input_bytes(fp8), model.mla
    a = model.num_attention_heads / tp
    kept = 2 * h * r + (h * r if model.dropout else 0.0)  # input norm's input; attention dropout mask (1 B)
    scores = 5 * a * seq_len if attention is AttentionKernel.UNFUSED else 0.0
    kept += 4 * a if attention is not AttentionKernel.UNFUSED else 0.0
    if mla is None:
        q_local, kv_local = model.q_dim / tp, kv_heads_per_rank(model, tp) * model.head_dim
        out = 2 * q_local + (q_local if fp8 else 0.0)
        return TokenBytes(kept=kept + q * h * r + 2 * (q_local + 2 * kv_local) + out, core_attn=scores)
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    ranks = mla.q_lora_rank + mla.kv_lora_rank
    kept += 2 * ranks + 2 * mla.qk_rope_head_dim + 2 * a * mla.v_head_dim + (a * mla.v_head_dim if fp8 else 0.0)
    return TokenBytes(kept=kept, norm_out=2 * h * r if not fp8 else 2 * q * h * r,
                      mla_up=q * ranks + 2 * a * (2 * qk + mla.v_head_dim), core_attn=scores)


def _mlp_inner(model: ModelSpec, width: float, fp8: bool) -> float:
    """FC1 output (gate and up, 4·f with a gated MLP, bf16) and FC2 input q·f for an MLP of local width f."""
    return (4 if model.gated_mlp else 2) * width + gemm_input_bytes(fp8) * width


def mlp_token_bytes(model: ModelSpec, tp: int, r: float, fp8: bool = False) -> TokenBytes:
    """A dense MLP (Megatron's TE spec fuses its norm into FC1): norm input 2h·r, FC1's input copy q·h·r, FC1
    output and FC2 input; the hidden dropout mask h·r."""
    h = model.hidden_size
    inner = gemm_input_bytes(fp8) * h * r + _mlp_inner(model, model.ffn_hidden_size / tp, fp8)
    return TokenBytes(kept=2 * h * r + (h * r if model.dropout else 0.0), mlp=inner)


def moe_token_bytes(model: ModelSpec, tp: int, r: float, etp: int, load: float, fp8: bool = False) -> TokenBytes:
    """An MoE MLP on one rank (module docstring, "MoE"): the separate pre-MLP norm's input 2h·r and output 2h·r
    (router input, and the shared experts' input: one bf16 tensor; in FP8 the shared FC1 adds its copy h·r);
    fp32 router probabilities 4·E·r; per routed copy (k·r·etp·load per token) the FC1 input q·h, its output
    (4·f_e/etp gated) and the FC2 input q·f_e/etp; the shared experts' FC1 output and FC2 input at width
    f_s/t. The combine keeps no expert output: megatron-core applies the routing weights inside the expert
    activation (TEGroupedMLP's bias_act_func), and its unpermute takes no probabilities."""
    assert model.moe is not None
    moe, h, q = model.moe, model.hidden_size, gemm_input_bytes(fp8)
    copies = moe.top_k * r * etp * load
    shared = moe.shared_ffn_hidden_size
    return TokenBytes(kept=2 * h * r + (h * r if model.dropout else 0.0), norm_out=2 * h * r,
                      moe_act=copies * q * moe.ffn_hidden_size / etp,
                      routed=4 * moe.num_experts * r + copies * (q * h + (4 if model.gated_mlp else 2)
                                                                 * moe.ffn_hidden_size / etp),
                      shared=_mlp_inner(model, shared / tp, fp8) if shared else 0.0,
                      shared_in=h * r if (fp8 and shared) else 0.0)


def layer_token_bytes(model: ModelSpec, seq_len: int, tp: int, sp: bool, attention: AttentionKernel,
                      moe: bool = False, etp: int = 1, load: float = 1.0, fp8: bool = False) -> TokenBytes:
    """Per-token bytes of one decoder layer without recomputation, by what frees them."""
    r = 1.0 / tp if sp else 1.0
    att = attention_token_bytes(model, tp, r, seq_len, attention, fp8)
    mlp = (moe_token_bytes(model, tp, r, etp, load, fp8) if moe and model.moe is not None
           else mlp_token_bytes(model, tp, r, fp8))
    return TokenBytes(*(getattr(att, f.name) + getattr(mlp, f.name) for f in fields(TokenBytes)))


def selective_modules(recompute: Recompute, modules: frozenset[RecomputeModule] | None) -> frozenset[RecomputeModule]:
    """What a recompute mode recomputes: selective means Megatron's default (core_attn) unless modules are named."""
    if recompute is not Recompute.SELECTIVE:
        return frozenset()
    return modules or DEFAULT_RECOMPUTE_MODULES


def layer_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool,
                           recompute: Recompute, attention: AttentionKernel, moe: bool = False, etp: int = 1,
                           load: float = 1.0, modules: frozenset[RecomputeModule] | None = None,
                           fp8: bool = False) -> float:
    """Activation bytes one decoder layer keeps for backward, per micro-batch, on one GPU: T = mbs·s/cp tokens
    times `layer_token_bytes` less what the recomputed `modules` free; full recomputation keeps the bf16 layer
    input 2h·r only."""
    tokens = mbs * seq_len / cp
    r = 1.0 / tp if sp else 1.0
    if recompute is Recompute.FULL:
        return tokens * 2 * model.hidden_size * r
    terms = layer_token_bytes(model, seq_len, tp, sp, attention, moe, etp, load, fp8)
    return tokens * (terms.total - terms.freed(selective_modules(recompute, modules)))


def logits_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, per_logit: float = 6.0) -> float:
    """Last stage: what the loss holds per logit at its peak (`per_logit`, Execution.logit_bytes or the runtime's
    vocabulary-parallel figure, cost_models.memory.held.loss_logit_bytes): Megatron's vocabulary-parallel
    cross-entropy the
    bf16 logits and its fp32 softmax (2 + 4); torchtitan's F.cross_entropy(pred.float()) at its backward peak the
    saved fp32 log-softmax and two fp32 gradients (4 + 4 + 4)."""
    return mbs * seq_len / cp * model.vocab_size / tp * per_logit


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
