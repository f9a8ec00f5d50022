"""`meshplan evaluate`, `plan`, `emit` and `explain`: parse the flags, call planner.api, print."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshcore import (
    DEFAULT_SCHEDULE,
    AttentionKernel,
    Dtype,
    Recompute,
    Schedule,
)
from meshcore import Target as EmitTarget
from meshcore.checks import (
    MAX_GPUS,
    MAX_WORKERS,
    TIME_LIMIT_S,
)
from meshcore.errors import InputError
from meshcore.framework import DEFAULT_FRAMEWORK, Framework
from planner.commands.chains import chain_table, no_chain_launcher, print_chain
from planner.commands.common import (
    Attention,
    CapacityFactor,
    CommOverlap,
    CompileOpt,
    DedupDispatch,
    DtypeOpt,
    Fp8RecipeOpt,
    GlobalBatch,
    GlobalBatchTokens,
    GpusPerNode,
    InterNode,
    LoadImbalance,
    LoraRank,
    MemoryGib,
    OffloadOpt,
    PackedDocLen,
    Progress,
    RecomputeModules,
    RuntimeOpt,
    SeqLen,
    app,
    check,
    degrees,
    echo_prediction,
    global_batch_of,
    output_path,
    png_needs_matplotlib,
    run,
    runtime_of,
)
from planner.search.ilp import Solver

if TYPE_CHECKING:
    from planner.search.space import SearchSpec

# the choices of --schedule, listed in its help: as typer's [a|b|...] metavar they overflow 80 columns
SCHEDULE_NAMES = ", ".join(s.value for s in Schedule)


@app.command()
def evaluate(
    plan_arg: Annotated[Path | None, typer.Argument(metavar="[PLAN]", show_default=False,
                                                    help="A saved plan file to re-predict (the same as --plan).")
                        ] = None,
    model: Annotated[str | None, typer.Option(help="Preset name, model YAML or Hugging Face config.json.")] = None,
    hardware: Annotated[str | None, typer.Option(help="Hardware preset or profile YAML (with --plan: re-predict "
                                                       "the plan on this hardware).")] = None,
    gpus: Annotated[int | None, typer.Option(help="Total number of GPUs.")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Sequence length in tokens.")] = None,
    plan_file: Annotated[Path | None, typer.Option("--plan", help="Re-predict a saved plan file.")] = None,
    global_batch: GlobalBatch = None,
    global_batch_tokens: GlobalBatchTokens = None,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel degree.")] = 1,
    cp: Annotated[int, typer.Option(help="Context-parallel degree.")] = 1,
    vpp: Annotated[int, typer.Option(help="Virtual pipeline stages (model chunks) per rank.")] = 1,
    ep: Annotated[int, typer.Option(help="Expert-parallel degree (MoE models).")] = 1,
    etp: Annotated[int | None, typer.Option(help="Expert tensor-parallel degree (MoE models; default 1).")] = None,
    mbs: Annotated[int, typer.Option(help="Micro-batch size in sequences.")] = 1,
    recompute: Annotated[Recompute, typer.Option(help="Activation recomputation.")] = Recompute.NONE,
    recompute_modules: RecomputeModules = None,
    offload: OffloadOpt = None,
    lora_rank: LoraRank = 0,
    packed_doc_len: PackedDocLen = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help="Sequence parallelism (default: tp > 1).")] = None,
    zero: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage (1 = distributed optimizer).")] = 0,
    dp_replicate: Annotated[int, typer.Option(help="HSDP: the replicate factor of dp (ZeRO shards over cp·dp / this "
                                                   "many ranks, all-reduced over this many replicas; 1: none).")] = 1,
    schedule: Annotated[Schedule | None, typer.Option(metavar="SCHEDULE", help=(
        f"Pipeline schedule: {SCHEDULE_NAMES} (default: 1f1b, interleaved-1f1b with --vpp > 1)."))] = None,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    moe_capacity_factor: CapacityFactor = None,
    moe_load_imbalance: LoadImbalance = 1.0,
    moe_comm_overlap: CommOverlap = False,
    moe_dedup_dispatch: DedupDispatch = False,
    compile_blocks: CompileOpt = None,
    fp8_recipe: Fp8RecipeOpt = None,
    gpus_per_node: GpusPerNode = None,
    inter_node_gbps: InterNode = None,
    memory_gib: MemoryGib = None,
    runtime_name: RuntimeOpt = DEFAULT_FRAMEWORK,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict step time, throughput, MFU and per-GPU memory of one layout (given by flags or --plan)."""
    from hardware_profiles import HardwareOverrides
    from planner.api import evaluate_plan_file, make_layout, resolve

    def action() -> None:
        from cost_models.step import evaluate_layout

        overrides = HardwareOverrides(gpus_per_node, inter_node_gbps, memory_gib)
        degrees(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, dp_replicate=dp_replicate)
        if plan_arg is not None and plan_file is not None and plan_arg != plan_file:
            raise InputError(f"give the plan file once: {plan_arg} and --plan {plan_file} differ")
        saved = plan_arg or plan_file
        if saved is not None:
            problem, layout, pred = evaluate_plan_file(saved, hardware, overrides)
            echo_prediction(problem.model, problem.cluster, problem.job, layout, pred, as_json)
            return
        if model is None or hardware is None or gpus is None or seq_len is None:
            raise InputError("give --model, --hardware, --gpus and --seq-len (or a plan file: evaluate PLAN)")
        check({"--gpus": (gpus, 1, MAX_GPUS)})
        batch = global_batch_of(seq_len, global_batch, global_batch_tokens)
        problem = resolve(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=batch, dtype=dtype,
                          runtime=runtime_of(attention, moe_capacity_factor, moe_load_imbalance, moe_comm_overlap,
                                             moe_dedup_dispatch, runtime_name, compile_blocks, fp8_recipe),
                          overrides=overrides, lora_rank=lora_rank, packed_doc_lens=packed_doc_len or "")
        layout = make_layout(problem, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, sp=sp, zero=zero,
                             recompute=recompute, schedule=schedule, ep=ep, etp=etp,
                             recompute_modules=recompute_modules, offload=offload, dp_replicate=dp_replicate)
        pred = evaluate_layout(problem.model, problem.cluster, problem.job, layout)
        echo_prediction(problem.model, problem.cluster, problem.job, layout, pred, as_json)

    run(action)


@app.command()
def plan(
    seq_len: SeqLen,
    hardware: Annotated[str | None, typer.Option(help="Hardware preset or hardware-profile YAML.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Total number of GPUs.")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster file: node groups of different hardware (instead "
                                                      "of --hardware and --gpus).")] = None,
    model: Annotated[str | None, typer.Option(help="Preset name, model YAML or Hugging Face config.json "
                                                   "(optional with --costs).")] = None,
    costs: Annotated[Path | None, typer.Option(help="Cost table (meshplan profile layers) replacing the "
                                                    "analytical compute times.")] = None,
    global_batch: GlobalBatch = None,
    global_batch_tokens: GlobalBatchTokens = None,
    out: Annotated[Path | None, typer.Option(parser=output_path, help="Write the plan here (.yaml, or .json).")] = None,
    top_k: Annotated[int, typer.Option(min=1, help="Alternatives to keep and show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    solver: Annotated[Solver, typer.Option(help="Stage-split solver: DP, or the ILP (CP-SAT, HiGHS).")] = Solver.DP,
    time_limit: Annotated[float, typer.Option(help="Time limit per ILP solve, seconds.")] = 10.0,
    tp: Annotated[int | None, typer.Option(help="Pin tensor parallelism.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pin pipeline parallelism.")] = None,
    cp: Annotated[int | None, typer.Option(help="Pin context parallelism.")] = None,
    vpp: Annotated[int | None, typer.Option(help="Pin virtual stages per rank.")] = None,
    ep: Annotated[int | None, typer.Option(help="Pin expert parallelism (MoE models).")] = None,
    etp: Annotated[int | None, typer.Option(help="Pin expert tensor parallelism (MoE models).")] = None,
    mbs: Annotated[int | None, typer.Option(help="Pin the micro-batch size.")] = None,
    zero: Annotated[int | None, typer.Option(min=0, max=3, help="Pin the ZeRO stage.")] = None,
    dp_replicate: Annotated[int | None, typer.Option(min=1, help="Pin HSDP's replicate factor (ZeRO/FSDP shards "
                                                                  "over cp·dp / this many ranks; 1: over all). Free: "
                                                                  "1 and shard groups of 1, 4, 16, ... nodes where "
                                                                  "the runtime runs HSDP.")] = None,
    recompute: Annotated[Recompute | None, typer.Option(help="Pin the recomputation granularity.")] = None,
    recompute_modules: RecomputeModules = None,
    offload: OffloadOpt = None,
    lora_rank: LoraRank = 0,
    packed_doc_len: PackedDocLen = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help="Pin sequence parallelism.")] = None,
    schedule: Annotated[Schedule | None, typer.Option(metavar="SCHEDULE", help=(
        f"Pin the pipeline schedule: {SCHEDULE_NAMES}."))] = None,
    runtime_name: RuntimeOpt = DEFAULT_FRAMEWORK,
    launcher: Annotated[EmitTarget | None, typer.Option(help="Plan only what this launcher configuration can "
                                                              "express (its runtime's space, narrowed; e.g. "
                                                              "torchtitan-cli: even splits).")] = None,
    max_tp: Annotated[int | None, typer.Option(help="Largest TP degree (default: the scale-up domain).")] = None,
    max_mbs: Annotated[int, typer.Option(min=1, help="Largest micro-batch size.")] = 8,
    no_cp: Annotated[bool, typer.Option("--no-cp", help="Switch context parallelism off.")] = False,
    no_partial_recompute: Annotated[bool, typer.Option("--no-partial-recompute",
                                                       help="No per-stage counts of fully recomputed layers.")] = False,
    emit_target: Annotated[EmitTarget | None, typer.Option("--emit", help="Also print a launcher config.")] = None,
    emit_out: Annotated[Path | None, typer.Option(parser=output_path, help="Write the launcher config of --emit "
                                                                           "(default: the runtime's) to this file "
                                                                           "instead of standard output.")] = None,
    even_split: Annotated[bool, typer.Option("--even-split", help="Keep Megatron-LM's even layer split (no solved "
                                                                   "split, no per-stage recomputation).")] = False,
    workers: Annotated[int, typer.Option(help="Processes that search a large space, split by TP degree and sharing "
                                              "their best plans so far (default 1; README, Search speed).")] = 1,
    per_layer: Annotated[bool, typer.Option("--per-layer", help="Chain tables: choose each layer's TP degree and "
                                                               "recomputation (no launcher runs such plans).")] = False,
    record_timing: Annotated[bool, typer.Option("--record-timing",
                                                help="Write the search time into the plan (the file then differs "
                                                     "between runs).")] = False,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    moe_capacity_factor: CapacityFactor = None,
    moe_load_imbalance: LoadImbalance = 1.0,
    moe_comm_overlap: CommOverlap = False,
    moe_dedup_dispatch: DedupDispatch = False,
    compile_blocks: CompileOpt = None,
    fp8_recipe: Fp8RecipeOpt = None,
    gpus_per_node: GpusPerNode = None,
    inter_node_gbps: InterNode = None,
    memory_gib: MemoryGib = None,
) -> None:
    """Search for the fastest layout that fits; print it with the top-k alternatives, write a plan file."""
    from hardware_profiles import HardwareOverrides
    from planner.api import cost_table_warning, model_and_costs, plan_chain_table, restricted_spec
    from planner.api import plan as run_plan
    from planner.commands.hetero import plan_on_cluster, refuse_with_cluster
    from planner.commands.planout import show_plan
    from planner.search.space import MAX_TOP_K

    def action() -> None:
        check({"--gpus": (gpus, 1, MAX_GPUS), "--top-k": (top_k, 1, MAX_TOP_K)},
               {"--time-limit": (time_limit, *TIME_LIMIT_S)})
        check({"--workers": (workers, 1, MAX_WORKERS)})
        degrees(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, max_tp=max_tp, max_mbs=max_mbs)
        batch = global_batch_of(seq_len, global_batch, global_batch_tokens)
        if cluster is not None:
            refuse_with_cluster(cluster_conflicts(
                hardware=hardware, gpus=gpus, costs=costs, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, schedule=schedule,
                offload=offload, recompute_modules=recompute_modules, sp=sp, launcher=launcher, solver=solver,
                even_split=even_split, lora_rank=lora_rank, emit_out=emit_out, packed_doc_len=packed_doc_len,
                overrides=(gpus_per_node, inter_node_gbps, memory_gib)))
            plan_on_cluster(cluster, model, seq_len, batch, dtype, runtime_of(
                attention, moe_capacity_factor, moe_load_imbalance, moe_comm_overlap, moe_dedup_dispatch),
                tp=tp, mbs=mbs, zero=zero, recompute=recompute, max_tp=max_tp, max_mbs=min(max_mbs, 16), top_k=top_k,
                partial=not no_partial_recompute, out=out, as_json=as_json, emit_target=emit_target,
                record_timing=record_timing)
            return
        if hardware is None or gpus is None:
            raise InputError("give --hardware and --gpus, or --cluster FILE")
        overrides = HardwareOverrides(gpus_per_node, inter_node_gbps, memory_gib)
        if costs is not None and model is None and chain_table(costs):
            if emit_target is not None or emit_out is not None or launcher is not None:
                raise InputError(no_chain_launcher(per_layer))
            with Progress("planning per-layer strategies" if per_layer else "planning the chain") as progress:
                chain = plan_chain_table(costs, hardware, gpus, batch, overrides, top_k, per_layer, progress.update)
            print_chain(chain, out, as_json)
            return
        if per_layer:
            raise InputError("--per-layer plans chain tables (--costs with kinds other than embedding, decoder, "
                             "lm_head); transformer plans take one TP degree and recompute setting for every layer")
        runtime = runtime_of(attention, moe_capacity_factor, moe_load_imbalance, moe_comm_overlap,
                             moe_dedup_dispatch, launcher_framework(launcher, runtime_name), compile_blocks, fp8_recipe)
        model_spec, runtime, limits = model_and_costs(model, costs, seq_len, runtime)
        if (warning := cost_table_warning(runtime, hardware)) is not None:
            typer.echo(warning, err=True)
        spec = restricted_spec(search_spec(
            tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, zero=zero, dp_replicate=dp_replicate,
            recompute=recompute, recompute_modules=recompute_modules, offload=offload, sp=sp, schedule=schedule,
            max_tp=max_tp, max_mbs=max_mbs, no_cp=no_cp, top_k=top_k, no_partial_recompute=no_partial_recompute,
            even_split=even_split), limits, launcher)
        label = "searching layouts" if workers == 1 else f"searching layouts in {workers} processes"
        with Progress(label, exact=False) as progress:
            if workers > 1:  # the parts report nothing while they run
                progress.silent()
            result = run_plan(model_spec, hardware, gpus=gpus, seq_len=seq_len, global_batch=batch, dtype=dtype,
                              runtime=runtime, overrides=overrides, lora_rank=lora_rank,
                              packed_doc_lens=packed_doc_len or "", spec=spec, solver=solver,
                              time_limit_s=time_limit, progress=progress.update, workers=workers)
        target = emit_target or (default_target(runtime.framework) if emit_out is not None else None)
        show_plan(result, out, as_json, record_timing, target, emit_out, workers)

    run(action)


def cluster_conflicts(*, hardware: str | None, gpus: int | None, costs: Path | None, pp: int | None, cp: int | None,
                      vpp: int | None, ep: int | None, etp: int | None, schedule: Schedule | None,
                      offload: str | None, recompute_modules: str | None, sp: bool | None,
                      launcher: EmitTarget | None, solver: Solver, even_split: bool, lora_rank: int,
                      emit_out: Path | None, packed_doc_len: str | None,
                      overrides: tuple[object, ...]) -> dict[str, bool]:
    """flag -> whether it is given: the flags of `meshplan plan` that do not apply with --cluster."""
    return {"--hardware": hardware is not None, "--gpus": gpus is not None, "--costs": costs is not None,
            "--pp": pp is not None, "--cp": cp not in (None, 1), "--vpp": vpp not in (None, 1),
            "--ep": ep not in (None, 1), "--etp": etp not in (None, 1),
            "--schedule": schedule not in (None, DEFAULT_SCHEDULE), "--offload": offload is not None,
            "--recompute-modules": recompute_modules is not None, "--sp/--no-sp": sp is not None,
            "--launcher": launcher is not None, "--solver": solver is not Solver.DP, "--even-split": even_split,
            "--lora-rank": lora_rank != 0, "--emit-out": emit_out is not None,
            "--packed-doc-len": packed_doc_len is not None,
            "--gpus-per-node/--inter-node-gbps/--memory-gib": any(x is not None for x in overrides)}


def search_spec(*, tp: int | None, pp: int | None, cp: int | None, vpp: int | None, ep: int | None,
                etp: int | None, mbs: int | None, zero: int | None, dp_replicate: int | None,
                recompute: Recompute | None, recompute_modules: str | None, offload: str | None, sp: bool | None,
                schedule: Schedule | None, max_tp: int | None, max_mbs: int, no_cp: bool, top_k: int,
                no_partial_recompute: bool, even_split: bool) -> SearchSpec:
    """The search space of `meshplan plan`'s flags: the pins, --recompute-modules (selective recomputation of
    those modules), --offload (targets, or "auto": the search chooses), --even-split (no solved split)."""
    from planner.api import offload_choice, recompute_choice
    from planner.search.space import SearchSpec

    rc, modules = (recompute_choice(recompute, recompute_modules) if recompute_modules is not None
                   else (recompute, None))
    auto = offload is not None and offload.strip() == "auto"
    return SearchSpec(
        tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, zero=zero, dp_replicate=dp_replicate, recompute=rc,
        sp=sp, recompute_modules=modules or None, schedule=schedule, max_tp=max_tp, max_mbs=max_mbs, no_cp=no_cp,
        top_k=top_k, partial_recompute=not (no_partial_recompute or even_split), uneven_split=not even_split,
        offload=None if auto or offload is None else offload_choice(offload), offload_auto=auto)


def default_target(framework: Framework) -> EmitTarget:
    """The configuration `emit` writes for a plan of `framework` when --to is not given."""
    from planner.inputs.runtimes import load_runtime

    target = load_runtime(framework).target
    if target is None:
        raise InputError("the plan was made for --runtime any (research mode), which no one launcher runs: give --to "
                         f"({', '.join(t.value for t in EmitTarget)})")
    return target


def launcher_framework(launcher: EmitTarget | None, framework: Framework) -> Framework:
    """The runtime to plan for: `--runtime`, or the runtime of `--launcher`'s configuration when that is given (a
    different explicit --runtime beside it is an error)."""
    if launcher is None:
        return framework
    from planner.outputs.emitters import FRAMEWORK

    implied = FRAMEWORK[launcher]
    if framework not in (implied, DEFAULT_FRAMEWORK):
        raise InputError(f"--launcher {launcher.value} writes a {implied.value} configuration, not {framework.value}: "
                         "give one of --runtime and --launcher")
    return implied


@app.command()
def emit(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan`.")],
    to: Annotated[EmitTarget | None, typer.Option("--to", help="Launcher to write for (default: the configuration of "
                                                              "the plan's runtime).")] = None,
    out: Annotated[Path | None, typer.Option(parser=output_path, help="Write here instead of standard output.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail when the launcher cannot run the plan's layout "
                                                          "instead of writing the best layout it can run.")] = False,
) -> None:
    """Turn a plan into a launcher configuration (Megatron-LM, torchtitan, DeepSpeed, NeMo)."""
    from meshcore.fileio import is_script, write_text_atomic
    from planner.outputs.emitters import emit as emit_config
    from planner.outputs.planread import load_plan

    def action() -> None:
        plan = load_plan(plan_file)
        emitted = emit_config(plan, to or default_target(plan.job.runtime.framework), strict)
        if emitted.note:
            typer.echo(f"note: {emitted.note}", err=True)
        if out is None:
            typer.echo(emitted.text, nl=False)
        else:
            write_text_atomic(out, emitted.text, executable=is_script(emitted.text))

    run(action)


@app.command()
def explain(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan`.")],
    png: Annotated[Path | None, typer.Option(parser=output_path,
                                             help="Write the timeline, memory and breakdown as a PNG.")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", parser=output_path,
                                                  help="Write a self-contained HTML report.")] = None,
    reprice: Annotated[bool, typer.Option("--reprice", help="Show the current cost model's figures instead of the "
                                                            "ones the file stores (a warning says where they "
                                                            "differ).")] = False,
) -> None:
    """Show why a plan is what it is: timeline, memory per stage, breakdown, the binding constraint."""
    from meshcore.fileio import write_bytes_atomic, write_text_atomic
    from planner.outputs.explain import explanation, render_png
    from planner.outputs.explain_html import render_html
    from planner.outputs.planread import load_plan
    from planner.outputs.report import plan_table

    def action() -> None:
        from planner.outputs.inferplan import check_inference_plan, is_inference_plan
        from planner.outputs.planread import read_plan_data
        from planner.workloads.plans import summary

        data, origin = read_plan_data(plan_file)
        if is_inference_plan(data):  # meshplan infer's plans: a text summary
            check_inference_plan(data, origin)
            typer.echo(summary(data))
            return
        plan = load_plan(plan_file, reprice=reprice)
        ex = explanation(plan)
        typer.echo(plan_table(plan))
        typer.echo(f"\n  binding constraint: {ex.binding}")
        typer.echo(f"  {ex.verdict}")
        for c in ex.comparisons:
            typer.echo(f"  alternative {c.rank}: {100 * c.slower_by:+.1f} % ({c.reason})")
        if html_out is not None:
            write_text_atomic(html_out, render_html(ex, str(plan_file)))
            typer.echo(f"report written to {html_out}")
        if png is not None:
            png_needs_matplotlib("the report" + (f" and {html_out}" if html_out is not None else ""))
            write_bytes_atomic(png, render_png(ex))
            typer.echo(f"timeline written to {png}")

    run(action)
