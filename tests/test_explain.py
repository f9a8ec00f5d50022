"""meshplan explain: a valid, non-trivial PNG; a self-contained HTML page (rendered headless where
Chromium is installed); the binding constraint and the comparison with the alternatives."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from planner import load_plan, plan, save_plan
from planner.outputs.explain import Explanation, explain_figure, explanation
from planner.outputs.explain_html import render_html
from planner.outputs.report import layout_line
from planner.outputs.verdict import TERM_NAMES, Contender, plan_verdict, seconds, why_best
from planner.search.ranked import Ranked
from planner.search.space import SearchSpec

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
    assert "Against the runner-up</b>: The plan beats the runner-up (" in page
    # issue 31 item 7: a colour key for the timeline and the memory bars, every stage in a table, how to launch
    assert page.count('<p class="key">') == 2 and "></i> forward</span>" in page and "></i> activations</span>" in page
    stages = load_plan(plan_file).best.prediction.stages
    assert page.count("<tr><td>") >= len(stages) and all(f"<tr><td>{s.pp_rank}</td><td>{s.num_layers}</td>" in page
                                                         for s in stages)
    assert "<h2>How to launch</h2>" in page and f"meshplan emit {plan_file} --to megatron" in page
    # the step the plan is ranked by, as the alternatives' (it showed the closed form beside their simulated steps)
    best = load_plan(plan_file).best
    assert best.simulated_step_time_s is not None and f"Step {best.step_time_s:.3f} s (the simulated pipeline" in page
    assert f"{best.step_time_s:.3f} s/step" in explain_figure(explanation(load_plan(plan_file))).axes[0].get_title()


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

    def step_line(output: str) -> str:  # the step time, and the closed form beside a simulated one
        lines = output.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith("step time"))
        return "\n".join(lines[at:at + 2])

    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        res = runner.invoke(app, ["explain", str(edited)])
    assert res.exit_code == 0, res.output
    assert f"{3 * now:.4f} s" in step_line(res.output)
    assert [r.getMessage().count(f"stored {3 * now:.6g} s, re-priced {now:.6g} s") for r in caplog.records] == [1]
    caplog.clear()
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        res = runner.invoke(app, ["explain", str(edited), "--reprice"])
    assert res.exit_code == 0, res.output
    assert f"{now:.4f} s" in step_line(res.output)
    assert len(caplog.records) == 1 and "showing the re-priced figures" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="planner.outputs.planread"):
        assert runner.invoke(app, ["explain", str(plan_file)]).exit_code == 0
    assert caplog.records == []


# ---- the timeline picture: legend, chunk numbers, sends (read from matplotlib's objects, not pixels) ----------

def _drawn(fig: Any) -> Any:
    """The figure drawn on an Agg canvas (so that texts have extents); its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _timeline_axes(fig: Any) -> Any:
    return next(ax for ax in fig.axes if ax.get_gid() == "timeline")


def _check_numbers_readable(ex: Explanation, fig: Any) -> list[Any]:
    """Every chunk number sits inside a bar of its chunk on its stage, at 5 pt or more, and no two overlap."""
    renderer = _drawn(fig)
    ax = _timeline_axes(fig)
    numbers = [t for t in ax.texts if t.get_gid() == "chunk"]
    boxes = []
    for t in numbers:
        x, y = t.get_position()
        (bar,) = [e for e in ex.timeline.events if e.device == y and e.start < x < e.end]
        assert str(bar.op.chunk) == t.get_text() and t.get_fontsize() >= 5
        box = t.get_window_extent(renderer)
        left, right = (ax.transData.transform((v, y))[0] for v in (bar.start, bar.end))
        assert left <= box.x0 and box.x1 <= right, t.get_text()
        boxes.append(box)
    boxes.sort(key=lambda b: (b.y0, b.x0))
    for a, b in zip(boxes, boxes[1:], strict=False):
        assert not a.overlaps(b)
    return numbers


def test_timeline_legend_chunk_numbers_and_sends(plan_file: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    ex = explanation(load_plan(plan_file))
    fig = explain_figure(ex)
    ax = _timeline_axes(fig)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "forward" and legend[1].startswith("backward") and legend[-1].startswith("send (")
    has_w = any(e.op.kind.value == "W" for e in ex.timeline.events)
    assert ("weight gradient" in legend) == has_w
    assert ax.get_legend().get_title().get_text() == "number on a bar: model chunk"
    # one line per send: each micro-batch crosses every stage boundary forward and back
    crossings = sum(a != b for a, b in zip(ex.placement, ex.placement[1:], strict=False))
    (lines,) = [c for c in ax.collections if c.get_gid() == "sends"]
    assert len(lines.get_segments()) == len(ex.sends) == 2 * crossings * ex.shown_microbatches == 2 * 3 * 16
    assert all(s.end > s.start for s in ex.sends)
    numbers = _check_numbers_readable(ex, fig)
    assert {t.get_text() for t in numbers} == {"0", "1", "2", "3"}  # pp 4, one chunk per stage
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"stage {d}" for d in range(4)]


@pytest.mark.parametrize("vpp", [1, 2])
def test_timeline_reads_at_pp16(vpp: int) -> None:
    """Sixteen stages: one labelled row per stage naming its chunks, rows that do not overlap, the chunks keyed
    in the legend (by shade) when a stage holds two, numbers only where a bar holds them."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    result = plan("llama3-70b", "h100-sxm", gpus=128, seq_len=4096, global_batch=16,
                  spec=SearchSpec(pp=16, vpp=vpp, top_k=2))
    ex = explanation(result)
    fig = explain_figure(ex)
    _check_numbers_readable(ex, fig)
    renderer = _drawn(fig)
    ax = _timeline_axes(fig)
    ticks = ax.get_yticklabels()
    assert len(ticks) == 16 and min(t.get_fontsize() for t in ticks) >= 7
    boxes = [t.get_window_extent(renderer) for t in ticks]
    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:], strict=False))
    legend = ax.get_legend()
    assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    texts = [t.get_text() for t in legend.get_texts()]
    if vpp == 1:
        assert [t.get_text() for t in ticks] == [f"stage {d}" for d in range(16)]
        assert ax.get_ylabel() == "pipeline stage (= model chunk)"
    else:
        for d, tick in enumerate(ticks):
            assert tick.get_text() == f"stage {d}: chunks " + ",".join(
                str(c) for c in range(32) if ex.placement[c] == d)
        assert texts[-2:] == ["chunk 1 of each stage: 0-15", "chunk 2 of each stage: 16-31"]
        # the chunks' swatches are greys, not the forward colour again (issue 31 item 7)
        from matplotlib.colors import to_hex

        kinds = {to_hex(h.get_facecolor()) for h in legend.legend_handles[:2]}
        chunks = {to_hex(h.get_facecolor()) for h in legend.legend_handles[-2:]}
        assert len(chunks) == 2 and not chunks & kinds


# ---- why the plan beats the runner-up -----------------------------------------------------------------------

def test_verdict_names_the_runner_up_and_the_largest_difference(tmp_path: Path) -> None:
    result = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64, spec=SearchSpec(top_k=3))
    sentence = plan_verdict(result)
    best, runner_up = result.best, result.alternatives[0]

    def terms(r: Ranked) -> dict[str, float]:  # the breakdown; the simulator's re-pricing of the pipeline: bubble
        t = r.prediction.breakdown.as_dict()
        t["bubble"] += r.step_time_s - r.prediction.step_time_s
        return t

    diffs = {k: terms(runner_up)[k] - terms(best)[k] for k in terms(best)}
    assert sum(diffs.values()) == pytest.approx(runner_up.step_time_s - best.step_time_s)
    key = max(diffs, key=lambda k: abs(diffs[k]))
    assert f"({layout_line(runner_up.layout)})" in sentence
    assert f"{seconds(diffs[key])} {'less' if diffs[key] > 0 else 'more'} {TERM_NAMES[key]}" in sentence
    assert ("within model error" in sentence) == result.indistinguishable[0]
    assert sentence == explanation(result).verdict and sentence.endswith(".") and ". " not in sentence  # one
    save_plan(result, tmp_path / "plan.yaml")
    res = runner.invoke(app, ["explain", str(tmp_path / "plan.yaml")])
    assert res.exit_code == 0 and sentence in " ".join(res.output.split())


BEST = Contender("tp2 pp4", 10.0, {"compute": 8.0, "bubble": 1.0, "tp_comm": 1.0}, (9.8, 10.2))


@pytest.mark.parametrize(("runner_terms", "within", "expected"), [
    ({"compute": 8.0, "bubble": 1.42, "tp_comm": 0.9}, False,
     "The plan beats the runner-up (tp4 pp2) by 3.2 %: 0.42 s less pipeline bubble, partly offset by 0.10 s more "
     "TP communication; the gap is beyond model error (bands 9.8-10.2 s and 10.3-10.5 s do not overlap)."),
    ({"compute": 8.0, "bubble": 1.4, "tp_comm": 1.2}, True,
     "The plan beats the runner-up (tp4 pp2) by 6 %: 0.40 s less pipeline bubble and 0.20 s less TP communication; "
     "the two are within model error (bands 9.8-10.2 s and 10.3-10.5 s overlap), so the model cannot say which "
     "is faster."),
    ({"compute": 8.0, "bubble": 1.5, "tp_comm": 0.95, "dp_comm": 0.004}, False,  # 0.05 s is under 20 % of 0.5 s
     "The plan beats the runner-up (tp4 pp2) by 4.5 %: 0.50 s less pipeline bubble; the gap is beyond model error "
     "(bands 9.8-10.2 s and 10.3-10.5 s do not overlap)."),
    ({"compute": 7.5, "bubble": 1.3, "tp_comm": 1.3, "dp_comm": 0.3}, False,  # the largest difference is a cost
     "The plan beats the runner-up (tp4 pp2) by 4 %: 0.30 s less pipeline bubble, partly offset by 0.50 s more "
     "compute; the gap is beyond model error (bands 9.8-10.2 s and 10.3-10.5 s do not overlap)."),
])
def test_why_best_on_hand_made_breakdowns(runner_terms: dict, within: bool, expected: str) -> None:
    runner_up = Contender("tp4 pp2", sum(runner_terms.values()), runner_terms, (10.3, 10.5))
    assert why_best(BEST, runner_up, within) == expected


def test_why_best_small_numbers_and_no_bands() -> None:
    best = Contender("a", 1.0, {"compute": 0.99, "pp_p2p": 0.01})
    runner_up = Contender("b", 1.004, {"compute": 0.99, "pp_p2p": 0.014})
    assert why_best(best, runner_up, True) == ("The plan beats the runner-up (b) by 0.4 %: 4 ms less pipeline "
                                               "send/receive; the two are within model error, so the model cannot "
                                               "say which is faster.")


def test_verdict_without_alternatives() -> None:
    result = plan("llama3-8b", "h100-sxm", gpus=8, seq_len=4096, global_batch=64, spec=SearchSpec(top_k=1))
    assert plan_verdict(result) == "The plan kept no alternative to compare with (plan with --top-k 2 or more)."


# ---- the memory and breakdown panels (issue 31 item 7) -------------------------------------------------------

def test_memory_legend_beside_the_bars_and_breakdown_numbered(plan_file: Path) -> None:
    """The memory legend covers no bar (it sat on the last stage's), the breakdown bar carries each large term's
    seconds and share, and no colour means two things across the panels."""
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install -e '.[plot]')")
    from matplotlib.colors import to_hex

    ex = explanation(load_plan(plan_file))
    fig = explain_figure(ex)
    renderer = _drawn(fig)
    memory = next(ax for ax in fig.axes if ax.get_gid() == "memory")
    legend = memory.get_legend().get_window_extent(renderer)
    assert memory.patches and not any(legend.overlaps(bar.get_window_extent(renderer)) for bar in memory.patches)
    breakdown = next(ax for ax in fig.axes if ax.get_gid() == "breakdown")
    terms = {k: v for k, v in ex.plan.best.prediction.breakdown.as_dict().items() if v > 0}
    total = sum(terms.values())
    shares = [t.get_text() for t in breakdown.texts if t.get_gid() == "share"]
    big = [v for v in terms.values() if v / total >= 0.08]
    assert len(shares) == len(big) >= 1 and all(f"{v:.3g} s" in text for v, text in zip(big, shares, strict=True))
    # colour -> meaning per panel: a colour in two panels must mean the same there (the send, the bubble)
    timeline = _timeline_axes(fig)
    meaning: dict[str, set[str]] = {}
    for ax in (timeline, memory, breakdown):
        for handle, text in zip(ax.get_legend().legend_handles, ax.get_legend().get_texts(), strict=True):
            color = handle.get_facecolor() if hasattr(handle, "get_facecolor") and not hasattr(handle, "get_xdata") \
                else handle.get_color()
            meaning.setdefault(to_hex(color), set()).add(text.get_text().split(" ")[0])
    assert all(len(m) == 1 or m <= {"send", "pp_p2p"} for m in meaning.values()), meaning
