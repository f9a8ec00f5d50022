"""DeepSpeed: ds_config.json (REFERENCE.md section 4).

train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x DP, with DeepSpeed's DP =
world / (pp x tp) (tensor parallelism comes from the model's mpu, not from this file). ZeRO 0-3 map to
zero_optimization.stage, offload to the CPU or NVMe where the plan offloads (offload_optimizer, which moves the
gradients too, offload_param with ZeRO-3, cpu_checkpointing of fully recomputed layers' checkpoints with
partition_activations, the blocking copies to pageable memory the cost model prices; the aio section
for NVMe) and explicitly off otherwise; a LoRA plan's PEFT LoraConfig arguments under "peft"; the pipeline
engine supports ZeRO 0-1 only and splits layers with its own partition methods, so only even pipeline
splits are expressed; there is no context parallelism and no selective or per-stage recomputation.
"""

from __future__ import annotations

import json
from typing import Any

from cost_models.memory.offload import GRADIENT_BUCKET_ELEMENTS
from meshcore import (
    AttentionKernel,
    Offload,
    Recompute,
    ZeroStage,
    module_names,
    non_default_modules,
)
from meshcore.framework import Framework
from planner.outputs.emitters.common import UnsupportedPlanError, facts, runs_schedule
from planner.outputs.plan import Plan


def refuse_unrunnable(plan: Plan) -> None:
    """UnsupportedPlanError naming what of the plan's layout DeepSpeed's config cannot express, and the nearest
    plan it can."""
    lay, job = plan.best.layout, plan.job
    f = facts(plan)
    if lay.ep > 1 or lay.etp > 1:
        raise UnsupportedPlanError(f"DeepSpeed's config has no expert parallelism (ep {lay.ep}, etp {lay.etp}: it is "
                                   "set in the model code, deepspeed.moe.layer.MoE(ep_size=...)); the nearest plan "
                                   "runs ep 1")
    if lay.cp > 1:
        raise UnsupportedPlanError(f"DeepSpeed's config has no context parallelism (cp {lay.cp}); the nearest plan "
                                   "runs cp 1 (re-plan with --no-cp)")
    if lay.zero is not ZeroStage.NONE and lay.dp_replicate > 1:
        raise UnsupportedPlanError(f"DeepSpeed's config has no hybrid sharding (dp_replicate {lay.dp_replicate}): ZeRO "
                                   f"shards over all dp {lay.dp} ranks (ZeRO++'s hpZ adds a per-node weight copy, not "
                                   "replicas of a shard); the nearest plan runs dp_replicate 1")
    if lay.pp > 1 and lay.zero >= ZeroStage.GRADIENTS:
        raise UnsupportedPlanError(f"DeepSpeed's pipeline engine supports ZeRO 0-1, not ZeRO-{int(lay.zero)} with "
                                   f"pp {lay.pp}; the nearest plan uses --zero 1")
    if lay.pp > 1 and not f.uniform_chunks:
        raise UnsupportedPlanError(f"DeepSpeed partitions pipeline stages itself; this plan splits {list(f.chunks)}: "
                                   "the nearest plan uses an even split (re-plan with --even-split)")
    if not runs_schedule(Framework.DEEPSPEED, lay):
        raise UnsupportedPlanError(f"DeepSpeed's pipeline engine runs its own 1F1B-style schedule, not "
                                   f"{lay.schedule.value}; the nearest plan uses --schedule 1f1b")
    if non_default_modules(lay):
        raise UnsupportedPlanError(f"DeepSpeed checkpoints whole layers only, not Megatron modules "
                                   f"({', '.join(module_names(lay.recompute_modules))}); the nearest plan uses "
                                   "--recompute full or none")
    if lay.recompute_layers is not None or (
            lay.recompute is Recompute.SELECTIVE and job.runtime.attention is AttentionKernel.UNFUSED):
        raise UnsupportedPlanError("DeepSpeed checkpoints whole layers only; the nearest plan uses --recompute full "
                                   "or none")
    if Offload.ACTIVATIONS in lay.offload and lay.recompute is not Recompute.FULL:
        raise UnsupportedPlanError("DeepSpeed offloads the checkpoints of fully recomputed layers only "
                                   "(cpu_checkpointing); the nearest plan uses --recompute full")
    if Offload.ACTIVATIONS in lay.offload and lay.tp > 1 and not lay.sp:
        raise UnsupportedPlanError(f"DeepSpeed's cpu_checkpointing as meshplan prices it partitions each checkpoint "
                                   f"over the {lay.tp} TP ranks (partition_activations); this plan keeps it whole on "
                                   "each: the nearest plan uses --sp")
    if Offload.OPTIMIZER in lay.offload and Offload.GRADIENTS not in lay.offload:
        raise UnsupportedPlanError("DeepSpeed's offload_optimizer also moves the gradients to the host in every "
                                   "backward; this plan keeps them on the GPU: the nearest plan offloads them "
                                   "(--offload optimizer,gradients)")


def config(plan: Plan) -> dict[str, Any]:
    refuse_unrunnable(plan)
    lay, job = plan.best.layout, plan.job
    f = facts(plan)
    zero: dict[str, Any] = {"stage": int(lay.zero), "overlap_comm": job.runtime.overlap_grad_reduce,
                            "contiguous_gradients": True, **offload_sections(lay.offload, lay.zero)}
    cfg: dict[str, Any] = {
        "train_batch_size": job.global_batch,
        "train_micro_batch_size_per_gpu": lay.mbs,
        "gradient_accumulation_steps": f.num_microbatches,
        "bf16": {"enabled": True},
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
    }
    if lay.recompute is Recompute.FULL:
        on_host = Offload.ACTIVATIONS in lay.offload  # the synchronous path priced (Execution.sync_checkpoint_copies)
        cfg["activation_checkpointing"] = {"partition_activations": lay.sp or on_host,
                                           "contiguous_memory_optimization": False, "cpu_checkpointing": on_host,
                                           "synchronize_checkpoint_boundary": False,
                                           "profile": False}
    if lay.pp > 1:
        cfg["pipeline"] = {"stages": lay.pp, "partition": "uniform", "activation_checkpoint_interval":
                           1 if lay.recompute is Recompute.FULL else 0}
    if Offload.NVME in lay.offload:  # DeepSpeed's async I/O for the NVMe tier (runtime/swap_tensor/aio_config.py)
        cfg["aio"] = {"block_size": 1048576, "queue_depth": 8, "single_submit": False, "overlap_events": True,
                      "thread_count": 1}
    if job.trainable_fraction < 1:
        cfg[PEFT_KEY] = lora_settings(job.lora_rank)
    return cfg


PEFT_KEY = "peft"  # DeepSpeed ignores top-level keys it does not know; the training script pops this one
NVME_PATH = "/local_nvme"  # where DeepSpeed swaps to: set it to the NVMe mount of each node


def offload_sections(offload: frozenset[Offload], zero: ZeroStage) -> dict[str, Any]:
    """zero_optimization's offload_optimizer (ZeRO 1-3) and offload_param (ZeRO-3): the CPU, NVMe (with its
    nvme_path) or, for what the plan keeps on the GPU, explicitly none; with gradients offloaded the reduce bucket
    the cost model gives the GPU (cost_models.memory.offload.GRADIENT_BUCKET_ELEMENTS)."""
    device = "nvme" if Offload.NVME in offload else "cpu"
    where = {"device": device, "pin_memory": True, **({"nvme_path": NVME_PATH} if device == "nvme" else {})}
    out: dict[str, Any] = {}
    if zero >= ZeroStage.OPTIMIZER:  # what the plan keeps on the GPU is said to stay there
        out["offload_optimizer"] = dict(where) if Offload.OPTIMIZER in offload else {"device": "none"}
    if zero is ZeroStage.WEIGHTS:
        out["offload_param"] = dict(where) if Offload.PARAMS in offload else {"device": "none"}
    if Offload.GRADIENTS in offload:
        out["reduce_bucket_size"] = GRADIENT_BUCKET_ELEMENTS
    return out


def lora_settings(rank: int) -> dict[str, Any]:
    """PEFT's LoraConfig arguments of a LoRA plan: adapters of `rank` on every linear layer of the decoder ("all-linear"
    leaves the output head out), as meshplan prices them (planner.api.lora_fraction); alpha and dropout do not change
    the cost (alpha = 2 x rank, the common choice)."""
    return {"r": rank, "lora_alpha": 2 * rank, "lora_dropout": 0.0, "target_modules": "all-linear",
            "bias": "none", "task_type": "CAUSAL_LM"}


def emit(plan: Plan) -> str:
    return json.dumps(config(plan), indent=2) + "\n"
