"""Serving-engine profiles: hardware_profiles/engines/ENGINE-VERSION.yaml -> EngineProfile (the serving room's
engine module). The schema is in hardware_profiles/engines/README.md."""

from __future__ import annotations

import functools
from importlib import resources
from types import MappingProxyType
from typing import Any

from meshcore.checks import choice, flag, mapping_keys
from meshcore.errors import InputError, SpecError
from meshcore.inputfile import safe_load
from planner.workloads.serving.engine import Engine, EngineProfile, PrefillPolicy

VERSIONS: MappingProxyType[Engine, str] = MappingProxyType({Engine.VLLM: "0.6.0", Engine.SGLANG: "0.3.0"})
_KEYS = ("engine", "version", "host_fixed_s", "host_per_seq_s", "scheduler_steps", "overlap",
         "cuda_graph_max_batch", "kernels_per_layer", "launch_s", "kernel_s",
         "policy", "max_num_seqs", "source")


def engine_from_mapping(data: Any, origin: str) -> EngineProfile:
    """One engine profile document -> EngineProfile (InputError naming the key on bad input)."""
    data = mapping_keys(data, _KEYS, (), origin)
    try:
        return EngineProfile(
            engine=choice(Engine, data["engine"], f"{origin}: engine"), version=str(data["version"]),
            host_fixed_s=data["host_fixed_s"], host_per_seq_s=data["host_per_seq_s"],
            scheduler_steps=data["scheduler_steps"], overlap=flag(data["overlap"], f"{origin}: overlap"),
            cuda_graph_max_batch=data["cuda_graph_max_batch"], kernels_per_layer=data["kernels_per_layer"],
            launch_s=data["launch_s"], kernel_s=data["kernel_s"],
            policy=choice(PrefillPolicy, data["policy"], f"{origin}: policy"),
            max_num_seqs=data["max_num_seqs"],
            source=" ".join(str(data["source"]).split()))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


@functools.cache
def load_engine(engine: Engine | str) -> EngineProfile:
    """The packaged profile of `engine` (vllm or sglang) at the version VERSIONS names."""
    engine = choice(Engine, engine, "--engine")
    name = f"{engine.value}-{VERSIONS[engine]}"
    text = (resources.files("hardware_profiles") / "engines" / f"{name}.yaml").read_text()
    profile = engine_from_mapping(safe_load(text), f"engine profile {name}")
    if profile.engine is not engine:
        raise InputError(f"engine profile {name} names engine {profile.engine.value}")
    return profile
