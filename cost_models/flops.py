"""Exact parameter counts and matmul FLOPs of a dense decoder-only transformer, per layer kind.

Conventions (those of Narayanan et al. 2021 and Korthikanti et al. 2022, and of FlopCounterMode):
a multiply-add is 2 FLOPs; only matrix multiplications are counted (norms, softmax and other
element-wise work is priced as memory traffic in `cost_models.compute`); attention scores and values
are counted in full (4·s²·a·d per sequence and layer, no causal halving), as MFU figures in those
papers do. Backward = 2 x forward (input and weight gradients).
"""

from __future__ import annotations

from planner.specs import LayerKind, ModelSpec, Norm


def norm_params(model: ModelSpec) -> int:
    """LayerNorm has a weight and a bias of size h; RMSNorm only a weight."""
    return model.hidden_size * (2 if model.norm is Norm.LAYERNORM else 1)


def attention_weight_params(model: ModelSpec) -> int:
    """W_Q (h x a·d), W_K and W_V (h x g·d each, GQA), W_O (a·d x h): 2·h·a·d + 2·h·g·d."""
    h = model.hidden_size
    return 2 * h * model.q_dim + 2 * h * model.kv_dim


def mlp_weight_params(model: ModelSpec) -> int:
    """Gated MLPs (SwiGLU/GeGLU) have gate, up and down projections: 3·h·f; plain MLPs 2·h·f."""
    return (3 if model.gated_mlp else 2) * model.hidden_size * model.ffn_hidden_size


def decoder_bias_params(model: ModelSpec) -> int:
    """Biases of the QKV projection (qkv_bias, e.g. Qwen2) or of every linear (linear_bias, GPT)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    qkv = model.q_dim + 2 * model.kv_dim if (model.qkv_bias or model.linear_bias) else 0
    rest = h + (2 if model.gated_mlp else 1) * f + h if model.linear_bias else 0
    return qkv + rest


def layer_params(model: ModelSpec, kind: LayerKind) -> int:
    """Parameters of one layer of `kind` (the LM head is 0 when tied to the embedding)."""
    if kind is LayerKind.EMBEDDING:
        return (model.vocab_size + model.learned_positions) * model.hidden_size
    if kind is LayerKind.DECODER:
        return (attention_weight_params(model) + mlp_weight_params(model) + decoder_bias_params(model)
                + 2 * norm_params(model))
    if kind is LayerKind.FINAL_NORM:
        return norm_params(model)
    if kind is LayerKind.LM_HEAD:
        return 0 if model.tied_embeddings else model.vocab_size * model.hidden_size
    return 0


def total_params(model: ModelSpec) -> int:
    """Sum over the layer chain: embedding + L decoder layers + final norm + (untied) LM head."""
    return sum(layer_params(model, kind) for kind in model.layers())


def decoder_matmul_flops(model: ModelSpec, seq_len: int) -> float:
    """Forward FLOPs of one decoder layer for one sequence of length s:
    2·s·(attention + MLP weights) + 4·s²·a·d (QKᵀ and softmax·V over all s keys)."""
    weights = attention_weight_params(model) + mlp_weight_params(model)
    return 2.0 * seq_len * weights + 4.0 * seq_len**2 * model.q_dim


def layer_forward_flops(model: ModelSpec, kind: LayerKind, seq_len: int) -> float:
    """Forward matmul FLOPs of one layer for one sequence (LM head: 2·s·h·V; others 0)."""
    if kind is LayerKind.DECODER:
        return decoder_matmul_flops(model, seq_len)
    if kind is LayerKind.LM_HEAD:
        return 2.0 * seq_len * model.hidden_size * model.vocab_size
    return 0.0


def model_flops_per_sequence(model: ModelSpec, seq_len: int) -> float:
    """Model FLOPs of forward + backward for one sequence: 3 x forward (MFU convention: no
    recomputation counted)."""
    forward = (model.num_layers * layer_forward_flops(model, LayerKind.DECODER, seq_len)
               + layer_forward_flops(model, LayerKind.LM_HEAD, seq_len))
    return 3.0 * forward


def narayanan_iteration_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. (3): F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).

    Counts full recomputation (4 forward-equivalents for the decoder, 3 for the logits) for a GPT
    with a 4h FFN; used to compare with the TFLOP/s printed in that paper.
    """
    return 96.0 * batch * seq_len * layers * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden)
    )
