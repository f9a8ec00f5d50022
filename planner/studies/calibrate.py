"""Calibrate a hardware profile on the user's own measured runs (`meshplan calibrate`).

A run is a layout the user trained, with its measured seconds per step (and, where logged, peak memory).
The fit moves the profile's physical parameters, the same ones benchmarks/calibration.py fits on published
runs (planner.studies.fit.Param: GEMM efficiency curve scale and size shift, fp8 GEMM share, fused-attention rate,
compute/communication overlap, HBM share, NVLink and NIC bus-bandwidth shares), by bounded least squares of
log(predicted / measured) with a Gaussian prior at the preset's value for each, so that a few runs move only
the parameters they see and the rest stay at the preset's. A parameter no run exercises is not fitted: fp8
without fp8 runs, the NIC share without a run across nodes, NVLink without a run of two or more GPUs.

Before anything is written the fit must show it generalises: every run is predicted by a fit on the others
(leave-one-out); the fit is refused when that error is not below the preset's own error on the same runs,
or when there are fewer than two runs to hold one out.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cost_models.step import evaluate_layout
from meshcore import ClusterSpec, JobSpec, Layout, ModelSpec
from meshcore.checks import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_MEMORY_GIB, MAX_SEQ_LEN
from meshcore.errors import InputError, LayoutError
from meshcore.inputfile import MAX_LOG_BYTES, MAX_PLAN_BYTES, MIB, parse_yaml, read_text, shown
from planner.studies.fit import BOUNDS, Param, apply, current_value, fit

MIN_RUNS = 2
# upper bounds of a run's numbers (meshcore.checks for the job; a step of a day; a GPU's memory)
RUN_LIMITS = MappingProxyType({"gpus": MAX_GPUS, "seq_len": MAX_SEQ_LEN, "global_batch": MAX_GLOBAL_BATCH,
                               "step_time_s": 86400.0, "peak_memory_gib": MAX_MEMORY_GIB})
LAYOUT_KEYS = ("tp", "pp", "cp", "vpp", "mbs", "zero", "recompute", "recompute_modules", "sp", "schedule",
               "ep", "etp")
RUN_KEYS = ("name", "model", "gpus", "seq_len", "global_batch", "dtype", "step_time_s", "peak_memory_gib",
            *LAYOUT_KEYS)


@dataclass(frozen=True)
class MeasuredRun:
    """One trained layout and what was measured."""

    name: str
    model: ModelSpec
    cluster: ClusterSpec  # the preset (with any fragments) at the run's GPU count
    job: JobSpec
    layout: Layout
    step_time_s: float
    peak_memory_gib: float | None = None


@dataclass(frozen=True)
class RunFit:
    """A run's measured step and meshplan's predictions before the fit, after it, and held out of it."""

    name: str
    measured_s: float
    before_s: float
    after_s: float
    held_out_s: float
    measured_gib: float | None = None  # peak memory, where the run logged it
    predicted_gib: float = 0.0  # meshplan's peak memory per GPU (the fitted parameters do not change it)

    @staticmethod
    def error_pct(predicted: float, measured: float) -> float:
        return 100.0 * (predicted / measured - 1.0)


@dataclass(frozen=True)
class Calibration:
    hardware: str
    params: tuple[Param, ...]
    before: Mapping[Param, float]
    after: Mapping[Param, float]
    runs: tuple[RunFit, ...]
    converged: bool

    @property
    def before_pct(self) -> float:
        """Mean |error| of the preset on the runs."""
        return _mean_abs([RunFit.error_pct(r.before_s, r.measured_s) for r in self.runs])

    @property
    def after_pct(self) -> float:
        """Mean |error| of the fitted profile on the runs it was fitted on."""
        return _mean_abs([RunFit.error_pct(r.after_s, r.measured_s) for r in self.runs])

    @property
    def held_out_pct(self) -> float:
        """Mean |error| predicting each run from a fit on the others."""
        return _mean_abs([RunFit.error_pct(r.held_out_s, r.measured_s) for r in self.runs])


def _mean_abs(values: Sequence[float]) -> float:
    return sum(abs(v) for v in values) / len(values)


# ---- reading runs -------------------------------------------------------------------------------------------

def _number(entry: Mapping[str, Any], key: str, where: str, *, integer: bool = False,
            required: bool = True) -> float | int | None:
    value = entry.get(key)
    if value is None or value == "":
        if required:
            raise InputError(f"{where}: missing {key!r}")
        return None
    if isinstance(value, bool):
        raise InputError(f"{where}: {key} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {key} must be a number, got {value!r}") from None
    high = RUN_LIMITS.get(key, 1e9)
    if not math.isfinite(number) or number <= 0 or number > high or (integer and number != int(number)):
        kind = "a positive integer" if integer else "a positive finite number"
        raise InputError(f"{where}: {key} must be {kind} up to {high:g}, got {value!r}")
    return int(number) if integer else number


def _flag(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise InputError(f"expected true or false, got {value!r}")


def run_from_mapping(entry: Mapping[str, Any], hardware: str, where: str) -> MeasuredRun:
    """One run from a mapping of RUN_KEYS (a YAML entry or a CSV row)."""
    from planner.api import make_layout, resolve  # planner.api imports the search; keep this module light

    unknown = sorted(set(entry) - set(RUN_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown keys {unknown}; allowed: {', '.join(RUN_KEYS)}")
    if not entry.get("model"):
        raise InputError(f"{where}: missing 'model' (a preset name or a model YAML / config.json path)")
    gpus = _number(entry, "gpus", where, integer=True)
    seq_len = _number(entry, "seq_len", where, integer=True)
    batch = _number(entry, "global_batch", where, integer=True)
    step = _number(entry, "step_time_s", where)
    memory = _number(entry, "peak_memory_gib", where, required=False)
    knobs: dict[str, Any] = {}
    for key in ("tp", "pp", "cp", "vpp", "mbs", "zero", "ep", "etp"):
        value = _number(entry, key, where, integer=True, required=False) if key != "zero" else entry.get(key)
        if key == "zero" and value not in (None, ""):
            if str(value) not in ("0", "1", "2", "3"):
                raise InputError(f"{where}: zero must be 0, 1, 2 or 3, got {value!r}")
            value = int(value)
        if value not in (None, ""):
            knobs[key] = value
    for key in ("recompute", "schedule", "recompute_modules"):
        if entry.get(key) not in (None, ""):
            knobs[key] = str(entry[key])
    try:
        sp = _flag(entry.get("sp"))
    except InputError as exc:
        raise InputError(f"{where}: sp: {exc}") from None
    if sp is not None:
        knobs["sp"] = sp
    try:
        problem = resolve(str(entry["model"]), hardware, gpus=int(gpus or 0), seq_len=int(seq_len or 0),
                          global_batch=int(batch or 0), dtype=str(entry.get("dtype") or "bf16"))
        layout = make_layout(problem, **knobs)
    except (InputError, LayoutError) as exc:
        raise InputError(f"{where}: {exc}") from None
    name = str(entry.get("name") or where)
    return MeasuredRun(name, problem.model, problem.cluster, problem.job, layout, float(step or 0),
                       None if memory is None else float(memory))


def _megatron_model(a: Mapping[str, Any], name: str, where: str) -> ModelSpec:
    """The model a Megatron-LM arguments block describes (dense or MoE with every layer MoE: the block's
    moe_layer_freq is not read)."""
    from planner.inputs.loaders import model_from_mapping

    need = ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "world_size", "global_batch_size",
            "micro_batch_size")
    missing = [k for k in need if a.get(k) is None]
    vocab = a.get("padded_vocab_size") or a.get("vocab_size")
    if missing or vocab is None:
        raise InputError(f"{where}: the arguments block does not print {missing or ['padded_vocab_size']}: "
                         "log with Megatron-LM's argument printout (rank 0's log)")
    h = a["hidden_size"]
    mapping: dict[str, Any] = {
        "name": name, "num_layers": a["num_layers"], "hidden_size": h,
        "ffn_hidden_size": a.get("ffn_hidden_size") or 4 * h, "num_attention_heads": a["num_attention_heads"],
        "num_kv_heads": a.get("num_query_groups") or a["num_attention_heads"], "vocab_size": vocab,
        "gated_mlp": bool(a.get("swiglu")), "tied_embeddings": not a.get("untie_embeddings_and_output_weights"),
        "norm": "rmsnorm" if str(a.get("normalization")).lower() == "rmsnorm" else "layernorm"}
    if a.get("kv_channels"):
        mapping["head_dim"] = a["kv_channels"]
    if a.get("position_embedding_type") == "learned_absolute":
        mapping["learned_positions"] = a["seq_length"]
    if a.get("num_experts"):
        mapping.update(moe_num_experts=a["num_experts"], moe_top_k=a.get("moe_router_topk") or 2,
                       moe_ffn_hidden_size=a.get("moe_ffn_hidden_size") or mapping["ffn_hidden_size"])
        if a.get("moe_shared_expert_intermediate_size"):
            mapping["moe_shared_ffn_hidden_size"] = a["moe_shared_expert_intermediate_size"]
    return model_from_mapping(mapping, where)


def run_from_megatron_log(path: Path, text: str, hardware: str) -> MeasuredRun:
    """A Megatron-LM log is self-describing: its arguments block gives model, job and layout, its iteration
    lines the step time (planner.inputs.runlogs), its memory report the peak allocated bytes."""
    from planner.api import make_layout, resolve
    from planner.inputs.runlogs import parse_megatron_log

    log = parse_megatron_log(text, str(path))
    a = log.layout()
    model = _megatron_model(a, path.stem, str(path))
    granularity = a.get("recompute_granularity")
    knobs: dict[str, Any] = dict(
        tp=a.get("tensor_model_parallel_size") or 1, pp=a.get("pipeline_model_parallel_size") or 1,
        cp=a.get("context_parallel_size") or 1, vpp=a.get("virtual_pipeline_model_parallel_size") or 1,
        mbs=a["micro_batch_size"], zero=a.get("zero_stage") or 0, sp=bool(a.get("sequence_parallel")),
        ep=a.get("expert_model_parallel_size") or 1, recompute=granularity or "none")
    if model.moe is not None:
        knobs["etp"] = a.get("expert_tensor_parallel_size") or 1
    if granularity == "selective" and a.get("recompute_modules"):
        knobs["recompute_modules"] = ",".join(a["recompute_modules"])
    try:
        problem = resolve(model, hardware, gpus=a["world_size"], seq_len=a["seq_length"],
                          global_batch=a["global_batch_size"], dtype="fp8" if a.get("fp8") else "bf16")
        layout = make_layout(problem, **knobs)
    except (InputError, LayoutError) as exc:
        raise InputError(f"{path}: {exc}") from None
    return MeasuredRun(path.stem, problem.model, problem.cluster, problem.job, layout, log.steady_step_time_s(),
                       log.peak_memory_gib)


def _trial_runs(path: Path, data: dict[str, Any], hardware: str) -> list[MeasuredRun]:
    """The trials of a `meshplan trial` manifest whose logs exist: layout from the copied plan, step time from
    the log (Megatron-LM's peak allocated memory too; torchtitan prints only reserved memory, which counts the
    allocator's slack, so it is not compared)."""
    from planner.api import resolve
    from planner.inputs.runlogs import DeepSpeedLog, MegatronLog, TorchtitanLog, parse_log
    from planner.outputs.planread import load_plan
    from planner.studies.trial import trial_paths

    plan_path, trials = trial_paths(path, data)
    plan = load_plan(plan_path)
    ranked = (plan.best, *plan.alternatives)
    problem = resolve(plan.model, hardware, gpus=plan.cluster.num_gpus, seq_len=plan.job.seq_len,
                      global_batch=plan.job.global_batch, dtype=plan.job.dtype, runtime=plan.job.runtime)
    runs = []
    for t in trials:
        log_path = path.parent / str(t.get("log", ""))
        if "log" not in t or not os.path.isfile(log_path):  # (os.path's: False for a name the system refuses)
            continue
        rank = t.get("rank")
        if not isinstance(rank, int) or not 0 <= rank < len(ranked):
            raise InputError(f"{path}: trial {t.get('name')!r}: rank must be 0 to {len(ranked) - 1}, got {rank!r}")
        log = parse_log(read_text(log_path, "training log", MAX_LOG_BYTES), str(log_path))
        memory: float | None = None
        if isinstance(log, MegatronLog):
            step, memory = log.steady_step_time_s(), log.peak_memory_gib
        elif isinstance(log, TorchtitanLog):
            if log.tokens_per_step is None:  # the plan knows the tokens of a step
                log = replace(log, tokens_per_step=plan.job.global_batch * plan.job.seq_len)
            step = log.steady_step_time_s(plan.cluster.num_gpus)
        else:
            assert isinstance(log, DeepSpeedLog)
            step, memory = log.steady_step_time_s(), log.peak_memory_gib
        runs.append(MeasuredRun(str(t.get("name", f"rank {rank}")), problem.model, problem.cluster, problem.job,
                                ranked[rank].layout, step, memory))
    if not runs:
        raise InputError(f"{path}: no trial has a log yet (run each trial's launch.sh; it writes train.log)")
    return runs


def load_runs(path: Path, hardware: str) -> list[MeasuredRun]:
    """Runs from a YAML file (a list of runs, or a mapping with `runs:`), a CSV file with a header row of
    RUN_KEYS columns, a `meshplan trial` manifest (trials.yaml) with the trials' logs, or a Megatron-LM log."""
    text = read_text(path, "runs file or training log", MAX_LOG_BYTES)
    from planner.inputs.runlogs import Launcher, detect_launcher

    launcher = detect_launcher(text)
    if launcher is Launcher.MEGATRON:
        return [run_from_megatron_log(path, text, hardware)]
    if launcher is not None:
        raise InputError(f"{path}: a {launcher.value} log does not say its model and layout; list it in the "
                         "trials.yaml manifest `meshplan trial` writes, and calibrate on the manifest")
    if len(text) > MAX_PLAN_BYTES:  # a log may be long; a runs file or manifest is parsed whole
        raise InputError(f"cannot read runs file {shown(path)}: larger than {MAX_PLAN_BYTES // MIB} MiB; a runs "
                         f"file (YAML or CSV) may be at most {MAX_PLAN_BYTES // MIB} MiB")
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        if not rows:
            raise InputError(f"{path}: no runs (a header row and one row per run)")
        return [run_from_mapping({k: v for k, v in row.items() if k}, hardware, f"{path}:{i + 2}")
                for i, row in enumerate(rows)]
    data = parse_yaml(text, shown(path), "not YAML")
    from planner.studies.trial import is_manifest

    if is_manifest(data):
        return _trial_runs(path, data, hardware)
    if isinstance(data, dict):
        data = data.get("runs")
    if not isinstance(data, list) or not data or not all(isinstance(e, dict) for e in data):
        raise InputError(f"{path}: expected a list of runs (or `runs:` with one), each a mapping of "
                         f"{', '.join(RUN_KEYS)}")
    return [run_from_mapping(entry, hardware, f"{path}: run {i + 1}") for i, entry in enumerate(data)]


# ---- fitting ------------------------------------------------------------------------------------------------

def params_seen(runs: Sequence[MeasuredRun]) -> tuple[Param, ...]:
    """The parameters the runs exercise (the rest keep the preset's values)."""
    out = [Param.GEMM_SCALE, Param.GEMM_SHIFT, Param.ATTENTION_EFFICIENCY, Param.MEMORY_EFFICIENCY]
    if any(r.cluster.gpu.has_fp8(r.job.dtype) for r in runs):
        out.append(Param.FP8_MATMUL_RATIO)
    if any(r.cluster.num_gpus > 1 for r in runs):
        out += [Param.OVERLAP_EFFICIENCY, Param.SCALE_UP_EFFICIENCY]
    if any(r.cluster.num_gpus > r.cluster.gpus_per_node for r in runs):
        out.append(Param.SCALE_OUT_EFFICIENCY)
    return tuple(out)


def _predict(run: MeasuredRun, values: Mapping[Param, float]) -> float:
    return evaluate_layout(run.model, apply(run.cluster, dict(values)), run.job, run.layout).step_time_s


def _fit(runs: Sequence[MeasuredRun], params: Sequence[Param], start: Mapping[Param, float]
         ) -> tuple[dict[Param, float], bool]:
    result = fit(lambda i, values: _predict(runs[i], values), [r.step_time_s for r in runs], params, dict(start))
    return result.values, result.converged


def calibrate(runs: Sequence[MeasuredRun], hardware: str,
              progress: Callable[[int, int], None] | None = None) -> Calibration:
    """Fit `hardware`'s parameters to `runs`, with leave-one-out predictions; InputError if refused.
    `progress(done, total)` after each of the len(runs) + 1 fits (all runs, then each held out)."""
    if len(runs) < MIN_RUNS:
        raise InputError(f"calibration needs at least {MIN_RUNS} runs (one is held out to check the fit), "
                         f"got {len(runs)}")
    params = params_seen(runs)
    start = {p: current_value(runs[0].cluster, p) for p in params}
    after, converged = _fit(runs, params, start)
    if progress is not None:
        progress(1, len(runs) + 1)
    fits = []
    for i, run in enumerate(runs):
        others = [r for j, r in enumerate(runs) if j != i]
        held, _ = _fit(others, params, start)
        if progress is not None:
            progress(i + 2, len(runs) + 1)
        preset = evaluate_layout(run.model, run.cluster, run.job, run.layout)
        fits.append(RunFit(run.name, run.step_time_s, preset.step_time_s, _predict(run, after), _predict(run, held),
                           run.peak_memory_gib, preset.peak_memory_gib))
    return Calibration(hardware, params, start, after, tuple(fits), converged)


def check(cal: Calibration) -> None:
    """Refuse a fit that does not generalise (InputError with the figures)."""
    if cal.held_out_pct >= cal.before_pct:
        raise InputError(
            f"refused: predicting each run from a fit on the others is {cal.held_out_pct:.1f} % off on average, "
            f"no better than the preset's {cal.before_pct:.1f} %; nothing written (more runs, or runs that "
            "differ in what they stress, let the fit tell the parameters apart)")


def fragment(cal: Calibration, cluster: ClusterSpec) -> dict[str, Any]:
    """The hardware-profile fragment (`--hardware PRESET,fragment.yaml`) holding the fitted values, and its
    provenance (`calibration:`: the base profile, the runs, the mean errors), which plans record."""
    fitted = apply(cluster, dict(cal.after))
    gpu: dict[str, Any] = {}
    if Param.GEMM_SCALE in cal.after or Param.GEMM_SHIFT in cal.after:
        gpu["matmul_efficiency"] = [[float(f"{s:.4g}"), round(e, 4)] for s, e in fitted.gpu.matmul_efficiency.points]
    for param, key in ((Param.ATTENTION_EFFICIENCY, "attention_efficiency"),
                       (Param.MEMORY_EFFICIENCY, "memory_efficiency"),
                       (Param.OVERLAP_EFFICIENCY, "overlap_efficiency"),
                       (Param.FP8_MATMUL_RATIO, "fp8_matmul_ratio")):
        if param in cal.after:
            gpu[key] = round(cal.after[param], 4)
    out: dict[str, Any] = {"gpu": gpu}
    if Param.SCALE_UP_EFFICIENCY in cal.after:
        out["node"] = {"scale_up_efficiency": round(cal.after[Param.SCALE_UP_EFFICIENCY], 4)}
    if Param.SCALE_OUT_EFFICIENCY in cal.after:
        out["network"] = {"efficiency": round(cal.after[Param.SCALE_OUT_EFFICIENCY], 4)}
    out["calibration"] = {"hardware": cal.hardware, "runs": [r.name for r in cal.runs],
                          "before_pct": round(cal.before_pct, 1), "after_pct": round(cal.after_pct, 1),
                          "held_out_pct": round(cal.held_out_pct, 1)}
    return out


def report(cal: Calibration) -> str:
    """Per-run errors before, after and held out; measured against predicted peak memory where runs logged it;
    the parameters that moved."""
    lines = [f"{'run':32} {'measured s':>10} {'preset':>8} {'fitted':>8} {'held out':>9}"]
    for r in cal.runs:
        lines.append(f"{r.name[:32]:32} {r.measured_s:10.3f} {RunFit.error_pct(r.before_s, r.measured_s):+7.1f}% "
                     f"{RunFit.error_pct(r.after_s, r.measured_s):+7.1f}% "
                     f"{RunFit.error_pct(r.held_out_s, r.measured_s):+8.1f}%")
    lines.append(f"{'mean |error|':32} {'':10} {cal.before_pct:7.1f}% {cal.after_pct:7.1f}% {cal.held_out_pct:8.1f}%")
    memory = [r for r in cal.runs if r.measured_gib is not None]
    if memory:  # not fitted: no parameter here moves memory; shown so that a model of memory gone wrong is seen
        lines += ["", f"{'run':32} {'peak GiB':>10} {'predicted':>10} {'error':>8}"]
        lines += [f"{r.name[:32]:32} {r.measured_gib:10.1f} {r.predicted_gib:10.1f} "
                  f"{RunFit.error_pct(r.predicted_gib, r.measured_gib or 1.0):+7.1f}%" for r in memory]
    lines.append("")
    lines.append(f"{'parameter':24} {'preset':>8} {'fitted':>8}  (prior sigma)")
    for p in cal.params:
        lines.append(f"{p.value:24} {cal.before[p]:8.3f} {cal.after[p]:8.3f}  ({BOUNDS[p][2]:g})")
    if not cal.converged:
        lines.append("the fit stopped before converging (200 evaluations); the figures above are where it stopped")
    return "\n".join(lines)

