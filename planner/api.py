"""The solver API in a few readable calls: resolve inputs into specs, validate, evaluate.

    import planner
    p = planner.evaluate("llama3-70b", "h100-sxm", gpus=64, seq_len=8192, global_batch=256,
                         tp=8, pp=4, mbs=1, recompute="selective")
    print(p.step_time_s, p.mfu, p.peak_memory_gib)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import UnionType
from typing import TYPE_CHECKING, Any

from cost_models.memory.params import lora_fraction
from cost_models.prediction import Prediction
from cost_models.profile.tables import read_costs
from cost_models.step import evaluate_layout
from hardware_profiles import HardwareOverrides, apply_overrides, load_hardware
from meshcore import (
    WAVE_PLACED,
    AttentionKernel,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    MeasuredCosts,
    ModelSpec,
    Offload,
    Recompute,
    RecomputeModule,
    Runtime,
    Schedule,
    ZeroStage,
    default_schedule,
)
from meshcore.checks import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ_LEN,
    MAX_TIME_LIMIT_S,
    MAX_WORKERS,
    choice,
    flag,
    integer,
    is_integer,
    optional_integer,
    real,
)
from meshcore.cluster import HeteroCluster
from meshcore.errors import InfeasibleError, InputError, LayoutError, UnsupportedModelError
from meshcore.framework import Framework
from meshcore.job import MAX_LORA_RANK, MAX_PACKED_DOCS
from planner.inputs.loaders import load_model
from planner.inputs.runtimes import load_runtime, with_execution
from planner.outputs.plan import Plan
from planner.search.exact import ProgressFn, search
from planner.search.ilp import SolveOptions, Solver
from planner.search.runtime_space import check_layout
from planner.search.space import SearchSpec

if TYPE_CHECKING:  # imported where used: `meshplan plan` starts faster without them
    from planner.outputs.emitters import Target
    from planner.outputs.heteroplan import HeteroPlan
    from planner.search.chain import ChainPlan, ChainTable
    from planner.search.hetero import HeteroSpec


@dataclass(frozen=True)
class Problem:
    """A resolved planning problem: what to train, on what, and how big a step."""

    model: ModelSpec
    cluster: ClusterSpec
    job: JobSpec


_enum = choice  # an enum member from itself or its value, InputError naming the allowed ones


def _instance(value: object, kind: type | UnionType, name: str, what: str) -> None:
    if not isinstance(value, kind):
        raise InputError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")


_RUNTIME_FLAGS = ("overlap_grad_reduce", "overlap_param_gather", "multi_rail", "moe_comm_overlap", "moe_dedup_dispatch",
                  "tp_comm_overlap", "fp8_param_gather", "overlap_p2p_comm", "pinned_offload",
                  "pinned_param_offload")


def _check_runtime(runtime: Runtime) -> None:
    """The fields of a Runtime that it does not check itself (its MoE factors it does): switches are bools, the
    gradient-reduction width 2 or 4 bytes, the kernel an AttentionKernel, a cost table a MeasuredCosts."""
    _instance(runtime, Runtime, "runtime", "a Runtime")
    for name in _RUNTIME_FLAGS:
        flag(getattr(runtime, name), f"runtime.{name}")
    if runtime.grad_reduce_bytes not in (2, 4) or not is_integer(runtime.grad_reduce_bytes):
        raise InputError(f"runtime.grad_reduce_bytes must be 2 (bf16) or 4 (fp32), got {runtime.grad_reduce_bytes!r}")
    if not isinstance(runtime.attention, AttentionKernel):
        raise InputError(f"runtime.attention must be an AttentionKernel ({', '.join(a.value for a in AttentionKernel)})"
                         f", got {runtime.attention!r}")
    if runtime.measured is not None:
        _instance(runtime.measured, MeasuredCosts, "runtime.measured", "a MeasuredCosts (a cost table) or None")


def resolve(model: ModelSpec | str, hardware: ClusterSpec | str, *, gpus: int, seq_len: int,
            global_batch: int, dtype: Dtype | str = Dtype.BF16, runtime: Runtime = Runtime(),
            overrides: HardwareOverrides = HardwareOverrides(), lora_rank: int = 0,
            packed_doc_lens: tuple[int, ...] | str = ()) -> Problem:
    """Turn names/paths into specs (specs pass through unchanged). Every argument is checked for its type and
    range first (meshcore.checks: gpus in [1, MAX_GPUS], seq_len in [1, MAX_SEQ_LEN], global_batch in
    [1, MAX_GLOBAL_BATCH]; bool is not an integer here), with an InputError naming it. `lora_rank` > 0 fine-tunes
    LoRA adapters of that rank on every decoder linear layer over frozen weights
    (cost_models.memory.params.lora_params);
    0 trains every weight. `packed_doc_lens` (a tuple or "512,1024,...") packs documents of those lengths into each
    sequence, each attending only to itself (cost_models/compute/packing.py); empty: one document per sequence."""
    _instance(model, ModelSpec | str, "model", "a preset name, a model file path or a ModelSpec")
    _instance(hardware, ClusterSpec | str, "hardware", "a preset name, a profile path or a ClusterSpec")
    integer(gpus, "gpus", 1, MAX_GPUS)
    integer(seq_len, "seq_len", 1, MAX_SEQ_LEN)
    integer(global_batch, "global_batch", 1, MAX_GLOBAL_BATCH)
    integer(lora_rank, "lora_rank", 0, MAX_LORA_RANK)
    dtype = _enum(Dtype, dtype, "dtype")
    _check_runtime(runtime)
    runtime = with_execution(runtime)
    _instance(overrides, HardwareOverrides, "overrides", "a HardwareOverrides")
    model_spec = model if isinstance(model, ModelSpec) else load_model(model)
    cluster = hardware if isinstance(hardware, ClusterSpec) else load_hardware(hardware, gpus, overrides)
    if cluster.num_gpus != gpus:
        raise InputError(f"cluster has {cluster.num_gpus} GPUs but --gpus is {gpus}")
    share = lora_fraction(model_spec, lora_rank) if lora_rank else 1.0
    job = JobSpec(seq_len=seq_len, global_batch=global_batch, dtype=dtype, runtime=runtime,
                  trainable_fraction=share, lora_rank=lora_rank, packed_doc_lens=doc_lengths(packed_doc_lens, seq_len))
    return Problem(model_spec, cluster, job)


def doc_lengths(value: tuple[int, ...] | str, seq_len: int) -> tuple[int, ...]:
    """Packed document lengths from a tuple or a comma-separated string ("" or "none": not packed), each an integer
    in [1, seq_len], at most MAX_PACKED_DOCS of them; an InputError names what is wrong."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("", "none"):
            return ()
        parts = [p.strip() for p in text.split(",")]
        if not all(p.isdigit() for p in parts):
            raise InputError(f"packed document lengths must be comma-separated positive integers (e.g. 512 or "
                             f"300,900,2000), got {value!r}")
        value = tuple(int(p) for p in parts)
    if not isinstance(value, tuple):
        raise InputError(f"packed_doc_lens must be a tuple of document lengths or a comma-separated string, got "
                         f"{value!r}")
    if len(value) > MAX_PACKED_DOCS:
        raise InputError(f"at most {MAX_PACKED_DOCS} packed document lengths, got {len(value)}")
    for n in value:
        integer(n, "packed document length (tokens, at most the sequence length)", 1, seq_len)
    return value


def recompute_choice(recompute: Recompute | None, modules: frozenset[RecomputeModule] | str | None,
                     ) -> tuple[Recompute, frozenset[RecomputeModule]]:
    """--recompute with --recompute-modules: modules imply selective recomputation and refuse full."""
    if modules is None:
        return recompute or Recompute.NONE, frozenset()
    if not isinstance(modules, str | frozenset | set | tuple | list):
        raise InputError(f"recompute_modules must be a comma-separated string or a set of RecomputeModule, got "
                         f"{modules!r}")
    mods = (RecomputeModule.parse(modules) if isinstance(modules, str)
            else frozenset(_enum(RecomputeModule, m, "recompute_modules entry") for m in modules))
    if recompute is Recompute.FULL:
        raise LayoutError("--recompute-modules needs --recompute selective (it names what selective "
                          "recomputation recomputes), got --recompute full")
    return Recompute.SELECTIVE, mods


def offload_choice(offload: frozenset[Offload] | str | None) -> frozenset[Offload]:
    """--offload: "none", or targets comma-separated ("optimizer,activations"), or a set of Offload."""
    if offload is None:
        return frozenset()
    if isinstance(offload, str):
        return Offload.parse(offload)
    if not isinstance(offload, frozenset | set | tuple | list):
        raise InputError(f"offload must be a comma-separated string or a set of Offload, got {offload!r}")
    return frozenset(_enum(Offload, o, "offload entry") for o in offload)


def make_layout(problem: Problem, *, tp: int = 1, pp: int = 1, cp: int = 1, vpp: int = 1, mbs: int = 1,
                sp: bool | None = None, zero: int | ZeroStage = 0, recompute: Recompute | str = "none",
                schedule: Schedule | str | None = None,
                stage_layers: tuple[int, ...] | None = None, ep: int = 1, etp: int | None = None,
                recompute_modules: frozenset[RecomputeModule] | str | None = None,
                offload: frozenset[Offload] | str | None = None, dp_replicate: int = 1) -> Layout:
    """Build and validate a layout, for the problem's runtime (LayoutError naming what that runtime cannot run); dp
    is what the GPU count leaves after tp·pp·cp, `dp_replicate` its replicate factor (HSDP: ZeRO shards over
    cp·dp/dp_replicate ranks and all-reduces over dp_replicate replicas; 1: none).

    sp defaults to on whenever tp > 1 (Megatron-LM's recommended setting); the schedule to
    interleaved 1F1B when vpp > 1, else 1F1B (zb-v and wave imply vpp 2); etp (MoE models) to 1, each expert whole
    on its rank. Degrees are integers in [1, MAX_GPUS] (InputError naming the argument otherwise)."""
    _instance(problem, Problem, "problem", "a Problem (planner.resolve)")
    gpus = problem.cluster.num_gpus
    for name, value in (("tp", tp), ("pp", pp), ("cp", cp), ("vpp", vpp), ("ep", ep), ("dp_replicate", dp_replicate)):
        integer(value, name, 1, MAX_GPUS)
    integer(mbs, "mbs", 1, MAX_GLOBAL_BATCH)
    optional_integer(etp, "etp", 1, MAX_GPUS)
    if sp is not None:
        flag(sp, "sp")
    if stage_layers is not None and (not isinstance(stage_layers, tuple | list)
                                     or not all(is_integer(n) for n in stage_layers)):
        raise InputError(f"stage_layers must be a tuple of layer counts (integers), got {stage_layers!r}")
    if gpus % (tp * pp * cp):
        raise LayoutError(f"world size {gpus} not divisible by tp {tp} * pp {pp} * cp {cp} = {tp * pp * cp}")
    integer(zero, "zero", 0, 3)
    sched = _enum(Schedule, schedule, "schedule") if schedule is not None else (
        default_schedule(vpp))
    if sched in WAVE_PLACED and vpp == 1:
        vpp = 2  # ZB-V and DualPipeV always run two chunks per rank; a wave without --vpp is one wave
    rc, modules = recompute_choice(_enum(Recompute, recompute, "recompute"), recompute_modules)
    layout = Layout(tp=tp, pp=pp, dp=gpus // (tp * pp * cp), cp=cp, vpp=vpp, mbs=mbs,
                    sp=(tp > 1) if sp is None else sp, zero=ZeroStage(zero),
                    recompute=rc, schedule=sched,
                    stage_layers=None if stage_layers is None else tuple(stage_layers), ep=ep,
                    etp=1 if etp is None else etp, recompute_modules=modules, offload=offload_choice(offload),
                    dp_replicate=dp_replicate)
    layout.validate(problem.model, problem.job, gpus)
    check_layout(layout, problem.model, load_runtime(problem.job.runtime.framework))
    check_model_definition(problem.model, problem.job.runtime.framework, problem.job.seq_len)
    return layout


def evaluate(model: ModelSpec | str, hardware: ClusterSpec | str, *, gpus: int, seq_len: int,
             global_batch: int, tp: int = 1, pp: int = 1, cp: int = 1, vpp: int = 1, mbs: int = 1,
             sp: bool | None = None, zero: int = 0, recompute: Recompute | str = "none",
             dtype: Dtype | str = Dtype.BF16, schedule: Schedule | str | None = None, ep: int = 1,
             etp: int | None = None, runtime: Runtime = Runtime(),
             overrides: HardwareOverrides = HardwareOverrides(),
             recompute_modules: frozenset[RecomputeModule] | str | None = None,
             offload: frozenset[Offload] | str | None = None, lora_rank: int = 0, dp_replicate: int = 1,
             packed_doc_lens: tuple[int, ...] | str = ()) -> Prediction:
    """Predict step time, throughput, MFU and per-GPU memory of one given layout (`dp_replicate` > 1: HSDP,
    see `make_layout`)."""
    problem = resolve(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=global_batch, dtype=dtype,
                      runtime=runtime, overrides=overrides, lora_rank=lora_rank, packed_doc_lens=packed_doc_lens)
    layout = make_layout(problem, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, sp=sp, zero=zero,
                         recompute=recompute, schedule=schedule, ep=ep, etp=etp, recompute_modules=recompute_modules,
                         offload=offload, dp_replicate=dp_replicate)
    return evaluate_layout(problem.model, problem.cluster, problem.job, layout)


def plan(model: ModelSpec | str, hardware: ClusterSpec | str, *, gpus: int, seq_len: int, global_batch: int,
         dtype: Dtype | str = Dtype.BF16, runtime: Runtime = Runtime(),
         overrides: HardwareOverrides = HardwareOverrides(), spec: SearchSpec | None = None,
         solver: Solver | str = Solver.DP, time_limit_s: float = 10.0,
         progress: ProgressFn | None = None, lora_rank: int = 0, workers: int = 1,
         packed_doc_lens: tuple[int, ...] | str = (), check_fit_options: bool = True) -> Plan:
    """Search the layout space for the fastest layout that fits; the best, the top-k alternatives and
    the certificate come back as a Plan (save it with `save_plan`). time_limit_s is finite in
    (0, MAX_TIME_LIMIT_S]. `workers` > 1 splits a large space by TP degree over that many processes
    (planner.search.parallel: the same answer; no progress callbacks then). When nothing fits, the error names the
    memory-freeing options (offload, LoRA) that do fit, each searched (`check_fit_options`,
    planner.search.fit_options)."""
    if spec is not None:
        _instance(spec, SearchSpec, "spec", "a SearchSpec or None")
    solver = _enum(Solver, solver, "solver")
    real(time_limit_s, "time_limit_s", 0.0, MAX_TIME_LIMIT_S)
    if progress is not None and not callable(progress):
        raise InputError(f"progress must be a callable(done, total) or None, got {progress!r}")
    integer(workers, "workers", 1, MAX_WORKERS)
    problem = resolve(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=global_batch, dtype=dtype,
                      runtime=runtime, overrides=overrides, lora_rank=lora_rank, packed_doc_lens=packed_doc_lens)
    check_model_definition(problem.model, problem.job.runtime.framework, problem.job.seq_len)
    try:
        if workers > 1:
            from planner.search.parallel import search_parallel

            result = search_parallel(problem.model, problem.cluster, problem.job, spec, solver,
                                     SolveOptions(time_limit_s=time_limit_s), workers)
        else:
            result = search(problem.model, problem.cluster, problem.job, spec, solver,
                            SolveOptions(time_limit_s=time_limit_s), progress)
    except InfeasibleError as error:
        if not check_fit_options:
            raise
        from planner.search.fit_options import checked_message

        def replan(s: SearchSpec, r: Runtime, rank: int) -> float:
            return plan(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=global_batch, dtype=dtype,
                        runtime=r, overrides=overrides, spec=s, solver=solver, time_limit_s=time_limit_s,
                        lora_rank=rank, packed_doc_lens=packed_doc_lens,
                        check_fit_options=False).best.prediction.step_time_s

        raise InfeasibleError(checked_message(error, spec, runtime, lora_rank, replan)) from None
    return Plan(problem.model, problem.cluster, problem.job, result.best, result.alternatives, result.certificate)


def check_model_definition(model: ModelSpec, framework: Framework, seq_len: int) -> None:
    """UnsupportedModelError when `framework` has no definition of `model` at this sequence length: a learned
    position table shorter than the sequence (Megatron-LM asserts max_position_embeddings >= seq_length, and a
    larger table is another model than the one priced); torchtitan builds only the flavors in its own code
    (planner/outputs/emitters/titan_flavors.py); the others build any decoder from its dimensions."""
    if framework is not Framework.ANY and 0 < model.learned_positions < seq_len:
        raise UnsupportedModelError(
            f"{model.name} has a learned position table of {model.learned_positions} positions, shorter than the "
            f"sequence of {seq_len}: runtimes build the table for the sequence (Megatron-LM needs "
            "--max-position-embeddings >= --seq-length), a larger model than this one; use a sequence of at most "
            f"{model.learned_positions}, or a model YAML with learned_positions >= {seq_len}")
    if framework is Framework.TORCHTITAN:
        from planner.outputs.emitters.titan_flavors import flavor_of

        flavor_of(model)


def model_and_costs(model: str | None, costs: Path | None, seq_len: int,
                     runtime: Runtime) -> tuple[ModelSpec, Runtime, dict[str, Any]]:
    """The model and runtime to plan with; a cost table brings its own model and limits the search to the
    TP degrees and micro-batch sizes it measured, without context parallelism."""
    if costs is None:
        if model is None:
            raise InputError("give --model (a preset, model YAML or config.json) or --costs (a cost table)")
        return load_model(model), runtime, {}
    table_model, measured = read_costs(costs)
    if measured.seq_len != seq_len:
        raise InputError(f"the cost table {costs} was measured at seq_len {measured.seq_len}, not {seq_len}")
    limits = {"tp_choices": measured.tp_degrees(), "mbs_choices": measured.micro_batches(), "no_cp": True}
    return table_model, replace(runtime, measured=measured), limits


def cost_table_warning(runtime: Runtime, hardware: str) -> str | None:
    """A warning when a cost table measured on a CPU is planned for a GPU system: its times are the CPU's, so the
    step time, MFU (near 0 %) and the error band (fitted on GPU runs) do not describe `hardware`."""
    measured = runtime.measured
    if measured is None or not measured.on_cpu:
        return None
    return (f"warning: the cost table {measured.source} was measured on {measured.device}: its layer times are a "
            f"CPU's, so the step time, MFU and error band below do not describe {hardware} (a GPU); profile on the "
            "target GPU (meshplan profile layers --device cuda) for a plan of it")


def restricted_spec(spec: SearchSpec, limits: dict[str, Any], launcher: Target | None = None) -> SearchSpec:
    """`spec` narrowed to what a cost table measured (`limits` from `model_and_costs`: its TP degrees and
    micro-batch sizes, no context parallelism) and to what `launcher` can run."""
    if limits:
        if spec.cp not in (None, 1):
            raise InputError("a cost table is measured on whole sequences: --cp must be 1 with --costs")
        spec = replace(spec, **limits)
    if launcher is None:
        return spec
    from planner.outputs.emitters import for_launcher

    return for_launcher(spec, launcher)


@dataclass(frozen=True)
class ChainPlans:
    """Plans of a chain of profiled layers that is not a transformer stack (`planner.search.chain`)."""

    table: ChainTable
    plans: list[ChainPlan]
    document: dict[str, Any]  # the plan file's contents


def plan_chain_table(costs: Path, hardware: str, gpus: int, global_batch: int,
                     overrides: HardwareOverrides = HardwareOverrides(), top_k: int = 5,
                     per_layer: bool = False, progress: ProgressFn | None = None) -> ChainPlans:
    """Plan a chain table (a CNN or any chain of profiled layers: PP, DP and TP where measured); `per_layer`
    chooses each layer's TP degree and recomputation too (planner.search.layerwise_dp), calling
    `progress(done, total)` as its candidates are planned (units of work: stage frontiers)."""
    from planner.search.chain import chain_plan_dict, plan_chain, read_chain

    table = read_chain(str(costs))
    cluster = load_hardware(hardware, gpus, overrides)
    if per_layer:
        from planner.search.layerwise_dp import plan_layerwise

        plans = plan_layerwise(table, cluster, global_batch, top_k=top_k, progress=progress)
    else:
        plans = plan_chain(table, cluster, global_batch, top_k=top_k)
    return ChainPlans(table, plans, chain_plan_dict(table, plans, str(costs), hardware, gpus, global_batch))


def evaluate_plan_file(path: Path, hardware: str | None = None,
                       overrides: HardwareOverrides = HardwareOverrides()) -> tuple[Problem, Layout, Prediction]:
    """Re-predict a saved plan's layout with the current cost model, on its own hardware (with `overrides`) or on
    `hardware`."""
    from planner.outputs.planread import read_plan

    model, cluster, job, layout = read_plan(path)
    cluster = load_hardware(hardware, cluster.num_gpus, overrides) if hardware else apply_overrides(cluster, overrides)
    layout.validate(model, job, cluster.num_gpus)
    check_layout(layout, model, load_runtime(job.runtime.framework))
    return Problem(model, cluster, job), layout, evaluate_layout(model, cluster, job, layout)


def plan_cluster(model: ModelSpec | str, cluster: HeteroCluster | str | Path, *, seq_len: int, global_batch: int,
                 dtype: Dtype | str = Dtype.BF16, runtime: Runtime = Runtime(),
                 spec: HeteroSpec | None = None) -> HeteroPlan | Plan:
    """Plan on a cluster of node groups (a cluster file or a HeteroCluster). Groups of one hardware that no link
    names merge into one pool first (`HeteroCluster.merged`); a cluster that is then one group is planned by the
    homogeneous search (`plan`, with `spec`'s pins of tp, mbs, zero, recompute and top_k), else by the search
    across groups (planner.search.hetero)."""
    from planner.inputs.cluster_file import load_cluster
    from planner.outputs.heteroplan import HeteroPlan
    from planner.search.hetero import HeteroSpec, search_hetero

    _instance(cluster, HeteroCluster | str | Path, "cluster", "a cluster file path or a HeteroCluster")
    if spec is not None:
        _instance(spec, HeteroSpec, "spec", "a HeteroSpec or None")
    spec = spec or HeteroSpec()
    hetero = cluster if isinstance(cluster, HeteroCluster) else load_cluster(cluster)
    merged = hetero.merged()
    if len(merged.groups) == 1:
        group = merged.groups[0]
        pins = SearchSpec(tp=spec.tp, mbs=spec.mbs, zero=None if spec.zero is None else int(spec.zero),
                          recompute=spec.recompute, max_tp=spec.max_tp, max_mbs=spec.max_mbs, top_k=spec.top_k,
                          partial_recompute=spec.partial_recompute)
        return plan(model, group.cluster, gpus=group.num_gpus, seq_len=seq_len, global_batch=global_batch,
                    dtype=dtype, runtime=runtime, spec=pins)
    problem = resolve(model, merged.groups[0].cluster, gpus=merged.groups[0].num_gpus, seq_len=seq_len,
                      global_batch=global_batch, dtype=dtype, runtime=runtime)
    return HeteroPlan(problem.model, merged, problem.job, search_hetero(problem.model, merged, problem.job, spec))
