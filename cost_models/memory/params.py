"""Parameters of one rank by the group that reduces their gradients: decoder layers, embedding, LM head and
multi-token prediction, from the model's shapes or a cost table's rows."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.compute import flops as F
from cost_models.memory import footprint as M
from meshcore import (
    JobSpec,
    ModelSpec,
)


@dataclass(frozen=True)
class StageParams:
    """Parameters of one pipeline rank by the group that reduces their gradients: `dense` over the dp·cp
    data-parallel ranks, `expert` (routed experts) over the expert-data-parallel ranks."""

    dense: float
    expert: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.expert

    def __add__(self, other: StageParams) -> StageParams:
        return StageParams(self.dense + other.dense, self.expert + other.expert)

    def scaled(self, k: float) -> StageParams:
        return StageParams(self.dense * k, self.expert * k)


def decoder_params(model: ModelSpec, job: JobSpec, tp: int, moe: bool = False) -> float:
    """Parameters of one decoder layer on one TP rank reduced over the dense data-parallel group (for an MoE
    layer without its routed experts): measured when the job has a cost table."""
    measured = job.runtime.measured
    return measured.params("decoder", tp) if measured else M.decoder_params_per_rank(model, tp, moe)


def one_layer_params(model: ModelSpec, job: JobSpec, tp: int, ep: int, etp: int, moe: bool) -> StageParams:
    """One decoder layer's parameters on one rank, by reduction group."""
    return StageParams(decoder_params(model, job, tp, moe), M.expert_params_per_rank(model, ep, etp) if moe else 0.0)


def embedding_params(model: ModelSpec, job: JobSpec, tp: int) -> float:
    """The first stage's extra parameters: the embedding (and a vision encoder with its projector)."""
    measured = job.runtime.measured
    if measured:
        return measured.params("embedding", tp)
    return M.embedding_params_per_rank(model, tp) + M.vision_params_per_rank(model, tp)


def head_params(model: ModelSpec, job: JobSpec, tp: int, beside_embedding: bool, ep: int = 1,
                etp: int = 1) -> StageParams:
    """LM head and final norm on the last stage, with the multi-token-prediction modules (three norms, the
    2h x h projection split over TP, one decoder layer each)."""
    measured = job.runtime.measured
    if measured:
        return StageParams(measured.params("lm_head", tp))
    head = StageParams(M.lm_head_params_per_rank(model, tp, beside_embedding) + F.norm_params(model))
    if model.mtp_layers:
        moe = model.moe is not None and model.moe.is_moe_layer(model.num_layers)
        per = StageParams(3 * F.norm_params(model) + 2 * model.hidden_size**2 / tp) + one_layer_params(
            model, job, tp, ep, etp, moe)
        head = head + per.scaled(model.mtp_layers)
    return head


def rank_params(model: ModelSpec, job: JobSpec, tp: int, head_beside_embedding: bool, ep: int = 1,
                etp: int = 1) -> StageParams:
    """Parameters of one rank of the tp (and expert) mesh summed over all pipeline stages: decoder layers,
    embedding, head and multi-token prediction."""
    n_dense, n_moe = F.decoder_layer_counts(model)
    layers = one_layer_params(model, job, tp, ep, etp, False).scaled(n_dense)
    if n_moe:
        layers = layers + one_layer_params(model, job, tp, ep, etp, True).scaled(n_moe)
    return (layers + StageParams(embedding_params(model, job, tp))
            + head_params(model, job, tp, head_beside_embedding, ep, etp))


def lora_params(model: ModelSpec, rank: int) -> float:
    """Trainable parameters of LoRA adapters of rank `rank` on every linear layer of the decoder (Hu et al. 2021;
    the "all-linear" target of PEFT and QLoRA): a [k, n] weight gains A [r, k] and B [n, r], r·(k + n) parameters.
    Attention: the q, k, v (or MLA's) projections and the output projection; a dense MLP's gate, up and down
    projections; an MoE layer's shared experts and each routed expert the same way. Embeddings, norms, the router
    and the LM head stay frozen without adapters. Llama-2-7B at rank 8: 19,988,480, as PEFT prints it."""
    from cost_models.compute.gemms import attention_gemms  # the projection shapes, at tp 1

    def mlp(width: float) -> float:
        return rank * ((2 if model.gated_mlp else 1) * (h + width) + (width + h))

    h = model.hidden_size
    if model.mla is None:  # q, k and v adapted apart (PEFT's q_proj, k_proj, v_proj), then o_proj
        kv = model.num_kv_heads * model.head_dim
        attention = float(rank * ((h + model.q_dim) + 2 * (h + kv) + (model.q_dim + h)))
    else:
        attention = sum(rank * (g.k + g.n) for g in attention_gemms(model, 1.0, 1))
    n_dense, n_moe = F.decoder_layer_counts(model)
    total = n_dense * (attention + mlp(model.ffn_hidden_size))
    if model.moe is not None and n_moe:
        moe = model.moe
        experts = moe.num_experts * mlp(moe.ffn_hidden_size)
        shared = mlp(moe.shared_ffn_hidden_size) if moe.shared_ffn_hidden_size else 0.0
        total += n_moe * (attention + experts + shared)
    return float(total)


def lora_fraction(model: ModelSpec, rank: int) -> float:
    """The trainable share of the model's parameters with LoRA adapters of rank `rank` (`lora_params`)."""
    return min(1.0, lora_params(model, rank) / F.total_params(model))
