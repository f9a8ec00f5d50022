"""Published measured training runs as observations: (model, cluster, job, layout, measured step time).

Three data files in benchmarks/data/calibration (copied from the project's calibration folder, sources named in
each record):
- published_runs.yaml: 32 Megatron-LM runs on DGX A100 (Narayanan et al. 2021, Korthikanti et al. 2022);
- published_runs_h100.yaml: 30 runs on DGX H100 from NVIDIA's NeMo 24.07 and Megatron-Bridge performance
  tables, with the architectures and recipe settings the tables leave out in h100_models.yaml;
- torchtitan_h100_2412.yaml: 18 torchtitan runs (Llama 3.1 8B/70B/405B, December 2024) on Meta's Grand Teton
  H100s (96 GB HBM2e at 500 W: the h100-sxm-96gb-500w profile), with the memory they printed.
Every run belongs to the runtime that ran it (`Observation.runtime`: megatron, nemo, deepspeed, torchtitan), which
the calibration reports separately.

Every measurement is turned into seconds per optimizer step in the source's own convention, so that runs of
different sources compare on one scale:
- Narayanan TFLOP/s per GPU counts recomputation: step = 96·B·s·l·h²·(1 + s/6h + V/16lh) / (TFLOP/s · GPUs);
- Korthikanti prints seconds per iteration, or MFU with F = 72·B·s·l·h²·(1 + s/6h + V/12lh);
- NVIDIA's and torchtitan's tables print tokens/s per GPU: step = B·s / (tokens/s/GPU · GPUs).
Knobs a source did not print (Table 1's micro-batch, Table 2's TP/PP split, NVIDIA's recomputation) are
chosen as a planner would: the fastest setting that fits, evaluated once with the committed profile.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from cost_models.compute.flops import model_flops_per_sequence, narayanan_iteration_flops
from cost_models.prediction import Prediction
from cost_models.step import evaluate_layout
from hardware_profiles import load_hardware
from meshcore import AttentionKernel, ClusterSpec, Dtype, JobSpec, Layout, ModelSpec, Runtime
from meshcore.errors import LayoutError
from meshcore.execution import Fp8Recipe
from meshcore.framework import Framework
from planner.api import Problem, make_layout
from planner.inputs.loaders import load_model, model_from_mapping
from planner.inputs.runtimes import with_execution

DATA = Path(__file__).resolve().parent / "data" / "calibration"
A100_RUNS = DATA / "published_runs.yaml"
H100_RUNS = DATA / "published_runs_h100.yaml"
H100_MODELS = DATA / "h100_models.yaml"
TITAN_RUNS = DATA / "torchtitan_h100_2412.yaml"

# Megatron-LM 2021-22 ran unfused attention, did not overlap the gradient all-reduce and used one NIC per
# rank for its rings; DeepSpeed ZeRO-3 (Narayanan Table 2) reduced fp16 gradients and overlapped both ways.
MEGATRON_2021 = Runtime(attention=AttentionKernel.UNFUSED, overlap_grad_reduce=False,
                        overlap_param_gather=False, grad_reduce_bytes=4, multi_rail=False, overlap_p2p_comm=False)
DEEPSPEED_ZERO3_2021 = Runtime(framework=Framework.DEEPSPEED, attention=AttentionKernel.UNFUSED,
                               overlap_grad_reduce=True, overlap_param_gather=True, grad_reduce_bytes=2,
                               multi_rail=False)


@dataclass(frozen=True)
class Observation:
    """One published run with the layout meshplan evaluates for it and its measured step time."""

    run_id: str
    source: str  # the unit left out in leave-one-source-out validation
    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec
    layout: Layout
    measured_step_s: float
    measured_flops_per_gpu: float  # model FLOP/s per GPU implied by the measurement (pairs are ranked on it)
    runtime: str = "megatron"  # the runtime that ran it: megatron, nemo, deepspeed, torchtitan
    measured_memory_gib: float | None = None  # peak memory the source printed (torchtitan's tables)
    hardware: str = "h100-sxm"  # the hardware profile of its GPUs
    consistent: int = 1  # layouts consistent with what the source printed; > 1: the model chose the fastest fitting

    @property
    def moe(self) -> bool:
        return self.model.moe is not None

    @property
    def label(self) -> str:
        lay = self.layout
        extra = (f" ep{lay.ep}" if lay.ep > 1 else "") + (f" cp{lay.cp}" if lay.cp > 1 else "")
        return (f"tp{lay.tp} pp{lay.pp} dp{lay.dp}{extra} v{lay.vpp} mbs{lay.mbs} z{int(lay.zero)} "
                f"{lay.recompute.value}{' sp' if lay.sp else ''} {self.job.dtype.value}")

    def predict(self, cluster: ClusterSpec | None = None, job: JobSpec | None = None) -> Prediction:
        return evaluate_layout(self.model, cluster or self.cluster, job or self.job, self.layout)


@dataclass(frozen=True)
class Skipped:
    run_id: str
    reason: str


def _fastest_fitting(problem: Problem, options: list[dict[str, Any]]) -> tuple[Layout, Prediction]:
    """The fastest layout among `options` that fits (or, if none fits, the fastest)."""
    best: tuple[Layout, Prediction] | None = None
    for knobs in options:
        try:
            layout = make_layout(problem, **knobs)
        except LayoutError:
            continue
        pred = evaluate_layout(problem.model, problem.cluster, problem.job, layout)
        if best is None or (pred.fits, -pred.step_time_s) > (best[1].fits, -best[1].step_time_s):
            best = (layout, pred)
    if best is None:
        raise LayoutError(f"no valid layout among {options}")
    return best


# ---- A100: Narayanan et al. 2021, Korthikanti et al. 2022 -------------------------------------------------

def _a100_model(rec: dict[str, Any]) -> ModelSpec:
    m = rec["model"]
    h = m["hidden_size"]
    return model_from_mapping({
        "name": m["name"], "num_layers": m["num_layers"], "hidden_size": h,
        "ffn_hidden_size": m["ffn_hidden_size"] or 4 * h, "num_attention_heads": m["num_attention_heads"],
        "vocab_size": m["vocab_size"], "gated_mlp": False, "tied_embeddings": True, "norm": "layernorm",
        "linear_bias": True, "learned_positions": m["seq_length"], "dropout": True,
    }, rec["id"])


def _a100_options(rec: dict[str, Any], gpus: int) -> list[dict[str, Any]]:
    """Layouts consistent with what the source printed: Table 1's micro-batch is enumerated; Table 2's PTD-P
    rows print only the model-parallel size (TP 8 = one DGX node, PP the rest); interleaving only where printed
    (it is opt-in in Megatron-LM)."""
    par, batch = rec["parallel"], rec["batch"]
    zero = par.get("zero_stage") or 0
    tp = par["tp"] or (1 if zero == 3 else 8)
    pp = par["pp"] or gpus // (par["dp"] * tp)
    recompute = par["recompute"] if par["recompute"] in ("full", "selective", "none") else "full"
    mbs_options = [batch["micro_batch_size"]] if batch["micro_batch_size"] else [1, 2, 4, 8]
    return [dict(tp=tp, pp=pp, vpp=par.get("vpp") or 1, mbs=b, sp=bool(par.get("sp")), zero=zero,
                 recompute=recompute) for b in mbs_options]


def _korthikanti_model_flops(batch: int, s: int, layers: int, h: int, vocab: int) -> float:
    """Model FLOPs per iteration as Korthikanti et al. 2022 count them for MFU (section 6.3)."""
    return 72.0 * batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (12 * layers * h))


def _a100_measured_step(rec: dict[str, Any]) -> float:
    m, res, gpus = rec["model"], rec["result"], rec["hardware"]["num_gpus"]
    b, s, layers, h, v = (rec["batch"]["global_batch_size_seqs"], m["seq_length"], m["num_layers"],
                          m["hidden_size"], m["vocab_size"])
    if res.get("tflops_per_gpu"):
        return narayanan_iteration_flops(b, s, layers, h, v) / (float(res["tflops_per_gpu"]) * 1e12 * gpus)
    if res.get("seconds_per_iteration"):
        return float(res["seconds_per_iteration"])
    peak = 312e12
    return _korthikanti_model_flops(b, s, layers, h, v) / (float(res["mfu_pct"]) / 100 * peak * gpus)


def _a100_source(rec: dict[str, Any]) -> str:
    rid = rec["id"]
    if rid.startswith("narayanan2021_t1"):
        return "narayanan2021-table1"
    if rid.startswith("narayanan2021_t2"):
        return "narayanan2021-table2"
    return "korthikanti2022"


def a100_observations(path: Path = A100_RUNS, hardware: str = "a100-80gb") -> list[Observation]:
    out = []
    for rec in yaml.safe_load(path.read_text()):
        gpus = rec["hardware"]["num_gpus"]
        model = _a100_model(rec)
        runtime = DEEPSPEED_ZERO3_2021 if rec["parallel"].get("zero_stage") == 3 else MEGATRON_2021
        job = JobSpec(seq_len=rec["model"]["seq_length"], global_batch=rec["batch"]["global_batch_size_seqs"],
                      runtime=runtime)
        problem = Problem(model, load_hardware(hardware, gpus), job)
        options = _a100_options(rec, gpus)
        layout, _ = _fastest_fitting(problem, options)
        step = _a100_measured_step(rec)
        out.append(Observation(rec["id"], _a100_source(rec), model, problem.cluster, job, layout, step,
                               _model_flops(model, job) / step / gpus, runtime=runtime.framework.value,
                               hardware=hardware, consistent=len(options)))
    return out


def _model_flops(model: ModelSpec, job: JobSpec) -> float:
    return model_flops_per_sequence(model, job.seq_len) * job.global_batch


# ---- H100: NVIDIA NeMo 24.07 and Megatron-Bridge tables ---------------------------------------------------

def _h100_source(rec: dict[str, Any]) -> str:
    rid = rec["id"]
    if rid.startswith("nemo2407"):
        return "nemo-24.07"
    return "megatron-bridge-" + rid.split("_")[1]


def _h100_dtype(rec: dict[str, Any]) -> Dtype:
    return Dtype.BF16 if "BF16" in str(rec.get("precision", "")).upper() else Dtype.FP8


def _recompute_options(recipe: str | list[str] | None) -> list[dict[str, Any]]:
    """Recomputation of a run: the recipe's when h100_models.yaml names it (a list is --recompute-modules),
    else none, selective and full, of which the caller takes the fastest that fits."""
    if recipe is None:
        return [dict(recompute=rc) for rc in ("none", "selective", "full")]
    if isinstance(recipe, list):
        return [dict(recompute="selective", recompute_modules=",".join(recipe))]
    return [dict(recompute=recipe)]


def _h100_options(rec: dict[str, Any], gpus: int, recipe: str | list[str] | None = None) -> list[dict[str, Any]]:
    """The printed layout; NeMo/Megatron-Bridge recipes run SP with TP > 1 and the distributed optimizer
    (ZeRO-1), or Megatron-FSDP (ZeRO-3) where the table's FSDP column says so. Recomputation is not printed:
    it is the recipe's where known (`_recompute_options`)."""
    par, batch = rec["parallel"], rec["batch"]
    fsdp = par.get("fsdp")
    zero = 3 if (fsdp and fsdp is not True and int(fsdp) > 0) or fsdp is True else 1
    vpp = par.get("vpp") or 1
    return [dict(tp=par["tp"], pp=par["pp"], cp=par.get("cp") or 1, vpp=vpp, mbs=batch["micro_batch_size"],
                 zero=zero, ep=par.get("ep") or 1, **rc) for rc in _recompute_options(recipe)]


def h100_observations(path: Path = H100_RUNS, models: Path = H100_MODELS,
                      hardware: str = "h100-sxm") -> tuple[list[Observation], list[Skipped]]:
    table = yaml.safe_load(models.read_text())
    out: list[Observation] = []
    skipped: list[Skipped] = []
    for rec in yaml.safe_load(path.read_text()):
        name = rec["model"]["name"]
        if name in table["unsupported"]:
            skipped.append(Skipped(rec["id"], table["unsupported"][name]))
            continue
        entry = table["models"][name]
        model = load_model(entry["preset"]) if "preset" in entry else model_from_mapping(entry["model"], name)
        gpus = rec["hardware"]["num_gpus"]
        source = _h100_source(rec)
        shared = table.get("sources", {})
        switches: dict[str, Any] = {}
        for prefix in sorted((k for k in shared if source.startswith(k)), key=len):
            switches.update(shared[prefix])
        switches.update(table["runs"].get(rec["id"], {}))
        runtime = Runtime(grad_reduce_bytes=2 if switches.get("grad_bf16", False) else 4,
                          tp_comm_overlap=switches.get("tp_overlap", False),
                          fp8_param_gather=switches.get("fp8_param_gather", False),
                          overlap_p2p_comm=switches.get("p2p_overlap", True),
                          moe_comm_overlap=switches.get("moe_overlap", False),
                          moe_dedup_dispatch=switches.get("dedup", False),
                          moe_capacity_factor=switches.get("capacity"))
        job = JobSpec(seq_len=rec["model"]["seq_length"], global_batch=rec["batch"]["global_batch_size_seqs"],
                      dtype=_h100_dtype(rec), runtime=runtime)
        problem = Problem(model, load_hardware(hardware, gpus), job)
        try:
            options = _h100_options(rec, gpus, switches.get("recompute"))
            layout, _ = _fastest_fitting(problem, options)
        except LayoutError as exc:
            skipped.append(Skipped(rec["id"], str(exc)))
            continue
        tokens = float(rec["result"]["tokens_per_sec_per_gpu"])
        step = job.tokens_per_step / (tokens * gpus)
        out.append(Observation(rec["id"], source, model, problem.cluster, job, layout, step,
                               _model_flops(model, job) / step / gpus, runtime="nemo", hardware=hardware,
                               consistent=len(options)))
    return out, skipped


# ---- H100 (Grand Teton, 500 W): torchtitan's December 2024 tables ----------------------------------------

def titan_runtime(rec: dict[str, Any]) -> Runtime:
    """How torchtitan ran a record (torchtitan 9dec370, the tables' build): FSDP2 reducing in fp32
    (training.mixed_precision_reduce float32), async TP where the table says so, the record's torch.compile, and
    with Float8 (torchao tensorwise dynamic scaling) its FSDP float8 all-gather, as docs/float8.md of that commit
    launches it (--float8.enable_fsdp_float8_all_gather) and train_configs/llama3_405b.toml sets it."""
    fp8 = rec["float8"] is not None
    return with_execution(Runtime(framework=Framework.TORCHTITAN, grad_reduce_bytes=4,
                                  tp_comm_overlap=bool(rec["async_tp"]), fp8_param_gather=fp8,
                                  compile=bool(rec["torch_compile"]),
                                  fp8_recipe=Fp8Recipe(rec["float8"]) if fp8 else None))


def titan_observations(path: Path = TITAN_RUNS, hardware: str = "h100-sxm-96gb-500w") -> list[Observation]:
    """torchtitan's runs as printed: FSDP over the fsdp·cp ranks (ZeRO-3; torchtitan shards over dp_shard x cp),
    TP with sequence-parallel norms, the printed schedule, micro-batch and activation checkpointing ('selective'
    is torchtitan's per-op policy). Grouped by table for leave-one-source-out: each table is its own experiment."""
    out = []
    for rec in yaml.safe_load(path.read_text()):
        gpus = rec["gpus"]
        model = load_model(rec["model"])
        job = JobSpec(seq_len=rec["seq_len"], global_batch=rec["global_batch"],
                      dtype=Dtype.FP8 if rec["float8"] else Dtype.BF16, runtime=titan_runtime(rec))
        problem = Problem(model, load_hardware(hardware, gpus), job)
        layout = make_layout(problem, tp=rec["tp"], pp=rec["pp"], cp=rec["cp"], vpp=rec["vpp"], mbs=rec["mbs"],
                             zero=3, recompute=rec["ac"], schedule=rec["schedule"])
        step = float(rec["measured_step_s"])
        table = str(rec["source"]["table"]).lower().replace(" ", "")
        out.append(Observation(rec["id"], f"torchtitan-2412-{table}", model, problem.cluster, job, layout, step,
                               _model_flops(model, job) / step / gpus, runtime="torchtitan",
                               measured_memory_gib=float(rec["measured"]["memory_gib"]), hardware=hardware))
    return out


def all_observations() -> tuple[list[Observation], list[Skipped]]:
    h100, skipped = h100_observations()
    return a100_observations() + h100 + titan_observations(), skipped


def rate_pairs(observations: list[Observation], min_gap: float = 0.05) -> Iterator[tuple[Observation, Observation]]:
    """Pairs of runs whose measured model FLOP rates per GPU differ by at least `min_gap` (relative)."""
    for i, a in enumerate(observations):
        for b in observations[i + 1:]:
            hi, lo = max(a.measured_flops_per_gpu, b.measured_flops_per_gpu), min(
                a.measured_flops_per_gpu, b.measured_flops_per_gpu)
            if hi >= lo * (1 + min_gap):
                yield a, b


def contradicted(observations: list[Observation], factor: float = 1.5) -> dict[str, tuple[str, float]]:
    """Runs another run contradicts: the same model, GPUs, layout and job (sequence, batch, precision; the
    runtime's switches may differ: they are the releases' software, what the rule attributes the gap to) measured
    at least `factor` times as fast or slow. No layout model can price both; the later-listed run maps to (the
    earlier one, its step time over the earlier's). The data cannot say which one is off, so callers report
    figures with and without it rather than drop it."""
    out: dict[str, tuple[str, float]] = {}
    for i, a in enumerate(observations):
        for b in observations[i + 1:]:
            same = (a.model == b.model and a.cluster == b.cluster and a.layout == b.layout
                    and replace(a.job, runtime=b.job.runtime) == b.job)
            ratio = b.measured_step_s / a.measured_step_s
            if same and max(ratio, 1 / ratio) >= factor:
                out[b.run_id] = (a.run_id, ratio)
    return out
