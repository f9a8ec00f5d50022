"""meshplan profile network: real gloo collectives between two spawned processes, fitted to alpha-beta."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from cost_models.comm.collectives import Collective, bandwidth_factor
from hardware_profiles import load_hardware

pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[profile]')")
runner = CliRunner()


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, Path]:
    from cost_models.profile.netprofile import SIZES, fit, fragment, measure

    calls: list[tuple[int, int]] = []
    samples = measure("gloo", 2, repeats=3, progress=lambda done, total: calls.append((done, total)))
    total = len(SIZES) * len(Collective)
    assert calls[-1] == (total, total) == (len(samples), total)  # the progress bar counts the measurements
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    fits = fit(samples, 2)
    path = tmp_path_factory.mktemp("net") / "net.yaml"
    path.write_text(fragment(fits, samples, "gloo", 2))
    return samples, fits, path


def test_every_collective_measured_and_fitted_positive(fitted: tuple[list, list, Path]) -> None:
    samples, fits, _ = fitted
    assert {s.collective for s in samples} == set(Collective)
    assert all(s.seconds > 0 for s in samples)
    for f in fits:
        assert f.alpha_s > 0 and f.busbw_bytes_per_s > 0
        times = [f.alpha_s + bandwidth_factor(f.collective, 2) * n / f.busbw_bytes_per_s for n in (1e3, 1e6, 1e9)]
        assert times == sorted(times) and times[0] < times[-1]  # monotone in message size


def test_fragment_merges_over_a_preset(fitted: tuple[list, list, Path]) -> None:
    _, fits, path = fitted
    ar = next(f for f in fits if f.collective is Collective.ALL_REDUCE)
    merged = load_hardware(f"h100-sxm,{path}", 8)
    assert merged.name == "h100-sxm+net"
    assert merged.scale_up.bus_bytes_per_s == pytest.approx(ar.busbw_bytes_per_s, rel=1e-5)
    assert merged.gpu == load_hardware("h100-sxm", 8).gpu  # only the measured tier changes


def test_bad_fragment_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("node:\n  nvlink_gen: 4\n")
    res = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--hardware", f"h100-sxm,{bad}", "--gpus", "8",
                              "--seq-len", "4096", "--global-batch", "8"])
    assert res.exit_code == 2 and "unknown keys ['nvlink_gen']" in res.output
