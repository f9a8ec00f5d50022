"""meshplan profile host (cost_models/profile/hostprofile.py): the host's fixed costs measured with PyTorch, here on a
CPU.
Times on a shared CPU say nothing about a GPU host; what is held is that the routine counts and times what it says,
and that its fragment merges over a preset."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from cost_models.compute import host  # noqa: E402
from cost_models.profile.hostprofile import count_ops, measure, tiny  # noqa: E402
from hardware_profiles import load_hardware  # noqa: E402
from planner.inputs.loaders import load_model  # noqa: E402


def test_counts_the_operators_a_layer_dispatches() -> None:
    """A decoder layer's forward dispatches dozens of aten operators (views included) and its backward more: the
    coarse counts of cost_models/compute/host.py (25 forward, twice that backward) sit below them."""
    import torch

    from cost_models.profile.layerprofile import decoder_module

    model = tiny(load_model("llama3-8b"))
    module, _ = decoder_module(model)
    x = torch.randn(1, 8, model.hidden_size, requires_grad=True)
    forward, backward = count_ops(module, x)
    assert forward >= host.forward_ops(model, 1, False)
    assert backward > forward


def test_cli_writes_a_fragment_that_merges(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    out = tmp_path / "host.yaml"
    result = CliRunner().invoke(app, ["profile", "host", "--out", str(out), "--repeats", "3"])
    assert result.exit_code == 0, result.output
    assert "host_op_us" in result.output and out.is_file()
    cluster = load_hardware(f"a100-80gb,{out}", 8)
    measured = float(out.read_text().split("host_op_us:")[1])
    assert cluster.host_op_us == pytest.approx(measured, abs=1e-3) and measured > 0


def test_bad_device_is_refused_in_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    result = CliRunner().invoke(app, ["profile", "host", "--out", str(tmp_path / "h.yaml"), "--device", "gpu"])
    assert result.exit_code == 2 and "--device must be cpu or cuda" in result.output
    assert not (tmp_path / "h.yaml").exists()


def test_measure_reports_every_quantity() -> None:
    profile = measure(load_model("llama3-8b"), "cpu", 1)
    assert profile.forward_ops > 0 and profile.backward_ops > profile.forward_ops
    assert profile.op_us > profile.aten_us > 0  # a counted operator is several aten operators
    assert profile.collective_us > 0 and profile.step_ms > 0
    assert profile.sync_us == 0.0  # no queue to drain on a CPU
