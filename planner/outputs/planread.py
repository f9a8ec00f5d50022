"""Reading a plan file back: its structure (planner/outputs/plan.schema.json, integers strictly), its meaning (every
layout, the best and each alternative, obeys `Layout.validate`; the split, the recomputation lists and the
stages agree), and the plan it describes.

A loaded plan is what the file says: the stored predictions and each alternative's stored split. The current
cost model prices every layout as well, since per-stage detail (memory by part, the timeline) exists only
there; its figures replace the stored ones only on request (`reprice`), and a warning names the stored and
re-priced step times of every layout where they differ. planner/outputs/planfile.py writes what this reads.
"""

from __future__ import annotations

import functools
import json
import logging
import math
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from cost_models.memory.params import lora_fraction
from cost_models.prediction import Breakdown
from cost_models.profile.tables import MIN_LAYER_MS, least_decoder_activation
from cost_models.step import evaluate_layout
from hardware_profiles import parse_profile
from meshcore import (
    AttentionKernel,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    MeasuredCosts,
    MeasuredLayer,
    ModelSpec,
    Offload,
    Recompute,
    RecomputeModule,
    Runtime,
    Schedule,
    ZeroStage,
)
from meshcore.checks import path_argument
from meshcore.errors import InputError, MeshplanError
from meshcore.inputfile import MAX_PLAN_BYTES, parse_json, parse_yaml, read_text, shown
from meshcore.text import one_line
from planner.inputs.loaders import model_from_mapping
from planner.inputs.runtimes import with_execution
from planner.outputs.plan import Plan
from planner.search.ilp import Solver
from planner.search.ranked import Certificate, Ranked
from planner.search.simulate import simulated_step_time

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


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type: JSON Schema's enum and const take 1.0 for 1 (and ZeroStage(1.0) is stage 1)."""
    return type(a) is type(b) and a == b


def _strict_enum(validator: Any, enums: list[Any], instance: Any, schema: dict[str, Any]) -> Any:
    if not any(_same(instance, e) for e in enums):
        yield jsonschema.ValidationError(f"{instance!r} is not one of {enums!r}")


def _strict_const(validator: Any, const: Any, instance: Any, schema: dict[str, Any]) -> Any:
    if not _same(instance, const):
        yield jsonschema.ValidationError(f"{const!r} was expected")


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={"enum": _strict_enum, "const": _strict_const},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer))


@functools.cache
def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((resources.files("planner.outputs") / "plan.schema.json").read_text())
    return data


@functools.cache
def _validator() -> Any:
    """The schema's validator, built (and the schema itself checked) once per process: checking the schema took
    two thirds of the time to load a plan."""
    schema = _schema()
    StrictValidator.check_schema(schema)
    return StrictValidator(schema)


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "top level"


def _non_finite(value: Any, where: str) -> tuple[str, float] | None:
    """The path and value of the first NaN or infinite number in a parsed document (JSON Schema's minimum passes
    both)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def _check_figures(data: dict[str, Any], origin: str) -> None:
    """The stored figures explain and report divide by and compare: step times above 0, the throughput, FLOP and
    memory figures, the bands, the stages' figures and the search's gap and time not negative."""
    def at_least(value: Any, where: str, low: float, strict: bool = False) -> None:
        if value is not None and (value < low or (strict and value == low)):
            raise InputError(f"{origin}: {where} must be a number {'>' if strict else '>='} {low:g}, got {value!r}")

    figures = [("prediction", data["prediction"])]
    figures += [(f"alternatives.{i}", alt) for i, alt in enumerate(data["alternatives"])]
    for where, saved in figures:
        for key in ("step_time_s", "simulated_step_time_s"):
            at_least(saved.get(key), f"{where}.{key}", 0.0, strict=True)
        for key in ("tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu", "hfu",
                    "peak_memory_gib"):
            at_least(saved.get(key), f"{where}.{key}", 0.0)
        for i, bound in enumerate(saved.get("band_s") or ()):
            at_least(bound, f"{where}.band_s.{i}", 0.0)
    at_least(data["prediction"].get("memory_capacity_gib"), "prediction.memory_capacity_gib", 0.0, strict=True)
    for i, stage in enumerate(data["stages"]):
        for key in ("compute_s", "peak_memory_gib"):
            at_least(stage[key], f"stages.{i}.{key}", 0.0)
    if data["search"] is not None:
        at_least(data["search"]["gap"], "search.gap", 0.0)
        at_least(data["search"]["solve_time_s"], "search.solve_time_s", 0.0)


def _costs_from(data: dict[str, Any] | None, job_seq_len: int, hidden: int, origin: str) -> MeasuredCosts | None:
    """The embedded cost table: measured at the job's sequence length, one row per (kind, tp, mbs), every layer
    taking some time, decoder layers keeping at least their input."""
    if not data:
        return None
    if data["seq_len"] != job_seq_len:
        raise InputError(f"{origin}: costs.seq_len {data['seq_len']} must be the job's seq_len {job_seq_len} (a cost "
                         f"table is measured at the sequence length it plans)")
    seen: dict[tuple[str, int, int], int] = {}
    for i, r in enumerate(data["rows"]):
        key = (r["kind"], r["tp"], r["mbs"])
        if key in seen:
            raise InputError(f"{origin}: costs.rows.{i} repeats costs.rows.{seen[key]} (kind {key[0]}, tp {key[1]}, "
                             f"mbs {key[2]}); one row per (kind, tp, mbs)")
        seen[key] = i
        if (r["forward_s"] + r["backward_s"]) * 1e3 < MIN_LAYER_MS:
            raise InputError(f"{origin}: costs.rows.{i} forward_s + backward_s must be at least {MIN_LAYER_MS / 1e3:g} "
                             f"s (a measured layer takes time), got {r['forward_s']:g} + {r['backward_s']:g}")
        least = least_decoder_activation(job_seq_len, r["mbs"], hidden)
        if r["kind"] == "decoder" and r["activation_bytes"] < least:
            raise InputError(f"{origin}: costs.rows.{i} activation_bytes must be at least the decoder layer's 16-bit "
                             f"input, 2 x seq_len x mbs x hidden_size = {least}, got {r['activation_bytes']:g}")
    rows = tuple(((r["kind"], r["tp"], r["mbs"]),
                  MeasuredLayer(r["forward_s"], r["backward_s"], r["activation_bytes"], r["params"]))
                 for r in data["rows"])
    return MeasuredCosts(rows, data["seq_len"], data["source"])


def _layout(lay: dict[str, Any], mbs: int, recompute: Recompute, split: list[int] | None,
            full: list[int] | None, modules: list[str]) -> Layout:
    """A layout from a plan file's parallelism (or an alternative's layout) section; its offload targets are
    schema-checked names."""
    return Layout(tp=lay["tp"], pp=lay["pp"], dp=lay["dp"], cp=lay["cp"], vpp=lay["vpp"],
                  ep=lay.get("ep", 1), etp=lay.get("etp", 1), mbs=mbs, sp=lay["sp"],
                  zero=ZeroStage(lay["zero_stage"]), recompute=recompute, schedule=Schedule(lay["schedule"]),
                  stage_layers=tuple(split) if split is not None else None,
                  recompute_layers=tuple(full) if full and recompute is not Recompute.FULL and any(full) else None,
                  recompute_modules=frozenset(RecomputeModule(m) for m in modules),
                  offload=frozenset(Offload(o) for o in lay.get("offload", [])),
                  dp_replicate=lay.get("dp_replicate", 1))


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
        ends = [min((a for a, _ in ranges), default=-1), max((b for _, b in ranges), default=-1)]
        stated = [stage["first_layer"], stage["last_layer"], stage["has_embedding"], stage["has_lm_head"]]
        if stated != [*ends, rank == layout.embedding_rank, rank == layout.head_rank]:
            raise InputError(f"{origin}: stages[{rank}] says first_layer {stage['first_layer']}, last_layer "
                             f"{stage['last_layer']}, has_embedding {stage['has_embedding']}, has_lm_head "
                             f"{stage['has_lm_head']}; its layers {ranges} under {layout.schedule.value} give "
                             f"{ends[0]}, {ends[1]}, {rank == layout.embedding_rank}, {rank == layout.head_rank}")
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


def _doc_lens(value: Any) -> tuple[int, ...]:
    """The job's packed document lengths: a list of integers (JobSpec checks their range)."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InputError(f"packed_doc_lens must be a list of document lengths in tokens, got {value!r}")
    return tuple(value)


def _job(data: dict[str, Any], model: ModelSpec, origin: str) -> JobSpec:
    """The job section (and an embedded cost table) as a JobSpec; its range errors name the file and section."""
    j = data["job"]
    measured = _costs_from(data.get("costs"), j["seq_len"], model.hidden_size, origin)
    try:
        runtime = Runtime(framework=data.get("runtime", {}).get("name", "any"),
                          attention=AttentionKernel(j["attention"]),
                          overlap_grad_reduce=j["overlap_grad_reduce"],
                          overlap_param_gather=j["overlap_param_gather"],
                          grad_reduce_bytes=j["grad_reduce_bytes"],
                          measured=measured,
                          moe_capacity_factor=j.get("moe_capacity_factor"),
                          moe_load_imbalance=j.get("moe_load_imbalance", 1.0),
                          moe_comm_overlap=j.get("moe_comm_overlap", False),
                          moe_dedup_dispatch=j.get("moe_dedup_dispatch", False), compile=j.get("compile"),
                          fp8_recipe=j.get("fp8_recipe"))
        return JobSpec(seq_len=j["seq_len"], global_batch=j["global_batch"], dtype=Dtype(j["dtype"]),
                       runtime=with_execution(runtime),
                       lora_rank=j.get("lora_rank", 0), packed_doc_lens=_doc_lens(j.get("packed_doc_lens", [])),
                       trainable_fraction=lora_fraction(model, j["lora_rank"]) if "lora_rank" in j else 1.0)
    except MeshplanError as exc:
        raise InputError(f"{origin}: job: {exc}") from None


def parse_plan(data: Any, origin: str) -> PlanData:
    """Validate a parsed plan, alternatives included, and return the layouts it describes."""
    error = jsonschema.exceptions.best_match(_validator().iter_errors(data))  # what jsonschema.validate raises
    if error is not None:
        raise InputError(f"{origin}: {_where(error)}: {error.message.splitlines()[0]}") from None
    if data.get("workload") == "inference":
        raise InputError(f"{origin}: an inference plan (workload: inference): `meshplan explain` reads it; `evaluate "
                         "--plan` and `emit` take training plans (launch arguments: `meshplan infer serve --emit`)")
    if data.get("workload") == "training-hetero":
        raise InputError(f"{origin}: a plan across node groups (workload: training-hetero): `evaluate --plan`, "
                         "`explain` and `emit` read plans on one hardware; its launcher configs come from `meshplan "
                         "plan --cluster FILE --emit TARGET`")
    bad = _non_finite(data, "")
    if bad is not None:
        raise InputError(f"{origin}: {bad[0]} must be a finite number, got {bad[1]!r}")
    known = _schema()["properties"]["prediction"]["properties"]
    unknown = sorted(str(k) for k in data["prediction"] if k not in known)
    if unknown:
        raise InputError(f"{origin}: prediction: unknown keys {unknown}; allowed: {', '.join(known)}")
    _check_figures(data, origin)
    model = model_from_mapping(data["model"], f"{origin}: model")
    hw = data["hardware"]
    cluster = parse_profile(hw["profile"], f"{origin}: hardware.profile", hw["num_gpus"])
    if hw.get("provenance"):
        cluster = replace(cluster, provenance=tuple(one_line(line) for line in hw["provenance"]))
    job = _job(data, model, origin)
    layout = _validated(layout_from_dict(data, origin), model, job, cluster.num_gpus, origin)
    _check_full(data["recompute"]["full_layers_per_stage"], layout, model, f"{origin}: recompute")
    if data["batching"]["global_batch"] != job.global_batch or \
            data["batching"]["num_microbatches"] != layout.num_microbatches(job):
        raise InputError(f"{origin}: batching does not match: micro-batch {layout.mbs} x dp {layout.dp} x "
                         f"{data['batching']['num_microbatches']} micro-batches != global batch {job.global_batch}")
    _check_stages(data["stages"], layout, model, origin)
    stored_m = data["prediction"].get("num_microbatches")
    if stored_m is not None and stored_m != layout.num_microbatches(job):
        raise InputError(f"{origin}: prediction.num_microbatches {stored_m} must be the layout's "
                         f"{layout.num_microbatches(job)} (global batch {job.global_batch} / (mbs {layout.mbs} x dp "
                         f"{layout.dp}))")
    alternatives = tuple(_alternative(alt, model, job, cluster.num_gpus, f"{origin}: alternatives[{i}] (alternative "
                                                                          f"{i + 2})")
                         for i, alt in enumerate(data["alternatives"]))
    return PlanData(model, cluster, job, layout, alternatives)


def read_plan_data(path: str | Path) -> tuple[Any, str]:
    """The parsed contents of a plan file (YAML, or JSON by suffix) and the name to give it in messages."""
    path_argument(path, "path", "a plan file")
    target = Path(path)
    text = read_text(target, "plan file", MAX_PLAN_BYTES)
    parse = parse_json if target.suffix == ".json" else parse_yaml
    return parse(text, shown(target)), str(target)


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


def read_plan(path: str | Path) -> tuple[ModelSpec, ClusterSpec, JobSpec, Layout]:
    """Read and validate a plan file (YAML, or JSON by suffix): its model, hardware, job and chosen layout."""
    parsed = parse_plan(*read_plan_data(path))
    return parsed.model, parsed.cluster, parsed.job, parsed.layout
