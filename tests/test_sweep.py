"""meshplan sweep: what-if tables and the capacity mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from test_progress import _Recorder
from typer.testing import CliRunner

from cli import app
from planner.studies.sweep import SECOND_AXIS, Job, Varied, capacity, short_layout, sweep, sweep_figure

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
    from meshcore.errors import InputError

    with pytest.raises(InputError, match="--workers must be a positive integer"):
        sweep(JOB, Varied.GPUS, ["8"], workers=workers)  # type: ignore[arg-type]


def test_a_bad_value_is_named_before_planning() -> None:
    from meshcore.errors import InputError

    with pytest.raises(InputError, match="'x' is not a number"):
        sweep(JOB, Varied.GPUS, ["8", "x"], workers=2)


# ---- the sweep picture: one quantity per axis, each point labelled with its layout --------------------------

LAYOUTS = ["tp1 pp1 dp64 cp1 vpp1 mbs2 zero2 none", "tp1 pp2 dp32 cp1 vpp2 mbs2 zero1 none zb-v",
           "tp2 pp4 dp64 cp2 vpp8 mbs1 sp zero1 none interleaved-1f1b",
           "tp4 pp12 dp16 cp2 vpp1 mbs1 sp zero1 full zb-h1",
           "tp8 pp16 dp8 cp4 ep8 etp1 vpp2 mbs1 sp zero1 selective[core_attn,mlp] zb-v"]


def _frame(varied: Varied, n: int = 10) -> pd.DataFrame:
    """A sweep table of `n` fitting points (and one that fits nothing) whose throughputs are nearly equal: the
    labels' worst case (neighbours at the same height)."""
    rows: list[dict[str, Any]] = [
        {varied.value: 8 * 2**i, "fits": True, "step_time_s": 1.0 + 0.01 * i, "tokens_per_s": 1e6 * 2**i,
         "tokens_per_s_per_gpu": 1e4 - i, "mfu": 0.5 - 0.001 * i, "peak_memory_gib": 60.0,
         "layout": LAYOUTS[i % len(LAYOUTS)], "note": ""} for i in range(n)]
    rows.append({varied.value: 4, "fits": False, "note": "no layout fits"})
    return pd.DataFrame(rows)


def _labels(fig: Any) -> list[Any]:
    return [c for c in fig.axes[0].get_children() if type(c).__name__ == "Annotation"]


@pytest.mark.parametrize("varied", list(Varied))
def test_sweep_figure_one_quantity_per_axis(varied: Varied) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    fig = sweep_figure(_frame(varied), varied)
    second = SECOND_AXIS[varied]
    assert len(fig.axes) == (1 if second is None else 2)
    assert [len(ax.get_lines()) for ax in fig.axes] == [1] * len(fig.axes)  # one line per axis
    assert [ax.get_ylabel() for ax in fig.axes] == ["tokens/s per GPU", *([second[1]] if second else [])]
    assert list(fig.axes[0].get_lines()[0].get_ydata()) == [1e4 - i for i in range(10)]
    if second is not None:  # never the same line twice: the right axis is not a rescaling of the left
        left, right = (ax.get_lines()[0].get_ydata() for ax in fig.axes)
        ratios = {round(float(r) / float(v), 9) for r, v in zip(right, left, strict=True)}
        assert len(ratios) > 1
    assert "nothing fits at 4" in fig.axes[0].get_title(loc="left")
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["tokens/s per GPU", *([second[1]] if second else [])]


def test_sweep_figure_labels_every_point_without_overlap() -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    frame = _frame(Varied.GPUS)
    fig = sweep_figure(frame, Varied.GPUS)
    labels = _labels(fig)
    assert [a.get_text() for a in labels] == [short_layout(lay) for lay in frame[frame["fits"]]["layout"]]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    boxes = [a.get_window_extent(renderer) for a in labels]
    page = fig.bbox
    for i, box in enumerate(boxes):
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
        assert all(not box.overlaps(other) for other in boxes[i + 1:]), labels[i].get_text()
        assert labels[i].get_fontsize() >= 7


def test_short_layout() -> None:
    """With a pipeline the label names the schedule (issue 31 item 7: the labels omitted it)."""
    assert short_layout("tp2 pp4 dp64 cp2 vpp8 mbs1 sp zero1 none interleaved-1f1b") == \
        "tp2 pp4 dp64 cp2\nvpp8 mbs1 zero1 interleaved-1f1b"
    assert short_layout("tp8 pp16 dp8 cp4 ep8 etp1 vpp2 mbs1 sp zero1 selective[core_attn,mlp] zb-v") == \
        "tp8 pp16 dp8 cp4 ep8 etp1\nvpp2 mbs1 zero1 selective zb-v"
    assert short_layout("tp1 pp2 dp4 cp1 vpp1 mbs1 zero3 full+full[1, 0] 1f1b") == \
        "tp1 pp2 dp4 cp1\nvpp1 mbs1 zero3 full 1f1b"
    assert short_layout("tp8 pp1 dp8 cp1 vpp1 mbs1 sp zero1 none 1f1b") == "tp8 pp1 dp8 cp1\nvpp1 mbs1 zero1"


@pytest.mark.parametrize(("varied", "title"), [
    (Varied.GPUS, "llama3-8b on h100-sxm, seq 4096, batch 256"),
    (Varied.HARDWARE, "llama3-8b on 64 GPUs, seq 4096, batch 256"),
    (Varied.INTER_NODE_GBPS, "llama3-8b on 64 x h100-sxm, seq 4096, batch 256"),
    (Varied.SEQ_LEN, "llama3-8b on 64 x h100-sxm, batch 256"),
    (Varied.GLOBAL_BATCH, "llama3-8b on 64 x h100-sxm, seq 4096")])
def test_sweep_picture_names_what_is_fixed_and_starts_at_zero(varied: Varied, title: str) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    from planner.studies.sweep import sweep_title

    assert sweep_title(Job("llama3-8b", "h100-sxm", 64, 4096, 256), varied) == title
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = sweep_figure(_frame(varied), varied, title)
    assert fig.get_suptitle() == title and fig.axes[0].get_title(loc="left").startswith("best plan per value")
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = fig.axes[0].get_legend().get_window_extent(renderer)
    heads = [fig._suptitle.get_window_extent(renderer), fig.axes[0].title.get_window_extent(renderer),
             fig.axes[0]._left_title.get_window_extent(renderer)]
    assert not any(legend.overlaps(h) for h in heads if h.width > 0)
    assert fig.bbox.contains(*heads[0].p0) and fig.bbox.contains(*heads[0].p1)


# ---- progress ----------------------------------------------------------------------------------------------

def test_cli_sweep_reports_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.commands import studies

    monkeypatch.setattr(studies, "Progress", _Recorder)
    _Recorder.made = []
    res = runner.invoke(app, ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64",
                              "--seq-len", "4096", "--global-batch", "256", "--vary", "gpus", "--values", "8,16,32",
                              "--workers", "1"])
    assert res.exit_code == 0, res.output
    (bar,) = _Recorder.made
    assert bar.label == "planning gpus values" and bar.calls == [(1, 3), (2, 3), (3, 3)]


def test_cli_capacity_reports_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.commands import studies

    monkeypatch.setattr(studies, "Progress", _Recorder)
    _Recorder.made = []
    res = runner.invoke(app, ["sweep", "--model", "llama3-8b", "--hardware", "h100-sxm", "--seq-len", "8192",
                              "--global-batch", "512", "--tokens", "1e12", "--days", "30"])
    assert res.exit_code == 0, res.output
    (bar,) = _Recorder.made
    planned = res.output.split("counts planned: ")[1].splitlines()[0].count(":")
    total = bar.calls[0][1]
    assert bar.calls == [(i + 1, total) for i in range(planned)] and planned <= total


@pytest.mark.parametrize(("varied", "values"), [
    (Varied.GPUS, ["16", "64"]), (Varied.HARDWARE, ["a100-80gb", "h100-sxm"]),
    (Varied.INTER_NODE_GBPS, ["100", "400"]), (Varied.SEQ_LEN, ["2048", "8192"]),
    (Varied.GLOBAL_BATCH, ["128", "512"])])
def test_second_axis_is_never_a_rescaling(varied: Varied, values: list[str]) -> None:
    """On real sweeps: the right axis' quantity is not proportional to tokens/s per GPU, and where there is no
    right axis every candidate (total tokens/s, MFU, 1 / step time) is."""
    frame = sweep(JOB, varied, values)
    per_gpu = frame["tokens_per_s_per_gpu"]
    candidates = {"tokens_per_s": frame["tokens_per_s"], "mfu": frame["mfu"], "step_time_s": 1 / frame["step_time_s"]}

    def rescales(column: str) -> bool:
        ratios = candidates[column] / per_gpu
        return bool(ratios.max() / ratios.min() - 1 < 1e-6)

    second = SECOND_AXIS[varied]
    if second is None:
        assert all(rescales(c) for c in candidates)
    else:
        assert not rescales(second[0])


def test_the_printed_sweep_reads_as_plan_prints() -> None:
    """Issue 31 item 6: tokens/s with thousands separators and MFU in %, as `plan` prints them (it printed
    7.236e+04 and 0.5503); the CSV keeps the raw numbers."""
    from planner.studies.sweep import sweep_table

    frame = pd.DataFrame([{"value": 8, "fits": True, "step_time_s": 2.91791, "tokens_per_s": 89840.4,
                           "tokens_per_s_per_gpu": 11230.05, "mfu": 0.58412, "peak_memory_gib": 71.83, "layout": "x",
                           "note": ""}, {"value": 4, "fits": False, "note": "does not fit"}])
    text = sweep_table(frame)
    assert "89,840" in text and "58.4" in text and "2.9179" in text and "e+" not in text and "0.584" not in text
    assert "MFU %" in text
