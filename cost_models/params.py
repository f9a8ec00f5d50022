"""Parameters of one rank by the group that reduces their gradients: decoder layers, embedding, LM head and
multi-token prediction, from the model's shapes or a cost table's rows."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models import flops as F
from cost_models import memory as M
from planner.core import (
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
