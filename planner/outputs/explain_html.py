"""`meshplan explain --html`: one self-contained page (inline SVG, no scripts or external files) with the plan, its
pipeline timeline and memory per stage, each with its colour key, the per-stage table, the step-time breakdown, how
to launch the plan, and why it beat the next alternatives. The colours are the PNG's (planner.outputs.explain)."""

from __future__ import annotations

import html

from cost_models.pipeline.simulator import Event
from cost_models.prediction import Prediction
from meshcore import spec_of
from planner.inputs.runtimes import load_runtime
from planner.outputs.explain import COLORS, KIND_NAMES, MEMORY_COLORS, Explanation, breakdown_colors
from planner.outputs.report import layout_dict


def _key(items: list[tuple[str, str]]) -> str:
    """A colour key: a swatch and its meaning per item."""
    return '<p class="key">' + " ".join(
        f'<span><i class="sw" style="background:{color}"></i> {html.escape(name)}</span>' for name, color in items
    ) + "</p>"


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
        parts = (("weights+grads+optimizer", s.weights_gib + s.gradients_gib + s.optimizer_state_gib),
                 ("activations", s.activations_gib), ("other", s.other_gib + s.buffers_gib))
        out.append(f'<text x="0" y="{i * bar + 15}" font-size="11">stage {s.pp_rank}</text>')
        for name, gib in parts:
            out.append(f'<rect x="{x:.1f}" y="{i * bar + 2}" width="{gib * scale:.1f}" height="{bar - 4}" '
                       f'fill="{MEMORY_COLORS[name]}"><title>{name}: {gib:.2f} GiB</title></rect>')
            x += gib * scale
        out.append(f'<text x="{x + 4:.1f}" y="{i * bar + 15}" font-size="11">{s.peak_memory_gib:.1f} GiB</text>')
    cap_x = 55 + cap * scale
    out.append(f'<line x1="{cap_x:.1f}" y1="0" x2="{cap_x:.1f}" y2="{len(stages) * bar}" stroke="red"/></svg>')
    return "".join(out)


def _stage_table(pred: Prediction) -> str:
    """Every stage (the text report shows three of a deep pipeline; the page has room for all)."""
    head = "".join(f"<th>{h}</th>" for h in ("stage", "layers", "s/micro-batch", "weights+grads+optimizer GiB",
                                              "activations GiB", "other GiB", "peak GiB"))
    rows = "".join(
        f"<tr><td>{s.pp_rank}</td><td>{s.num_layers}</td><td>{s.compute_s:.4f}</td>"
        f"<td>{s.weights_gib + s.gradients_gib + s.optimizer_state_gib:.2f}</td><td>{s.activations_gib:.2f}</td>"
        f"<td>{s.other_gib + s.buffers_gib:.2f}</td><td>{s.peak_memory_gib:.2f}</td></tr>" for s in pred.stages)
    return f"<table><tr>{head}</tr>{rows}</table>"


def _launch(ex: Explanation, plan_name: str) -> str:
    """How to launch: the emit command for the plan's runtime and the launchers that run its schedule."""
    plan, esc = ex.plan, html.escape
    profile = load_runtime(plan.job.runtime.framework)
    if profile.target is None:
        emit = (f"<code>meshplan emit {esc(plan_name)} --to TARGET</code> (the plan is for --runtime any: choose the "
                "launcher; <code>--strict</code> refuses a layout it cannot run)")
    else:
        emit = (f"<code>meshplan emit {esc(plan_name)} --to {profile.target.value} --out FILE</code>, the "
                f"configuration of the plan's runtime ({esc(profile.title)})")
    lay = plan.best.layout
    runs = (f" The {esc(lay.schedule.value)} schedule runs on: {esc(', '.join(spec_of(lay.schedule).launchers))}."
            if lay.pp > 1 else "")
    return (f"<p>Write the launcher configuration with {emit}; <code>meshplan trial {esc(plan_name)} --out trials"
            f"</code> writes scripts that train the best layouts for a few steps to check them.{runs}</p>")


def render_html(ex: Explanation, plan_name: str = "plan.yaml") -> str:
    """The page; `plan_name` is the plan file the launch commands name."""
    plan, pred = ex.plan, ex.plan.best.prediction
    esc = html.escape
    lay = " ".join(f"{k}={v}" for k, v in layout_dict(plan.best.layout).items())
    # the ranking's step, as the alternatives below are given (the simulated pipeline's where it was simulated)
    step, rate = plan.best.step_time_s, pred.step_time_s / plan.best.step_time_s
    closed = (f" (the simulated pipeline; the closed form says {pred.step_time_s:.3f} s)"
              if plan.best.simulated_step_time_s is not None else "")
    terms = {k: v for k, v in pred.breakdown.as_dict().items() if v > 0}
    colors = breakdown_colors(list(terms))
    rows = "".join(f'<tr><td><i class="sw" style="background:{colors[k]}"></i> {esc(k)}</td>'
                   f"<td>{v:.4f}</td><td>{100 * v / pred.step_time_s:.1f} %</td></tr>"
                   for k, v in terms.items())
    alts = "".join(f"<tr><td>{c.rank}</td><td>{esc(' '.join(f'{k}={v}' for k, v in layout_dict(c.layout).items()))}"
                   f"</td><td>{c.step_time_s:.3f}</td><td>{100 * c.slower_by:+.1f} %</td><td>{esc(c.reason)}</td></tr>"
                   for c in ex.comparisons)
    if ex.timeline:
        kinds = [k for k in "FBW" if any(e.op.kind.value == k for e in ex.timeline.events)]
        timeline = (f"<h2>Pipeline timeline</h2><p>First {ex.shown_microbatches} micro-batches of "
                    f"{pred.num_microbatches}, simulated.</p>"
                    + _key([(KIND_NAMES[k], COLORS[k]) for k in kinds])
                    + _svg_timeline(ex.timeline.events, plan.best.layout.pp))
    else:
        timeline = "<h2>Pipeline timeline</h2><p>No pipeline parallelism: one stage.</p>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>meshplan: {esc(plan.model.name)}</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}.key span{{margin-right:1.5em}}
.sw{{display:inline-block;width:12px;height:12px;vertical-align:middle}}</style></head><body>
<h1>{esc(plan.model.name)} on {plan.cluster.num_gpus} x {esc(plan.cluster.name)}</h1>
<p>Layout: {esc(lay)}. Step {step:.3f} s{closed}, {pred.tokens_per_s * rate:,.0f} tokens/s,
MFU {100 * pred.mfu * rate:.1f} %, peak memory {pred.peak_memory_gib:.1f} of {pred.memory_capacity_gib:g} GiB.</p>
<p><b>Binding constraint</b>: {esc(ex.binding)}.</p>
<p><b>Against the runner-up</b>: {esc(ex.verdict)}</p>
{timeline}
<h2>Memory per stage</h2>
{_key([*MEMORY_COLORS.items(), ("capacity", "red")])}
{_svg_memory(pred)}
{_stage_table(pred)}
<h2>Step-time breakdown</h2><table><tr><th>component</th><th>s</th><th>share</th></tr>{rows}</table>
<h2>How to launch</h2>
{_launch(ex, plan_name)}
<h2>Why this plan beat the next ones</h2>
<table><tr><th>#</th><th>layout</th><th>step s</th><th>vs plan</th><th>largest difference</th></tr>{alts}</table>
</body></html>
"""
