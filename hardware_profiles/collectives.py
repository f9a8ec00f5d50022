"""The optional `collectives` section of a hardware profile: which of NCCL's algorithms and protocols the system
has (meshcore.CollectiveSpec, priced by cost_models/comm/nccl.py; SCHEMA.md says what each key means)."""

from __future__ import annotations

from typing import Any

from meshcore import CollectiveSpec, Fabric
from meshcore.checks import real
from meshcore.errors import InputError, SpecError

KEYS = ("fabric", "nvls", "nvls_efficiency", "ll128", "ll128_pxn", "pat", "tree", "ll_max_gbs", "ll_max_net_gbs",
        "net_overhead_us", "links", "link_gbs")
_FLAGS = ("nvls", "ll128", "ll128_pxn", "pat", "tree")
_NUMBERS = {"nvls_efficiency": 2.0, "ll_max_gbs": 1e5, "ll_max_net_gbs": 1e5, "net_overhead_us": 1e3, "link_gbs": 1e4}


def parse_collectives(body: dict[str, Any], where: str) -> CollectiveSpec:
    """The section's keys (already checked against KEYS) -> CollectiveSpec; absent keys keep its defaults."""
    values: dict[str, Any] = {}
    if "fabric" in body:
        allowed = [f.value for f in Fabric]
        if body["fabric"] not in allowed:
            raise InputError(f"{where}: fabric must be one of {', '.join(allowed)}, got {body['fabric']!r}")
        values["fabric"] = Fabric(body["fabric"])
    for key in _FLAGS:
        if key in body:
            if not isinstance(body[key], bool):
                raise InputError(f"{where}: {key} must be true or false, got {body[key]!r}")
            values[key] = body[key]
    for key, upper in _NUMBERS.items():
        if key in body:
            low_open = key != "net_overhead_us"  # a host may post for free; the others divide
            values[key] = real(body[key], f"{where}: {key}", 0.0, upper, low_open=low_open)
    if "links" in body:
        rows = body["links"]
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise InputError(f"{where}: links must be a list of rows (NVLinks between GPU i and GPU j), got {rows!r}")
        values["links"] = tuple(tuple(row) for row in rows)
        if "link_gbs" not in body:
            raise InputError(f"{where}: links needs link_gbs (GB/s per direction of one link)")
    try:
        return CollectiveSpec(**values)
    except SpecError as exc:
        raise InputError(f"{where}: {exc}") from None


def collectives_mapping(spec: CollectiveSpec) -> dict[str, Any]:
    """The inverse of `parse_collectives`."""
    out = {"fabric": spec.fabric.value,
           **{key: getattr(spec, key) for key in KEYS if key not in ("fabric", "links", "link_gbs")}}
    if spec.links:
        out |= {"links": [list(row) for row in spec.links], "link_gbs": spec.link_gbs}
    return out
