"""NeMo 2 / Megatron-Bridge: override lists (REFERENCE.md section 5).

NeMo-Run CLI form (`trainer.strategy.tensor_model_parallel_size=4 data.global_batch_size=512`) and the
Megatron-Bridge recipe form (`cfg.model.<field>=`, `cfg.train.micro_batch_size=`, `cfg.ddp.<field>=`).
Model-parallel names are megatron-core TransformerConfig fields; uneven splits use
num_layers_in_first/last_pipeline_stage or pipeline_model_parallel_layout. Megatron-FSDP (ZeRO-2/3) is
not expressed here.
"""

from __future__ import annotations

from typing import Any

from meshcore import Recompute, ZeroStage, module_names, non_default_modules
from meshcore.framework import Framework
from meshcore.text import comment
from planner.outputs.emitters.common import (
    UnsupportedPlanError,
    describe,
    facts,
    offload_runner,
    partial_recompute,
    runs_schedule,
)
from planner.outputs.emitters.megatron import pipeline_layout
from planner.outputs.plan import Plan


def model_fields(plan: Plan) -> dict[str, Any]:
    """TransformerConfig fields of the layout."""
    lay, f = plan.best.layout, facts(plan)
    fields: dict[str, Any] = {
        "tensor_model_parallel_size": lay.tp, "pipeline_model_parallel_size": lay.pp,
        "virtual_pipeline_model_parallel_size": lay.vpp if lay.vpp > 1 else None,
        "context_parallel_size": lay.cp, "sequence_parallel": lay.sp,
    }
    if plan.model.moe is not None:
        fields.update(expert_model_parallel_size=lay.ep, expert_tensor_parallel_size=lay.etp)
    if lay.pp > 1 and not f.uniform_chunks:
        middle = f.chunks[1:-1]
        if lay.vpp == 1 and len(set(middle)) <= 1:
            fields.update(num_layers_in_first_pipeline_stage=f.chunks[0],
                          num_layers_in_last_pipeline_stage=f.chunks[-1])
        else:
            fields.update(pipeline_model_parallel_layout=pipeline_layout(f.chunks, plan.model.mtp_layers),
                          virtual_pipeline_model_parallel_size=None)
    block = partial_recompute(plan)
    if block is not None:
        if lay.recompute is Recompute.SELECTIVE:
            raise UnsupportedPlanError("Megatron-Core cannot mix selective recomputation with fully recomputed layers; "
                                       "the nearest plan recomputes the block layers only (--recompute none)")
        fields.update(recompute_granularity="full", recompute_method="block", recompute_num_layers=block)
    elif lay.recompute is Recompute.FULL:
        fields.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    elif lay.recompute is Recompute.SELECTIVE:
        fields.update(recompute_granularity="selective")
        if non_default_modules(lay):  # Megatron-Core's TransformerConfig.recompute_modules (default core_attn)
            fields.update(recompute_modules=module_names(lay.recompute_modules))
    return fields


def _value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ",".join(_value(v) for v in value) + "]"
    return str(value)


def emit(plan: Plan) -> str:
    lay, job, f = plan.best.layout, plan.job, facts(plan)
    if lay.offload:
        raise UnsupportedPlanError("the NeMo target keeps every state on the GPU (its optimizer offload is not written "
                                   f"by meshplan yet; {offload_runner(lay.offload)}); the nearest plan offloads "
                                   "nothing")
    if lay.dp_replicate > 1:
        raise UnsupportedPlanError(f"the NeMo target shards the optimizer over every data-parallel rank; this plan "
                                   f"replicates it {lay.dp_replicate} times (HSDP): the nearest plan uses "
                                   "--dp-replicate 1")
    if lay.zero >= ZeroStage.GRADIENTS:
        raise UnsupportedPlanError(f"the NeMo target writes DDP and the distributed optimizer only, not "
                                   f"ZeRO-{int(lay.zero)} (Megatron-FSDP); the nearest plan uses --zero 1")
    if not runs_schedule(Framework.NEMO, lay):
        raise UnsupportedPlanError(f"NeMo runs Megatron-Core's 1F1B and interleaved schedules, not "
                                   f"{lay.schedule.value}; the nearest plan uses --schedule 1f1b")
    fields = model_fields(plan)
    distributed = lay.zero is ZeroStage.OPTIMIZER
    run = [f"trainer.num_nodes={f.nodes}", f"trainer.devices={f.gpus_per_node}"]
    run += [f"trainer.strategy.{k}={_value(v)}" for k, v in fields.items() if not k.startswith("recompute")]
    run += [f"model.config.{k}={_value(v)}" for k, v in fields.items() if k.startswith("recompute")]
    run += [f"data.micro_batch_size={lay.mbs}", f"data.global_batch_size={job.global_batch}",
            f"data.seq_length={job.seq_len}", f"optim.config.use_distributed_optimizer={_value(distributed)}"]
    bridge = [f"cfg.model.{k}={_value(v)}" for k, v in fields.items()]
    bridge += [f"cfg.model.seq_length={job.seq_len}", f"cfg.train.micro_batch_size={lay.mbs}",
               f"cfg.train.global_batch_size={job.global_batch}",
               f"cfg.ddp.use_distributed_optimizer={_value(distributed)}",
               f"cfg.ddp.overlap_grad_reduce={_value(job.runtime.overlap_grad_reduce)}"]
    return "\n".join([comment(f"NeMo 2 launch overrides for {describe(plan)}"), "# NeMo-Run CLI:", *run, "",
                      "# Megatron-Bridge recipe overrides:", *bridge, ""])
