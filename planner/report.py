"""Presentation of predictions: a JSON-ready dict and a readable text table (no I/O here)."""

from __future__ import annotations

from typing import Any

from cost_models.step import Prediction
from planner.specs import ClusterSpec, JobSpec, Layout, ModelSpec


def layout_dict(layout: Layout) -> dict[str, Any]:
    return {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "vpp": layout.vpp,
            "mbs": layout.mbs, "sp": layout.sp, "zero_stage": int(layout.zero),
            "recompute": layout.recompute.value, "schedule": layout.schedule.value}


def prediction_dict(pred: Prediction) -> dict[str, Any]:
    """The fields `meshplan evaluate --json` prints (units in the names)."""
    return {
        "step_time_s": pred.step_time_s,
        "tokens_per_s": pred.tokens_per_s,
        "model_tflops_per_gpu": pred.model_tflops_per_gpu,
        "hardware_tflops_per_gpu": pred.hardware_tflops_per_gpu,
        "mfu": pred.mfu,
        "hfu": pred.hfu,
        "peak_memory_gib": pred.peak_memory_gib,
        "memory_capacity_gib": pred.memory_capacity_gib,
        "fits": pred.fits,
        "bubble_fraction": pred.bubble_fraction,
        "num_microbatches": pred.num_microbatches,
        "breakdown": pred.breakdown.as_dict(),
        "stages": [
            {"pp_rank": s.pp_rank, "num_layers": s.num_layers, "first_layer": s.first_layer,
             "last_layer": s.last_layer, "has_embedding": s.has_embedding, "has_lm_head": s.has_lm_head,
             "compute_s": s.compute_s, "peak_memory_gib": s.peak_memory_gib,
             "memory_gib": {"weights": s.weights_gib, "gradients": s.gradients_gib,
                            "optimizer": s.optimizer_state_gib, "activations": s.activations_gib,
                            "other": s.other_gib, "buffers": s.buffers_gib}}
            for s in pred.stages
        ],
    }


def _stage_rows(pred: Prediction) -> list[str]:
    stages = list(pred.stages)
    if len(stages) > 6:  # the ends and the heaviest middle stage tell the story
        heavy = max(stages[1:-1], key=lambda s: s.peak_memory_gib)
        stages = [stages[0], heavy, stages[-1]]
    rows = [f"  {'stage':>5} {'layers':>6} {'s/micro-batch':>13} {'weights+grads+optim':>19} "
            f"{'activations':>11} {'other':>6} {'peak GiB':>9}"]
    for s in stages:
        states = s.weights_gib + s.gradients_gib + s.optimizer_state_gib
        rows.append(f"  {s.pp_rank:>5} {s.num_layers:>6} {s.compute_s:>13.4f} {states:>19.2f} "
                    f"{s.activations_gib:>11.2f} {s.other_gib + s.buffers_gib:>6.2f} {s.peak_memory_gib:>9.2f}")
    return rows


def prediction_table(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                     pred: Prediction) -> str:
    lay = layout_dict(layout)
    head = " ".join(f"{k}={v}" for k, v in lay.items())
    fit = "fits" if pred.fits else "DOES NOT FIT"
    lines = [
        f"{model.name} on {cluster.num_gpus} x {cluster.name}, seq {job.seq_len}, global batch "
        f"{job.global_batch}, {job.dtype.value}",
        f"layout: {head}, micro-batches {pred.num_microbatches}",
        "",
        f"  step time            {pred.step_time_s:12.4f} s",
        f"  throughput           {pred.tokens_per_s:12.1f} tokens/s",
        f"  model TFLOP/s/GPU    {pred.model_tflops_per_gpu:12.1f}   (MFU {100 * pred.mfu:.1f} %)",
        f"  hardware TFLOP/s/GPU {pred.hardware_tflops_per_gpu:12.1f}   (HFU {100 * pred.hfu:.1f} %)",
        f"  pipeline bubble      {100 * pred.bubble_fraction:12.1f} %",
        f"  peak memory          {pred.peak_memory_gib:12.2f} GiB of {pred.memory_capacity_gib:g} ({fit})",
        "",
        "  step breakdown (s):",
    ]
    lines += [f"    {k:16} {v:10.4f}" for k, v in pred.breakdown.as_dict().items() if v > 0]
    lines += ["", "  per stage:", *_stage_rows(pred)]
    return "\n".join(lines)
