"""Diffusion-transformer inputs: presets (presets.yaml beside this module) and model YAML files -> DiffusionModel."""

from __future__ import annotations

import functools
from dataclasses import fields
from pathlib import Path
from typing import Any

from meshcore.checks import finite
from meshcore.errors import InputError, SpecError
from planner.inputs.yamlfile import packaged_presets, preset_or_yaml
from planner.workloads.diffusion.spec import DiffusionModel

REQUIRED_KEYS = ("hidden_size", "num_heads", "ffn_hidden_size", "double_layers", "single_layers", "patch_size",
                 "latent_channels")
OPTIONAL_KEYS = ("name", "vae_downsample", "text_tokens", "cfg", "default_steps", "double_modulation",
                 "single_modulation", "encoder_params", "published_params", "text_encoders", "clip_tokens")
_FLOATS = ("encoder_params", "published_params")


@functools.cache
def _preset_data() -> dict[str, dict[str, Any]]:
    return packaged_presets("presets.yaml", __package__)


def diffusion_preset_names() -> list[str]:
    return list(_preset_data())


def diffusion_from_mapping(data: Any, origin: str) -> DiffusionModel:
    """A mapping of DiffusionModel keys -> DiffusionModel; unknown or missing keys name the allowed ones."""
    allowed = ", ".join(REQUIRED_KEYS + OPTIONAL_KEYS)
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a mapping of diffusion-model keys ({allowed})")
    unknown = sorted(set(data) - set(REQUIRED_KEYS + OPTIONAL_KEYS))
    missing = [k for k in REQUIRED_KEYS if k not in data]
    if unknown or missing:
        problem = f"unknown keys {unknown}" if unknown else f"missing keys {missing}"
        raise InputError(f"{origin}: {problem}; allowed: {allowed}")
    for key in _FLOATS:
        if key in data and data[key] is not None and not finite(data[key]):
            raise InputError(f"{origin}: {key} must be a finite number, got {data[key]!r}")
    if "cfg" in data and not isinstance(data["cfg"], bool):
        raise InputError(f"{origin}: cfg must be true or false, got {data['cfg']!r}")
    encoders = data.get("text_encoders", [])
    if not isinstance(encoders, list | tuple) or not all(isinstance(e, str) for e in encoders):
        raise InputError(f"{origin}: text_encoders must be a list of names, got {encoders!r}")
    values: dict[str, Any] = {k: (float(v) if k in _FLOATS and v is not None else v) for k, v in data.items()}
    values["text_encoders"] = tuple(encoders)
    values.setdefault("name", Path(origin).stem)
    try:
        return DiffusionModel(**values)
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def load_diffusion_model(name_or_path: str) -> DiffusionModel:
    """A preset name (`diffusion_preset_names`) or a YAML path -> DiffusionModel."""
    presets = _preset_data()
    return preset_or_yaml(name_or_path, presets, diffusion_from_mapping,
                          f"unknown diffusion model {name_or_path!r}: give a preset ({', '.join(presets)}) or a path "
                          "to a diffusion-model YAML", "diffusion model")


def diffusion_mapping(model: DiffusionModel) -> dict[str, Any]:
    """The inverse of `diffusion_from_mapping` (for self-contained plan files)."""
    return {f.name: (list(v) if isinstance(v := getattr(model, f.name), tuple) else v) for f in fields(model)}
