"""Explain a plan: its pipeline timeline (from the simulator), memory per stage against capacity, the
step-time breakdown, and why it beat the next alternatives (the binding constraint).

`explanation(plan)` gathers the facts (pure); `render_html` writes a self-contained page (inline SVG,
no scripts or external files); `render_png` draws the same with matplotlib (the [plot] extra).
"""

from __future__ import annotations

import html
import io
from dataclasses import dataclass

from cost_models.simulator import Event, SimResult
from cost_models.step import Prediction
from planner.planfile import Plan
from planner.report import layout_dict
from planner.search import Ranked
from planner.simulate import simulate_layout
from planner.specs import Layout

MAX_SHOWN_MICROBATCHES = 4  # per pipeline stage in the timeline: the pattern repeats after the warm-up
COLORS = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}


@dataclass(frozen=True)
class Comparison:
    rank: int
    layout: Layout
    step_time_s: float
    slower_by: float  # relative to the plan
    reason: str


@dataclass(frozen=True)
class Explanation:
    plan: Plan
    timeline: SimResult | None  # None without a pipeline
    shown_microbatches: int
    binding: str
    comparisons: tuple[Comparison, ...]


def _timeline(plan: Plan) -> tuple[SimResult | None, int]:
    lay, pred = plan.best.layout, plan.best.prediction
    if lay.pp == 1:
        return None, 0
    shown = min(pred.num_microbatches, MAX_SHOWN_MICROBATCHES * lay.pp)
    if lay.vpp > 1:
        shown = max(lay.pp, shown - shown % lay.pp)
    short = Prediction(**{**pred.__dict__, "num_microbatches": shown})
    return simulate_layout(plan.model, plan.cluster, plan.job, lay, short), shown


def binding_constraint(pred: Prediction) -> str:
    """What limits the plan: memory when a stage is within 10 % of capacity, else the largest overhead."""
    worst = max(pred.stages, key=lambda s: s.peak_memory_gib)
    share = worst.peak_memory_gib / pred.memory_capacity_gib
    if share > 0.9:
        return (f"memory: stage {worst.pp_rank} uses {worst.peak_memory_gib:.1f} of {pred.memory_capacity_gib:g} GiB "
                f"({100 * share:.0f} %); layouts that keep fewer activations or shard less fit no faster")
    parts = {k: v for k, v in pred.breakdown.as_dict().items() if k != "compute" and v > 0}
    name, value = max(parts.items(), key=lambda kv: kv[1]) if parts else ("compute", 0.0)
    return (f"time: compute is {100 * pred.breakdown.compute_s / pred.step_time_s:.0f} % of the step; the largest "
            f"overhead is {name} ({100 * value / pred.step_time_s:.1f} %); memory peaks at {100 * share:.0f} %")


def _compare(plan: Plan, rank: int, other: Ranked) -> Comparison:
    best = plan.best.prediction.breakdown.as_dict()
    alt = other.prediction.breakdown.as_dict()
    diffs = {k: alt[k] - best[k] for k in best}
    key = max(diffs, key=lambda k: diffs[k])
    reason = f"{diffs[key]:+.3f} s of {key}"
    if other.prediction.peak_memory_gib > plan.best.prediction.peak_memory_gib:
        reason += f", {other.prediction.peak_memory_gib - plan.best.prediction.peak_memory_gib:.1f} GiB more memory"
    slower = other.step_time_s / plan.best.step_time_s - 1
    return Comparison(rank, other.layout, other.step_time_s, slower, reason)


def explanation(plan: Plan) -> Explanation:
    timeline, shown = _timeline(plan)
    comparisons = tuple(_compare(plan, i + 2, alt) for i, alt in enumerate(plan.alternatives))
    return Explanation(plan, timeline, shown, binding_constraint(plan.best.prediction), comparisons)


def _svg_timeline(events: tuple[Event, ...], devices: int, width: int = 900) -> str:
    end = max(e.end for e in events)
    row, scale = 22, (width - 60) / end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{devices * row + 30}">']
    for d in range(devices):
        out.append(f'<text x="0" y="{d * row + 15}" font-size="11">stage {d}</text>')
    for e in events:
        x, w = 55 + e.start * scale, max(e.end - e.start, 0) * scale
        out.append(f'<rect x="{x:.2f}" y="{e.device * row + 2}" width="{w:.2f}" height="{row - 4}" '
                   f'fill="{COLORS[e.op.kind.value]}" stroke="white" stroke-width="0.5">'
                   f"<title>{e.op.kind.value} micro-batch {e.op.microbatch} chunk {e.op.chunk}: "
                   f"{e.start * 1e3:.2f}-{e.end * 1e3:.2f} ms</title></rect>")
    out.append(f'<text x="55" y="{devices * row + 20}" font-size="11">0 s</text>'
               f'<text x="{width - 60}" y="{devices * row + 20}" font-size="11">{end:.3f} s</text></svg>')
    return "".join(out)


def _svg_memory(pred: Prediction, width: int = 900) -> str:
    stages = pred.stages
    bar, cap = 22, pred.memory_capacity_gib
    scale = (width - 140) / max(cap, max(s.peak_memory_gib for s in stages))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{len(stages) * bar + 10}">']
    for i, s in enumerate(stages):
        x = 55.0
        parts = (("states", s.weights_gib + s.gradients_gib + s.optimizer_state_gib, "#8172B3"),
                 ("activations", s.activations_gib, "#4C72B0"), ("other", s.other_gib + s.buffers_gib, "#937860"))
        out.append(f'<text x="0" y="{i * bar + 15}" font-size="11">stage {s.pp_rank}</text>')
        for name, gib, color in parts:
            out.append(f'<rect x="{x:.1f}" y="{i * bar + 2}" width="{gib * scale:.1f}" height="{bar - 4}" '
                       f'fill="{color}"><title>{name}: {gib:.2f} GiB</title></rect>')
            x += gib * scale
        out.append(f'<text x="{x + 4:.1f}" y="{i * bar + 15}" font-size="11">{s.peak_memory_gib:.1f} GiB</text>')
    cap_x = 55 + cap * scale
    out.append(f'<line x1="{cap_x:.1f}" y1="0" x2="{cap_x:.1f}" y2="{len(stages) * bar}" stroke="red"/></svg>')
    return "".join(out)


def render_html(ex: Explanation) -> str:
    plan, pred = ex.plan, ex.plan.best.prediction
    esc = html.escape
    lay = " ".join(f"{k}={v}" for k, v in layout_dict(plan.best.layout).items())
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{v:.4f}</td><td>{100 * v / pred.step_time_s:.1f} %</td></tr>"
                   for k, v in pred.breakdown.as_dict().items() if v > 0)
    alts = "".join(f"<tr><td>{c.rank}</td><td>{esc(' '.join(f'{k}={v}' for k, v in layout_dict(c.layout).items()))}"
                   f"</td><td>{c.step_time_s:.3f}</td><td>{100 * c.slower_by:+.1f} %</td><td>{esc(c.reason)}</td></tr>"
                   for c in ex.comparisons)
    timeline = (f"<h2>Pipeline timeline</h2><p>First {ex.shown_microbatches} micro-batches of "
                f"{pred.num_microbatches}, simulated (F forward, B backward, W weight gradient).</p>"
                + _svg_timeline(ex.timeline.events, plan.best.layout.pp)) if ex.timeline else \
        "<h2>Pipeline timeline</h2><p>No pipeline parallelism: one stage.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>meshplan: {esc(plan.model.name)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}</style></head><body>
<h1>{esc(plan.model.name)} on {plan.cluster.num_gpus} x {esc(plan.cluster.name)}</h1>
<p>Layout: {esc(lay)}. Step {pred.step_time_s:.3f} s, {pred.tokens_per_s:,.0f} tokens/s, MFU {100 * pred.mfu:.1f} %,
peak memory {pred.peak_memory_gib:.1f} of {pred.memory_capacity_gib:g} GiB.</p>
<p><b>Binding constraint</b>: {esc(ex.binding)}.</p>
{timeline}
<h2>Memory per stage</h2><p>Weights, gradients and optimizer state; activations; other buffers. Red: capacity.</p>
{_svg_memory(pred)}
<h2>Step-time breakdown</h2><table><tr><th>component</th><th>s</th><th>share</th></tr>{rows}</table>
<h2>Why this plan beat the next ones</h2>
<table><tr><th>#</th><th>layout</th><th>step s</th><th>vs plan</th><th>largest difference</th></tr>{alts}</table>
</body></html>
"""


def render_png(ex: Explanation) -> bytes:
    """Timeline, memory bars and breakdown as one PNG (needs matplotlib: pip install -e '.[plot]')."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pred = ex.plan.best.prediction
    fig, (ax_t, ax_m, ax_b) = plt.subplots(3, 1, figsize=(11, 9), gridspec_kw={"height_ratios": [3, 2, 1]})
    if ex.timeline is not None:
        for e in ex.timeline.events:
            ax_t.broken_barh([(e.start, e.end - e.start)], (e.device - 0.4, 0.8), facecolors=COLORS[e.op.kind.value],
                             edgecolor="white", linewidth=0.3)
        ax_t.set_ylabel("pipeline stage")
        ax_t.set_yticks(range(ex.plan.best.layout.pp))
        ax_t.invert_yaxis()
        ax_t.set_xlabel(f"seconds (first {ex.shown_microbatches} of {pred.num_microbatches} micro-batches)")
    else:
        ax_t.text(0.5, 0.5, "no pipeline parallelism", ha="center", va="center")
    ax_t.set_title(f"{ex.plan.model.name} on {ex.plan.cluster.num_gpus} x {ex.plan.cluster.name}: "
                   f"{pred.step_time_s:.3f} s/step, MFU {100 * pred.mfu:.1f} %")
    ranks = [s.pp_rank for s in pred.stages]
    states = [s.weights_gib + s.gradients_gib + s.optimizer_state_gib for s in pred.stages]
    acts = [s.activations_gib for s in pred.stages]
    other = [s.other_gib + s.buffers_gib for s in pred.stages]
    ax_m.bar(ranks, states, label="weights+grads+optimizer", color="#8172B3")
    ax_m.bar(ranks, acts, bottom=states, label="activations", color="#4C72B0")
    ax_m.bar(ranks, other, bottom=[a + b for a, b in zip(states, acts, strict=True)], label="other", color="#937860")
    ax_m.axhline(pred.memory_capacity_gib, color="red", label="capacity")
    ax_m.set_xticks(ranks)
    ax_m.set_ylabel("GiB per GPU")
    ax_m.set_xlabel("pipeline stage")
    ax_m.legend(fontsize=8, loc="lower right")
    parts = {k: v for k, v in pred.breakdown.as_dict().items() if v > 0}
    left = 0.0
    for i, (name, value) in enumerate(parts.items()):
        ax_b.barh(0, value, left=left, color=f"C{i % 10}", label=name)
        left += value
    ax_b.set_yticks([])
    ax_b.set_xlabel("step time (s)")
    ax_b.legend(fontsize=7, ncol=min(5, len(parts)), loc="upper center", bbox_to_anchor=(0.5, -0.6))
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


__all__ = ["Explanation", "binding_constraint", "explanation", "render_html", "render_png"]
