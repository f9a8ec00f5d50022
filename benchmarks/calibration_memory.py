"""Memory calibration for benchmarks/calibration.py: the peaks a runtime's published runs printed against the
predicted figure that runtime prints (torchtitan: torch.cuda max reserved, `Prediction.reserved_gib`).

What a runtime holds at its peak is read from its code (cost_models/memory/held.py, the `memory` section of its runtime
profile); two quantities of its caching allocator are not and are fitted here, on the printed peaks, by bounded least
squares of log(predicted / printed) with priors from benchmarks/data/calibration/prior_<runtime>.yaml:
`reserve_share` (what the allocator reserves beyond the peak's allocations, as a share of what each step allocates
and frees) and `outside_allocator_gib` (CUDA context and NCCL buffers: they cap what the allocator can reserve and
count against the GPU). Each run is also predicted with the two fitted without its table (leave-one-table-out)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from functools import cache

import yaml
from calibration_runtimes import ROOT, RUNTIMES
from published import DATA, Observation

from planner.studies.fit import Param, apply_execution, fit

MEMORY_PARAMS = (Param.RESERVE_SHARE, Param.OUTSIDE_ALLOCATOR_GIB)
TARGET_MEMORY = 7.0  # issue 29: mean |error| of the printed peaks, per runtime


@cache
def memory_priors(runtime: str) -> dict[Param, float]:
    data = yaml.safe_load((DATA / f"prior_{runtime}.yaml").read_text())
    return {p: float(data[p.value]) for p in MEMORY_PARAMS}


def printed(o: Observation) -> float:
    return float(o.measured_memory_gib or 0.0)


def reserved_with(o: Observation, values: dict[Param, float]) -> float:
    """`o`'s predicted max-reserved GiB with the allocator `values`."""
    runtime = o.job.runtime
    execution = apply_execution(runtime.priced_execution, values, o.cluster.gpu.architecture)
    return o.predict(job=replace(o.job, runtime=replace(runtime, execution=execution))).reserved_gib


def fit_memory(runs: Sequence[Observation], runtime: str) -> dict[Param, float]:
    """The allocator parameters `runs`' printed peaks fit."""
    result = fit(lambda i, v: reserved_with(runs[i], v), [printed(o) for o in runs], MEMORY_PARAMS,
                 memory_priors(runtime))
    return result.values


def error_pct(pred: float, meas: float) -> float:
    return 100.0 * (pred / meas - 1.0)


def report_memory(observations: Sequence[Observation], write: bool) -> None:
    """Per runtime whose runs printed their memory: every run's printed and predicted peak (in-sample and with the
    allocator fitted without its table), the mean |error| and how many are under, and the fitted parameters."""
    for rt in RUNTIMES:
        runs = [o for o in observations if o.runtime == rt and o.measured_memory_gib]
        if not runs:
            continue
        values = fit_memory(runs, rt)
        held: dict[str, float] = {}
        for source in sorted({o.source for o in runs}):
            rest = [o for o in runs if o.source != source]
            own = fit_memory(rest, rt)
            held.update({o.run_id: reserved_with(o, own) for o in runs if o.source == source})
        print(f"\n{rt} memory: the peak it printed against the predicted max reserved GiB (held out: allocator fitted "
              f"without the run's table)")
        print(f"{'run':46} {'printed':>8} {'pred':>6} {'error':>7} {'held out':>8}")
        errs, outs = [], []
        for o in runs:
            pred = o.predict().reserved_gib
            errs.append(error_pct(pred, printed(o)))
            outs.append(error_pct(held[o.run_id], printed(o)))
            print(f"{o.run_id[:46]:46} {printed(o):8.1f} {pred:6.1f} {errs[-1]:+6.1f}% {outs[-1]:+7.1f}%")
        under = sum(e < 0 for e in errs)
        print(f"{rt} memory against the peaks it printed: mean |error| {_mean_abs(errs):.1f} %, {under} of {len(runs)} "
              f"under ({min(errs):+.0f} % to {max(errs):+.0f} %); held out by table {_mean_abs(outs):.1f} % "
              f"(target {TARGET_MEMORY:g})")
        priors = memory_priors(rt)
        for p in MEMORY_PARAMS:
            print(f"  {rt:10} {p.value:22} {priors[p]:8.3f} -> {values[p]:8.3f}")
        if write:
            write_memory(rt, values)


def _mean_abs(errs: Sequence[float]) -> float:
    return sum(abs(e) for e in errs) / max(len(errs), 1)


def write_memory(runtime: str, values: dict[Param, float]) -> None:
    """Put the fitted allocator parameters into the runtime profile's `memory` section (text edits keep comments)."""
    path = ROOT / "hardware_profiles" / "runtimes" / f"{runtime}.yaml"
    text = path.read_text()
    for p in MEMORY_PARAMS:
        text, n = re.subn(rf"(\n    {p.value}: )[0-9.]+", lambda m, v=values[p]: m.group(1) + f"{v:.3f}", text,
                          count=1)
        if n != 1:
            raise SystemExit(f"{path}: no '    {p.value}:' line to update")
    path.write_text(text)
    print(f"wrote {path.relative_to(ROOT)}")


__all__ = ["MEMORY_PARAMS", "fit_memory", "report_memory", "reserved_with", "write_memory"]
