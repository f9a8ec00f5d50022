"""Hardware profiles: one YAML per GPU/cluster preset in this folder, read into `ClusterSpec`.

The schema is documented in SCHEMA.md beside this file. Unknown or missing keys are errors that list
the allowed ones; every number is checked for range, and efficiency curves for monotonicity.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from hardware_profiles.collectives import KEYS as COLLECTIVE_KEYS
from hardware_profiles.collectives import collectives_mapping, parse_collectives
from meshcore import ClusterSpec, CollectiveSpec, EfficiencyCurve, GpuSpec, HostSpec, LinkSpec
from meshcore.checks import (
    BANDWIDTH_GBS,
    EFFICIENCY,
    MAX_GPUS,
    MAX_PHYSICAL,
    MEMORY_GIB,
    NIC_GBPS,
    PEAK_TFLOPS,
    finite,
    identifier,
    integer,
    not_found,
    optional_integer,
    physical,
    real,
)
from meshcore.errors import InputError, SpecError
from meshcore.hardware import DEFAULT_HOST_OP_US
from meshcore.inputfile import MAX_SPEC_BYTES, not_a_file, parse_yaml, read_text, safe_load, shown
from meshcore.text import one_line

_SCHEMA: MappingProxyType[str, dict[str, bool]] = MappingProxyType({
    # section -> {key: required}
    "": {"name": True, "description": False, "gpu": True, "node": True, "network": True, "host": False,
         "collectives": False},
    "gpu": {"name": True, "architecture": False, "memory_gib": True, "hbm_gbs": True, "peak_bf16_tflops": True,
            "peak_fp8_tflops": False, "matmul_efficiency": True, "attention_efficiency": True,
            "memory_efficiency": True, "overlap_efficiency": True, "attention_half_seq": False,
            "attention_backward_ratio": False, "fp8_matmul_ratio": False, "peak_fp16acc_tflops": False},
    "node": {"gpus_per_node": True, "scale_up_size": True, "scale_up_gbs": True,
             "scale_up_latency_us": True, "scale_up_efficiency": True, "host_op_us": False},
    "network": {"nic_gbps_per_gpu": True, "latency_us": True, "efficiency": True},
    "host": {"memory_gib": False, "memory_gbs": False, "cores": False, "pcie_gbs": False, "gpus_per_pcie_link": False,
             "gpus_per_socket": False, "cross_socket_gbs": False, "adam_mparams_per_core": False, "nvme_gbs": False,
             "nvme_gib": False},
    "collectives": dict.fromkeys(COLLECTIVE_KEYS, False),
})


@dataclass(frozen=True)
class HardwareOverrides:
    """Command-line overrides of a profile (None keeps the profile's value)."""

    gpus_per_node: int | None = None
    inter_node_gbps: float | None = None  # per GPU, Gbit/s
    memory_gib: float | None = None

    def __post_init__(self) -> None:
        optional_integer(self.gpus_per_node, "--gpus-per-node", 1, MAX_GPUS)
        if self.inter_node_gbps is not None:
            physical(self.inter_node_gbps, "--inter-node-gbps", NIC_GBPS)
        if self.memory_gib is not None:
            physical(self.memory_gib, "--memory-gib", MEMORY_GIB)


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).iterdir() if p.name.endswith(".yaml"))


def _read(name_or_path: str) -> tuple[dict[str, Any], str]:
    path = Path(name_or_path)
    allowed = f"a preset ({', '.join(preset_names())}) or a path to a hardware YAML"
    if name_or_path in preset_names():
        origin = f"hardware preset {name_or_path!r}"
        try:
            data = safe_load((resources.files(__package__) / f"{name_or_path}.yaml").read_text())
        except yaml.YAMLError as exc:
            raise InputError(f"{origin}: not valid YAML ({str(exc).splitlines()[0]})") from None
    elif (problem := not_a_file(name_or_path, "hardware")) is not None:
        raise InputError(f"hardware {shown(name_or_path)} {problem}: give {allowed}")
    elif path.suffix in (".yaml", ".yml") and path.is_file():
        origin = str(path)
        data = parse_yaml(read_text(path, "hardware profile", MAX_SPEC_BYTES), shown(path))
    else:
        raise InputError(not_found("hardware", name_or_path, preset_names(), allowed, (".yaml", ".yml")))
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a mapping at the top level")
    return data, origin


def _section(data: dict[str, Any], section: str, origin: str) -> dict[str, Any]:
    body = data if section == "" else data.get(section)
    where = f"{origin}: {section or 'top level'}"
    if not isinstance(body, dict):
        raise InputError(f"{where}: expected a mapping")
    allowed = _SCHEMA[section]
    unknown = sorted(set(body) - set(allowed))
    missing = sorted(k for k, req in allowed.items() if req and k not in body)
    if unknown or missing:
        problem = f"unknown keys {unknown}" if unknown else f"missing keys {missing}"
        raise InputError(f"{where}: {problem}; allowed: {', '.join(allowed)}")
    return body


# the physical range of each number a profile divides by (meshcore.checks); the others (latencies,
# attention_half_seq, overlap_efficiency) are finite and positive, at most `upper` or MAX_PHYSICAL
_RANGES: MappingProxyType[str, tuple[float, float]] = MappingProxyType({
    "memory_gib": MEMORY_GIB, "hbm_gbs": BANDWIDTH_GBS, "scale_up_gbs": BANDWIDTH_GBS, "memory_gbs": BANDWIDTH_GBS,
    "pcie_gbs": BANDWIDTH_GBS, "nic_gbps_per_gpu": NIC_GBPS, "peak_bf16_tflops": PEAK_TFLOPS,
    "peak_fp8_tflops": PEAK_TFLOPS, "peak_fp16acc_tflops": PEAK_TFLOPS, "attention_efficiency": EFFICIENCY,
    "memory_efficiency": EFFICIENCY,
    "scale_up_efficiency": EFFICIENCY, "efficiency": EFFICIENCY, "fp8_matmul_ratio": EFFICIENCY,
    "attention_backward_ratio": (EFFICIENCY[0], 2.0)})


def _number(body: dict[str, Any], key: str, where: str, *, upper: float | None = None) -> float:
    """A finite number in the key's physical range (_RANGES), else positive and at most `upper` or MAX_PHYSICAL."""
    if key in _RANGES:
        return physical(body[key], f"{where}: {key}", _RANGES[key])
    return real(body[key], f"{where}: {key}", 0.0, MAX_PHYSICAL if upper is None else upper)


def _integer(body: dict[str, Any], key: str, where: str) -> int:
    return integer(body[key], f"{where}: {key}", 1, MAX_GPUS)


def _curve(value: Any, where: str) -> EfficiencyCurve:
    ok = isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(finite(x) for x in p) for p in value
    )
    if not ok:
        raise InputError(f"{where}: matmul_efficiency must be a non-empty list of [gemm_flops, efficiency] pairs of "
                         "finite numbers")
    for _, efficiency in value:
        physical(efficiency, f"{where}: matmul_efficiency: an efficiency", EFFICIENCY)
    try:
        return EfficiencyCurve(tuple((float(s), float(e)) for s, e in value))
    except SpecError as exc:
        raise InputError(f"{where}: {exc}") from None


# optional physical keys of the gpu section and their upper bounds (defaults: meshcore.GpuSpec)
_OPTIONAL_GPU: MappingProxyType[str, float | None] = MappingProxyType({
    "attention_half_seq": None, "attention_backward_ratio": 2.0, "fp8_matmul_ratio": 1.0, "peak_fp16acc_tflops": None})
ARCHITECTURES = ("volta", "ampere", "ada", "hopper", "blackwell", "cdna3", "unknown")


def _architecture(value: Any, where: str) -> str:
    if value not in ARCHITECTURES:
        raise InputError(f"{where}: architecture must be one of {', '.join(ARCHITECTURES)}, got {value!r}")
    return str(value)


def _host(data: dict[str, Any], origin: str) -> HostSpec:
    """The optional `host` section (offloading: host memory, its bandwidth, cores, PCIe); absent keys keep
    HostSpec's defaults."""
    if "host" not in data:
        return HostSpec()
    body = _section(data, "host", origin)
    where = f"{origin}: host"
    values: dict[str, Any] = {k: _number(body, k, where) for k in ("memory_gib", "memory_gbs", "pcie_gbs",
                                                                   "cross_socket_gbs", "adam_mparams_per_core",
                                                                   "nvme_gbs", "nvme_gib") if k in body}
    values.update({k: _integer(body, k, where) for k in ("cores", "gpus_per_pcie_link", "gpus_per_socket")
                   if k in body})
    return HostSpec(**values)


def parse_profile(data: dict[str, Any], origin: str, num_gpus: int) -> ClusterSpec:
    """Turn one parsed profile document into a ClusterSpec for `num_gpus` GPUs."""
    top = _section(data, "", origin)
    gpu, node, net = (_section(data, s, origin) for s in ("gpu", "node", "network"))
    fp8 = gpu.get("peak_fp8_tflops")
    if fp8 is not None:
        fp8 = _number(gpu, "peak_fp8_tflops", f"{origin}: gpu")
    gpu_spec = GpuSpec(
        name=identifier(gpu["name"], f"{origin}: gpu.name"),
        memory_gib=_number(gpu, "memory_gib", f"{origin}: gpu"),
        hbm_gbs=_number(gpu, "hbm_gbs", f"{origin}: gpu"),
        peak_bf16_tflops=_number(gpu, "peak_bf16_tflops", f"{origin}: gpu"),
        peak_fp8_tflops=fp8,
        matmul_efficiency=_curve(gpu["matmul_efficiency"], f"{origin}: gpu"),
        attention_efficiency=_number(gpu, "attention_efficiency", f"{origin}: gpu", upper=1),
        memory_efficiency=_number(gpu, "memory_efficiency", f"{origin}: gpu", upper=1),
        overlap_efficiency=_number(gpu, "overlap_efficiency", f"{origin}: gpu", upper=1),
        architecture=_architecture(gpu.get("architecture", "unknown"), f"{origin}: gpu"),
        **{key: _number(gpu, key, f"{origin}: gpu", upper=upper) for key, upper in _OPTIONAL_GPU.items()
           if key in gpu},
    )
    try:
        return ClusterSpec(
            name=identifier(top["name"], f"{origin}: name"),
            gpu=gpu_spec,
            num_gpus=num_gpus,
            gpus_per_node=_integer(node, "gpus_per_node", f"{origin}: node"),
            scale_up_size=_integer(node, "scale_up_size", f"{origin}: node"),
            scale_up=LinkSpec(
                bandwidth_gbs=_number(node, "scale_up_gbs", f"{origin}: node"),
                latency_us=_number(node, "scale_up_latency_us", f"{origin}: node"),
                efficiency=_number(node, "scale_up_efficiency", f"{origin}: node", upper=1),
            ),
            scale_out=LinkSpec(
                bandwidth_gbs=_number(net, "nic_gbps_per_gpu", f"{origin}: network") / 8,
                latency_us=_number(net, "latency_us", f"{origin}: network"),
                efficiency=_number(net, "efficiency", f"{origin}: network", upper=1),
            ),
            host_op_us=(real(node["host_op_us"], f"{origin}: node: host_op_us", 0.0, 1e4, low_open=False)
                        if "host_op_us" in node else DEFAULT_HOST_OP_US),
            host=_host(data, origin),
            collectives=(parse_collectives(_section(data, "collectives", origin), f"{origin}: collectives")
                         if "collectives" in data else CollectiveSpec()),
        )
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def _provenance(values: Any, fragment_path: str) -> str:
    """One line from a fragment's `calibration:` section (written by `meshplan calibrate`): which runs the
    fitted values came from and how well they predict them. It changes no number."""
    if not isinstance(values, dict) or not isinstance(values.get("runs"), list):
        raise InputError(f"hardware fragment {fragment_path}: calibration must be a mapping with a list of runs")
    runs = ", ".join(str(r) for r in values["runs"])
    errors = [f"{key.replace('_pct', '').replace('_', '-')} {values[key]} %" for key in
              ("before_pct", "after_pct", "held_out_pct") if isinstance(values.get(key), (int, float))]
    return one_line(f"{Path(fragment_path).name}: fitted on {len(values['runs'])} runs ({runs})"
            + (f" of {values['hardware']}" if values.get("hardware") else "")
            + (f"; mean |error| {', '.join(errors)}" if errors else ""))


def _merge(data: dict[str, Any], fragment_path: str, origin: str) -> tuple[dict[str, Any], str | None]:
    """Overlay a profile fragment (e.g. from `meshplan profile network`) on a parsed profile; with the line its
    `calibration:` section (from `meshplan calibrate`) gives, if any: provenance, which changes no number."""
    path = Path(fragment_path)
    frag = parse_yaml(read_text(path, "hardware fragment", MAX_SPEC_BYTES),
                      f"hardware fragment {fragment_path!r}", "cannot read: not valid YAML")
    if not isinstance(frag, dict):
        raise InputError(f"hardware fragment {fragment_path}: expected a mapping of sections (gpu, node, network)")
    merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    provenance = None
    for section, values in frag.items():
        if section == "calibration":
            provenance = _provenance(values, fragment_path)
            continue
        allowed = _SCHEMA.get(section) if section else None
        if section in ("host", "collectives") and section not in merged:
            merged[section] = {}
        if allowed is None or not isinstance(values, dict) or not isinstance(merged.get(section), dict):
            raise InputError(f"hardware fragment {fragment_path}: unknown section {section!r}; "
                             "allowed: gpu, node, network, host, collectives, calibration")
        unknown = sorted(set(values) - set(allowed))
        if unknown:
            raise InputError(f"hardware fragment {fragment_path}: {section}: unknown keys {unknown}; "
                             f"allowed: {', '.join(allowed)}")
        merged[section].update(values)
    merged["name"] = f"{merged.get('name', origin)}+{path.stem}"
    return merged, provenance


def load_hardware(name_or_path: str, num_gpus: int,
                  overrides: HardwareOverrides = HardwareOverrides()) -> ClusterSpec:
    """A preset name or a YAML path -> ClusterSpec, with command-line overrides applied. Fragments
    follow after commas (`h100-sxm,net.yaml`) and replace the keys they give."""
    if not isinstance(name_or_path, str):
        raise InputError(f"hardware must be a preset name or a path (str), got {name_or_path!r}")
    integer(num_gpus, "gpus", 0, MAX_GPUS)
    base, *fragments = name_or_path.split(",")
    data, origin = _read(base)
    provenance: list[str] = []
    for frag in fragments:
        data, line = _merge(data, frag, origin)
        provenance += [line] if line else []
    cluster = parse_profile(data, origin, num_gpus=max(num_gpus, 1))
    return apply_overrides(replace(cluster, provenance=tuple(provenance)) if provenance else cluster, overrides)


def apply_overrides(cluster: ClusterSpec, overrides: HardwareOverrides) -> ClusterSpec:
    """`cluster` with the command-line overrides applied (HardwareOverrides checked their ranges)."""
    if not isinstance(overrides, HardwareOverrides):
        raise InputError(f"overrides must be a HardwareOverrides, got {overrides!r}")
    if overrides.memory_gib is not None:
        cluster = replace(cluster, gpu=replace(cluster.gpu, memory_gib=float(overrides.memory_gib)))
    if overrides.inter_node_gbps is not None:
        cluster = replace(cluster, scale_out=replace(cluster.scale_out,
                                                     bandwidth_gbs=float(overrides.inter_node_gbps) / 8))
    if overrides.gpus_per_node is not None:
        size = min(cluster.scale_up_size, overrides.gpus_per_node) \
            if cluster.scale_up_size == cluster.gpus_per_node else cluster.scale_up_size
        links = cluster.collectives.links[:size]  # a smaller node of the same board: its first GPUs' links
        collectives = replace(cluster.collectives, links=tuple(row[:size] for row in links))
        try:
            cluster = replace(cluster, gpus_per_node=overrides.gpus_per_node, scale_up_size=size,
                              collectives=collectives)
        except SpecError as exc:
            raise InputError(str(exc)) from None
    return cluster


def describe(name: str) -> str:
    data, _ = _read(name)
    return str(data.get("description", ""))


def profile_mapping(cluster: ClusterSpec, description: str = "") -> dict[str, Any]:
    """The inverse of `parse_profile`: a mapping in this folder's schema (for self-contained plans)."""
    gpu = cluster.gpu
    return {
        "name": cluster.name,
        "description": description,
        "gpu": {"name": gpu.name, "architecture": gpu.architecture, "memory_gib": gpu.memory_gib,
                "hbm_gbs": gpu.hbm_gbs,
                "peak_bf16_tflops": gpu.peak_bf16_tflops, "peak_fp8_tflops": gpu.peak_fp8_tflops,
                "matmul_efficiency": [list(p) for p in gpu.matmul_efficiency.points],
                "attention_efficiency": gpu.attention_efficiency, "memory_efficiency": gpu.memory_efficiency,
                "overlap_efficiency": gpu.overlap_efficiency, "attention_half_seq": gpu.attention_half_seq,
                "attention_backward_ratio": gpu.attention_backward_ratio, "fp8_matmul_ratio": gpu.fp8_matmul_ratio,
                **({"peak_fp16acc_tflops": gpu.peak_fp16acc_tflops} if gpu.peak_fp16acc_tflops else {})},
        "node": {"gpus_per_node": cluster.gpus_per_node, "scale_up_size": cluster.scale_up_size,
                 "scale_up_gbs": cluster.scale_up.bandwidth_gbs, "scale_up_latency_us": cluster.scale_up.latency_us,
                 "scale_up_efficiency": cluster.scale_up.efficiency, "host_op_us": cluster.host_op_us},
        "network": {"nic_gbps_per_gpu": cluster.scale_out.bandwidth_gbs * 8,
                    "latency_us": cluster.scale_out.latency_us, "efficiency": cluster.scale_out.efficiency},
        "host": {"memory_gib": cluster.host.memory_gib, "memory_gbs": cluster.host.memory_gbs,
                 "cores": cluster.host.cores, "pcie_gbs": cluster.host.pcie_gbs,
                 "gpus_per_pcie_link": cluster.host.gpus_per_pcie_link,
                 **({"adam_mparams_per_core": cluster.host.adam_mparams_per_core}
                    if cluster.host.adam_mparams_per_core else {}),
                 **({"gpus_per_socket": cluster.host.gpus_per_socket, "cross_socket_gbs": cluster.host.cross_socket_gbs}
                    if cluster.host.gpus_per_socket else {}),
                 **({"nvme_gbs": cluster.host.nvme_gbs, "nvme_gib": cluster.host.nvme_gib} if cluster.host.nvme_gbs
                    else {})},
        "collectives": collectives_mapping(cluster.collectives),
    }
