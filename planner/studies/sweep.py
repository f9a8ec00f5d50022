"""What-if studies: the best plan as one quantity varies, and the GPUs needed to train T tokens in D days.

`sweep` re-plans the same job for each value of one varied quantity (GPU count, hardware preset,
scale-out bandwidth, sequence length, global batch) and returns a pandas DataFrame, one row per value:
the best layout, its step time, throughput, MFU and memory, or why nothing fits.
`capacity` finds the fewest GPUs whose best plan trains `tokens` within `days`, trying whole-node
counts in powers of two and the 1.5x steps between them in increasing order (every count it reports
was planned, none interpolated). `sweep_figure` draws a sweep: tokens/s per GPU, one other quantity where it
is not a rescaling of that, and each point's layout.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

from hardware_profiles import HardwareOverrides
from meshcore import Dtype, Runtime, Schedule
from meshcore.checks import MAX_GPUS, MAX_WORKERS, integer, real
from meshcore.errors import InfeasibleError, InputError, LayoutError
from planner.api import plan
from planner.outputs.plan import Plan
from planner.outputs.report import layout_line
from planner.search.space import SearchSpec


class Varied(str, Enum):
    GPUS = "gpus"
    HARDWARE = "hardware"
    INTER_NODE_GBPS = "inter-node-gbps"
    SEQ_LEN = "seq-len"
    GLOBAL_BATCH = "global-batch"


@dataclass(frozen=True)
class Job:
    """The fixed part of a sweep."""

    model: str
    hardware: str
    gpus: int
    seq_len: int
    global_batch: int
    runtime: Runtime = Runtime()
    dtype: Dtype = Dtype.BF16
    spec: SearchSpec = SearchSpec(top_k=1)


def sweep_title(job: Job, varied: Varied) -> str:
    """What a sweep's picture holds fixed, without the varied quantity: 'llama3-8b on 64 x h100-sxm, seq 4096, batch
    256' (a model file is named by its file name)."""
    model = Path(job.model).name if ("/" in job.model or job.model.endswith((".yaml", ".yml", ".json"))) else job.model
    fixed = {Varied.GPUS: f"{job.gpus} x" if varied is not Varied.HARDWARE else f"{job.gpus} GPUs",
             Varied.HARDWARE: Path(job.hardware).name,
             Varied.SEQ_LEN: f"seq {job.seq_len}", Varied.GLOBAL_BATCH: f"batch {job.global_batch}"}
    where = " ".join(fixed[v] for v in (Varied.GPUS, Varied.HARDWARE) if v is not varied)
    return ", ".join([f"{model} on {where}".strip(), *(fixed[v] for v in (Varied.SEQ_LEN, Varied.GLOBAL_BATCH)
                                                        if v is not varied)])


def _plan(job: Job, **changes: Any) -> Plan:
    args = {"model": job.model, "hardware": job.hardware, "gpus": job.gpus, "seq_len": job.seq_len,
            "global_batch": job.global_batch, **changes}
    overrides = args.pop("overrides", HardwareOverrides())
    return plan(args.pop("model"), args.pop("hardware"), runtime=job.runtime, dtype=job.dtype, overrides=overrides,
                spec=job.spec, **args)


def _row(value: Any, result: Plan | None, problem: str = "") -> dict[str, Any]:
    if result is None:
        return {"value": value, "fits": False, "note": problem}
    lay, pred = result.best.layout, result.best.prediction
    return {"value": value, "fits": True, "step_time_s": pred.step_time_s, "tokens_per_s": pred.tokens_per_s,
            "tokens_per_s_per_gpu": pred.tokens_per_s / result.cluster.num_gpus, "mfu": pred.mfu,
            "peak_memory_gib": pred.peak_memory_gib,
            "layout": layout_line(lay, with_split_recompute=False), "note": ""}


# how `sweep_table` prints each column (the CSV keeps the raw values): as `plan` prints the same figures
_SHOWN: dict[str, tuple[str, Any]] = {
    "step_time_s": ("step s", lambda x: f"{x:.4f}"), "tokens_per_s": ("tokens/s", lambda x: f"{x:,.0f}"),
    "tokens_per_s_per_gpu": ("tokens/s/GPU", lambda x: f"{x:,.0f}"), "mfu": ("MFU %", lambda x: f"{100 * x:.1f}"),
    "peak_memory_gib": ("peak GiB", lambda x: f"{x:.1f}")}


def sweep_table(frame: pd.DataFrame) -> str:
    """The sweep as text: step seconds, tokens/s with thousands separators, MFU in %, memory in GiB (it printed
    7.236e+04 and 0.5503 where `plan` prints 72,360 and 55.0 %); a point that does not fit shows '-'."""
    shown = frame.rename(columns={k: v[0] for k, v in _SHOWN.items()})
    formatters = {v[0]: (lambda f: lambda x: "-" if x != x else f(x))(v[1]) for v in _SHOWN.values()}
    return str(shown.to_string(index=False, formatters=formatters, na_rep="-"))


def _change(varied: Varied, raw: str) -> tuple[Any, dict[str, Any]]:
    try:
        if varied is Varied.HARDWARE:
            return raw, {"hardware": raw}
        if varied is Varied.INTER_NODE_GBPS:
            value = float(raw)
            return value, {"overrides": HardwareOverrides(inter_node_gbps=value)}
        key = {Varied.GPUS: "gpus", Varied.SEQ_LEN: "seq_len", Varied.GLOBAL_BATCH: "global_batch"}[varied]
        return int(raw), {key: int(raw)}
    except ValueError:
        raise InputError(f"--values: {raw!r} is not a number, as {varied.value} needs") from None


def _point(job: Job, varied: Varied, raw: str) -> dict[str, Any]:
    """One row of a sweep: the best plan at one value (a module-level function, so worker processes run it)."""
    value, changes = _change(varied, raw)
    try:
        return _row(value, _plan(job, **changes))
    except (InfeasibleError, LayoutError) as exc:  # nothing fits there, or no layout of that point passes the rules
        return _row(value, None, str(exc))


def sweep(job: Job, varied: Varied, values: list[str], progress: Callable[[int, int], None] | None = None,
          workers: int = 1, ray_address: str | None = None) -> pd.DataFrame:
    """The best plan at each value, in order. With `workers` > 1 the points are planned in that many
    processes (each search is independent and single-threaded); the rows are the same as with one.

    With `ray_address` the points run as Ray tasks on that cluster instead (planner/studies/sweep_ray.py: HOST:PORT,
    ray://HOST:PORT, "auto", or "local" to start a Ray instance on this machine for the sweep), one task per
    point, the rows again the same. `workers` is then checked but not used: the cluster's CPUs set how many
    points run at once (and the CLI passes its default worker count along with --ray, so the pair is no error).
    `progress(done, total)` after each point planned."""
    if not values:
        raise InputError(f"--values must name at least one {varied.value} value (comma-separated), got none")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers must be a positive integer up to {MAX_WORKERS}, got {workers!r}")
    for raw in values:  # a bad value is named before any planning starts
        _change(varied, raw)
    rows = _rows([(job, varied, raw) for raw in values], progress, workers, ray_address)
    import pandas as pd  # the table is a DataFrame; importing it here keeps pandas out of other commands

    frame = pd.DataFrame(rows)
    frame.insert(0, varied.value, frame.pop("value"))
    return frame


def _rows(points: list[tuple[Job, Varied, str]], progress: Callable[[int, int], None] | None, workers: int,
          ray_address: str | None) -> list[dict[str, Any]]:
    """`_point` of each point, in order: on Ray, in a process pool, or in this process."""
    if ray_address is not None:
        from planner.studies.sweep_ray import run_on_ray  # it, and ray in it, only when asked for

        return run_on_ray(ray_address, _point, points, progress)
    if workers == 1 or len(points) == 1:
        return _collect((_point(*p) for p in points), len(points), progress)
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(workers, len(points))) as pool:
        return _collect(pool.map(_point, *zip(*points, strict=True)), len(points), progress)


def _collect(rows: Iterable[dict[str, Any]], total: int,
             progress: Callable[[int, int], None] | None) -> list[dict[str, Any]]:
    """The rows as they come (lazily: a point is planned when its row is asked for), reporting progress."""
    done: list[dict[str, Any]] = []
    for row in rows:
        done.append(row)
        if progress is not None:
            progress(len(done), total)
    return done


MAX_TOKENS = 1e18  # tokens to train: ~10^4 x the largest published runs (at least one token)
MIN_DAYS, MAX_DAYS = 1e-3, 36525.0  # 86 seconds to a century (a denormal day overflowed the GPU count)


@dataclass(frozen=True)
class CapacityAnswer:
    gpus: int
    plan: Plan
    days: float  # to train the tokens at the plan's throughput
    tried: tuple[tuple[int, float | None], ...]  # (GPUs, days or None when nothing fit)


def capacity(job: Job, tokens: float, days: float, max_gpus: int,
             progress: Callable[[int, int], None] | None = None) -> CapacityAnswer:
    """The fewest GPUs, among whole-node counts in powers of two and the 1.5x steps between them, whose
    best plan trains `tokens` in at most `days` (scanned in increasing order; every count is planned).
    `progress(done, total)` after each count planned, of all the counts the scan may plan."""
    real(tokens, "--tokens", 1.0, MAX_TOKENS, low_open=False)
    real(days, "--days", MIN_DAYS, MAX_DAYS, low_open=False)
    integer(max_gpus, "--max-gpus", 1, MAX_GPUS)
    per_node, floor = _plan_node_size(job), _fewest_at_peak(job, tokens, days)
    counts = sorted({c for k in range(40) for c in (per_node * 2**k, per_node * 3 * 2**k // 2)
                     if max(per_node, floor) <= c <= max_gpus and c % per_node == 0})
    tried: list[tuple[int, float | None]] = []
    for gpus in counts:
        try:
            result = _plan(job, gpus=gpus)
        except (InfeasibleError, LayoutError):
            tried.append((gpus, None))
            if progress is not None:
                progress(len(tried), len(counts))
            continue
        need = tokens / result.best.prediction.tokens_per_s / 86400
        tried.append((gpus, need))
        if progress is not None:
            progress(len(tried), len(counts))
        if need <= days:
            return CapacityAnswer(gpus, result, need, tuple(tried))
    raise InfeasibleError(f"no cluster of up to {max_gpus} GPUs trains {tokens:.3g} tokens in {days:g} days "
                          f"({_closest(dict(tried))}); raise --max-gpus or allow more days")


def _closest(tried: dict[int, float | None]) -> str:
    fitted = [(g, d) for g, d in tried.items() if d is not None]
    if not fitted:
        return "nothing fits"
    g, d = min(fitted, key=lambda gd: gd[1])
    return f"{g} GPUs need {d:.1f} days"


def _plan_node_size(job: Job) -> int:
    from hardware_profiles import load_hardware

    return load_hardware(job.hardware, 1).gpus_per_node


def _fewest_at_peak(job: Job, tokens: float, days: float) -> int:
    """GPUs needed even at 100 % MFU: no smaller count can meet the target, so none is planned."""
    from cost_models.compute.flops import model_flops_per_sequence
    from hardware_profiles import load_hardware
    from planner.inputs.loaders import load_model

    flops = model_flops_per_sequence(load_model(job.model), job.seq_len) / job.seq_len * tokens
    return int(flops / (days * 86400 * load_hardware(job.hardware, 1).gpu.peak(job.dtype)))


# The right-hand axis: a second quantity that is not a rescaling of tokens/s per GPU for this sweep, or none.
# With the GPU count fixed, total tokens/s is tokens/s per GPU times a constant, and with the GPU model and the
# model's FLOPs per token fixed, so is MFU: each is plotted only where it tells something new.
SECOND_AXIS: dict[Varied, tuple[str, str, float] | None] = {
    Varied.GPUS: ("tokens_per_s", "total tokens/s", 1.0),  # per GPU falls while the total rises
    Varied.HARDWARE: ("mfu", "MFU %", 100.0),  # the GPU's peak changes with the preset
    Varied.SEQ_LEN: ("mfu", "MFU %", 100.0),  # attention FLOPs per token grow with the sequence
    Varied.GLOBAL_BATCH: ("step_time_s", "step time (s)", 1.0),  # more sequences per step
    Varied.INTER_NODE_GBPS: None,  # same GPUs, model and batch: every other quantity rescales tokens/s per GPU
}
_LAYOUT_TOKEN = re.compile(r"(tp|pp|dp|cp|ep|etp|vpp|mbs|zero)(\d+)")
_SCHEDULES = frozenset(s.value for s in Schedule)


def short_layout(line: str) -> str:
    """Two lines for a point's label from a `layout_line` (the frame's `layout` column): the degrees, then
    virtual stages, micro-batch size, ZeRO stage, recomputation when there is some and, with a pipeline, the
    schedule (sp and the recomputed modules are in the table)."""
    parts: dict[str, str] = {m.group(1): m.group(2) for m in map(_LAYOUT_TOKEN.fullmatch, line.split()) if m}
    recompute = next((b for b in (re.split(r"[\[+]", t)[0] for t in line.split()) if b in ("selective", "full")), "")
    schedule = line.split()[-1] if int(parts.get("pp", "1")) > 1 and line.split()[-1] in _SCHEDULES else ""
    first = " ".join(f"{k}{parts[k]}" for k in ("tp", "pp", "dp", "cp", "ep", "etp") if k in parts)
    second = " ".join([*(f"{k}{parts[k]}" for k in ("vpp", "mbs", "zero") if k in parts), recompute, schedule])
    return f"{first}\n{' '.join(second.split())}"


def sweep_figure(frame: pd.DataFrame, varied: Varied, title: str = "") -> Figure:
    """Tokens/s per GPU of the best plan against the varied quantity (left axis, from zero), the sweep's
    SECOND_AXIS quantity on the right, each point labelled with its layout (`short_layout`), as a matplotlib Figure;
    `title` (the model, hardware and what stays fixed) heads it."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import EngFormatter

    fits = frame[frame["fits"]]
    labels = [str(v) for v in fits[varied.value]]
    per_gpu = list(fits["tokens_per_s_per_gpu"])
    fig = Figure(figsize=(max(8.0, 1.15 * len(labels) + 2.5), 5.0))  # a slot per point wider than its label
    ax = fig.subplots()
    lines: list[Line2D] = ax.plot(labels, per_gpu, marker="o", color="C0", label="tokens/s per GPU")
    ax.set_xlabel(varied.value)
    ax.set_ylabel("tokens/s per GPU", color="C0")
    ax.tick_params(axis="y", colors="C0")
    ax.yaxis.set_major_formatter(EngFormatter(sep=""))  # 10k, not an offset label the legend could cover
    second = SECOND_AXIS[varied]
    if second is not None:
        column, name, scale = second
        right = ax.twinx()
        lines += right.plot(labels, [scale * v for v in fits[column]], marker="s", linestyle="--", color="C1",
                            label=name)
        right.set_ylabel(name, color="C1")
        right.tick_params(axis="y", colors="C1")
        right.set_ylim(0, 1.15 * max(scale * v for v in fits[column]))
        if column == "tokens_per_s":
            right.yaxis.set_major_formatter(EngFormatter(sep=""))
        ax.set_zorder(right.get_zorder() + 1)  # the labelled line and its labels above the right axis' line
        ax.patch.set_visible(False)
    for i, (label, y, lay) in enumerate(zip(labels, per_gpu, fits["layout"], strict=True)):
        above = i % 2 == 0  # neighbours alternate above and below their points: no two labels meet
        ax.annotate(short_layout(lay), (label, y), xytext=(0, 9 if above else -9), textcoords="offset points",
                    ha="center", va="bottom" if above else "top", fontsize=7, linespacing=1.1,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85})
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylim(0, 1.3 * max(per_gpu))  # from zero: the differences read at their true size
    ax.legend(handles=lines, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8, frameon=False)
    missing = [str(v) for v in frame[~frame["fits"]][varied.value]]
    ax.set_title("best plan per value" + (f" (nothing fits at {', '.join(missing)})" if missing else ""),
                 loc="left", fontsize=10)
    if title:  # a line of its own above the axes' title and legend, so that neither covers it
        fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout()
    return fig


def sweep_plot(frame: pd.DataFrame, varied: Varied, title: str = "") -> bytes:
    """`sweep_figure` as PNG bytes (needs matplotlib: pip install -e '.[plot]')."""
    import io

    buf = io.BytesIO()
    sweep_figure(frame, varied, title).savefig(buf, format="png", dpi=110)
    return buf.getvalue()
