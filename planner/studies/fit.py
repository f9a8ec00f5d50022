"""Fitting a hardware profile's physical parameters to measured runs by bounded least squares.

The parameters are physical shares and rates of one GPU generation, never per-run factors:
- `gemm_scale`, `gemm_shift`: the GEMM efficiency curve η(F) becomes min(1, scale · η(F / shift)): how close
  large GEMMs come to peak, and how large a GEMM must be to get there;
- `fp8_matmul_ratio`, `attention_efficiency`, `overlap_efficiency`, `memory_efficiency` of the GPU;
- `scale_up_efficiency`, `scale_out_efficiency`: achieved bus bandwidth over line rate of NVLink and the NICs;
- `host_op_us`: the host's time to issue one operator of the framework's layer code (cost_models/compute/host.py);
- `peak_scale`: the sustained tensor clock of a power-limited part over its profile's derived one (its peaks scale);
- `attention_rate`: a runtime's attention kernel over the GPU profile's fused-attention figures
  (Execution.attention_rate on the GPU's architecture), fitted per runtime.
Each run contributes the residual log(predicted / measured step time); each parameter a prior residual
(value − preset) / σ that keeps a few runs from moving parameters they barely see (a Gaussian prior at the
preset's value, as in a maximum a posteriori fit). Solved with scipy.optimize.least_squares (trust region
reflective, bounds on every parameter); a parameter that no run sees at the solution is restarted across its bounds
(`flat_parameters`: a threshold such as the host's issue time is flat on one side, where a local solver cannot
move).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from meshcore import ClusterSpec, EfficiencyCurve
from meshcore.execution import Execution


class Param(str, Enum):
    GEMM_SCALE = "gemm_scale"
    GEMM_SHIFT = "gemm_shift"
    FP8_MATMUL_RATIO = "fp8_matmul_ratio"
    ATTENTION_EFFICIENCY = "attention_efficiency"
    OVERLAP_EFFICIENCY = "overlap_efficiency"
    MEMORY_EFFICIENCY = "memory_efficiency"
    SCALE_UP_EFFICIENCY = "scale_up_efficiency"
    SCALE_OUT_EFFICIENCY = "scale_out_efficiency"
    HOST_OP_US = "host_op_us"
    PEAK_SCALE = "peak_scale"
    ATTENTION_RATE = "attention_rate"
    RESERVE_SHARE = "reserve_share"
    OUTSIDE_ALLOCATOR_GIB = "outside_allocator_gib"


# (lower bound, upper bound, prior σ). gemm_shift is fitted in log10.
BOUNDS: dict[Param, tuple[float, float, float]] = {
    Param.GEMM_SCALE: (0.6, 1.4, 0.15),
    Param.GEMM_SHIFT: (-1.5, 1.5, 0.5),
    Param.FP8_MATMUL_RATIO: (0.4, 1.0, 0.15),
    Param.ATTENTION_EFFICIENCY: (0.2, 0.9, 0.15),
    Param.OVERLAP_EFFICIENCY: (0.0, 1.0, 0.3),
    Param.MEMORY_EFFICIENCY: (0.5, 0.95, 0.1),
    Param.SCALE_UP_EFFICIENCY: (0.3, 0.95, 0.15),
    Param.SCALE_OUT_EFFICIENCY: (0.3, 0.95, 0.15),
    # host µs per counted operator: a bare kernel launch (~4 µs) to FP8 on 2024 Transformer Engine modules (~56 µs);
    # the hopper prior, 30, and its sources: benchmarks/data/calibration/prior_hopper.yaml
    Param.HOST_OP_US: (2.0, 60.0, 10.0),
    # the 500 W Grand Teton H100's sustained tensor clock against its (500/700)^(1/3) derivation (884 TFLOP/s bf16:
    # dynamic power f·V² with V ∝ f, and no power that does not scale with the clock). The physical range: power that
    # does not follow the SM clock (HBM, NVLink, leakage) and a voltage at its floor (P ∝ f) lower the clock towards
    # 500/700 = 0.714 of the 700 W part's, 0.714 / 0.894 = 0.80 of the derivation; at most SXM's 989 (1.12). (The
    # earlier lower bound 0.944, H100 NVL's 835 TFLOP/s, is a 400 W part's boost-clock datasheet peak, not a bound
    # on a capped part's sustained clock; torchtitan's note "between SXM and NVL" is about those datasheet peaks.)
    Param.PEAK_SCALE: (0.80, 1.12, 0.05),
    Param.ATTENTION_RATE: (0.3, 1.0, 0.1),
    # memory (cost_models/memory/held.py): the caching allocator's reserve over what a step allocates and frees, and the
    # memory outside it (CUDA context, NCCL buffers), fitted on a runtime's printed peaks
    Param.RESERVE_SHARE: (0.0, 0.8, 0.15),
    Param.OUTSIDE_ALLOCATOR_GIB: (0.5, 16.0, 3.0),
}
# A parameter no run sees at a solution (`flat_parameters`: over its whole range its slope moves no run's log step
# time by FLAT_SPAN) is restarted from these shares of its bounded range, and the least-cost solution kept.
FLAT_SPAN = 0.05
RESTARTS = (0.25, 0.5, 0.75)
# parameters of a runtime's Execution, not of the cluster
RUNTIME_PARAMS = frozenset({Param.ATTENTION_RATE, Param.RESERVE_SHARE, Param.OUTSIDE_ALLOCATOR_GIB})


def current_value(cluster: ClusterSpec, param: Param) -> float:
    """The value `param` has in `cluster` (the curve's scale and shift are relative: 1 and 0)."""
    gpu = cluster.gpu
    return {
        Param.GEMM_SCALE: 1.0, Param.GEMM_SHIFT: 0.0,
        Param.FP8_MATMUL_RATIO: gpu.fp8_matmul_ratio, Param.ATTENTION_EFFICIENCY: gpu.attention_efficiency,
        Param.OVERLAP_EFFICIENCY: gpu.overlap_efficiency, Param.MEMORY_EFFICIENCY: gpu.memory_efficiency,
        Param.SCALE_UP_EFFICIENCY: cluster.scale_up.efficiency,
        Param.SCALE_OUT_EFFICIENCY: cluster.scale_out.efficiency, Param.HOST_OP_US: cluster.host_op_us,
        Param.PEAK_SCALE: 1.0,
    }[param]


def execution_value(execution: Execution, param: Param, architecture: str) -> float:
    """The value a runtime parameter has in `execution` on GPUs of `architecture`."""
    if param is Param.ATTENTION_RATE:
        return execution.attention_share(architecture)
    if param is Param.RESERVE_SHARE:
        return execution.memory.reserve_share
    if param is Param.OUTSIDE_ALLOCATOR_GIB:
        return execution.memory.outside_allocator_gib
    raise ValueError(f"{param.value} is not a runtime parameter")


def apply_execution(execution: Execution, values: dict[Param, float], architecture: str) -> Execution:
    """`execution` with the given runtime parameter values on `architecture`."""
    memory = {p.value: values[p] for p in (Param.RESERVE_SHARE, Param.OUTSIDE_ALLOCATOR_GIB) if p in values}
    if memory:
        execution = replace(execution, memory=replace(execution.memory, **memory))  # type: ignore[arg-type]
    if Param.ATTENTION_RATE not in values:
        return execution
    rates = dict(execution.attention_rate)
    rates[architecture] = values[Param.ATTENTION_RATE]
    return replace(execution, attention_rate=tuple(sorted(rates.items())))


def scaled_curve(curve: EfficiencyCurve, scale: float, log10_shift: float) -> EfficiencyCurve:
    """η'(F) = min(1, scale · η(F / 10^shift)) on the curve's own sizes."""
    shift = 10.0 ** log10_shift
    return EfficiencyCurve(tuple((size, min(1.0, scale * curve.at(size / shift))) for size, _ in curve.points))


def apply(cluster: ClusterSpec, values: dict[Param, float]) -> ClusterSpec:
    """`cluster` with the given parameter values."""
    gpu = cluster.gpu
    if Param.GEMM_SCALE in values or Param.GEMM_SHIFT in values:
        gpu = replace(gpu, matmul_efficiency=scaled_curve(gpu.matmul_efficiency, values.get(Param.GEMM_SCALE, 1.0),
                                                          values.get(Param.GEMM_SHIFT, 0.0)))
    shares = {field: values[param] for param, field in (
        (Param.FP8_MATMUL_RATIO, "fp8_matmul_ratio"), (Param.ATTENTION_EFFICIENCY, "attention_efficiency"),
        (Param.OVERLAP_EFFICIENCY, "overlap_efficiency"), (Param.MEMORY_EFFICIENCY, "memory_efficiency"))
        if param in values}
    gpu = replace(gpu, **shares)  # type: ignore[arg-type]  # every key names a float field of GpuSpec
    if Param.PEAK_SCALE in values:
        scale = values[Param.PEAK_SCALE]
        gpu = replace(gpu, peak_bf16_tflops=gpu.peak_bf16_tflops * scale,
                      peak_fp8_tflops=gpu.peak_fp8_tflops * scale if gpu.peak_fp8_tflops else gpu.peak_fp8_tflops)
    up, out = cluster.scale_up, cluster.scale_out
    if Param.SCALE_UP_EFFICIENCY in values:
        up = replace(up, efficiency=values[Param.SCALE_UP_EFFICIENCY])
    if Param.SCALE_OUT_EFFICIENCY in values:
        out = replace(out, efficiency=values[Param.SCALE_OUT_EFFICIENCY])
    host = values.get(Param.HOST_OP_US, cluster.host_op_us)
    return replace(cluster, gpu=gpu, scale_up=up, scale_out=out, host_op_us=host)


@dataclass(frozen=True)
class FitResult:
    values: dict[Param, float]  # fitted
    start: dict[Param, float]  # the preset's
    cost: float  # sum of squared residuals (runs + priors) at the optimum
    converged: bool


# A prediction function: (run index, parameter values) -> predicted step seconds.
Predictor = Callable[[int, dict[Param, float]], float]


def fit(predict: Predictor, measured: Sequence[float], params: Sequence[Param], start: dict[Param, float],
        prior_weight: float = 1.0) -> FitResult:
    """Bounded least squares of log(predicted/measured) over the runs plus Gaussian priors at `start`."""
    from scipy.optimize import least_squares  # imported here: only calibration needs scipy

    free = list(params)
    lo = [BOUNDS[p][0] for p in free]
    hi = [BOUNDS[p][1] for p in free]
    x0 = [min(max(start[p], lo[i] + 1e-9), hi[i] - 1e-9) for i, p in enumerate(free)]

    def residuals(x: Sequence[float]) -> list[float]:
        values = dict(zip(free, (float(v) for v in x), strict=True))
        runs = [math.log(predict(i, values) / m) for i, m in enumerate(measured)]
        priors = [math.sqrt(prior_weight) * (v - start[p]) / BOUNDS[p][2] * 0.05 for p, v in values.items()]
        return runs + priors

    def solve(x: Sequence[float]) -> Any:
        return least_squares(residuals, x, bounds=(lo, hi), diff_step=1e-3, xtol=1e-6, ftol=1e-6, max_nfev=200)

    sol = solve(x0)
    for i in flat_parameters(sol.jac[:len(measured)], lo, hi):
        for share in RESTARTS:
            trial = solve([lo[i] + share * (hi[i] - lo[i]) if j == i else v for j, v in enumerate(sol.x)])
            if trial.cost < sol.cost:
                sol = trial
    values = dict(zip(free, (float(v) for v in sol.x), strict=True))
    return FitResult(values, {p: start[p] for p in free}, float(2 * sol.cost), bool(sol.success))


def flat_parameters(run_jacobian: Any, lo: Sequence[float], hi: Sequence[float]) -> list[int]:
    """Indices of the parameters the runs do not see at a solution: over the parameter's whole bounded range its
    slope would move no run's log step time by FLAT_SPAN. Such a parameter may sit on the flat side of a threshold
    that no run has crossed there, as `host_op_us` does where every run's host time hides behind its kernels
    (cost_models/compute/host.py: max(0, ops·t − gpu)); a local solver started on that side has a zero gradient and
    stays at its start whatever the runs beyond the threshold say, so `fit` restarts it across its bounds."""
    return [i for i in range(len(lo))
            if max((abs(float(row[i])) for row in run_jacobian), default=0.0) * (hi[i] - lo[i]) < FLAT_SPAN]
