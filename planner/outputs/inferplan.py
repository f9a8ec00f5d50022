"""Inference plan files (`meshplan infer ... --out`): the training plan's schema (plan.schema.json) with
`workload: inference` and an `inference` section (family, job, layout, prediction, search, alternatives, launch).
What the families share lives here: the document frame, plain values, writing and the schema check; each room
(planner.workloads.serving/edge/diffusion, module plan) fills its `inference` section and its summary lines."""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from hardware_profiles import profile_mapping
from meshcore import ClusterSpec
from meshcore.errors import InputError
from planner.outputs.planfile import MESHPLAN_VERSION


def plain(value: Any) -> Any:
    """Dataclasses, enums and tuples as YAML/JSON-ready values (floats rounded to 6 significant digits)."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.6g}")
    return value


def document(model: dict[str, Any], cluster: ClusterSpec, gpus: int, inference: dict[str, Any]) -> dict[str, Any]:
    return {"schema_version": 1, "meshplan_version": MESHPLAN_VERSION, "workload": "inference", "model": model,
            "hardware": {"name": cluster.name, "num_gpus": gpus, "profile": profile_mapping(cluster)},
            "inference": inference}


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
