"""What sharded data parallelism holds gathered on a stage beside its sharded states, as the runtime's FSDP runs it
(Execution.fsdp, reshard_under_pp): one rule, read by the cost model (cost_models.step.stage_held) and by the search's
memory floors (planner.search.memory_floors)."""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.memory import footprint as M
from cost_models.memory import held as H
from cost_models.memory.params import StageParams
from cost_models.sync import gather_bytes, kept_gathered, per_block
from meshcore import ClusterSpec, JobSpec, Layout, ModelSpec, ZeroStage


@dataclass(frozen=True)
class Gathered:
    """What sharded data parallelism holds gathered beside the states on a stage of one layer or more, as the runtime's
    FSDP runs it (Execution.fsdp, reshard_under_pp): `weight` bytes per parameter of the stage (its weights gathered:
    fp8 with FP8 all-gathers, else bf16), `grad` bytes per trained parameter of it (the gradients accumulated unsharded
    in the reduce dtype beside them), `fixed` bytes (ZeRO-3's working modules, FSDP2's block gradient) and `root` bytes
    per parameter of the embedding and the head (FSDP2's root module, gathered through the backward)."""

    weight: float = 0.0
    grad: float = 0.0
    fixed: float = 0.0
    root: float = 0.0


def gathered_form(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, layout: Layout, block: float
                  ) -> Gathered | None:
    """`Gathered` of the layout's stages, None where sharding holds nothing gathered (below ZeRO-3, and ZeRO-2 but as
    FSDP2 per block). `block`: the parameters of the block FSDP2 gathers at once (`LayoutCosts.block_params`).
      kept under PP     (`sync.kept_gathered`) every weight gathered and its gradients accumulated unsharded across
                        micro-batches;
      FSDP2 ZeRO-2      (reshard_after_forward "never") every weight gathered from its forward to its backward and one
                        block's full gradient, with the root module (`H.root_gathered_bytes`);
      ZeRO-3            the current and the prefetched module with one module's full gradient (`M.zero3_working_bytes`;
                        a module is one weight matrix per-module, a whole block per-block), with the root module."""
    zero, grad, block_wise = layout.zero, job.runtime.grad_reduce_bytes, per_block(job)
    if not (zero is ZeroStage.WEIGHTS or (zero is ZeroStage.GRADIENTS and block_wise)):
        return None
    if kept_gathered(layout, job):
        return Gathered(weight=gather_bytes(job, cluster), grad=grad)
    root = H.root_gathered_bytes(1.0, job.runtime.priced_execution.memory)
    if zero is ZeroStage.GRADIENTS:
        return Gathered(weight=gather_bytes(job, cluster), fixed=block * grad * job.trainable_fraction, root=root)
    return Gathered(fixed=M.zero3_working_bytes(model, layout.tp, grad, layout.ep, layout.etp,
                                                block if block_wise else None), root=root)


def gathered_weight_bytes(params: StageParams, form: Gathered, job: JobSpec) -> float:
    """Bytes `form` holds gathered on a stage of `params` parameters (its root module's aside)."""
    return params.total * form.weight + params.total * form.grad * job.trainable_fraction + form.fixed


def fsdp_block(dense: StageParams, moe: StageParams) -> float:
    """Parameters of the block FSDP2 gathers and reduces at once (`gathered_form`'s `block`): an MoE layer's on a rank
    where the model has MoE layers (`moe` is empty where it has none), else a dense layer's."""
    return moe.total or dense.total
