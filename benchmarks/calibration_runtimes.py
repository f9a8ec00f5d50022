"""Per-runtime calibration for benchmarks/calibration.py: which runs fit a GPU generation, which parameters each
runtime's own runs fit, and the per-runtime figures (mean error in-sample and leave-one-source-out, pair ordering).

A GPU generation's physical parameters (GEMM curve, fp8 share, fused-attention rate, overlap, bus bandwidth shares,
host time per operator) are fitted on the runs of NVIDIA's stack (Megatron-LM, NeMo / Megatron-Bridge, and the
DeepSpeed ZeRO-3 rows of the same paper), as before runtimes had execution profiles. A runtime with runs of its own
(torchtitan) then fits the parameters only its runs see, with the generation's fitted values held: its attention
kernel's rate over the profile's (FlashAttention-2 against cuDNN), and the sustained clock of the power-limited part
it ran on (its only runs). Priors: benchmarks/data/calibration/prior_<runtime>.yaml (published figures)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

import yaml
from published import DATA, Observation

from meshcore import ClusterSpec
from planner.studies.fit import Param, apply, apply_execution, fit

ROOT = Path(__file__).resolve().parents[1]
GENERATION_RUNTIMES = ("megatron", "nemo", "deepspeed")  # NVIDIA's stack: the runs a GPU generation is fitted on
RUNTIME_PARAMS: dict[str, tuple[Param, ...]] = {"torchtitan": (Param.PEAK_SCALE, Param.ATTENTION_RATE)}
RUNTIMES = ("megatron", "nemo", "deepspeed", "torchtitan")
TARGET_RUNTIME_LOSO, TARGET_RUNTIME_PAIRS = 7.0, 85.0  # issue 29: every runtime


@dataclass(frozen=True)
class RuntimeFit:
    values: dict[Param, float]
    converged: bool


@cache
def runtime_priors(runtime: str) -> dict[Param, float]:
    """The prior values of `runtime`'s own parameters (prior_<runtime>.yaml: published figures)."""
    data = yaml.safe_load((DATA / f"prior_{runtime}.yaml").read_text())
    return {p: float(data[p.value]) for p in RUNTIME_PARAMS.get(runtime, ())}


@cache
def derived_peaks(profile: str) -> tuple[float, float] | None:
    """The (bf16, fp8) peaks a hardware profile derived before calibration scaled them (its `# derived peak_...`
    comments; None where it has none): the base that `peak_scale` multiplies, so that fits start from the
    derivation whatever --write last stored."""
    text = (ROOT / "hardware_profiles" / f"{profile}.yaml").read_text()
    found = dict(re.findall(r"# derived (peak_\w+): ([0-9.]+)", text))
    if "peak_bf16_tflops" not in found:
        return None
    return float(found["peak_bf16_tflops"]), float(found.get("peak_fp8_tflops", 0.0))


def underived(cluster: ClusterSpec, profile: str) -> ClusterSpec:
    """`cluster` with the peaks its profile derived (`derived_peaks`), where it states them."""
    peaks = derived_peaks(profile)
    if peaks is None:
        return cluster
    gpu = replace(cluster.gpu, peak_bf16_tflops=peaks[0], peak_fp8_tflops=peaks[1] or cluster.gpu.peak_fp8_tflops)
    return replace(cluster, gpu=gpu)


def with_values(obs: Observation, base: ClusterSpec, values: dict[Param, float]) -> float:
    """`obs`'s predicted step on `base` with `values` (cluster parameters and its runtime's execution parameters)."""
    cluster = apply(base, {p: v for p, v in values.items() if p is not Param.ATTENTION_RATE})
    runtime = obs.job.runtime
    execution = apply_execution(runtime.priced_execution, values, obs.cluster.gpu.architecture)
    job = replace(obs.job, runtime=replace(runtime, execution=execution))
    return obs.predict(cluster, job).step_time_s


def fit_runtime(observations: Sequence[Observation], runtime: str, bases: dict[str, ClusterSpec],
                gpu_values: dict[Param, float]) -> RuntimeFit:
    """Fit `runtime`'s own parameters on its runs among `observations`, the GPU generation's `gpu_values` held; a
    runtime without parameters of its own (or without runs) keeps none."""
    params = RUNTIME_PARAMS.get(runtime, ())
    runs = [o for o in observations if o.runtime == runtime]
    if not params or not runs:
        return RuntimeFit({}, True)
    priors = runtime_priors(runtime)

    def predict(i: int, values: dict[Param, float]) -> float:
        return with_values(runs[i], bases[runs[i].run_id], {**gpu_values, **values})

    result = fit(predict, [o.measured_step_s for o in runs], params, priors)
    return RuntimeFit(result.values, result.converged)


def on_bound(param: Param, value: float) -> bool:
    from planner.studies.fit import BOUNDS

    lo, hi, _ = BOUNDS[param]
    return min(value - lo, hi - value) < 1e-3 * (hi - lo)


def write_runtime(runtime: str, fitted: RuntimeFit, profile: str) -> None:
    """Put `runtime`'s fitted parameters into its runtime profile (attention rate) and the hardware profile of its
    runs (sustained peaks of the power-limited part), as text edits that keep the comments."""
    if Param.ATTENTION_RATE in fitted.values:
        path = ROOT / "hardware_profiles" / "runtimes" / f"{runtime}.yaml"
        text, n = re.subn(r"(\n  attention_rate: \{hopper: )[0-9.]+", lambda m: m.group(1) +
                          f"{fitted.values[Param.ATTENTION_RATE]:.3f}", path.read_text(), count=1)
        if n != 1:
            raise SystemExit(f"{path}: no 'attention_rate: {{hopper: ...}}' to update")
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")
    if Param.PEAK_SCALE in fitted.values:
        path = ROOT / "hardware_profiles" / f"{profile}.yaml"
        text = path.read_text()
        derived = {k: float(v) for k, v in re.findall(r"# derived (peak_\w+): ([0-9.]+)", text)}
        for key, value in derived.items():
            text, n = re.subn(rf"(\n  {key}: )[0-9.]+", lambda m, v=value: m.group(1) +
                              f"{v * fitted.values[Param.PEAK_SCALE]:.0f}", text, count=1)
            if n != 1:
                raise SystemExit(f"{path}: no '{key}:' line to update")
        path.write_text(text)
        print(f"wrote {path.relative_to(ROOT)}")


__all__ = ["GENERATION_RUNTIMES", "RUNTIMES", "RUNTIME_PARAMS", "RuntimeFit", "derived_peaks", "fit_runtime",
           "on_bound", "runtime_priors", "underived", "with_values", "write_runtime"]
