"""Reading a plan file back: its structure (planner/plan.schema.json, integers strictly), its meaning (every
layout, the best and each alternative, obeys `Layout.validate`; the split, the recomputation lists and the
stages agree), and the plan it describes.

A loaded plan is what the file says: the stored predictions and each alternative's stored split. The current
cost model prices every layout as well, since per-stage detail (memory by part, the timeline) exists only
there; its figures replace the stored ones only on request (`reprice`), and a warning names the stored and
re-priced step times of every layout where they differ. planner/planfile.py writes what this reads.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from cost_models.profile import MeasuredCosts, MeasuredLayer
from cost_models.step import Breakdown, evaluate_layout
from hardware_profiles import parse_profile
from planner.errors import InputError, MeshplanError
from planner.ilp import Solver
from planner.loaders import model_from_mapping
from planner.planfile import Plan
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
)

# the prediction figures a plan file stores for its best layout and for each alternative
STORED_BEST = ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu",
               "peak_memory_gib", "memory_capacity_gib", "fits", "bubble_fraction", "num_microbatches")
STORED_ALTERNATIVE = ("step_time_s", "tokens_per_s", "mfu", "peak_memory_gib")
# relative difference within which a stored step time is the re-priced one: the same inputs re-price to the
# same bits; this leaves room for another platform's floating-point summation order
DRIFT_TOLERANCE = 1e-6

log = logging.getLogger(__name__)


def _is_integer(_: Any, value: Any) -> bool:
    """JSON Schema counts 2.0 as an integer; a degree or a count written 2.0 is refused here."""
    return isinstance(value, int) and not isinstance(value, bool)


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((resources.files("planner") / "plan.schema.json").read_text())
    return data


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "top level"


def _costs_from(data: dict[str, Any] | None) -> MeasuredCosts | None:
    if not data:
        return None
    rows = tuple(((r["kind"], r["tp"], r["mbs"]),
                  MeasuredLayer(r["forward_s"], r["backward_s"], r["activation_bytes"], r["params"]))
                 for r in data["rows"])
    return MeasuredCosts(rows, data["seq_len"], data["source"])


def _layout(lay: dict[str, Any], mbs: int, recompute: Recompute, split: list[int] | None,
            full: list[int] | None, modules: list[str]) -> Layout:
    return Layout(tp=lay["tp"], pp=lay["pp"], dp=lay["dp"], cp=lay["cp"], vpp=lay["vpp"],
                  ep=lay.get("ep", 1), etp=lay.get("etp", 1), mbs=mbs, sp=lay["sp"],
                  zero=ZeroStage(lay["zero_stage"]), recompute=recompute, schedule=Schedule(lay["schedule"]),
                  stage_layers=tuple(split) if split is not None else None,
                  recompute_layers=tuple(full) if full and recompute is not Recompute.FULL and any(full) else None,
                  recompute_modules=frozenset(RecomputeModule(m) for m in modules))


def layout_from_dict(data: dict[str, Any], origin: str) -> Layout:
    """The best layout of a parsed plan (not yet validated)."""
    par, rec = data["parallelism"], data["recompute"]
    return _layout(par, data["batching"]["micro_batch_size"], Recompute(rec["granularity"]),
                   par["layers_per_chunk"], rec["full_layers_per_stage"], rec.get("modules", []))


def _check_full(full: list[int] | None, layout: Layout, model: ModelSpec, where: str) -> None:
    """A full_layers_per_stage list has one count per pp rank, and says what the layout recomputes."""
    if full is None:
        return
    if len(full) != layout.pp:
        raise InputError(f"{where}: full_layers_per_stage {full} needs one count per pp rank, pp {layout.pp}")
    want = [layout.fully_recomputed(r, model.num_layers) for r in range(layout.pp)]
    if full != want:
        raise InputError(f"{where}: full_layers_per_stage {full} does not match recompute {layout.recompute.value} "
                         f"over layers per rank {list(layout.rank_layers(model.num_layers))} (which recomputes {want})")


def _check_stages(stages: list[dict[str, Any]], layout: Layout, model: ModelSpec, origin: str) -> None:
    """The stages listed hold the layers parallelism.layers_per_chunk gives each pp rank."""
    if len(stages) != layout.pp:
        raise InputError(f"{origin}: {len(stages)} stages listed for pp {layout.pp}")
    chunks = layout.chunk_layers(model.num_layers)
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    for rank, stage in enumerate(stages):
        ranges = [[starts[c], starts[c] + chunks[c] - 1] for c in layout.rank_chunks(rank) if chunks[c]]
        if stage["pp_rank"] != rank or stage["layer_ranges"] != ranges or \
                stage["num_layers"] != sum(b - a + 1 for a, b in ranges):
            raise InputError(f"{origin}: stages[{rank}] (pp rank {stage['pp_rank']}) holds layers "
                             f"{stage['layer_ranges']}, but parallelism.layers_per_chunk {list(chunks)} gives pp rank "
                             f"{rank} layers {ranges}")
        if stage["full_recompute_layers"] != layout.fully_recomputed(rank, model.num_layers):
            raise InputError(f"{origin}: stages[{rank}] fully recomputes {stage['full_recompute_layers']} layers, "
                             f"recompute.full_layers_per_stage says {layout.fully_recomputed(rank, model.num_layers)}")


def _validated(layout: Layout, model: ModelSpec, job: JobSpec, gpus: int, where: str) -> Layout:
    try:
        layout.validate(model, job, gpus)
    except MeshplanError as exc:
        raise InputError(f"{where}: {exc}") from None
    return layout


def _alternative(alt: dict[str, Any], model: ModelSpec, job: JobSpec, gpus: int, where: str) -> Layout:
    """An alternative's layout with its stored split (files before the split was stored: the even split)."""
    lay = alt["layout"]
    full = lay.get("full_layers_per_stage")
    layout = _layout(lay, lay["mbs"], Recompute(lay["recompute"]), lay.get("layers_per_chunk"), full,
                     lay.get("recompute_modules", []))
    _check_full(full, _validated(layout, model, job, gpus, where), model, where)
    return layout


@dataclass(frozen=True)
class PlanData:
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    layout: Layout
    alternatives: tuple[Layout, ...]


def parse_plan(data: Any, origin: str) -> PlanData:
    """Validate a parsed plan, alternatives included, and return the layouts it describes."""
    try:
        jsonschema.validate(data, _schema(), cls=StrictValidator)
    except jsonschema.ValidationError as exc:
        raise InputError(f"{origin}: {_where(exc)}: {exc.message.splitlines()[0]}") from None
    model = model_from_mapping(data["model"], f"{origin}: model")
    hw = data["hardware"]
    cluster = parse_profile(hw["profile"], f"{origin}: hardware.profile", hw["num_gpus"])
    if hw.get("provenance"):
        cluster = replace(cluster, provenance=tuple(hw["provenance"]))
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
    layout = _validated(layout_from_dict(data, origin), model, job, cluster.num_gpus, origin)
    _check_full(data["recompute"]["full_layers_per_stage"], layout, model, f"{origin}: recompute")
    if data["batching"]["global_batch"] != job.global_batch or \
            data["batching"]["num_microbatches"] != layout.num_microbatches(job):
        raise InputError(f"{origin}: batching does not match: micro-batch {layout.mbs} x dp {layout.dp} x "
                         f"{data['batching']['num_microbatches']} micro-batches != global batch {job.global_batch}")
    _check_stages(data["stages"], layout, model, origin)
    alternatives = tuple(_alternative(alt, model, job, cluster.num_gpus, f"{origin}: alternatives[{i}] (alternative "
                                                                          f"{i + 2})")
                         for i, alt in enumerate(data["alternatives"]))
    return PlanData(model, cluster, job, layout, alternatives)


def read_plan_data(path: str | Path) -> tuple[Any, str]:
    """The parsed contents of a plan file (YAML, or JSON by suffix) and the name to give it in messages."""
    target = Path(path)
    try:
        text = target.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read plan {target}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return (json.loads(text) if target.suffix == ".json" else yaml.safe_load(text)), str(target)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{target}: not valid {'JSON' if target.suffix == '.json' else 'YAML'} "
                         f"({str(exc).splitlines()[0]})") from None


def _certificate(rec: dict[str, Any] | None) -> Certificate | None:
    return None if rec is None else Certificate(
        method=rec["method"], solver=Solver(rec["solver"]), candidates=rec["candidates"], evaluated=rec["evaluated"],
        pruned_memory=rec["pruned"]["memory_bound"], pruned_time=rec["pruned"]["time_bound"],
        infeasible=rec["pruned"]["no_split_fits"], solve_time_s=rec["solve_time_s"] or 0.0, optimal=rec["optimal"],
        gap=rec["gap"])


def _priced(plan: PlanData, layout: Layout, where: str) -> Ranked:
    """`layout` priced by the current cost model (and the simulator)."""
    try:
        pred = evaluate_layout(plan.model, plan.cluster, plan.job, layout)
        return Ranked(layout, pred, simulated_step_time(plan.model, plan.cluster, plan.job, layout, pred))
    except MeshplanError as exc:
        raise InputError(f"{where}: {exc}") from None


def _as_stored(priced: Ranked, saved: dict[str, Any], names: tuple[str, ...]) -> Ranked:
    """`priced` with the figures the file stores in place of the current model's: the headline numbers, the
    simulated step time and (for the best layout) the breakdown; keys an older file lacks stay re-priced."""
    values: dict[str, Any] = {k: saved[k] for k in names if k in saved}
    if "breakdown" in saved:
        now = priced.prediction.breakdown
        values["breakdown"] = Breakdown(**{f.name: saved["breakdown"].get(f.name.removesuffix("_s"),
                                                                          getattr(now, f.name))
                                           for f in fields(Breakdown)})
    return Ranked(priced.layout, replace(priced.prediction, **values), saved.get("simulated_step_time_s"))


def _drift(label: str, stored: Ranked, priced: Ranked) -> str | None:
    """`label: step time stored x s, re-priced y s (+z %)` for each of the two step times (closed form,
    simulated) that differ, None when both agree."""
    def same(a: float | None, b: float | None) -> bool:
        return a is b if a is None or b is None else math.isclose(a, b, rel_tol=DRIFT_TOLERANCE)

    def shown(x: float | None) -> str:
        return "none" if x is None else f"{x:.6g} s"

    parts = []
    for name, a, b in (("step time", stored.prediction.step_time_s, priced.prediction.step_time_s),
                       ("simulated step time", stored.simulated_step_time_s, priced.simulated_step_time_s)):
        if not same(a, b):
            change = f" ({100 * (b / a - 1):+.2f} %)" if a and b is not None else ""
            parts.append(f"{name} stored {shown(a)}, re-priced {shown(b)}{change}")
    return f"{label}: {', '.join(parts)}" if parts else None


def load_plan(path: str | Path, reprice: bool = False) -> Plan:
    """Read and validate a plan file: the plan as the file states it (its predictions, each alternative's split),
    or with every layout re-priced by the current cost model when `reprice`; a warning names the stored and
    re-priced step times where they differ."""
    data, origin = read_plan_data(path)
    parsed = parse_plan(data, origin)
    layouts = (parsed.layout, *parsed.alternatives)
    labels = ["best layout", *(f"alternative {i + 2}" for i in range(len(parsed.alternatives)))]
    priced = [_priced(parsed, lay, f"{origin}: {label}") for lay, label in zip(layouts, labels, strict=True)]
    saved = [(data["prediction"], STORED_BEST), *((alt, STORED_ALTERNATIVE) for alt in data["alternatives"])]
    stored = [_as_stored(r, values, names) for r, (values, names) in zip(priced, saved, strict=True)]
    drift = [d for d in map(_drift, labels, stored, priced) if d is not None]
    if drift:
        shown = ("showing the re-priced figures" if reprice else
                 "showing the stored figures (meshplan explain --reprice, or load_plan(..., reprice=True), re-prices)")
        log.warning("%s: the current cost model prices this plan differently from the file: %s; %s",
                    origin, "; ".join(drift), shown)
    chosen = priced if reprice else stored
    return Plan(parsed.model, parsed.cluster, parsed.job, chosen[0], tuple(chosen[1:]), _certificate(data["search"]))
