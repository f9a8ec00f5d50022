"""Runtime profiles: hardware_profiles/runtimes/NAME.yaml -> RuntimeProfile (meshcore.framework), one per
runtime at the version meshplan pins. The schema is in hardware_profiles/SCHEMA.md ("Runtime profiles"); an
unknown or missing key is an error naming the allowed ones."""

from __future__ import annotations

import functools
from dataclasses import replace
from importlib import resources
from typing import Any

from meshcore.checks import choice, flag, integer, mapping_keys
from meshcore.enums import Offload, Schedule, Target
from meshcore.errors import InputError
from meshcore.framework import Capabilities, Framework, RuntimeProfile
from meshcore.inputfile import safe_load
from meshcore.job import Runtime
from planner.inputs.execution import execution_from_mapping

_ABOUT = ("name", "label", "package", "version", "emit", "source")
_FLAGS = ("context_parallel", "expert_parallel", "expert_tensor_parallel", "virtual_stages", "uneven_split",
          "per_stage_recompute", "recompute_modules", "kv_heads_replicated", "ddp_beside_others", "sp_with_tp",
          "offload_checkpoints_only")
_KEYS = (*_ABOUT, "schedules", "zero_stages", "pipeline_zero_stages", "hsdp_zero_stages", "max_waves", "offload",
         *_FLAGS)


def _stages(value: Any, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise InputError(f"{where} must be a list of ZeRO stages 0-3, got {value!r}")
    return tuple(integer(v, f"{where} entry", 0, 3) for v in value)


def profile_from_mapping(data: Any, origin: str) -> RuntimeProfile:
    """One runtime profile document -> RuntimeProfile."""
    data = mapping_keys(data, _KEYS, ("execution",), origin)
    if not (isinstance(data["schedules"], list) or data["schedules"] == "all") or not isinstance(data["offload"], dict):
        raise InputError(f"{origin}: schedules must be a list (or all) and offload a mapping of what -> ZeRO stages")
    caps = Capabilities(
        schedules=tuple(Schedule) if data["schedules"] == "all" else tuple(
            choice(Schedule, s, f"{origin}: schedules entry") for s in data["schedules"]),
        zero_stages=_stages(data["zero_stages"], f"{origin}: zero_stages"),
        pipeline_zero_stages=_stages(data["pipeline_zero_stages"], f"{origin}: pipeline_zero_stages"),
        hsdp_zero_stages=_stages(data["hsdp_zero_stages"], f"{origin}: hsdp_zero_stages"),
        max_waves=integer(data["max_waves"], f"{origin}: max_waves", 1, 8),
        offload=tuple((choice(Offload, k, f"{origin}: offload key"), _stages(v, f"{origin}: offload {k}"))
                      for k, v in data["offload"].items()),
        **{key: flag(data[key], f"{origin}: {key}") for key in _FLAGS})
    target = None if data["emit"] is None else choice(Target, data["emit"], f"{origin}: emit")
    return RuntimeProfile(framework=choice(Framework, data["name"], f"{origin}: name"), label=str(data["label"]),
                          package=str(data["package"]), version=str(data["version"]), target=target,
                          capabilities=caps, source=" ".join(str(data["source"]).split()),
                          execution=execution_from_mapping(data.get("execution"), origin))


@functools.cache
def load_runtime(framework: Framework | str) -> RuntimeProfile:
    """The packaged profile of `framework` (a Framework or its name: megatron, nemo, torchtitan, deepspeed, any)."""
    framework = choice(Framework, framework, "runtime")
    text = (resources.files("hardware_profiles") / "runtimes" / f"{framework.value}.yaml").read_text()
    profile = profile_from_mapping(safe_load(text), f"runtime profile {framework.value}")
    if profile.framework is not framework:
        raise InputError(f"runtime profile {framework.value}: its name is {profile.framework.value}")
    return profile


def with_execution(runtime: Runtime) -> Runtime:
    """`runtime` with its profile's execution (how that runtime runs a layout, what the cost model prices) unless it
    carries one already."""
    if runtime.execution is not None:
        return runtime
    return replace(runtime, execution=load_runtime(runtime.framework).execution)


__all__ = ["load_runtime", "profile_from_mapping", "with_execution"]
