"""Explain a plan: its pipeline timeline (from the simulator), memory per stage against capacity, the
step-time breakdown, and why it beat the next alternatives (the binding constraint, and one sentence on
the runner-up from planner.outputs.verdict).

`explanation(plan)` gathers the facts (pure); planner.outputs.explain_html writes a self-contained page (inline SVG,
no scripts or external files); `explain_figure` draws the same with matplotlib (the [plot] extra) and
`render_png` saves that figure as PNG bytes.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Event, OpKind, SimResult
from cost_models.prediction import Prediction
from cost_models.step import pipeline_hop_time
from meshcore import Layout
from planner.outputs.plan import Plan
from planner.outputs.verdict import plan_verdict, seconds
from planner.search.ranked import Ranked
from planner.search.simulate import simulate_layout

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MAX_SHOWN_MICROBATCHES = 4  # per pipeline stage in the timeline: the pattern repeats after the warm-up
COLORS = {"F": "#4C72B0", "B": "#55A868", "W": "#DD8452"}
KIND_NAMES = {"F": "forward", "B": "backward", "W": "weight gradient"}
SEND_COLOR = "#333333"
CHUNK_KEY_COLOR = "#606060"  # the legend keys a stage's chunks by shade, in grey: the shade, not the hue, says which
# every colour means one thing in every panel: the timeline's op kinds (above), memory's parts, the breakdown's terms
# (the pipeline send's and the idle bubble's as the timeline draws them; the rest their own)
MEMORY_COLORS = {"weights+grads+optimizer": "#8172B3", "activations": "#CCB974", "other": "#937860"}
BREAKDOWN_COLORS = {"pp_p2p": SEND_COLOR, "bubble": "#D0D0D0"}
BREAKDOWN_PALETTE = ("#1B2A49", "#D45087", "#00A087", "#F7B6D2", "#17BECF", "#6B8E23", "#7F0000", "#FFD92F")


@dataclass(frozen=True)
class Comparison:
    rank: int
    layout: Layout
    step_time_s: float
    slower_by: float  # relative to the plan
    reason: str


@dataclass(frozen=True)
class Send:
    """A pipeline send/recv between stages: activations forward, or their gradients backward."""

    src: int  # pipeline stage (device) that sends
    dst: int
    start: float  # when the producing op ends
    end: float  # start + one hop
    backward: bool


@dataclass(frozen=True)
class Explanation:
    plan: Plan
    timeline: SimResult | None  # None without a pipeline
    shown_microbatches: int
    binding: str
    comparisons: tuple[Comparison, ...]
    sends: tuple[Send, ...] = ()  # of the shown timeline
    placement: tuple[int, ...] = ()  # stage of each model chunk in the timeline
    verdict: str = ""  # why the plan beats the runner-up, one sentence (`why_best`)


def _timeline(plan: Plan) -> tuple[SimResult | None, int]:
    lay, pred = plan.best.layout, plan.best.prediction
    if lay.pp == 1:
        return None, 0
    # a window of micro-batches: with v chunks per stage each brings v times the ops, so 1/v of them (at least one
    # round of pp) keeps a deep interleaved timeline readable
    shown = min(pred.num_microbatches, max(1, MAX_SHOWN_MICROBATCHES // lay.vpp) * lay.pp)
    if lay.vpp > 1:
        shown = max(lay.pp, shown - shown % lay.pp)
    short = Prediction(**{**pred.__dict__, "num_microbatches": shown})
    return simulate_layout(plan.model, plan.cluster, plan.job, lay, short), shown


def sends(events: tuple[Event, ...], placement: tuple[int, ...], hop_s: float) -> tuple[Send, ...]:
    """The sends the simulator charges but does not list as events: F(mb, c) needs F(mb, c - 1)'s output and
    B(mb, c) B(mb, c + 1)'s, one hop after the producer ends, whenever the two chunks sit on different stages."""
    ends = {(e.op.kind, e.op.microbatch, e.op.chunk): e.end for e in events}
    out = []
    for e in events:
        kind, mb, c = e.op.kind, e.op.microbatch, e.op.chunk
        if kind is OpKind.W:
            continue
        src = c - 1 if kind is OpKind.F else c + 1
        if not 0 <= src < len(placement) or placement[src] == placement[c]:
            continue
        start = ends[(kind, mb, src)]
        out.append(Send(placement[src], placement[c], start, start + hop_s, kind is OpKind.B))
    return tuple(sorted(out, key=lambda s: (s.start, s.src)))


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
    shipped: tuple[Send, ...] = ()
    place: tuple[int, ...] = ()
    if timeline is not None:
        lay = plan.best.layout
        place = program(lay.schedule, lay.pp, shown, lay.vpp).placement
        shipped = sends(timeline.events, place, pipeline_hop_time(plan.model, plan.job, plan.cluster, lay))
    return Explanation(plan, timeline, shown, binding_constraint(plan.best.prediction), comparisons, shipped, place,
                       plan_verdict(plan))


BAR = 0.7  # height of a timeline bar in rows: the sends run in the gaps between the rows
CHUNK_FONT_PT = (5.0, 8.0)  # chunk numbers on the bars: no smaller than the first (else none), no larger
MAX_SHADES_KEYED = 8  # chunks per stage the legend keys by shade (the stage labels list them all)


def _shade(color: str, share: float) -> tuple[float, float, float]:
    """`color` mixed with white: lighter for a stage's later chunks."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return (r + (1 - r) * share, g + (1 - g) * share, b + (1 - b) * share)


def _lightening(v: int, per_stage: int) -> float:
    """How much white the bars of a stage's chunk `v` (0-based, model order) get: none for the first."""
    return 0.55 * v / max(1, per_stage - 1)


def _local_chunks(place: tuple[int, ...]) -> list[int]:
    """Per model chunk, which of its stage's chunks it is (0: the stage's first, in model order)."""
    return [place[:c].count(place[c]) for c in range(len(place))]


def _draw_timeline(ax: Axes, ex: Explanation) -> None:
    """Bars per op (colour: kind; shade: which of its stage's chunks), sends as lines between the rows, the
    stages (with their chunks) on the y axis."""
    from matplotlib.collections import LineCollection

    assert ex.timeline is not None
    pp, place = ex.plan.best.layout.pp, ex.placement
    local = _local_chunks(place)
    per_stage = max(local) + 1
    groups: dict[tuple[int, str, int], list[tuple[float, float]]] = {}
    for e in ex.timeline.events:
        groups.setdefault((e.device, e.op.kind.value, local[e.op.chunk]), []).append((e.start, e.end - e.start))
    for (device, kind, v), spans in groups.items():
        ax.broken_barh(spans, (device - BAR / 2, BAR), facecolors=_shade(COLORS[kind], _lightening(v, per_stage)),
                       edgecolor="white", linewidth=0.3)
    segments = [[(s.start, s.src + (BAR / 2 if s.dst > s.src else -BAR / 2)),
                 (s.end, s.dst - (BAR / 2 if s.dst > s.src else -BAR / 2))] for s in ex.sends]
    ax.add_collection(LineCollection(segments, colors=SEND_COLOR, linewidths=0.7, zorder=0.5, gid="sends"))
    ax.set_xlim(0, ex.timeline.makespan)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp))
    ax.set_yticklabels([f"stage {d}" if per_stage == 1 else
                        f"stage {d}: chunks {','.join(str(c) for c in range(len(place)) if place[c] == d)}"
                        for d in range(pp)], fontsize=8 if pp <= 8 else 7)


def _chunk_numbers(ax: Axes, ex: Explanation, width_pt: float, height_pt: float) -> int:
    """The model chunk's number on every bar wide enough to hold it, sized to the rows (axes size in points);
    returns how many were drawn."""
    assert ex.timeline is not None
    events, per_s = ex.timeline.events, width_pt / ex.timeline.makespan
    digits = len(str(len(ex.placement) - 1))
    widths = sorted((e.end - e.start) * per_s for e in events)
    # one size for all: what the row height allows and what fits the median bar (a digit is ~0.64 em wide)
    font = min(CHUNK_FONT_PT[1], 0.6 * BAR * height_pt / ex.plan.best.layout.pp,
               (widths[len(widths) // 2] - 2) / (0.65 * digits))
    if font < CHUNK_FONT_PT[0]:
        return 0
    local, drawn = _local_chunks(ex.placement), 0
    for e in events:
        label = str(e.op.chunk)
        if (e.end - e.start) * per_s >= 0.65 * font * len(label) + 2:
            ax.text((e.start + e.end) / 2, e.device, label, ha="center", va="center", fontsize=font,
                    color="white" if local[e.op.chunk] == 0 else "black", gid="chunk")
            drawn += 1
    return drawn


def _span(chunks: list[int]) -> str:
    return f"{chunks[0]}-{chunks[-1]}" if chunks == list(range(chunks[0], chunks[-1] + 1)) and len(chunks) > 2 \
        else ",".join(map(str, chunks))


def _timeline_legend(ax: Axes, ex: Explanation) -> None:
    """Kinds by colour, the send line, and (with several chunks per stage) the shades keyed by chunk."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    assert ex.timeline is not None
    kinds = {e.op.kind.value for e in ex.timeline.events}
    names = {**KIND_NAMES, "B": "backward (input gradient)" if "W" in kinds else "backward (input + weight gradient)"}
    handles: list[Patch | Line2D] = [Patch(facecolor=COLORS[k], label=names[k]) for k in "FBW" if k in kinds]
    hop = ex.sends[0].end - ex.sends[0].start if ex.sends else 0.0
    handles.append(Line2D([], [], color=SEND_COLOR, linewidth=0.7, label=f"send ({seconds(hop)} a hop)"))
    local = _local_chunks(ex.placement)
    per_stage = max(local) + 1
    if 1 < per_stage <= MAX_SHADES_KEYED:
        for v in range(per_stage):
            chunks = sorted(c for c in range(len(local)) if local[c] == v)
            handles.append(Patch(facecolor=_shade(CHUNK_KEY_COLOR, _lightening(v, per_stage)),
                                 label=f"chunk {v + 1} of each stage: {_span(chunks)}"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              title="number on a bar: model chunk", title_fontsize=8)


def explain_figure(ex: Explanation) -> Figure:
    """Timeline (with legend and chunk numbers), memory bars and breakdown as one matplotlib Figure (needs
    matplotlib: pip install -e '.[plot]'); the axes carry gids "timeline", "memory" and "breakdown"."""
    from matplotlib.figure import Figure

    pred, pp = ex.plan.best.prediction, ex.plan.best.layout.pp
    timeline_in = 2.6 + 0.2 * pp  # a taller timeline for deeper pipelines keeps each row readable
    fig = Figure(figsize=(11, timeline_in + 4.6))
    ax_t, ax_m, ax_b = fig.subplots(3, 1, gridspec_kw={"height_ratios": [timeline_in, 2.4, 1.2]})
    for ax, gid in ((ax_t, "timeline"), (ax_m, "memory"), (ax_b, "breakdown")):
        ax.set_gid(gid)
    if ex.timeline is not None:
        ax_t.set_ylabel("pipeline stage" + (" (= model chunk)" if len(ex.placement) == pp else ""))
        ax_t.set_xlabel(f"seconds (first {ex.shown_microbatches} of {pred.num_microbatches} micro-batches)")
        _draw_timeline(ax_t, ex)
        _timeline_legend(ax_t, ex)
    else:
        ax_t.text(0.5, 0.5, "no pipeline parallelism", ha="center", va="center")
    ax_t.set_title(f"{ex.plan.model.name} on {ex.plan.cluster.num_gpus} x {ex.plan.cluster.name}: "
                   f"{ex.plan.best.step_time_s:.3f} s/step, "
                   f"MFU {100 * pred.mfu * pred.step_time_s / ex.plan.best.step_time_s:.1f} %")
    ranks = [s.pp_rank for s in pred.stages]
    states = [s.weights_gib + s.gradients_gib + s.optimizer_state_gib for s in pred.stages]
    acts = [s.activations_gib for s in pred.stages]
    other = [s.other_gib + s.buffers_gib for s in pred.stages]
    bottom = [0.0] * len(ranks)
    for (name, color), gib in zip(MEMORY_COLORS.items(), (states, acts, other), strict=True):
        ax_m.bar(ranks, gib, bottom=bottom, label=name, color=color)
        bottom = [a + b for a, b in zip(bottom, gib, strict=True)]
    ax_m.axhline(pred.memory_capacity_gib, color="red", label="capacity")
    ax_m.set_xticks(ranks)
    ax_m.set_ylabel("GiB per GPU")
    ax_m.set_xlabel("pipeline stage")
    ax_m.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1.0))  # beside the bars, never on them
    _draw_breakdown(ax_b, pred)
    fig.tight_layout()
    if ex.timeline is not None:  # after the layout: the numbers are sized to the bars as they will be drawn
        box = ax_t.get_position()
        if not _chunk_numbers(ax_t, ex, 72 * box.width * fig.get_figwidth(), 72 * box.height * fig.get_figheight()):
            ax_t.get_legend().set_title("")  # no bar could hold a number
            fig.tight_layout()
    return fig


def breakdown_colors(names: list[str]) -> dict[str, str]:
    """A colour per breakdown term: the send's and the bubble's as the timeline draws them, the rest in turn from a
    palette that no other panel uses."""
    rest = iter(BREAKDOWN_PALETTE * (1 + len(names) // len(BREAKDOWN_PALETTE)))
    return {n: BREAKDOWN_COLORS.get(n) or next(rest) for n in names}


def _draw_breakdown(ax: Axes, pred: Prediction) -> None:
    """The step as one bar of its terms, each with its seconds and share where the segment holds them."""
    parts = {k: v for k, v in pred.breakdown.as_dict().items() if v > 0}
    colors, total, left = breakdown_colors(list(parts)), sum(parts.values()), 0.0
    for name, value in parts.items():
        ax.barh(0, value, left=left, color=colors[name], label=f"{name} {value:.3g} s ({100 * value / total:.0f} %)")
        if value / total >= 0.08:  # a segment of 8 % of the width holds "12.3 s 45 %" at 7 pt
            dark = name not in BREAKDOWN_COLORS or name == "pp_p2p"
            ax.text(left + value / 2, 0, f"{value:.3g} s\n{100 * value / total:.0f} %", ha="center", va="center",
                    fontsize=7, color="white" if dark else "black", gid="share")
        left += value
    ax.set_xlim(0, total)
    ax.set_yticks([])
    ax.set_xlabel("step time (s)")
    ax.legend(fontsize=7, ncol=min(4, len(parts)), loc="upper center", bbox_to_anchor=(0.5, -0.6))


def render_png(ex: Explanation) -> bytes:
    """`explain_figure` as PNG bytes."""
    buf = io.BytesIO()
    explain_figure(ex).savefig(buf, format="png", dpi=110)
    return buf.getvalue()


__all__ = ["Explanation", "Send", "binding_constraint", "explain_figure", "explanation", "render_png", "sends"]
