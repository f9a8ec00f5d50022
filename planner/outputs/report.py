"""Presentation of predictions: a JSON-ready dict and a readable text table (no I/O here)."""

from __future__ import annotations

from typing import Any

from cost_models.prediction import Prediction, StageCost
from meshcore import (
    ClusterSpec,
    JobSpec,
    Layout,
    ModelSpec,
    Offload,
    module_names,
    non_default_modules,
    offload_names,
    spec_of,
)
from planner.inputs.runtimes import load_runtime
from planner.outputs.bands import StepBand, band_dict, describe
from planner.outputs.plan import Plan


def layout_dict(layout: Layout) -> dict[str, Any]:
    """The layout's degrees; ep and etp only where they are not 1, dp_replicate (HSDP) only where it is not 1,
    offload only where there is some (plans without them keep their form)."""
    experts = {"ep": layout.ep, "etp": layout.etp} if layout.ep > 1 or layout.etp > 1 else {}
    hsdp = {"dp_replicate": layout.dp_replicate} if layout.dp_replicate != 1 else {}
    return {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, **hsdp, "cp": layout.cp, "vpp": layout.vpp,
            "mbs": layout.mbs, "sp": layout.sp, "zero_stage": int(layout.zero),
            "recompute": layout.recompute.value, "schedule": layout.schedule.value, **experts,
            **({"recompute_modules": module_names(layout.recompute_modules)} if non_default_modules(layout) else {}),
            **({"offload": offload_names(layout.offload)} if layout.offload else {})}


def prediction_dict(pred: Prediction, band: StepBand | None = None) -> dict[str, Any]:
    """The fields `meshplan evaluate --json` prints (units in the names); with a band, also
    `step_time_band_s` [low, high] and `step_time_band` (its percentages, regime key and residual count)."""
    banded = {} if band is None else {"step_time_band_s": [band.low_s, band.high_s],
                                      "step_time_band": band_dict(band)}
    return {
        "step_time_s": pred.step_time_s,
        **banded,
        "tokens_per_s": pred.tokens_per_s,
        "model_tflops_per_gpu": pred.model_tflops_per_gpu,
        "hardware_tflops_per_gpu": pred.hardware_tflops_per_gpu,
        "mfu": pred.mfu,
        "hfu": pred.hfu,
        "peak_memory_gib": pred.peak_memory_gib,
        "memory_capacity_gib": pred.memory_capacity_gib,
        "fits": pred.fits,
        **({"host_memory_gib": pred.host_memory_gib, "host_capacity_gib": pred.host_capacity_gib}
           if pred.host_memory_gib > 0 else {}),
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
    """The per-stage table; past six stages the ends and the heaviest middle stage tell the story, with a "..."
    row where stages are left out and a line saying how many are shown."""
    stages: list[StageCost | None] = list(pred.stages)
    if len(stages) > 6:
        middle = list(pred.stages[1:-1])
        heavy = max(middle, key=lambda s: s.peak_memory_gib)
        at = middle.index(heavy) + 1
        stages = [pred.stages[0], *([None] if at > 1 else []), heavy,
                  *([None] if at < len(pred.stages) - 2 else []), pred.stages[-1]]
    rows = [f"  {'stage':>5} {'layers':>6} {'s/micro-batch':>13} {'weights+grads+optim':>19} "
            f"{'activations':>11} {'other':>6} {'peak GiB':>9}"]
    for s in stages:
        if s is None:
            rows.append(f"  {'...':>5}")
            continue
        states = s.weights_gib + s.gradients_gib + s.optimizer_state_gib
        rows.append(f"  {s.pp_rank:>5} {s.num_layers:>6} {s.compute_s:>13.4f} {states:>19.2f} "
                    f"{s.activations_gib:>11.2f} {s.other_gib + s.buffers_gib:>6.2f} {s.peak_memory_gib:>9.2f}")
    if len(pred.stages) > 6:
        rows.append(f"  (3 of {len(pred.stages)} stages shown: the first, the heaviest in memory, the last; a plan "
                    "file lists them all)")
    return rows


def _doc_text(lengths: tuple[int, ...]) -> str:
    """Packed document lengths for a report line: all of them up to six, else the first six and the count."""
    head = ", ".join(str(n) for n in lengths[:6])
    return head if len(lengths) <= 6 else f"{head}, ... ({len(lengths)} lengths)"


def _band_note(step_s: float, band: StepBand | None) -> str:
    if band is None:
        return ""
    around = "" if band.step_s == step_s else f" around the simulated {band.step_s:.4g} s"
    return f"   ({describe(band)}{around})"


def prediction_table(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout,
                     pred: Prediction, band: StepBand | None = None, simulated_s: float | None = None) -> str:
    """The prediction as text; with a band, the step-time line says its model error band. With `simulated_s` (a plan's
    layout whose pipeline is simulated) the step, throughput and TFLOP/s are the simulated step's, the step a plan
    ranks by, and the closed form is named beside it."""
    lay = layout_dict(layout)
    if layout.recompute_layers:  # per-stage full recomputation: said where the layout's own mode is not
        full = sum(layout.fully_recomputed(r, model.num_layers) for r in range(layout.pp))
        lay["recompute"] = (f"{layout.recompute.value}+full{list(layout.recompute_layers)} ({full} of "
                            f"{model.num_layers} layers fully recomputed)")
    head = " ".join(f"{k}={v}" for k, v in lay.items())
    fit = "fits" if pred.fits else "DOES NOT FIT"
    step = pred.step_time_s if simulated_s is None else simulated_s
    rate = pred.step_time_s / step  # the per-second figures at the step shown
    lines = [
        f"{model.name} on {cluster.num_gpus} x {cluster.name}, seq {job.seq_len}, global batch "
        f"{job.global_batch}, {job.dtype.value}"
        + (f", LoRA rank {job.lora_rank} ({100 * job.trainable_fraction:.2f} % of the weights train)"
           if job.lora_rank else "")
        + (f", packed documents of {_doc_text(job.packed_doc_lens)} tokens" if job.packed_doc_lens else ""),
        *(f"hardware calibrated: {line}" for line in cluster.provenance),
        f"runtime: {load_runtime(job.runtime.framework).title}",
        f"layout: {head}, micro-batches {pred.num_microbatches}",
        "",
        f"  step time            {step:12.4f} s{_band_note(step, band)}",
        *([f"                       (the simulated pipeline; the closed form says {pred.step_time_s:.4f} s)"]
          if simulated_s is not None else []),
        f"  throughput           {pred.tokens_per_s * rate:12.1f} tokens/s",
        f"  model TFLOP/s/GPU    {pred.model_tflops_per_gpu * rate:12.1f}   (MFU {100 * pred.mfu * rate:.1f} %)",
        f"  hardware TFLOP/s/GPU {pred.hardware_tflops_per_gpu * rate:12.1f}   (HFU {100 * pred.hfu * rate:.1f} %)",
        f"  pipeline bubble      {100 * pred.bubble_fraction:12.1f} %",
        f"  peak memory          {pred.peak_memory_gib:12.2f} GiB of {pred.memory_capacity_gib:g} ({fit})",
        *([f"  host memory per node {pred.host_memory_gib:12.2f} GiB of {pred.host_capacity_gib:.0f} usable "
           f"(offloaded: {', '.join(offload_names(layout.offload))})"] if layout.offload else []),
        "",
        "  step breakdown (s):",
    ]
    lines += [f"    {k:16} {v:10.4f}" for k, v in pred.breakdown.as_dict().items() if v > 0]
    lines += ["", "  per stage:", *_stage_rows(pred)]
    return "\n".join(lines)


def layout_line(layout: Layout, with_split_recompute: bool = True) -> str:
    """One-line form of a layout: degrees, ZeRO stage, recomputation, schedule (and ep/etp for MoE)."""
    rec = layout.recompute.value
    if non_default_modules(layout):
        rec += f"[{','.join(module_names(layout.recompute_modules))}]"
    if layout.recompute_layers and with_split_recompute:
        rec += f"+full{list(layout.recompute_layers)}"
    experts = f"ep{layout.ep} etp{layout.etp} " if layout.ep > 1 or layout.etp > 1 else ""
    offload = f" offload[{','.join(offload_names(layout.offload))}]" if layout.offload else ""
    hsdp = f" dp_replicate{layout.dp_replicate}" if layout.dp_replicate != 1 else ""
    return (f"tp{layout.tp} pp{layout.pp} dp{layout.dp}{hsdp} cp{layout.cp} {experts}vpp{layout.vpp} mbs{layout.mbs} "
            f"{'sp ' if layout.sp else ''}zero{int(layout.zero)} {rec}"
            + (f" {layout.schedule.value}" if layout.pp > 1 else "") + offload)


def offload_reason(plan: Plan) -> str:
    """Why the best layout offloads: the same layout with everything on the GPU, priced by the same model, either
    does not fit (its peak memory) or is slower (by how much)."""
    from dataclasses import replace

    from cost_models.step import evaluate_layout

    best = plan.best
    names = ", ".join(offload_names(best.layout.offload))
    kept = evaluate_layout(plan.model, plan.cluster, plan.job, replace(best.layout, offload=frozenset()))
    if not kept.fits:
        return (f"  offloads {names}: the same layout with everything on the GPU needs {kept.peak_memory_gib:.1f} GiB "
                f"per GPU, over the {kept.memory_capacity_gib:g} GiB there are")
    return (f"  offloads {names}: the same layout with everything on the GPU fits but takes "
            f"{kept.step_time_s - best.prediction.step_time_s:+.2f} s more per step")


def activations_on_host(plan: Plan) -> str:
    """What the best layout's activation offload moves and how its runtime copies it (Execution.
    sync_checkpoint_copies: DeepSpeed's cpu_checkpointing, blocking copies to pageable memory, exposed whole;
    otherwise asynchronous copies beside the passes, exposed where a pass is shorter), with the host copies the
    passes do not hide, in seconds per step."""
    lay, model = plan.best.layout, plan.model
    full = sum(lay.fully_recomputed(r, model.num_layers) for r in range(lay.pp))
    what = (f"the checkpoints (layer inputs) of the {full} fully recomputed layers" if full == model.num_layers
            else "what each layer stores for its backward")
    how = ("by blocking copies to and from pageable host memory, the GPU idle meanwhile (cpu_checkpointing)"
           if plan.job.runtime.priced_execution.sync_checkpoint_copies else "by asynchronous copies beside the passes")
    return (f"  activations on the host: {what}, {how}; all host copies the passes do not hide: "
            f"{plan.best.prediction.breakdown.offload_s:.2f} s per step")


def plan_table(plan: Plan) -> str:
    """The best plan in full, then the alternatives one per line (≈: within model error of the best),
    then the certificate."""
    best, bands = plan.best, plan.bands
    marks = ("", *("≈" if same else "" for same in plan.indistinguishable))
    lines = [prediction_table(plan.model, plan.cluster, plan.job, best.layout, best.prediction, bands[0],
                              best.simulated_step_time_s)]
    if best.layout.stage_layers is not None and best.layout.vpp == 1:
        lines.append(f"  layers per stage: {list(best.layout.stage_layers)}")
    if best.layout.pp > 1:
        runs_on = ", ".join(spec_of(best.layout.schedule).launchers)
        lines.append(f"  schedule {best.layout.schedule.value} runs on: {runs_on}")
    if best.layout.offload:
        lines.append(offload_reason(plan))
    if Offload.ACTIVATIONS in best.layout.offload:
        lines.append(activations_on_host(plan))
    lines += ["", f"  {'#':>2}   {'step s':>9} {'closed s':>9} {'error band s':>13} {'tokens/s':>11} {'MFU %':>6} "
                  f"{'peak GiB':>9}  layout"]
    for i, (r, b, mark) in enumerate(zip((best, *plan.alternatives), bands, marks, strict=True)):
        p, rate = r.prediction, r.prediction.step_time_s / r.step_time_s
        closed = f"{p.step_time_s:9.3f}" if r.simulated_step_time_s is not None else f"{'-':>9}"
        lines.append(f"  {i + 1:>2} {mark:1} {r.step_time_s:9.3f} {closed} {f'{b.low_s:.3f}-{b.high_s:.3f}':>13} "
                     f"{p.tokens_per_s * rate:11.0f} {100 * p.mfu * rate:6.1f} {p.peak_memory_gib:9.1f}  "
                     f"{layout_line(r.layout)}")
    if any(r.simulated_step_time_s is not None for r in (best, *plan.alternatives)):
        lines.append("  step s: the simulated pipeline's where there is a closed s beside it; the ranking's step")
    if plan.alternatives:
        lines.append(f"  ≈ within model error: the alternative's band overlaps the best's, so the model cannot say "
                     f"which is faster (bands cover {100 * bands[0].band.coverage:g} % of "
                     f"{'held-out' if bands[0].band.held_out else 'in-sample calibration'} runs in regime "
                     f"{bands[0].band.regime}{'; ' + bands[0].band.note if bands[0].band.note else ''}; "
                     f"{sum(plan.indistinguishable)} of {len(plan.alternatives)} marked)")
    cert = plan.certificate
    if cert is not None:
        verdict = "optimal within the modelled space" if cert.optimal else f"gap {100 * cert.gap:.2f} % left"
        lines += ["", f"  search: {cert.candidates} candidates, {cert.evaluated} priced ({cert.simulated} simulated), "
                      f"{cert.pruned_memory} "
                      f"pruned by memory, {cert.pruned_time} by the time bound, {cert.infeasible} did not fit; "
                      f"{cert.solve_time_s:.2f} s, {verdict} ({cert.solver.value})"]
    return "\n".join(lines)
