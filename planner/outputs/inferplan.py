"""Inference plan files (`meshplan infer ... --out`): the training plan's schema (plan.schema.json) with
`workload: inference` and an `inference` section (family, job, layout, prediction, search, alternatives, and for
serving the vLLM and SGLang launch arguments); and their text summary, which `meshplan explain` prints."""

from __future__ import annotations

import json
from dataclasses import asdict, fields, is_dataclass
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from cost_models.diffusion import DiffusionPrediction
from cost_models.serving_deploy import ServingPrediction
from hardware_profiles import profile_mapping
from meshcore import GIB, ClusterSpec, ModelSpec
from meshcore.diffusion import DiffusionJob, DiffusionModel
from meshcore.errors import InputError
from meshcore.inference import EdgeJob, Family, ServingJob
from planner.inputs.diffusion import diffusion_mapping
from planner.inputs.loaders import model_mapping
from planner.outputs.launch_args import sglang_commands, vllm_commands
from planner.outputs.planfile import MESHPLAN_VERSION
from planner.outputs.xfuser_args import xfuser_command
from planner.search.infer_diffusion import DiffusionSearch
from planner.search.infer_edge import EdgePlan
from planner.search.infer_serving import ServingSearch


def _plain(value: Any) -> Any:
    """Dataclasses, enums and tuples as YAML/JSON-ready values (floats rounded to 6 significant digits)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def _document(model: dict[str, Any], cluster: ClusterSpec, gpus: int, inference: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "meshplan_version": MESHPLAN_VERSION, "workload": "inference", "model": model,
            "hardware": {"name": cluster.name, "num_gpus": gpus, "profile": profile_mapping(cluster)},
            "inference": inference}


def _serving_prediction(p: ServingPrediction) -> dict[str, Any]:
    out = {k: v for k, v in asdict(p).items() if k not in ("memory", "prefill_memory")}
    mem = p.memory
    out.update(weights_gib=mem.weights / GIB, kv_cache_gib=max(mem.kv_budget, 0.0) / GIB,
               workspace_gib=mem.workspace / GIB, engine_memory_gib=mem.capacity / GIB)
    plain: dict[str, Any] = _plain(out)
    return plain


def serving_document(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, gpus: int,
                     result: ServingSearch) -> dict[str, Any]:
    """The plan file of a serving search."""
    best = result.best
    inference = {
        "family": Family.SERVING.value, "job": _plain(job), "layout": _plain(best.layout),
        "prediction": _serving_prediction(best.prediction),
        "search": {"method": result.method, "replica_layouts": result.replica_layouts,
                   "pruned_memory": result.pruned_memory, "priced": result.priced, "slo_misses": result.slo_misses,
                   "optimal": True},
        "alternatives": [{"layout": _plain(c.layout), "prediction": _serving_prediction(c.prediction)}
                         for c in result.ranked[1:]],
        "launch": {"vllm": vllm_commands(model.name, job, best.layout),
                   "sglang": sglang_commands(model.name, job, best.layout)},
    }
    return _document(model_mapping(model), cluster, gpus, inference)


def edge_document(model: ModelSpec, devices: list[ClusterSpec], job: EdgeJob, plan: EdgePlan) -> dict[str, Any]:
    """The plan file of an edge split: `hardware` is the first device, `inference.devices` all of them."""
    prediction = {k: getattr(plan, k) for k in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "bottleneck_s",
                                                "objective_value")}
    inference = {"family": Family.EDGE.value, "job": _plain(job), "layout": {"stages": _plain(plan.stages)},
                 "prediction": _plain(prediction),
                 "search": {"method": "exact DP over (device, layers placed) in every device order",
                            "orders": plan.orders_tried, "optimal": True},
                 "devices": [profile_mapping(d) for d in devices]}
    doc = _document(model_mapping(model), devices[0], len(devices), inference)
    doc["hardware"]["name"] = ",".join(d.name for d in devices)
    return doc


def _diffusion_prediction(p: DiffusionPrediction) -> dict[str, Any]:
    plain: dict[str, Any] = _plain({**asdict(p), "fits": p.fits})
    return plain


def diffusion_document(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, gpus: int,
                       result: DiffusionSearch) -> dict[str, Any]:
    """The plan file of a diffusion search (`model` holds the diffusion-model keys)."""
    best = result.best
    inference = {"family": Family.DIFFUSION.value, "job": _plain(job), "layout": _plain(best.layout),
                 "prediction": _diffusion_prediction(best.prediction),
                 "search": {"method": result.method, "candidates": result.candidates, "priced": result.priced,
                            "pruned_memory": result.pruned_memory, "pruned_bound": result.pruned_bound,
                            "optimal": True},
                 "alternatives": [{"layout": _plain(c.layout), "prediction": _diffusion_prediction(c.prediction)}
                                  for c in result.ranked[1:]],
                 "launch": {"xfuser": xfuser_command(model, job, best.layout, cluster.gpus_per_node)}}
    return _document(_plain(diffusion_mapping(model)), cluster, gpus, inference)


def dumps(document: dict[str, Any], path: str | Path) -> str:
    """YAML, or JSON when the name ends in .json."""
    if str(path).endswith(".json"):
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False, width=120))


def is_inference_plan(data: Any) -> bool:
    return isinstance(data, dict) and data.get("workload") == "inference"


def check_inference_plan(data: Any, origin: str) -> None:
    """Structure check against plan.schema.json (jsonschema loads here, not on the planning path)."""
    import jsonschema

    schema = json.loads((resources.files("planner.outputs") / "plan.schema.json").read_text())
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "top level"
        raise InputError(f"{origin}: {where}: {error.message.splitlines()[0]}")


def summary(data: dict[str, Any]) -> str:
    """A text summary of an inference plan (what `meshplan infer` prints and `meshplan explain` shows)."""
    inf, hw = data["inference"], data["hardware"]
    family, pred, lay = inf["family"], inf["prediction"], inf["layout"]
    name = data["model"].get("name", "model")
    lines = [f"{family} plan: {name} on {hw['num_gpus']} x {hw['name']}"]
    if family == Family.SERVING.value:
        lines += _serving_lines(inf, pred, lay)
    elif family == Family.EDGE.value:
        lines.append(f"  TTFT {pred['ttft_s'] * 1e3:.1f} ms, TPOT {pred['tpot_s'] * 1e3:.2f} ms, "
                     f"{pred['tokens_per_s']:.1f} tokens/s, request {pred['e2e_s']:.2f} s")
        for s in lay["stages"]:
            lines.append(f"  {s['device']:22} layers {s['first_layer']:>3}-{s['first_layer'] + s['num_layers'] - 1:<3} "
                         f"decode {s['decode_s'] * 1e3:7.2f} ms  prefill {s['prefill_s'] * 1e3:8.1f} ms  memory "
                         f"{s['memory_gib']:5.1f} / {s['capacity_gib']:.1f} GiB")
    else:
        lines.append(f"  {_diffusion_layout(lay)}: {pred['latency_s']:.3f} s per image ({pred['step_s'] * 1e3:.1f} ms "
                     f"per step), {pred['images_per_s']:.3f} images/s, {pred['memory_gib']:.1f} / "
                     f"{pred['capacity_gib']:.0f} GiB per GPU; perfect scaling would give {pred['compute_s']:.3f} s")
        if "denoise_s" in pred:
            lines.append(f"  text encoders {pred['encode_s'] * 1e3:.1f} ms, denoising {pred['denoise_s']:.3f} s, "
                         f"VAE decode {pred['decode_s'] * 1e3:.1f} ms")
        for i, alt in enumerate(inf.get("alternatives", []), 2):
            lines.append(f"  {i}. {_diffusion_layout(alt['layout'])}: {alt['prediction']['latency_s']:.3f} s, "
                         f"{alt['prediction']['images_per_s']:.3f} images/s")
    search = inf["search"]
    lines.append(f"  search: {search['method']}" + (", optimal in the modelled space" if search.get("optimal") else ""))
    if family == Family.DIFFUSION.value and "xfuser" in inf.get("launch", {}):
        lines.append(f"  launch (xDiT): {inf['launch']['xfuser']}")
    return "\n".join(lines)


def _replica(r: dict[str, Any]) -> str:
    return f"tp{r['tp']} pp{r['pp']}" + (f" ep{r['ep']} (dp-attention {r['dp']})" if r["ep"] > 1 else "")


def _serving_layout(lay: dict[str, Any]) -> str:
    decode = f"{lay['replicas']} x [{_replica(lay['decode'])}] batch {lay['batch']}"
    if lay.get("prefill") is None:
        return decode
    return f"prefill {lay['prefill_replicas']} x [{_replica(lay['prefill'])}] + decode {decode}"


def _serving_lines(inf: dict[str, Any], pred: dict[str, Any], lay: dict[str, Any]) -> list[str]:
    engine = inf["job"].get("engine")
    under = f" under {engine['engine']} {engine['version']}" if engine else " (GPU roofline, no engine)"
    out = [f"  {_serving_layout(lay)}{under}",
           f"  TTFT {pred['ttft_s'] * 1e3:.1f} ms, TPOT {pred['tpot_s'] * 1e3:.2f} ms, {pred['tokens_per_s']:.0f} "
           f"output tokens/s ({pred['tokens_per_s_per_gpu']:.0f} per GPU, {pred['requests_per_s']:.2f} requests/s)",
           f"  per GPU: weights {pred['weights_gib']:.1f} GiB, KV cache {pred['kv_cache_gib']:.1f} GiB, workspace "
           f"{pred['workspace_gib']:.1f} GiB of {pred['engine_memory_gib']:.1f}; largest batch that fits "
           f"{pred['max_batch']} per decode replica"]
    for i, alt in enumerate(inf.get("alternatives", []), 2):
        p = alt["prediction"]
        out.append(f"  {i}. {_serving_layout(alt['layout'])}: {p['tokens_per_s']:.0f} tokens/s, TTFT "
                   f"{p['ttft_s'] * 1e3:.1f} ms, TPOT {p['tpot_s'] * 1e3:.2f} ms")
    return out


def _diffusion_layout(lay: dict[str, Any]) -> str:
    parts = [f"ulysses {lay['ulysses']}", f"ring {lay['ring']}", f"pipefusion {lay['pipefusion']}"]
    parts += [f"patches {lay['patches']}"] if lay["pipefusion"] > 1 else []
    return ", ".join([*parts, f"cfg {lay['cfg']}", f"dp {lay['dp']}"])
