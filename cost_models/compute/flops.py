"""Exact parameter counts and matmul FLOPs of a dense decoder-only transformer, per layer kind.

Conventions (those of Narayanan et al. 2021 and Korthikanti et al. 2022, and of FlopCounterMode):
a multiply-add is 2 FLOPs; only matrix multiplications are counted (norms, softmax and other
element-wise work is priced as memory traffic in `cost_models.compute.kernels`); attention scores and values
are counted in full (4·s²·a·d per sequence and layer, no causal halving), as MFU figures in those
papers do. Backward = 2 x forward (input and weight gradients).
"""

from __future__ import annotations

from meshcore import LayerKind, ModelSpec, Norm


def norm_params(model: ModelSpec) -> int:
    """LayerNorm has a weight and a bias of size h; RMSNorm only a weight."""
    return model.hidden_size * (2 if model.norm is Norm.LAYERNORM else 1)


def attention_weight_params(model: ModelSpec) -> int:
    """W_Q (h x a·d), W_K and W_V (h x g·d each, GQA), W_O (a·d x h): 2·h·a·d + 2·h·g·d.

    Multi-head latent attention (DeepSeek-V3, arXiv 2412.19437 section 2.1.1): queries through a rank-r_q
    bottleneck h·r_q + r_q·a·(d_nope + d_rope), keys and values through h·(r_kv + d_rope) + r_kv·a·(d_nope + d_v),
    output a·d_v·h (the bottleneck norms are counted with the norms)."""
    h, mla = model.hidden_size, model.mla
    if mla is None:
        return 2 * h * model.q_dim + 2 * h * model.kv_dim
    a, qk = model.num_attention_heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim
    q = h * mla.q_lora_rank + mla.q_lora_rank * a * qk if mla.q_lora_rank else h * a * qk
    kv = h * (mla.kv_lora_rank + mla.qk_rope_head_dim) + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + a * mla.v_head_dim * h


def mlp_params_of_width(model: ModelSpec, width: int) -> int:
    """One MLP (or expert) of intermediate width f: gated MLPs (SwiGLU/GeGLU) have gate, up and down
    projections, 3·h·f; plain MLPs 2·h·f."""
    return (3 if model.gated_mlp else 2) * model.hidden_size * width


def mlp_weight_params(model: ModelSpec) -> int:
    """The dense MLP: 3·h·f gated, 2·h·f plain."""
    return mlp_params_of_width(model, model.ffn_hidden_size)


def decoder_bias_params(model: ModelSpec) -> int:
    """Biases of the QKV projection (qkv_bias, e.g. Qwen2) or of every linear (linear_bias, GPT)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    qkv = model.q_dim + 2 * model.kv_dim if (model.qkv_bias or model.linear_bias) else 0
    rest = h + (2 if model.gated_mlp else 1) * f + h if model.linear_bias else 0
    return qkv + rest


def attention_norm_params(model: ModelSpec) -> int:
    """Norms inside attention: per-head query and key RMSNorms (Qwen3), MLA's bottleneck RMSNorms."""
    extra = 2 * model.head_dim if model.qk_norm else 0
    if model.mla is not None:
        extra += model.mla.q_lora_rank + model.mla.kv_lora_rank
    return extra


def moe_matmul_params(model: ModelSpec, active: bool = False) -> int:
    """The matrices of a MoE MLP: router h·E, E experts of width f_e (the top-k of them when `active`) and
    the shared experts of total width f_s (Fedus et al. 2021; Mixtral, Qwen3-MoE, DeepSeek-V3 configs)."""
    assert model.moe is not None
    moe = model.moe
    experts = moe.top_k if active else moe.num_experts
    return (model.hidden_size * moe.num_experts + experts * mlp_params_of_width(model, moe.ffn_hidden_size)
            + mlp_params_of_width(model, moe.shared_ffn_hidden_size))


def moe_mlp_params(model: ModelSpec, active: bool = False) -> int:
    """A MoE MLP's parameters: its matrices plus E router score biases when the model has them."""
    assert model.moe is not None
    return moe_matmul_params(model, active) + (model.moe.num_experts if model.moe.router_bias else 0)


def decoder_layer_counts(model: ModelSpec) -> tuple[int, int]:
    """(dense, MoE) decoder layers of the stack."""
    n_moe = 0 if model.moe is None else model.moe.count_moe_layers(model.num_layers)
    return model.num_layers - n_moe, n_moe


def _moe_decoder_params(model: ModelSpec, active: bool) -> int:
    return layer_params(model, LayerKind.DECODER) - mlp_weight_params(model) + moe_mlp_params(model, active)


def decoder_params_at(model: ModelSpec, index: int, active: bool = False) -> int:
    """Parameters of decoder layer `index` (MoE or dense MLP); `active` counts only the routed top-k."""
    if model.moe is None or not model.moe.is_moe_layer(index):
        return layer_params(model, LayerKind.DECODER)
    return _moe_decoder_params(model, active)


def _decoder_stack_params(model: ModelSpec, active: bool) -> int:
    """All decoder layers: the dense ones and the MoE ones (with every expert, or the top-k when `active`)."""
    n_dense, n_moe = decoder_layer_counts(model)
    moe = n_moe * _moe_decoder_params(model, active) if n_moe else 0
    return n_dense * layer_params(model, LayerKind.DECODER) + moe


def mtp_params(model: ModelSpec, active: bool = False) -> int:
    """DeepSeek-V3 multi-token prediction: per module two norms and a 2h x h projection before one decoder
    layer (MoE when the model is), then a norm; embedding and output head are shared with the main model."""
    h = model.hidden_size
    per = 3 * norm_params(model) + 2 * h * h + decoder_params_at(model, model.num_layers, active)
    return model.mtp_layers * per


def projector_weights_and_biases(model: ModelSpec) -> tuple[int, int]:
    """The vision-to-language projector's (weights, biases): a biased MLP h_v -> p -> h (GELU between), or one
    biased linear map h_v -> h."""
    vision = model.vision
    if vision is None:
        return 0, 0
    h, p = model.hidden_size, vision.projector_hidden
    if not p:
        return vision.hidden_size * h, h
    return vision.hidden_size * p + p * h, p + h


def projector_params(model: ModelSpec) -> int:
    return sum(projector_weights_and_biases(model))


def vision_outer_params(model: ModelSpec) -> int:
    """What a CLIP-style encoder holds outside its layers: patch embedding 3·p²·h_v (no bias), class token h_v,
    learned positions tokens·h_v, LayerNorms before and after the layers."""
    vision = model.vision
    if vision is None:
        return 0
    h = vision.hidden_size
    return 3 * vision.patch_size**2 * h + int(vision.class_token) * h + vision.tokens * h + 2 * 2 * h


def vision_params(model: ModelSpec) -> int:
    """A CLIP-style vision encoder and its projector: the parts outside the layers, its layers, the projector."""
    vision = model.vision
    if vision is None:
        return 0
    layers = vision.num_layers * layer_params(vision.as_model(), LayerKind.DECODER)
    return vision_outer_params(model) + layers + projector_params(model)


def vision_forward_flops(model: ModelSpec) -> float:
    """Forward FLOPs of the vision encoder and projector for one sample: per image the patch embedding
    2·patches·3p²·h_v, every encoder layer on all tokens (attention core counted in full, as for the decoder),
    and the projector on the patch tokens."""
    vision = model.vision
    if vision is None:
        return 0.0
    encoder = vision.as_model()
    patches, tokens = vision.patches, vision.tokens
    projector = projector_weights_and_biases(model)[0]  # biases are not matmuls
    per_image = (2.0 * patches * 3 * vision.patch_size**2 * vision.hidden_size
                 + vision.num_layers * decoder_matmul_flops(encoder, tokens) + 2.0 * patches * projector)
    return vision.images * per_image


def _outside_decoders(model: ModelSpec) -> int:
    """Embedding, final norm, (untied) LM head and the vision encoder with its projector."""
    return sum(layer_params(model, kind) for kind in (LayerKind.EMBEDDING, LayerKind.FINAL_NORM,
                                                       LayerKind.LM_HEAD)) + vision_params(model)


def active_params(model: ModelSpec) -> int:
    """Parameters one token goes through (top-k experts only); equal to the total for dense models."""
    return _outside_decoders(model) + _decoder_stack_params(model, active=True)


def layer_params(model: ModelSpec, kind: LayerKind) -> int:
    """Parameters of one layer of `kind` (the LM head is 0 when tied to the embedding)."""
    if kind is LayerKind.EMBEDDING:
        return (model.vocab_size + model.learned_positions) * model.hidden_size
    if kind is LayerKind.DECODER:
        return (attention_weight_params(model) + mlp_weight_params(model) + decoder_bias_params(model)
                + 2 * norm_params(model) + attention_norm_params(model))
    if kind is LayerKind.FINAL_NORM:
        return norm_params(model)
    if kind is LayerKind.LM_HEAD:
        return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size
    return 0


def total_params(model: ModelSpec) -> int:
    """Sum over the layer chain: embedding + L decoder layers (all experts) + final norm + (untied) LM head
    + multi-token-prediction modules."""
    return _outside_decoders(model) + _decoder_stack_params(model, active=False) + mtp_params(model)


def decoder_matmul_flops(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs of one dense decoder layer for one sequence of length s:
    2·s·(attention + MLP weights) + 4·s²·a·d (QKᵀ and softmax·V over all s keys)."""
    weights = attention_weight_params(model) + mlp_weight_params(model)
    return 2.0 * seq_len * weights + attention_core_flops(model, seq_len)


def attended_fraction(model: ModelSpec, seq_len: int, causal: bool) -> float:
    """Mean over the decoder layers of the (query, key) pairs a layer computes, over s²:
        full layer      1/2 with a causal mask (`causal`), else 1;
        windowed layer  (s·w − w²/2) / s² with the mask (query i sees keys max(0, i − w + 1) .. i), else w/s,
    for a sliding window w < s on `ModelSpec.windowed_layers` of the layers (Beltagy et al. 2020, Longformer's
    band; Mistral 7B's and Gemma 2's sliding-window layers). `causal` False is the MFU convention of counting
    a full layer's s² pairs, which counts a windowed layer's band s·w."""
    s, n = float(seq_len), model.num_layers
    windowed = model.windowed_layers(seq_len)
    full = 0.5 if causal and model.causal else 1.0
    if not windowed:
        return full
    w = float(model.sliding_window)
    band = (s * w - w * w / 2) / (s * s) if causal and model.causal else w / s
    return (windowed * band + (n - windowed) * full) / n


def attention_core_flops(model: ModelSpec, seq_len: int) -> float:
    """QKᵀ and softmax·V over all s keys, as dense matmuls count them: 2·s²·a·d_qk + 2·s²·a·d_v
    (= 4·s²·a·d without MLA, whose query/key heads are d_nope + d_rope wide and value heads d_v)."""
    if model.mla is None:
        return 4.0 * seq_len**2 * model.q_dim * attended_fraction(model, seq_len, causal=False)
    mla, a = model.mla, model.num_attention_heads
    return (2.0 * seq_len**2 * a * (mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim)
            * attended_fraction(model, seq_len, causal=False))


def moe_decoder_matmul_flops(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs of one MoE decoder layer for one sequence: 2·s·(attention weights + router h·E + the
    top-k and shared experts a token goes through) + the attention core. The count does not depend on how
    evenly the router spreads the tokens; only the time does."""
    weights = attention_weight_params(model) + moe_matmul_params(model, active=True)
    return 2.0 * seq_len * weights + attention_core_flops(model, seq_len)


def layer_forward_flops(model: ModelSpec, kind: LayerKind, seq_len: int) -> float:
    """Forward matmul FLOPs of one layer for one sequence (LM head: 2·s·h·V; others 0)."""
    if kind is LayerKind.DECODER:
        return decoder_matmul_flops(model, seq_len)
    if kind is LayerKind.LM_HEAD:
        return 2.0 * seq_len * model.hidden_size * model.vocab_size
    return 0.0


def model_flops_per_sequence(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs of forward + backward for one sequence: 3 x forward (MFU convention: no
    recomputation counted; MoE layers count the routed top-k experts only, multi-token-prediction
    modules are left out; a vision encoder counts its images)."""
    n_dense, n_moe = decoder_layer_counts(model)
    forward = (n_dense * decoder_matmul_flops(model, seq_len) + layer_forward_flops(model, LayerKind.LM_HEAD, seq_len)
               + (n_moe * moe_decoder_matmul_flops(model, seq_len) if n_moe else 0.0) + vision_forward_flops(model))
    return 3.0 * forward


def narayanan_iteration_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

    Counts full recomputation (4 forward-equivalents for the decoder, 3 for the logits) for a GPT
    with a 4h FFN; used to compare with the TFLOP/s printed in that paper.
    """
    return 96.0 * batch * seq_len * layers * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden)
    )


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads held by one TP rank; when tp exceeds the KV heads they are replicated."""
    return max(1, model.num_kv_heads // tp)
