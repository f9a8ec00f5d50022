"""YAML the inputs read, always with yaml.safe_load: the packaged preset files and a user's files. A user's file that
cannot be read, decoded or parsed is a one-line InputError naming it; a name that is neither a preset nor a YAML
file is one naming what is allowed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from planner.core.errors import InputError

T = TypeVar("T")


def packaged_presets(filename: str) -> dict[str, dict[str, Any]]:
    """The mapping of preset name -> keys in planner/inputs/presets/`filename`."""
    data: dict[str, dict[str, Any]] = yaml.safe_load(
        (resources.files("planner.inputs") / "presets" / filename).read_text())
    return data


def read_yaml(path: Path) -> Any:
    """The parsed contents of the YAML file at `path`."""
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read ({str(exc).splitlines()[0]})") from None


def preset_or_yaml(name_or_path: str, presets: Mapping[str, Mapping[str, Any]], build: Callable[[Any, str], T],
                   unknown: str) -> T:
    """`build(mapping, origin)` of the preset `name_or_path` (its name added) or of the .yaml/.yml file at that path;
    `unknown` is the error for anything else."""
    if name_or_path in presets:
        return build({"name": name_or_path, **presets[name_or_path]}, f"preset {name_or_path!r}")
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        raise InputError(unknown)
    return build(read_yaml(path), str(path))
