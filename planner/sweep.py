"""What-if studies: the best plan as one quantity varies, and the GPUs needed to train T tokens in D days.

`sweep` re-plans the same job for each value of one varied quantity (GPU count, hardware preset,
scale-out bandwidth, sequence length, global batch) and returns a pandas DataFrame, one row per value:
the best layout, its step time, throughput, MFU and memory, or why nothing fits.
`capacity` finds the fewest GPUs whose best plan trains `tokens` within `days`, trying whole-node
counts in powers of two and the 1.5x steps between them in increasing order (every count it reports
was planned, none interpolated).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

from hardware_profiles import HardwareOverrides
from planner.api import plan
from planner.checks import MAX_GPUS, integer, real
from planner.errors import InfeasibleError, InputError
from planner.planfile import Plan
from planner.report import layout_line
from planner.space import SearchSpec
from planner.specs import Dtype, Runtime


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
    except InfeasibleError as exc:
        return _row(value, None, str(exc))


def sweep(job: Job, varied: Varied, values: list[str],
          progress: Callable[[int, int], None] | None = None, workers: int = 1) -> pd.DataFrame:
    """The best plan at each value, in order. With `workers` > 1 the points are planned in that many
    processes (each search is independent and single-threaded); the rows are the same as with one."""
    if not values:
        raise InputError(f"--values must name at least one {varied.value} value (comma-separated), got none")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"--workers must be a positive integer, got {workers!r}")
    for raw in values:  # a bad value is named before any planning starts
        _change(varied, raw)
    rows: list[dict[str, Any]] = []
    if workers == 1 or len(values) == 1:
        for raw in values:
            rows.append(_point(job, varied, raw))
            if progress is not None:
                progress(len(rows), len(values))
    else:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(workers, len(values))) as pool:
            for row in pool.map(_point, [job] * len(values), [varied] * len(values), values):
                rows.append(row)
                if progress is not None:
                    progress(len(rows), len(values))
    import pandas as pd  # the table is a DataFrame; importing it here keeps pandas out of other commands

    frame = pd.DataFrame(rows)
    frame.insert(0, varied.value, frame.pop("value"))
    return frame


MAX_TOKENS = 1e18  # tokens to train: ~10^4 x the largest published runs
MAX_DAYS = 36525.0  # a century


@dataclass(frozen=True)
class CapacityAnswer:
    gpus: int
    plan: Plan
    days: float  # to train the tokens at the plan's throughput
    tried: tuple[tuple[int, float | None], ...]  # (GPUs, days or None when nothing fit)


def capacity(job: Job, tokens: float, days: float, max_gpus: int) -> CapacityAnswer:
    """The fewest GPUs, among whole-node counts in powers of two and the 1.5x steps between them, whose
    best plan trains `tokens` in at most `days` (scanned in increasing order; every count is planned)."""
    real(tokens, "--tokens", 0.0, MAX_TOKENS)
    real(days, "--days", 0.0, MAX_DAYS)
    integer(max_gpus, "--max-gpus", 1, MAX_GPUS)
    per_node, floor = _plan_node_size(job), _fewest_at_peak(job, tokens, days)
    counts = sorted({c for k in range(40) for c in (per_node * 2**k, per_node * 3 * 2**k // 2)
                     if max(per_node, floor) <= c <= max_gpus and c % per_node == 0})
    tried: list[tuple[int, float | None]] = []
    for gpus in counts:
        try:
            result = _plan(job, gpus=gpus)
        except InfeasibleError:
            tried.append((gpus, None))
            continue
        need = tokens / result.best.prediction.tokens_per_s / 86400
        tried.append((gpus, need))
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
    from cost_models.flops import model_flops_per_sequence
    from hardware_profiles import load_hardware
    from planner.loaders import load_model

    flops = model_flops_per_sequence(load_model(job.model), job.seq_len) / job.seq_len * tokens
    return int(flops / (days * 86400 * load_hardware(job.hardware, 1).gpu.peak(job.dtype)))


def sweep_plot(frame: pd.DataFrame, varied: Varied) -> bytes:
    """Throughput per GPU and MFU of the best plan against the varied quantity, as a PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fits = frame[frame["fits"]]
    labels = [str(v) for v in fits[varied.value]]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(labels, fits["tokens_per_s_per_gpu"], marker="o", color="C0")
    ax.set_xlabel(varied.value)
    ax.set_ylabel("tokens/s per GPU", color="C0")
    mfu = ax.twinx()
    mfu.plot(labels, 100 * fits["mfu"], marker="s", color="C1")
    mfu.set_ylabel("MFU %", color="C1")
    ax.set_title("best plan per value")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()
