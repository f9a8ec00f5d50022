"""Plan files: the versioned, self-contained answer of a search, read by launchers and by meshplan.

A plan holds the model and the hardware profile it was made for (so it can be re-predicted without
presets), the job, the chosen layout with its stage split, the prediction, the search certificate and
the top-k alternatives. YAML by default, JSON when the name ends in .json; the structure is checked
against planner/plan.schema.json, the meaning (degrees multiply to the GPU count, the split covers
every layer, the batch divides) by `Layout.validate`. Files are written atomically.

The same inputs give a byte-identical file: the search's wall time is therefore left out (null)
unless the caller asks for it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cost_models.profile import MeasuredCosts, MeasuredLayer
from cost_models.schedules import LAUNCHERS
from cost_models.step import evaluate_layout
from hardware_profiles import parse_profile, profile_mapping
from planner.bands import StepBand, band_dict, band_for, load_bands, step_band
from planner.errors import InputError, MeshplanError
from planner.ilp import Solver
from planner.loaders import model_from_mapping, model_mapping
from planner.report import layout_dict, prediction_dict
from planner.search import Certificate, Ranked
from planner.simulate import simulated_step_time
from planner.specs import (
    AttentionKernel,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    ModelSpec,
    Recompute,
    RecomputeModule,
    Runtime,
    Schedule,
    ZeroStage,
    module_names,
    non_default_modules,
)

SCHEMA_VERSION = 1
MESHPLAN_VERSION = "0.1.0"


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    best: Ranked
    alternatives: tuple[Ranked, ...]
    certificate: Certificate | None  # None for a plan written by hand

    @cached_property
    def bands(self) -> tuple[StepBand, ...]:
        """Model error band of the best layout (index 0) and of each alternative, around the step time the
        ranking uses (`Ranked.step_time_s`: simulated when there is one), from planner/error_bands.yaml."""
        band = band_for(load_bands(), self.model, self.cluster, self.job)
        return tuple(step_band(r.step_time_s, band) for r in (self.best, *self.alternatives))

    @property
    def indistinguishable(self) -> tuple[bool, ...]:
        """Per alternative: its band overlaps the best's, so the model cannot say which is faster."""
        best, *others = self.bands
        return tuple(b.overlaps(best) for b in others)


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((resources.files("planner") / "plan.schema.json").read_text())
    return data


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


def _summary(ranked: Ranked, band: StepBand, indistinguishable: bool) -> dict[str, Any]:
    p = ranked.prediction
    return {"step_time_s": p.step_time_s, "simulated_step_time_s": ranked.simulated_step_time_s,
            "tokens_per_s": p.tokens_per_s, "mfu": p.mfu,
            "peak_memory_gib": p.peak_memory_gib, "layout": layout_dict(ranked.layout),
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
        "model": model_mapping(plan.model),
        "hardware": {"name": plan.cluster.name, "num_gpus": plan.cluster.num_gpus,
                     "profile": profile_mapping(plan.cluster)},
        "job": {"seq_len": job.seq_len, "global_batch": job.global_batch, "dtype": job.dtype.value,
                "attention": job.runtime.attention.value, "overlap_grad_reduce": job.runtime.overlap_grad_reduce,
                "overlap_param_gather": job.runtime.overlap_param_gather,
                "grad_reduce_bytes": job.runtime.grad_reduce_bytes, **_moe_job(plan.model, job)},
        "parallelism": {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "ep": layout.ep,
                        **({"etp": layout.etp} if plan.model.moe is not None else {}), "sp": layout.sp,
                        "vpp": layout.vpp, "zero_stage": int(layout.zero), "schedule": layout.schedule.value,
                        "schedule_runs_on": list(LAUNCHERS[layout.schedule]),
                        "layers_per_chunk": list(layout.chunk_layers(plan.model.num_layers))},
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
        "alternatives": [_summary(r, b, same) for r, b, same
                         in zip(plan.alternatives, plan.bands[1:], plan.indistinguishable, strict=True)],
        "costs": _costs_dict(job.runtime.measured),
    }


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


def _costs_from(data: dict[str, Any] | None) -> MeasuredCosts | None:
    if not data:
        return None
    rows = tuple(((r["kind"], r["tp"], r["mbs"]),
                  MeasuredLayer(r["forward_s"], r["backward_s"], r["activation_bytes"], r["params"]))
                 for r in data["rows"])
    return MeasuredCosts(rows, data["seq_len"], data["source"])


def dumps(plan: Plan, path: str | Path, record_timing: bool = False) -> str:
    data = plan_to_dict(plan, record_timing)
    if str(path).endswith(".json"):
        return json.dumps(data, indent=2) + "\n"
    return yaml.safe_dump(data, sort_keys=False, width=120)


def save_plan(plan: Plan, path: str | Path, record_timing: bool = False) -> None:
    """Write atomically: a temporary file in the same folder, then a rename."""
    write_text_atomic(Path(path), dumps(plan, path, record_timing))


def write_text_atomic(target: Path, text: str) -> None:
    """Write `text` to `target` through a temporary file in the same folder and a rename."""
    write_bytes_atomic(target, text.encode())


def write_bytes_atomic(target: Path, data: bytes) -> None:
    """Write `data` to `target` through a temporary file in the same folder and a rename."""
    target = Path(target)
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise InputError(f"cannot write {target}: {exc.strerror or exc}") from None


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "top level"


def layout_from_dict(data: dict[str, Any], origin: str) -> Layout:
    par, rec = data["parallelism"], data["recompute"]
    full = rec["full_layers_per_stage"]
    recompute = Recompute(rec["granularity"])
    return Layout(tp=par["tp"], pp=par["pp"], dp=par["dp"], cp=par["cp"], vpp=par["vpp"],
                  ep=par.get("ep", 1), etp=par.get("etp", 1),
                  mbs=data["batching"]["micro_batch_size"], sp=par["sp"], zero=ZeroStage(par["zero_stage"]),
                  recompute=recompute, schedule=Schedule(par["schedule"]),
                  stage_layers=tuple(par["layers_per_chunk"]),
                  recompute_layers=tuple(full) if recompute is not Recompute.FULL and any(full) else None,
                  recompute_modules=frozenset(RecomputeModule(m) for m in rec.get("modules", ())))


def load_plan_data(data: Any, origin: str) -> tuple[ModelSpec, ClusterSpec, JobSpec, Layout]:
    """Validate a parsed plan and return what it describes."""
    try:
        jsonschema.validate(data, _schema())
    except jsonschema.ValidationError as exc:
        raise InputError(f"{origin}: {_where(exc)}: {exc.message.splitlines()[0]}") from None
    model = model_from_mapping(data["model"], f"{origin}: model")
    hw = data["hardware"]
    cluster = parse_profile(hw["profile"], f"{origin}: hardware.profile", hw["num_gpus"])
    j = data["job"]
    job = JobSpec(seq_len=j["seq_len"], global_batch=j["global_batch"], dtype=Dtype(j["dtype"]),
                  runtime=Runtime(attention=AttentionKernel(j["attention"]),
                                  overlap_grad_reduce=j["overlap_grad_reduce"],
                                  overlap_param_gather=j["overlap_param_gather"],
                                  grad_reduce_bytes=j["grad_reduce_bytes"],
                                  measured=_costs_from(data.get("costs")),
                                  moe_capacity_factor=j.get("moe_capacity_factor"),
                                  moe_load_imbalance=j.get("moe_load_imbalance", 1.0),
                                  moe_comm_overlap=j.get("moe_comm_overlap", False),
                                  moe_dedup_dispatch=j.get("moe_dedup_dispatch", False)))
    layout = layout_from_dict(data, origin)
    try:
        layout.validate(model, job, cluster.num_gpus)
    except MeshplanError as exc:
        raise InputError(f"{origin}: {exc}") from None
    if data["batching"]["global_batch"] != job.global_batch or \
            data["batching"]["num_microbatches"] != layout.num_microbatches(job):
        raise InputError(f"{origin}: batching does not match: micro-batch {layout.mbs} x dp {layout.dp} x "
                         f"{data['batching']['num_microbatches']} micro-batches != global batch {job.global_batch}")
    if len(data["stages"]) != layout.pp:
        raise InputError(f"{origin}: {len(data['stages'])} stages listed for pp {layout.pp}")
    return model, cluster, job, layout


def read_plan(path: str | Path) -> tuple[ModelSpec, ClusterSpec, JobSpec, Layout]:
    """Read and validate a plan file (YAML, or JSON by suffix)."""
    target = Path(path)
    try:
        text = target.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read plan {target}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text) if target.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{target}: not valid {'JSON' if target.suffix == '.json' else 'YAML'} "
                         f"({str(exc).splitlines()[0]})") from None
    return load_plan_data(data, str(target))


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan file; the chosen layout is re-predicted by the current cost model, the
    alternatives (stored as summaries) are re-predicted with an even layer split."""
    model, cluster, job, layout = read_plan(path)
    target = Path(path)
    data = json.loads(target.read_text()) if target.suffix == ".json" else yaml.safe_load(target.read_text())
    rec = data["search"]
    cert = None if rec is None else Certificate(
        method=rec["method"], solver=Solver(rec["solver"]), candidates=rec["candidates"], evaluated=rec["evaluated"],
        pruned_memory=rec["pruned"]["memory_bound"], pruned_time=rec["pruned"]["time_bound"],
        infeasible=rec["pruned"]["no_split_fits"], solve_time_s=rec["solve_time_s"] or 0.0, optimal=rec["optimal"],
        gap=rec["gap"])
    def ranked(lay: Layout) -> Ranked:
        pred = evaluate_layout(model, cluster, job, lay)
        return Ranked(lay, pred, simulated_step_time(model, cluster, job, lay, pred))

    best = ranked(layout)
    alternatives = []
    for alt in data["alternatives"]:  # stored as summaries: re-priced with the even split
        lay = alt["layout"]
        other = Layout(tp=lay["tp"], pp=lay["pp"], dp=lay["dp"], cp=lay["cp"], vpp=lay["vpp"], mbs=lay["mbs"],
                       sp=lay["sp"], zero=ZeroStage(lay["zero_stage"]), recompute=Recompute(lay["recompute"]),
                       schedule=Schedule(lay["schedule"]), ep=lay.get("ep", 1), etp=lay.get("etp", 1),
                       recompute_modules=frozenset(RecomputeModule(m) for m in lay.get("recompute_modules", ())))
        alternatives.append(ranked(other))
    return Plan(model, cluster, job, best, tuple(alternatives), cert)
