"""meshplan explain: a valid, non-trivial PNG; a self-contained HTML page (rendered headless where
Chromium is installed); the binding constraint and the comparison with the alternatives."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from planner import plan, save_plan
from planner.explain import explanation, render_html
from planner.space import SearchSpec

runner = CliRunner()


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("explain") / "plan.yaml"
    save_plan(plan("llama3-70b", "h100-sxm", gpus=64, seq_len=4096, global_batch=64,
                   spec=SearchSpec(pp=4, vpp=1, top_k=3)), path)
    return path


def test_png_is_a_real_picture(plan_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    png = tmp_path / "t.png"
    res = runner.invoke(app, ["explain", str(plan_file), "--png", str(png)])
    assert res.exit_code == 0, res.output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 600 and len(data) > 20_000


def test_html_is_self_contained(plan_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = runner.invoke(app, ["explain", str(plan_file), "--html", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2
    assert "src=" not in page and "<script" not in page and "http://" not in page.replace(
        'xmlns="http://www.w3.org/2000/svg"', "")
    assert "Binding constraint" in page and "Why this plan beat the next ones" in page


def test_explanation_names_constraint_and_alternatives(plan_file: Path) -> None:
    from planner import load_plan

    ex = explanation(load_plan(plan_file))
    assert ex.binding.startswith(("time:", "memory:"))
    assert len(ex.comparisons) == 2 and all(c.slower_by >= -1e-9 for c in ex.comparisons)
    assert ex.timeline is not None and ex.timeline.makespan > 0


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="Chromium is not installed (apt-get install chromium)")
def test_html_renders_in_headless_chromium(plan_file: Path, tmp_path: Path) -> None:
    from planner import load_plan

    page = tmp_path / "r.html"
    page.write_text(render_html(explanation(load_plan(plan_file))))
    shot = tmp_path / "shot.png"
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
                    "--window-size=1000,1400", page.as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_explain_shows_the_file_and_reprices_on_request(plan_file: Path, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    """`meshplan explain` shows the figures the plan file stores (here edited, as if another cost model had made
    the plan) and warns that the current model prices it differently; `--reprice` shows the current model's."""
    data = yaml.safe_load(plan_file.read_text())
    now = data["prediction"]["step_time_s"]
    data["prediction"]["step_time_s"] = 3 * now
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(data, sort_keys=False))

    def step_line(output: str) -> str:
        return next(line for line in output.splitlines() if line.strip().startswith("step time"))

    with caplog.at_level("WARNING", logger="planner.planread"):
        res = runner.invoke(app, ["explain", str(edited)])
    assert res.exit_code == 0, res.output
    assert f"{3 * now:12.4f} s" in step_line(res.output)
    assert [r.getMessage().count(f"stored {3 * now:.6g} s, re-priced {now:.6g} s") for r in caplog.records] == [1]
    caplog.clear()
    with caplog.at_level("WARNING", logger="planner.planread"):
        res = runner.invoke(app, ["explain", str(edited), "--reprice"])
    assert res.exit_code == 0, res.output
    assert f"{now:12.4f} s" in step_line(res.output)
    assert len(caplog.records) == 1 and "showing the re-priced figures" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="planner.planread"):
        assert runner.invoke(app, ["explain", str(plan_file)]).exit_code == 0
    assert caplog.records == []
