"""Cluster files: node groups of different hardware and the links between them -> HeteroCluster.

    name: mixed                      # optional (default: the file's stem)
    groups:
      - name: h100                   # unique
        hardware: h100-sxm           # a preset or a hardware-profile YAML (relative to the cluster file)
        nodes: 2                     # GPUs = nodes x the profile's gpus_per_node
      - {name: a100, hardware: a100-80gb, nodes: 2}
    links:                           # optional; default: the slower of the two groups' scale-out NICs
      - {between: [h100, a100], bandwidth_gbs: 25, latency_us: 10}   # GB/s per GPU and direction

Read with yaml.safe_load; unknown or missing keys are errors listing the allowed ones, every number is range
checked, and any problem is one line naming the file and the place in it (InputError, exit code 2).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hardware_profiles import load_hardware
from meshcore.checks import (
    BANDWIDTH_GBS,
    EFFICIENCY,
    MAX_GPUS,
    MAX_PHYSICAL,
    identifier,
    integer,
    mapping_keys,
    physical,
    real,
)
from meshcore.cluster import GroupLink, HeteroCluster, NodeGroup
from meshcore.errors import InputError, SpecError
from planner.inputs.yamlfile import read_yaml, refuse_non_file

TOP = ("groups",), ("name", "links")
GROUP = ("name", "hardware", "nodes"), ()
LINK = ("between", "bandwidth_gbs", "latency_us"), ("efficiency",)
MAX_GROUPS = 16  # orders of the groups along the pipeline are searched: a handful of groups is the use


def _keys(data: Any, keys: tuple[tuple[str, ...], tuple[str, ...]], where: str) -> dict[str, Any]:
    return mapping_keys(data, *keys, where)


def _name(value: Any, where: str) -> str:
    """A group's name: an identifier (meshcore.checks.identifier) of at most 64 characters, without '+'."""
    identifier(value, f"{where}: name")
    name = str(value)
    if "+" in name or len(name) > 64:
        raise InputError(f"{where}: name must be at most 64 characters without '+', got {value!r}")
    return name


def _group(data: Any, where: str, base: Path) -> NodeGroup:
    data = _keys(data, GROUP, where)
    name = _name(data["name"], where)
    where = f"{where} ({name})"
    hardware = data["hardware"]
    if not isinstance(hardware, str) or not hardware:
        raise InputError(f"{where}: hardware must be a preset name or a profile YAML path, got {hardware!r}")
    identifier(hardware, f"{where}: hardware")
    nodes = integer(data["nodes"], f"{where}: nodes", 1, MAX_GPUS)
    local = base / hardware
    source = str(local) if not Path(hardware).is_absolute() and local.is_file() else hardware
    try:
        one = load_hardware(source, 1)
        cluster = load_hardware(source, nodes * one.gpus_per_node)
    except (InputError, SpecError) as exc:
        raise InputError(f"{where}: {exc}") from None
    return NodeGroup(name, hardware, nodes, cluster)


def _link(data: Any, where: str) -> GroupLink:
    data = _keys(data, LINK, where)
    ends = data["between"]
    if not isinstance(ends, list) or len(ends) != 2 or not all(isinstance(e, str) for e in ends):
        raise InputError(f"{where}: between must name two groups, as [a, b], got {ends!r}")
    bandwidth = physical(data["bandwidth_gbs"], f"{where}: bandwidth_gbs", BANDWIDTH_GBS)
    latency = real(data["latency_us"], f"{where}: latency_us", 0.0, MAX_PHYSICAL, low_open=False)
    efficiency = physical(data.get("efficiency", 0.9), f"{where}: efficiency", EFFICIENCY)
    return GroupLink(ends[0], ends[1], bandwidth, latency, efficiency)


def cluster_from_mapping(data: Any, origin: str, base: Path = Path(".")) -> HeteroCluster:
    """A cluster mapping (see the module docstring) -> HeteroCluster; profile paths are relative to `base`."""
    data = _keys(data, TOP, origin)
    groups, links = data["groups"], data.get("links", [])
    if not isinstance(groups, list) or not groups or len(groups) > MAX_GROUPS:
        raise InputError(f"{origin}: groups must be a list of 1 to {MAX_GROUPS} node groups "
                         f"({', '.join(GROUP[0])}), got {groups!r}"[:300])
    if not isinstance(links, list):
        raise InputError(f"{origin}: links must be a list of links ({', '.join(LINK[0] + LINK[1])}), got {links!r}")
    name = identifier(data.get("name", Path(origin).stem), f"{origin}: name")
    parsed = tuple(_group(g, f"{origin}: group {i}", base) for i, g in enumerate(groups))
    try:
        cluster = HeteroCluster(name, parsed, tuple(_link(x, f"{origin}: link {i}") for i, x in enumerate(links)))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None
    if cluster.num_gpus > MAX_GPUS:
        raise InputError(f"{origin}: {cluster.num_gpus} GPUs in all, more than {MAX_GPUS}")
    return cluster


def load_cluster(path: str | Path) -> HeteroCluster:
    """Read a cluster YAML file (safe-loaded, at most MAX_SPEC_BYTES) into a HeteroCluster."""
    refuse_non_file(str(path), "cluster file", "a cluster .yaml/.yml file")
    path = Path(path)
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        raise InputError(f"cluster file {str(path)!r}: not a readable .yaml/.yml file")
    return cluster_from_mapping(read_yaml(path, "cluster file"), str(path), path.parent)
