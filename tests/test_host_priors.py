"""The pre-Hopper host priors (benchmarks/data/calibration/host_pre_hopper.yaml): what each V100/A100 profile carries
as `host_op_us`, and the published figures the prior rests on (issue 30, item 1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from hardware_profiles import load_hardware
from planner.studies.fit import BOUNDS, Param

DATA = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "calibration" / "host_pre_hopper.yaml"
PROFILES = Path(__file__).resolve().parents[1] / "hardware_profiles"


def _doc() -> dict[str, Any]:
    doc = yaml.safe_load(DATA.read_text())
    assert isinstance(doc, dict)
    return doc


def _figures(kind: str) -> list[float]:
    return [float(f["value_us"]) for f in _doc()["figures"] if f["kind"] == kind]


@pytest.mark.parametrize("stack", _doc()["stacks"], ids=lambda s: s["name"])
def test_each_pre_hopper_profile_carries_its_stack_prior(stack: dict[str, Any]) -> None:
    """Every V100/A100 profile prices the host at its stack's prior, with the calibration's bounds and σ; where no
    figure was published for the stack the profile says so next to the value."""
    prior = stack["prior"]
    low, high, sigma = BOUNDS[Param.HOST_OP_US]
    assert (prior["low"], prior["high"], prior["sigma"]) == (low, high, sigma)
    assert low <= prior["value"] <= high
    for name in stack["profiles"]:
        assert load_hardware(name, 8).host_op_us == prior["value"]
        text = (PROFILES / f"{name}.yaml").read_text()
        assert ("no published figure" in text) is (not stack["published"])


def test_the_prior_spans_the_published_call_figures() -> None:
    """The plain PyTorch calls with their launch (torch.nn.Linear forward: 13.48 µs on a DGX H100's Xeon 8480C,
    33.17 and 37.08 µs on GH200/GB200 Grace, NVIDIA/TransformerEngine#2053) and a 2020 PyTorch op without a launch
    (6.8 µs, pytorch/pytorch#41383) plus a bare launch (3.8 µs, NVIDIA's CUDA Graphs blog, Gray 2019) all lie
    within two σ of the pre-Hopper prior; the bare launch alone is above its lower bound."""
    launch = _figures("launch_only")
    calls = _figures("plain_call_with_launch") + [f + launch[0] for f in _figures("plain_call_without_launch")]
    assert calls == pytest.approx([13.48, 33.17, 37.08, 10.6])
    for stack in _doc()["stacks"]:
        prior = stack["prior"]
        assert all(abs(c - prior["value"]) <= 2 * prior["sigma"] for c in calls)
        assert min(launch) >= prior["low"]
