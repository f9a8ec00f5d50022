"""Progress on the command line (issue 31 item 1): the layout search shows a spinner with what it has checked (its
total is only a ceiling: it stops early), never a percentage or a time left; work whose total is known (a per-layer
chain search) shows a bar that ends at its total."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from test_layerwise import mixed_table
from typer.testing import CliRunner

from cli import app
from hardware_profiles import load_hardware
from planner.commands.common import Progress
from planner.search.chain import read_chain
from planner.search.layerwise_dp import plan_layerwise

runner = CliRunner()


def _shown(exact: bool, done: int, total: int) -> str:
    out = io.StringIO()
    bar = Progress("searching layouts", exact=exact, delay=0.0,
                   console=Console(file=out, force_terminal=True, width=200, color_system=None))
    bar.update(done, total)
    bar.bar.refresh()
    text = out.getvalue()
    bar.__exit__(None, None, None)
    return text


def test_search_progress_is_a_spinner_without_percent_or_time_left() -> None:
    text = _shown(False, 1_234, 56_789)
    assert "1,234 candidates checked of at most 56,789" in text
    assert "%" not in text and "left" not in text and "-:--:--" not in text


def test_known_totals_show_a_bar_with_the_count() -> None:
    text = _shown(True, 30, 120)
    assert "25%" in text and "30/120" in text and "left" in text


class _Recorder:
    """Stands in for planner.commands.common.Progress: records how it was made and every update."""

    made: list[_Recorder] = []

    def __init__(self, label: str = "searching layouts", exact: bool = True) -> None:
        self.label, self.exact, self.calls = label, exact, []
        _Recorder.made.append(self)

    def __enter__(self) -> _Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def silent(self) -> None:
        self.calls.append((-1, -1))


def test_plan_reports_the_search_as_open_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner.commands import planning

    monkeypatch.setattr(planning, "Progress", _Recorder)
    _Recorder.made = []
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "4096", "--global-batch", "64"])
    assert res.exit_code == 0, res.output
    (bar,) = _Recorder.made
    assert bar.exact is False and bar.calls
    done = [d for d, _ in bar.calls]
    assert done == sorted(done) and all(d <= t for d, t in bar.calls)


def test_per_layer_chain_search_reports_progress_to_its_total(monkeypatch: pytest.MonkeyPatch,
                                                              tmp_path: Path) -> None:
    from planner.commands import planning

    monkeypatch.setattr(planning, "Progress", _Recorder)
    _Recorder.made = []
    res = runner.invoke(app, ["plan", "--costs", str(mixed_table(tmp_path / "mixed.csv")), "--hardware", "a100-40gb",
                              "--gpus", "8", "--seq-len", "1", "--global-batch", "64", "--per-layer"])
    assert res.exit_code == 0, res.output
    (bar,) = _Recorder.made
    assert bar.exact is True and bar.label == "planning per-layer strategies"
    totals = {t for _, t in bar.calls}
    done = [d for d, _ in bar.calls]
    assert len(totals) == 1 and done == sorted(set(done)) and done[-1] == totals.pop()


def test_plan_layerwise_counts_stage_frontiers(tmp_path: Path) -> None:
    table = read_chain(str(mixed_table(tmp_path / "mixed.csv")))
    calls: list[tuple[int, int]] = []
    plan_layerwise(table, load_hardware("a100-40gb", 8), 64, progress=lambda d, t: calls.append((d, t)))
    # a candidate of pp stages on 6 layers builds 1 + (pp - 1) * (6 - pp + 1) frontiers: the first stage starts at
    # layer 0, a later one at any layer that leaves the stages after it a layer each
    assert calls[0][0] in {1 + (pp - 1) * (6 - pp + 1) for pp in (1, 2, 4)} and calls[-1][0] == calls[-1][1]


def test_a_search_over_processes_shows_a_spinner(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan --workers N reports nothing while its parts run: a spinner with the time says it is working."""
    import time

    from planner.commands import planning

    monkeypatch.setattr(planning, "Progress", _Recorder)
    _Recorder.made = []
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "4096", "--global-batch", "64", "--workers", "2"])
    assert res.exit_code == 0, res.output
    (bar,) = _Recorder.made
    assert bar.label == "searching layouts in 2 processes" and bar.calls == [(-1, -1)]
    out = io.StringIO()
    with Progress("searching layouts in 2 processes", exact=False, delay=0.0,
                  console=Console(file=out, force_terminal=True, width=120, color_system=None)) as spinner:
        spinner.silent()
        waited = time.monotonic()
        while spinner.bar is None and time.monotonic() - waited < 60:  # the timer's thread shows it
            time.sleep(0.01)
        spinner.bar.refresh()
    assert "searching layouts in 2 processes" in out.getvalue() and "%" not in out.getvalue()
