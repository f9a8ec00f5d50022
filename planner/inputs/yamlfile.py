"""YAML the inputs read, always with a safe loader: the packaged preset files and a user's files. A user's file is read
bounded and parsed with libyaml where installed (meshcore/inputfile.py); one that cannot be read, decoded or
parsed, or is over its size limit, is a one-line InputError naming it; a name that is neither a preset nor a YAML
file is one naming what is allowed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from meshcore.errors import InputError
from meshcore.inputfile import MAX_SPEC_BYTES, not_a_file, parse_yaml, read_text, safe_load, shown

T = TypeVar("T")


def packaged_presets(filename: str, package: str | None = None) -> dict[str, dict[str, Any]]:
    """The mapping of preset name -> keys in the packaged file `filename`: in planner/inputs/presets/ (the training
    models) or, given a workload's `package`, beside its code in planner/workloads/<name>/."""
    where = resources.files(package) if package else resources.files("planner.inputs") / "presets"
    data: dict[str, dict[str, Any]] = safe_load((where / filename).read_text())
    return data


def read_yaml(path: Path, what: str = "YAML file", limit: int = MAX_SPEC_BYTES) -> Any:
    """The parsed contents of the YAML file at `path` (`what` names it in messages; at most `limit` bytes)."""
    return parse_yaml(read_text(path, what, limit), shown(path), "cannot read: not valid YAML")


def refuse_non_file(name_or_path: str, what: str, allowed: str) -> None:
    """An InputError when `name_or_path` is an existing directory, device, FIFO or socket: `what` ("model") names the
    input and `allowed` what it may be, so the message says why the path is not one instead of "unknown"."""
    problem = not_a_file(name_or_path, what)
    if problem is not None:
        raise InputError(f"{what} {shown(name_or_path)} {problem}: give {allowed}")


def preset_or_yaml(name_or_path: str, presets: Mapping[str, Mapping[str, Any]], build: Callable[[Any, str], T],
                   unknown: str, what: str = "model") -> T:
    """`build(mapping, origin)` of the preset `name_or_path` (its name added) or of the .yaml/.yml file at that path;
    `unknown` is the error for anything else (a directory or device is named as one; `what` names the input)."""
    if name_or_path in presets:
        return build({"name": name_or_path, **presets[name_or_path]}, f"preset {name_or_path!r}")
    refuse_non_file(name_or_path, what, "a preset or a .yaml/.yml file")
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        raise InputError(unknown)
    return build(read_yaml(path, f"{what} YAML"), str(path))
