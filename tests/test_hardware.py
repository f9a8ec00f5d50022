"""Hardware profiles: every preset loads and is sane; broken profiles give clean errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hardware_profiles import HardwareOverrides, load_hardware, preset_names
from meshcore.errors import InputError

PRESETS = ["a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "gb200-nvl72", "mi300x", "l40s",
           "rtx4090", "v100-32gb", "h800"]


def test_all_issue_presets_exist() -> None:
    assert set(PRESETS) <= set(preset_names())


@pytest.mark.parametrize("name", PRESETS)
def test_preset_is_physical(name: str) -> None:
    c = load_hardware(name, 8)
    curve = [e for _, e in c.gpu.matmul_efficiency.points]
    assert curve == sorted(curve) and 0 < curve[-1] <= 1
    assert c.gpu.peak_bf16_tflops > 0 and c.gpu.memory_gib > 0
    assert c.scale_up.bandwidth_gbs >= c.scale_out.bandwidth_gbs  # NVLink/PCIe beats the NIC per GPU


def test_h100_figures_match_datasheet() -> None:
    """REFERENCE.md section 7: H100 SXM 989 dense bf16, 3.35 TB/s, NVLink 900 GB/s bidirectional, 400 Gb/s."""
    c = load_hardware("h100-sxm", 8)
    assert (c.gpu.peak_bf16_tflops, c.gpu.hbm_gbs, c.scale_up.bandwidth_gbs * 2, c.scale_out.bandwidth_gbs * 8) == (
        989, 3350, 900, 400)


def test_h800_is_h100_with_narrower_nvlink() -> None:
    """H800: H100 compute and memory, NVLink 400 GB/s bidirectional, 8 x 400 Gb/s NICs per node."""
    h800, h100 = load_hardware("h800", 16), load_hardware("h100-sxm", 16)
    assert h800.gpu.peak_bf16_tflops == h100.gpu.peak_bf16_tflops and h800.gpu.memory_gib == h100.gpu.memory_gib
    assert (h800.scale_up.bandwidth_gbs * 2, h800.scale_out.bandwidth_gbs * 8, h800.gpus_per_node) == (400, 400, 8)


def test_overrides() -> None:
    c = load_hardware("h100-sxm", 16, HardwareOverrides(gpus_per_node=4, inter_node_gbps=800, memory_gib=40))
    assert (c.gpus_per_node, c.scale_up_size, c.scale_out.bandwidth_gbs, c.gpu.memory_gib) == (4, 4, 100, 40)


def test_unknown_preset() -> None:
    with pytest.raises(InputError, match="unknown hardware 'h900'.*a100-80gb"):
        load_hardware("h900", 8)


def test_non_monotone_curve_rejected(tmp_path: Path) -> None:
    data = yaml.safe_load(Path("hardware_profiles/h100-sxm.yaml").read_text())
    data["gpu"]["matmul_efficiency"] = [[1.0e9, 0.5], [1.0e10, 0.4]]
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="non-decreasing"):
        load_hardware(str(path), 8)


def test_unknown_key_rejected(tmp_path: Path) -> None:
    data = yaml.safe_load(Path("hardware_profiles/h100-sxm.yaml").read_text())
    data["node"]["nvlink_gen"] = 4
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"node: unknown keys \['nvlink_gen'\]; allowed: gpus_per_node"):
        load_hardware(str(path), 8)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(section=st.sampled_from(["gpu", "node", "network"]), key=st.text(min_size=1, max_size=20),
       value=st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(), st.text(max_size=5),
                       st.lists(st.integers(), max_size=3)))
def test_mutated_profiles_fail_cleanly(tmp_path: Path, section: str, key: str, value: object) -> None:
    data = yaml.safe_load(Path("hardware_profiles/a100-80gb.yaml").read_text())
    keys = list(data[section])
    data[section][keys[len(key) % len(keys)] if key.isalpha() else key] = value
    path = tmp_path / "hw.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_hardware(str(path), 8)
    except InputError as exc:
        assert "\n" not in str(exc)
