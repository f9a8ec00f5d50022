"""Plan files: the versioned, self-contained answer of a search, read by launchers and by meshplan.

A plan holds the model and the hardware profile it was made for (so it can be re-predicted without
presets), the job, the chosen layout with its stage split, the prediction, the search certificate and
the top-k alternatives. YAML by default, JSON when the name ends in .json; the structure is checked
against planner/outputs/plan.schema.json, the meaning (degrees multiply to the GPU count, the split covers
every layer, the batch divides) by `Layout.validate`. Files are written atomically.

The same inputs give a byte-identical file: the search's wall time is therefore left out (null)
unless the caller asks for it.

The `Plan` itself is planner/outputs/plan.py; reading a file back (validation, and what the file says against
the current cost model) is planner/outputs/planread.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from hardware_profiles import profile_mapping
from meshcore import (
    JobSpec,
    Layout,
    MeasuredCosts,
    ModelSpec,
    fileio,
    module_names,
    non_default_modules,
    offload_names,
    spec_of,
)
from meshcore.checks import path_argument
from meshcore.errors import InputError
from meshcore.framework import Framework
from planner.inputs.loaders import model_mapping
from planner.inputs.runtimes import load_runtime
from planner.outputs.bands import StepBand, band_dict
from planner.outputs.plan import Plan
from planner.outputs.report import layout_dict, prediction_dict
from planner.search.ranked import Ranked

SCHEMA_VERSION = 1
MESHPLAN_VERSION = "0.1.0"


def _stages(ranked: Ranked) -> list[dict[str, Any]]:
    layout, pred = ranked.layout, ranked.prediction
    chunks = layout.chunk_layers(sum(s.num_layers for s in pred.stages))
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    out = []
    for s in pred.stages:
        mine = [c for c in layout.rank_chunks(s.pp_rank) if chunks[c]]
        out.append({
            "pp_rank": s.pp_rank, "first_layer": s.first_layer, "last_layer": s.last_layer,
            "num_layers": s.num_layers, "layer_ranges": [[starts[c], starts[c] + chunks[c] - 1] for c in mine],
            "has_embedding": s.has_embedding, "has_lm_head": s.has_lm_head,
            "full_recompute_layers": layout.fully_recomputed(s.pp_rank, sum(chunks)),
            "compute_s": s.compute_s, "peak_memory_gib": s.peak_memory_gib})
    return out


def _summary(ranked: Ranked, band: StepBand, indistinguishable: bool, num_layers: int) -> dict[str, Any]:
    """An alternative: its figures and its layout with its own stage split (and partial recomputation)."""
    p, lay = ranked.prediction, ranked.layout
    layout = {**layout_dict(lay), "layers_per_chunk": list(lay.chunk_layers(num_layers))}
    if lay.recompute_layers is not None:
        layout["full_layers_per_stage"] = list(lay.recompute_layers)
    return {"step_time_s": p.step_time_s, "simulated_step_time_s": ranked.simulated_step_time_s,
            "tokens_per_s": p.tokens_per_s, "mfu": p.mfu,
            "peak_memory_gib": p.peak_memory_gib, "layout": layout,
            "band_s": [band.low_s, band.high_s], "indistinguishable": indistinguishable}


def plan_to_dict(plan: Plan, record_timing: bool = False) -> dict[str, Any]:
    layout, pred, job, cert = plan.best.layout, plan.best.prediction, plan.job, plan.certificate
    prediction = {k: v for k, v in prediction_dict(pred).items() if k != "stages"}
    prediction["simulated_step_time_s"] = plan.best.simulated_step_time_s
    best_band = plan.bands[0]
    prediction["band_s"] = [best_band.low_s, best_band.high_s]
    prediction["step_time_band"] = band_dict(best_band)
    return {
        "schema_version": SCHEMA_VERSION,
        "meshplan_version": MESHPLAN_VERSION,
        "runtime": runtime_dict(job.runtime.framework),
        "model": model_mapping(plan.model),
        "hardware": {"name": plan.cluster.name, "num_gpus": plan.cluster.num_gpus,
                     "profile": profile_mapping(plan.cluster),
                     **({"provenance": list(plan.cluster.provenance)} if plan.cluster.provenance else {})},
        "job": {"seq_len": job.seq_len, "global_batch": job.global_batch, "dtype": job.dtype.value,
                "attention": job.runtime.attention.value, "overlap_grad_reduce": job.runtime.overlap_grad_reduce,
                "overlap_param_gather": job.runtime.overlap_param_gather,
                "grad_reduce_bytes": job.runtime.grad_reduce_bytes, **_moe_job(plan.model, job),
                **_execution_job(job),
                **({"lora_rank": job.lora_rank, "trainable_fraction": job.trainable_fraction} if job.lora_rank
                   else {}),
                **({"packed_doc_lens": list(job.packed_doc_lens)} if job.packed_doc_lens else {})},
        "parallelism": {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, **_replicate(layout), "cp": layout.cp,
                        "ep": layout.ep,
                        **({"etp": layout.etp} if plan.model.moe is not None else {}), "sp": layout.sp,
                        "vpp": layout.vpp, "zero_stage": int(layout.zero), "schedule": layout.schedule.value,
                        "schedule_runs_on": list(spec_of(layout.schedule).launchers),
                        "layers_per_chunk": list(layout.chunk_layers(plan.model.num_layers)),
                        **({"offload": offload_names(layout.offload)} if layout.offload else {})},
        "batching": {"micro_batch_size": layout.mbs, "num_microbatches": layout.num_microbatches(job),
                     "global_batch": job.global_batch},
        "recompute": {"granularity": layout.recompute.value,
                      "full_layers_per_stage": [layout.fully_recomputed(r, plan.model.num_layers)
                                                for r in range(layout.pp)],
                      **({"modules": module_names(layout.recompute_modules)} if non_default_modules(layout) else {})},
        "stages": _stages(plan.best),
        "prediction": prediction,
        "search": None if cert is None else {
            "method": cert.method, "solver": cert.solver.value, "candidates": cert.candidates,
            "evaluated": cert.evaluated,
            "pruned": {"memory_bound": cert.pruned_memory, "time_bound": cert.pruned_time,
                       "no_split_fits": cert.infeasible},
            "solve_time_s": round(cert.solve_time_s, 3) if record_timing else None,
            "optimal": cert.optimal, "gap": cert.gap},
        "alternatives": [_summary(r, b, same, plan.model.num_layers) for r, b, same
                         in zip(plan.alternatives, plan.bands[1:], plan.indistinguishable, strict=True)],
        "costs": _costs_dict(job.runtime.measured),
    }


def _replicate(layout: Layout) -> dict[str, Any]:
    """HSDP's replicate factor, only where there is one (plans without HSDP keep their form)."""
    return {"dp_replicate": layout.dp_replicate} if layout.dp_replicate != 1 else {}


def runtime_dict(framework: Framework) -> dict[str, str]:
    """The runtime a plan was searched for, as plan files record it: name, label, package and version."""
    profile = load_runtime(framework)
    return {"name": profile.framework.value, "label": profile.label, "package": profile.package,
            "version": profile.version}


def _execution_job(job: JobSpec) -> dict[str, Any]:
    """The job's torch.compile and FP8 recipe where it chose them (absent: the runtime's defaults; files without them
    stay as they were)."""
    out: dict[str, Any] = {}
    if job.runtime.compile is not None:
        out["compile"] = job.runtime.compile
    if job.runtime.fp8_recipe is not None:
        out["fp8_recipe"] = job.runtime.fp8_recipe.value
    return out


def _moe_job(model: ModelSpec, job: JobSpec) -> dict[str, Any]:
    """Routing assumptions of an MoE plan (absent for dense models, whose files stay as they were)."""
    if model.moe is None:
        return {}
    return {"moe_capacity_factor": job.runtime.moe_capacity_factor,
            "moe_load_imbalance": job.runtime.moe_load_imbalance, "moe_comm_overlap": job.runtime.moe_comm_overlap,
            "moe_dedup_dispatch": job.runtime.moe_dedup_dispatch}


def _costs_dict(measured: MeasuredCosts | None) -> dict[str, Any] | None:
    """A cost table the plan was made with, embedded so the plan re-predicts the same way."""
    if measured is None:
        return None
    return {"source": measured.source, "seq_len": measured.seq_len,
            "rows": [{"kind": k[0], "tp": k[1], "mbs": k[2], "forward_s": m.forward_s, "backward_s": m.backward_s,
                      "activation_bytes": m.activation_bytes, "params": m.params} for k, m in measured.rows]}


def dumps(plan: Plan, path: str | Path, record_timing: bool = False) -> str:
    data = plan_to_dict(plan, record_timing)
    if str(path).endswith(".json"):
        return json.dumps(data, indent=2) + "\n"
    return str(yaml.safe_dump(data, sort_keys=False, width=120))


def save_plan(plan: Plan, path: str | Path, record_timing: bool = False) -> None:
    """Write atomically: a temporary file in the same folder, then a rename."""
    if not isinstance(plan, Plan):
        raise InputError(f"plan must be a Plan (planner.plan or planner.load_plan), got {type(plan).__name__}")
    path_argument(path, "path", "the plan file to write")
    fileio.write_text_atomic(Path(path), dumps(plan, path, record_timing))
