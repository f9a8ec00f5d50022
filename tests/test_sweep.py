"""meshplan sweep: what-if tables and the capacity mode."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from cli import app
from planner.sweep import Job, Varied, capacity, sweep

runner = CliRunner()
JOB = Job("llama3-8b", "h100-sxm", 64, 4096, 256)


def test_more_gpus_more_throughput_less_per_gpu() -> None:
    frame = sweep(JOB, Varied.GPUS, ["16", "32", "64"])
    assert list(frame["gpus"]) == [16, 32, 64] and frame["fits"].all()
    assert frame["tokens_per_s"].is_monotonic_increasing


def test_faster_network_never_hurts() -> None:
    frame = sweep(JOB, Varied.INTER_NODE_GBPS, ["100", "400", "3200"])
    assert frame["step_time_s"].is_monotonic_decreasing or frame["step_time_s"].nunique() == 1


def test_hardware_sweep_orders_generations() -> None:
    frame = sweep(JOB, Varied.HARDWARE, ["a100-80gb", "h100-sxm", "b200"]).set_index("hardware")
    times = frame["step_time_s"]
    assert times["a100-80gb"] > times["h100-sxm"] > times["b200"]


def test_nothing_fits_is_a_row_not_an_error() -> None:
    frame = sweep(Job("llama3-70b", "rtx4090", 8, 4096, 64), Varied.SEQ_LEN, ["4096"])
    assert not frame["fits"].iloc[0] and "no layout fits" in frame["note"].iloc[0]


def test_capacity_is_the_first_count_that_meets_the_target() -> None:
    job = Job("llama3-8b", "h100-sxm", 1, 8192, 512)
    answer = capacity(job, tokens=1e12, days=30, max_gpus=4096)
    assert answer.days <= 30
    earlier = [d for g, d in answer.tried if g < answer.gpus]
    assert all(d is None or d > 30 for d in earlier)
    assert answer.plan.cluster.num_gpus == answer.gpus


def test_cli_sweep_csv_and_png(tmp_path: Path) -> None:
    csv, png = tmp_path / "s.csv", tmp_path / "s.png"
    args = ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "4096",
            "--global-batch", "256", "--vary", "global-batch", "--values", "128,256", "--csv", str(csv)]
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    res = runner.invoke(app, [*args, "--png", str(png)])
    assert res.exit_code == 0, res.output
    assert list(pd.read_csv(csv)["global-batch"]) == [128, 256]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_capacity_and_errors() -> None:
    res = runner.invoke(app, ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "8192",
                              "--global-batch", "512", "--tokens", "1e12", "--days", "30"])
    assert res.exit_code == 0 and "GPUs train 1e+12 tokens" in res.output
    res = runner.invoke(app, ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "8192",
                              "--global-batch", "512", "--gpus", "8", "--vary", "gpus", "--values", "8,x"])
    assert res.exit_code == 2 and "'x' is not a number" in res.output


def test_workers_give_the_same_rows() -> None:
    """Points planned in two processes come back in order and equal the single-process sweep (a point that
    fits nothing included)."""
    values = ["8", "16", "1", "32"]
    one = sweep(JOB, Varied.GPUS, values, workers=1)
    two = sweep(JOB, Varied.GPUS, values, workers=2)
    pd.testing.assert_frame_equal(one, two)
    assert list(two["gpus"]) == [8, 16, 1, 32] and not two["fits"][2]


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_workers_must_be_a_positive_integer(workers: object) -> None:
    from planner.errors import InputError

    with pytest.raises(InputError, match="--workers must be a positive integer"):
        sweep(JOB, Varied.GPUS, ["8"], workers=workers)  # type: ignore[arg-type]


def test_a_bad_value_is_named_before_planning() -> None:
    from planner.errors import InputError

    with pytest.raises(InputError, match="'x' is not a number"):
        sweep(JOB, Varied.GPUS, ["8", "x"], workers=2)
