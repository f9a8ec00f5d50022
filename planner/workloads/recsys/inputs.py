"""Recommendation-model inputs: presets (presets.yaml beside this module) and tables YAML files -> RecModel.
Unknown or missing keys are errors that list the allowed ones."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from meshcore.checks import choice, identifier, mapping_keys
from meshcore.errors import InputError, SpecError
from planner.inputs.yamlfile import packaged_presets, preset_or_yaml
from planner.workloads.recsys.spec import EmbeddingOptimizer, EmbeddingTable, Interaction, RecModel, TableDtype

MODEL_REQUIRED = ("dense_features", "bottom_mlp", "top_mlp", "tables")
MODEL_OPTIONAL = ("name", "interaction", "cross_layers", "cross_rank", "optimizer")
TABLE_REQUIRED = ("name", "rows", "dim")
TABLE_OPTIONAL = ("pooling", "skew", "dtype")



@functools.cache
def _preset_data() -> dict[str, dict[str, Any]]:
    return packaged_presets("presets.yaml", __package__)


def recsys_preset_names() -> list[str]:
    return list(_preset_data())


def _widths(value: Any, key: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where}: {key} must be a non-empty list of layer widths, got {value!r}")
    return tuple(value)


def _table(data: Any, where: str) -> EmbeddingTable:
    data = mapping_keys(data, TABLE_REQUIRED, TABLE_OPTIONAL, where)
    for key in ("pooling", "skew"):
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], (int, float))):
            raise InputError(f"{where}: {key} must be a number, got {data[key]!r}")
    return EmbeddingTable(data["name"], data["rows"], data["dim"], float(data.get("pooling", 1.0)),
                          float(data.get("skew", 0.0)),
                          choice(TableDtype, data.get("dtype", "fp32"), f"{where}: dtype"))


def recsys_from_mapping(data: Any, origin: str) -> RecModel:
    """A mapping (MODEL_REQUIRED + MODEL_OPTIONAL keys; `tables` a list of table mappings) -> RecModel."""
    data = mapping_keys(data, MODEL_REQUIRED, MODEL_OPTIONAL, origin)
    if not isinstance(data["tables"], list) or not data["tables"]:
        raise InputError(f"{origin}: tables must be a non-empty list of tables ({', '.join(TABLE_REQUIRED)}, "
                         f"optional {', '.join(TABLE_OPTIONAL)})")
    try:
        tables = tuple(_table(t, f"{origin}: table {i}") for i, t in enumerate(data["tables"]))
        return RecModel(
            name=identifier(data.get("name", Path(origin).stem), f"{origin}: name"), tables=tables,
            dense_features=data["dense_features"],
            bottom_mlp=_widths(data["bottom_mlp"], "bottom_mlp", origin),
            top_mlp=_widths(data["top_mlp"], "top_mlp", origin),
            interaction=choice(Interaction, data.get("interaction", "dot"), f"{origin}: interaction"),
            cross_layers=data.get("cross_layers", 0), cross_rank=data.get("cross_rank", 512),
            optimizer=choice(EmbeddingOptimizer, data.get("optimizer", "sgd"), f"{origin}: optimizer"))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def load_recsys_model(name_or_path: str) -> RecModel:
    """A preset name (`recsys_preset_names`) or a tables YAML path -> RecModel."""
    presets = _preset_data()
    return preset_or_yaml(name_or_path, presets, recsys_from_mapping,
                          f"unknown recommendation model {name_or_path!r}: give a preset ({', '.join(presets)}) or a "
                          "path to a tables YAML", "recommendation model")
