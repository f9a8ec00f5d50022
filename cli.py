"""The `meshplan` command line: parse, call the planner API, print. Errors become one line on stderr
and an exit code (2: bad input or a layout that breaks a rule; 3: nothing fits)."""

from __future__ import annotations

import os
import sys


def _interrupted(exc: BaseException | None) -> bool:
    """Whether Ctrl-C caused `exc` (an extension module's initialisation turns it into an ImportError)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


try:  # Ctrl-C while the modules load (half a second: pandas, numpy, ortools) exits 130 like one during the work
    import dataclasses
    import importlib.util
    import json
    import time
    from collections.abc import Callable
    from pathlib import Path
    from typing import Annotated, Any, TypeVar

    import typer

    from cost_models.step import Prediction
    from planner.checks import (
        MAX_GLOBAL_BATCH,
        MAX_GPUS,
        MAX_SEQ_LEN,
        MAX_TIME_LIMIT_S,
        MAX_WORKERS,
        optional_integer,
        real,
    )
    from planner.emitters import Target as EmitTarget
    from planner.errors import InputError, MeshplanError
    from planner.ilp import Solver
    from planner.specs import (
        AttentionKernel,
        ClusterSpec,
        Dtype,
        JobSpec,
        Layout,
        ModelSpec,
        Recompute,
        Runtime,
        Schedule,
    )
    from planner.sweep import Varied
except (KeyboardInterrupt, ImportError) as exc:
    if not _interrupted(exc):
        raise
    sys.stderr.write("\n")
    raise SystemExit(130) from None

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="meshplan: plan and predict parallel layouts for large-model training.")
T = TypeVar("T")


def _run(action: Callable[[], T]) -> T:
    """Run `action`; turn meshplan's errors into a one-line message and their exit code."""
    try:
        return action()
    except MeshplanError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def _needs(module: str, extra: str, what: str) -> None:
    """Refuse, before any work, a command whose optional dependency is not installed (other import errors
    surface as they are)."""
    if importlib.util.find_spec(module) is None:
        raise InputError(f"{what} needs {module}: pip install -e '.[{extra}]'")


def _check(ints: dict[str, tuple[int | None, int, int]] | None = None,
           reals: dict[str, tuple[float | None, float, float]] | None = None) -> None:
    """Range checks of command-line numbers before any work: {flag: (value, low, high)}; None is not given."""
    for name, (value, low, high) in (ints or {}).items():
        optional_integer(value, name, low, high)
    for name, (number, low_f, high_f) in (reals or {}).items():
        if number is not None:
            real(number, name, low_f, high_f)


def _global_batch(seq_len: int, global_batch: int | None, global_batch_tokens: int | None) -> int:
    _check({"--seq-len": (seq_len, 1, MAX_SEQ_LEN), "--global-batch": (global_batch, 1, MAX_GLOBAL_BATCH),
            "--global-batch-tokens": (global_batch_tokens, 1, MAX_GLOBAL_BATCH * MAX_SEQ_LEN)})
    if (global_batch is None) == (global_batch_tokens is None):
        raise InputError("give exactly one of --global-batch (sequences) or --global-batch-tokens")
    if global_batch_tokens is not None:
        if global_batch_tokens % seq_len or global_batch_tokens // seq_len > MAX_GLOBAL_BATCH:
            raise InputError(f"--global-batch-tokens {global_batch_tokens} must be a multiple of --seq-len {seq_len} "
                             f"of at most {MAX_GLOBAL_BATCH} sequences")
        return global_batch_tokens // seq_len
    assert global_batch is not None
    return global_batch


def _degrees(**pins: int | None) -> None:
    """Parallel degrees and micro-batch size given on the command line: integers >= 1 (not checked: absent)."""
    _check({f"--{name.replace('_', '-')}": (value, 1, MAX_GLOBAL_BATCH if "mbs" in name else MAX_GPUS)
            for name, value in pins.items()})


def _echo_prediction(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout, pred: Prediction,
                     as_json: bool) -> None:
    from planner.bands import band_for, load_bands, step_band
    from planner.report import layout_dict, prediction_dict, prediction_table

    band = step_band(pred.step_time_s, band_for(load_bands(), model, cluster, job))
    if as_json:
        out: dict[str, Any] = {**prediction_dict(pred, band), "layout": layout_dict(layout), "model": model.name,
                               "hardware": cluster.name, "gpus": cluster.num_gpus, "seq_len": job.seq_len,
                               "global_batch": job.global_batch}
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(prediction_table(model, cluster, job, layout, pred, band))


RecomputeModules = Annotated[str | None, typer.Option(
    help="Megatron's --recompute-modules, comma-separated (core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, "
         "shared_experts); implies --recompute selective.")]
Model = Annotated[str, typer.Option(help="Preset name, model YAML or Hugging Face config.json.")]
Hardware = Annotated[str, typer.Option(help="Hardware preset or hardware-profile YAML.")]
Gpus = Annotated[int, typer.Option(help="Total number of GPUs.")]
SeqLen = Annotated[int, typer.Option(help="Sequence length in tokens.")]
GlobalBatch = Annotated[int | None, typer.Option(help="Sequences per optimizer step.")]
GlobalBatchTokens = Annotated[int | None, typer.Option(help="Tokens per optimizer step (instead of --global-batch).")]
DtypeOpt = Annotated[Dtype, typer.Option(help="Precision of the matrix multiplications.")]
GpusPerNode = Annotated[int | None, typer.Option(help="Override the profile's GPUs per node.")]
InterNode = Annotated[float | None, typer.Option(help="Override scale-out bandwidth per GPU, Gbit/s.")]
MemoryGib = Annotated[float | None, typer.Option(help="Override GPU memory, GiB.")]
Attention = Annotated[AttentionKernel, typer.Option(help="Attention kernel the framework runs.")]
CapacityFactor = Annotated[float | None, typer.Option(
    min=1.0, help="MoE: pad every expert's buffer to this x its mean load (default: dropless routing).")]
LoadImbalance = Annotated[float, typer.Option(
    min=1.0, help="MoE dropless routing: tokens on the busiest expert rank over the mean.")]
CommOverlap = Annotated[bool, typer.Option(
    "--moe-comm-overlap", help="MoE: hide expert all-to-alls behind another micro-batch's compute (Megatron-LM "
                               "--overlap-moe-expert-parallel-comm, DualPipe).")]


DedupDispatch = Annotated[bool, typer.Option(
    "--moe-dedup-dispatch", help="MoE: send a token once to each remote node holding its experts and forward it "
                                 "over NVLink (DeepEP; Megatron-LM's flex dispatcher).")]


def _runtime(attention: AttentionKernel, capacity: float | None, imbalance: float, overlap: bool,
             dedup: bool) -> Runtime:
    return Runtime(attention=attention, moe_capacity_factor=capacity, moe_load_imbalance=imbalance,
                   moe_comm_overlap=overlap, moe_dedup_dispatch=dedup)


@app.command()
def evaluate(
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
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help="Sequence parallelism (default: tp > 1).")] = None,
    zero: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage (1 = distributed optimizer).")] = 0,
    schedule: Annotated[Schedule | None, typer.Option(help="Pipeline schedule (default: 1f1b, interleaved-1f1b "
                                                           "with --vpp > 1).")] = None,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    moe_capacity_factor: CapacityFactor = None,
    moe_load_imbalance: LoadImbalance = 1.0,
    moe_comm_overlap: CommOverlap = False,
    moe_dedup_dispatch: DedupDispatch = False,
    gpus_per_node: GpusPerNode = None,
    inter_node_gbps: InterNode = None,
    memory_gib: MemoryGib = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Predict step time, throughput, MFU and per-GPU memory of one layout (given by flags or --plan)."""
    from hardware_profiles import HardwareOverrides, apply_overrides, load_hardware
    from planner.api import make_layout, resolve

    def action() -> None:
        from cost_models.step import evaluate_layout
        from planner.planfile import read_plan

        overrides = HardwareOverrides(gpus_per_node, inter_node_gbps, memory_gib)
        _degrees(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs)
        if plan_file is not None:
            model_spec, cluster, job, layout = read_plan(plan_file)
            cluster = (load_hardware(hardware, cluster.num_gpus, overrides) if hardware
                       else apply_overrides(cluster, overrides))
            layout.validate(model_spec, job, cluster.num_gpus)
            pred = evaluate_layout(model_spec, cluster, job, layout)
            _echo_prediction(model_spec, cluster, job, layout, pred, as_json)
            return
        if model is None or hardware is None or gpus is None or seq_len is None:
            raise InputError("give --model, --hardware, --gpus and --seq-len (or --plan FILE)")
        _check({"--gpus": (gpus, 1, MAX_GPUS)})
        batch = _global_batch(seq_len, global_batch, global_batch_tokens)
        problem = resolve(model, hardware, gpus=gpus, seq_len=seq_len, global_batch=batch, dtype=dtype,
                          runtime=_runtime(attention, moe_capacity_factor, moe_load_imbalance, moe_comm_overlap,
                           moe_dedup_dispatch),
                          overrides=overrides)
        layout = make_layout(problem, tp=tp, pp=pp, cp=cp, vpp=vpp, mbs=mbs, sp=sp, zero=zero,
                             recompute=recompute, schedule=schedule, ep=ep, etp=etp,
                             recompute_modules=recompute_modules)
        pred = evaluate_layout(problem.model, problem.cluster, problem.job, layout)
        _echo_prediction(problem.model, problem.cluster, problem.job, layout, pred, as_json)

    _run(action)


@app.command()
def plan(
    hardware: Hardware,
    gpus: Gpus,
    seq_len: SeqLen,
    model: Annotated[str | None, typer.Option(help="Preset name, model YAML or Hugging Face config.json "
                                                   "(optional with --costs).")] = None,
    costs: Annotated[Path | None, typer.Option(help="Cost table (meshplan profile layers) replacing the "
                                                    "analytical compute times.")] = None,
    global_batch: GlobalBatch = None,
    global_batch_tokens: GlobalBatchTokens = None,
    out: Annotated[Path | None, typer.Option(help="Write the plan here (.yaml, or .json).")] = None,
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
    recompute: Annotated[Recompute | None, typer.Option(help="Pin the recomputation granularity.")] = None,
    recompute_modules: RecomputeModules = None,
    sp: Annotated[bool | None, typer.Option("--sp/--no-sp", help="Pin sequence parallelism.")] = None,
    schedule: Annotated[Schedule | None, typer.Option(help="Pin the pipeline schedule.")] = None,
    launcher: Annotated[EmitTarget | None, typer.Option(help="Plan only what this launcher can run.")] = None,
    max_tp: Annotated[int | None, typer.Option(help="Largest TP degree (default: the scale-up domain).")] = None,
    max_mbs: Annotated[int, typer.Option(min=1, help="Largest micro-batch size.")] = 8,
    no_cp: Annotated[bool, typer.Option("--no-cp", help="Switch context parallelism off.")] = False,
    no_partial_recompute: Annotated[bool, typer.Option("--no-partial-recompute",
                                                       help="No per-stage counts of fully recomputed layers.")] = False,
    emit_target: Annotated[EmitTarget | None, typer.Option("--emit", help="Also print a launcher config.")] = None,
    even_split: Annotated[bool, typer.Option("--even-split", help="Keep Megatron-LM's even layer split (no solved "
                                                                   "split, no per-stage recomputation).")] = False,
    record_timing: Annotated[bool, typer.Option("--record-timing",
                                                help="Write the search time into the plan (the file then differs "
                                                     "between runs).")] = False,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    moe_capacity_factor: CapacityFactor = None,
    moe_load_imbalance: LoadImbalance = 1.0,
    moe_comm_overlap: CommOverlap = False,
    moe_dedup_dispatch: DedupDispatch = False,
    gpus_per_node: GpusPerNode = None,
    inter_node_gbps: InterNode = None,
    memory_gib: MemoryGib = None,
) -> None:
    """Search for the fastest layout that fits; print it with the top-k alternatives, write a plan file."""
    from hardware_profiles import HardwareOverrides
    from planner.api import model_and_costs, recompute_choice
    from planner.api import plan as run_plan
    from planner.fileio import write_text_atomic
    from planner.planfile import dumps, plan_to_dict
    from planner.report import plan_table
    from planner.space import MAX_TOP_K, SearchSpec

    def action() -> None:
        _check({"--gpus": (gpus, 1, MAX_GPUS), "--top-k": (top_k, 1, MAX_TOP_K)},
               {"--time-limit": (time_limit, 0.0, MAX_TIME_LIMIT_S)})
        _degrees(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, max_tp=max_tp, max_mbs=max_mbs)
        batch = _global_batch(seq_len, global_batch, global_batch_tokens)
        if costs is not None and model is None:
            from planner.chain import is_chain_table

            if is_chain_table(str(costs)):
                _plan_chain(costs, hardware, gpus, batch, HardwareOverrides(gpus_per_node, inter_node_gbps, memory_gib),
                            top_k, out, as_json)
                return
        runtime = _runtime(attention, moe_capacity_factor, moe_load_imbalance, moe_comm_overlap,
                           moe_dedup_dispatch)
        model_spec, runtime, limits = model_and_costs(model, costs, seq_len, runtime)
        rc, modules = (recompute_choice(recompute, recompute_modules) if recompute_modules is not None
                       else (recompute, None))
        spec = SearchSpec(tp=tp, pp=pp, cp=cp, vpp=vpp, ep=ep, etp=etp, mbs=mbs, zero=zero, recompute=rc, sp=sp,
                          recompute_modules=modules or None,
                          schedule=schedule, max_tp=max_tp, max_mbs=max_mbs, no_cp=no_cp, top_k=top_k,
                          partial_recompute=not (no_partial_recompute or even_split), uneven_split=not even_split)
        if limits:
            if cp not in (None, 1):
                raise InputError("a cost table is measured on whole sequences: --cp must be 1 with --costs")
            spec = dataclasses.replace(spec, **limits)
        if launcher is not None:
            from planner.emitters import for_launcher

            spec = for_launcher(spec, launcher)
        with _Progress() as progress:
            result = run_plan(model_spec, hardware, gpus=gpus, seq_len=seq_len, global_batch=batch, dtype=dtype,
                              runtime=runtime,
                              overrides=HardwareOverrides(gpus_per_node, inter_node_gbps, memory_gib),
                              spec=spec, solver=solver, time_limit_s=time_limit, progress=progress.update)
        if out is not None:
            write_text_atomic(out, dumps(result, out, record_timing))
        if as_json:
            typer.echo(json.dumps(plan_to_dict(result, record_timing), indent=2))
        else:
            typer.echo(plan_table(result))
            if out is not None:
                typer.echo(f"\nplan written to {out}")
        if emit_target is not None:
            from planner.emitters import emit as emit_config

            emitted = emit_config(result, emit_target)
            if emitted.note:
                typer.echo(f"note: {emitted.note}", err=True)
            typer.echo(emitted.text)

    _run(action)


def _plan_chain(costs: Path, hardware: str, gpus: int, batch: int, overrides: Any, top_k: int, out: Path | None,
                as_json: bool) -> None:
    """Plan a non-transformer chain of profiled layers (PP, DP, TP where measured)."""
    import yaml

    from hardware_profiles import load_hardware
    from planner.chain import chain_plan_dict, plan_chain, read_chain
    from planner.fileio import write_text_atomic

    table = read_chain(str(costs))
    plans = plan_chain(table, load_hardware(hardware, gpus, overrides), batch, top_k=top_k)
    doc = chain_plan_dict(table, plans, str(costs), hardware, gpus, batch)
    if out is not None:
        write_text_atomic(out, yaml.safe_dump(doc, sort_keys=False))
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
        return
    typer.echo(f"{table.num_layers}-layer chain from {costs} on {gpus} x {hardware}, global batch {batch}")
    typer.echo(f"  {'#':>2} {'step s':>9} {'samples/s':>10} {'peak GiB':>9}  layout (layers per stage)")
    for i, p in enumerate(plans):
        typer.echo(f"  {i + 1:>2} {p.step_time_s:9.4f} {p.samples_per_s:10.1f} {max(p.stage_memory_gib):9.2f}  "
                   f"tp{p.tp} pp{p.pp} dp{p.dp} mbs{p.mbs} zero{int(p.zero)} {list(p.stage_layers)}")


class _Progress:
    """A progress bar on stderr that appears only once a search has run for a second (and only on a terminal)."""

    def __init__(self, label: str = "searching layouts") -> None:
        self.label = label
        self.start = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None

    def __enter__(self) -> _Progress:
        return self

    def update(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.perf_counter() - self.start < 1.0 or not sys.stderr.isatty():
                return
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total)
        self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command()
def emit(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan`.")],
    to: Annotated[EmitTarget, typer.Option("--to", help="Launcher to write for.")],
    out: Annotated[Path | None, typer.Option(help="Write here instead of standard output.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Fail when the launcher cannot run the plan's layout "
                                                          "instead of writing the best layout it can run.")] = False,
) -> None:
    """Turn a plan into a launcher configuration (Megatron-LM, torchtitan, DeepSpeed, NeMo)."""
    from planner.emitters import emit as emit_config
    from planner.fileio import is_script, write_text_atomic
    from planner.planfile import load_plan

    def action() -> None:
        emitted = emit_config(load_plan(plan_file), to, strict)
        if emitted.note:
            typer.echo(f"note: {emitted.note}", err=True)
        if out is None:
            typer.echo(emitted.text, nl=False)
        else:
            write_text_atomic(out, emitted.text, executable=is_script(emitted.text))

    _run(action)


@app.command()
def explain(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan`.")],
    png: Annotated[Path | None, typer.Option(help="Write the timeline, memory and breakdown as a PNG.")] = None,
    html_out: Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report.")] = None,
    reprice: Annotated[bool, typer.Option("--reprice", help="Show the current cost model's figures instead of the "
                                                            "ones the file stores (a warning says where they "
                                                            "differ).")] = False,
) -> None:
    """Show why a plan is what it is: timeline, memory per stage, breakdown, the binding constraint."""
    from planner.explain import explanation, render_html, render_png
    from planner.fileio import write_bytes_atomic, write_text_atomic
    from planner.planfile import load_plan
    from planner.report import plan_table

    def action() -> None:
        if png is not None:
            _needs("matplotlib", "plot", "--png")
        plan = load_plan(plan_file, reprice=reprice)
        ex = explanation(plan)
        typer.echo(plan_table(plan))
        typer.echo(f"\n  binding constraint: {ex.binding}")
        typer.echo(f"  {ex.verdict}")
        for c in ex.comparisons:
            typer.echo(f"  alternative {c.rank}: {100 * c.slower_by:+.1f} % ({c.reason})")
        if html_out is not None:
            write_text_atomic(html_out, render_html(ex))
            typer.echo(f"report written to {html_out}")
        if png is not None:
            write_bytes_atomic(png, render_png(ex))
            typer.echo(f"timeline written to {png}")

    _run(action)


@app.command()
def sweep(
    model: Model,
    hardware: Hardware,
    seq_len: SeqLen,
    global_batch: GlobalBatch = None,
    global_batch_tokens: GlobalBatchTokens = None,
    gpus: Annotated[int | None, typer.Option(help="Total number of GPUs (not needed with --tokens/--days).")] = None,
    vary: Annotated[Varied | None, typer.Option(help="The quantity to vary.")] = None,
    values: Annotated[str | None, typer.Option(help="Comma-separated values of the varied quantity.")] = None,
    tokens: Annotated[float | None, typer.Option(help="Capacity mode: tokens to train.")] = None,
    days: Annotated[float | None, typer.Option(help="Capacity mode: days to train them in.")] = None,
    max_gpus: Annotated[int, typer.Option(help="Capacity mode: the largest cluster to consider.")] = 131072,
    csv: Annotated[Path | None, typer.Option(help="Write the table as CSV.")] = None,
    png: Annotated[Path | None, typer.Option(help="Plot tokens/s per GPU (and total tokens/s, MFU or step time "
                                                  "where that is not a rescaling of it) against the varied "
                                                  "quantity, each point labelled with its layout.")] = None,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    workers: Annotated[int | None, typer.Option(help="Processes that plan the points (default: the cores "
                                                     "there are).")] = None,
) -> None:
    """What-if studies: best plan against GPU count, hardware, bandwidth, sequence or batch; or the GPUs
    needed to train --tokens in --days."""
    from planner.fileio import write_bytes_atomic, write_text_atomic
    from planner.report import plan_table
    from planner.sweep import Job, capacity, sweep_plot
    from planner.sweep import sweep as run_sweep

    def action() -> None:
        _check({"--gpus": (gpus, 1, MAX_GPUS), "--max-gpus": (max_gpus, 1, MAX_GPUS),
                "--workers": (workers, 1, MAX_WORKERS)})
        if png is not None:
            _needs("matplotlib", "plot", "--png")
        batch = _global_batch(seq_len, global_batch, global_batch_tokens)
        runtime = Runtime(attention=attention)
        if tokens is not None or days is not None:
            if tokens is None or days is None:
                raise InputError("capacity mode needs both --tokens and --days")
            job = Job(model, hardware, 1, seq_len, batch, runtime, dtype)
            with _Progress("planning GPU counts") as progress:
                answer = capacity(job, tokens, days, max_gpus, progress=progress.update)
            typer.echo(f"{answer.gpus} GPUs train {tokens:.3g} tokens in {answer.days:.1f} days "
                       f"(target {days:g}); counts planned: "
                       + ", ".join(f"{g}: {'no fit' if d is None else f'{d:.1f} d'}" for g, d in answer.tried))
            typer.echo("")
            typer.echo(plan_table(answer.plan))
            return
        if vary is None or values is None or gpus is None:
            raise InputError("give --gpus, --vary and --values (or --tokens and --days for capacity mode)")
        procs = (os.cpu_count() or 1) if workers is None else workers
        with _Progress(f"planning {vary.value} values") as progress:
            frame = run_sweep(Job(model, hardware, gpus, seq_len, batch, runtime, dtype), vary,
                              [v.strip() for v in values.split(",") if v.strip()], progress=progress.update,
                              workers=procs)
        typer.echo(frame.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        if csv is not None:
            write_text_atomic(csv, frame.to_csv(index=False))
        if png is not None:
            write_bytes_atomic(png, sweep_plot(frame, vary))

    _run(action)


profile_app = typer.Typer(no_args_is_help=True, help="Measure layers and the network with PyTorch ([profile] extra).")
app.add_typer(profile_app, name="profile")


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{flag} takes comma-separated positive integers, got {text!r}")
    return values


@profile_app.command("layers")
def profile_layers(
    model: Model,
    out: Annotated[Path, typer.Option(help="Cost table to write (.csv).")],
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    tp: Annotated[str, typer.Option(help="TP degrees to measure, comma-separated.")] = "1",
    mbs: Annotated[str, typer.Option(help="Micro-batch sizes to measure, comma-separated.")] = "1",
    seq_len: Annotated[int, typer.Option(min=1, help="Sequence length in tokens.")] = 2048,
    scale: Annotated[float, typer.Option(help="Scale heads, FFN and vocabulary down (a CPU cannot hold 8B).")] = 1.0,
    repeats: Annotated[int, typer.Option(min=1, help="Timed repeats (after two warm-ups); the median is kept.")] = 5,
) -> None:
    """Time real decoder, embedding and LM-head layers with PyTorch and write a cost table."""
    from planner.fileio import write_text_atomic
    from planner.loaders import load_model

    def action() -> None:
        if device not in ("cpu", "cuda"):
            raise InputError(f"--device must be cpu or cuda, got {device!r}")
        _check({"--seq-len": (seq_len, 1, MAX_SEQ_LEN)})
        _needs("torch", "profile", "profiling")
        from cost_models.layerprofile import decoder_module, scaled, shard, table
        from cost_models.layerprofile import profile_layers as measure
        spec, tps = scaled(load_model(model), scale), _int_list(tp, "--tp")
        rows = measure(spec, tps, _int_list(mbs, "--mbs"), seq_len, device, repeats)
        built_with = decoder_module(shard(spec, tps[0]))[1]
        write_text_atomic(out, table(spec, rows, f"{device} ({built_with})"))
        for r in rows:
            typer.echo(f"{r.kind:9} tp {r.tp} mbs {r.mbs}: forward {r.forward_ms:8.3f} ms  "
                       f"backward {r.backward_ms:8.3f} ms  activations {r.activation_bytes / 2**20:8.2f} MiB")
        typer.echo(f"cost table written to {out} ({spec.name})")

    _run(action)


@profile_app.command("network")
def profile_network(
    out: Annotated[Path, typer.Option(help="Hardware-profile fragment to write (merge: --hardware PRESET,FILE).")],
    backend: Annotated[str, typer.Option(help="torch.distributed backend: nccl (GPUs) or gloo (CPU).")] = "gloo",
    procs: Annotated[int, typer.Option(min=2, help="Processes to spawn (one per GPU with nccl).")] = 2,
    repeats: Annotated[int, typer.Option(min=1, help="Timed repeats per size (after three warm-ups).")] = 5,
) -> None:
    """Time all-reduce, all-gather, reduce-scatter, all-to-all and send/recv; fit alpha-beta."""
    from planner.fileio import write_text_atomic

    def action() -> None:
        if backend not in ("gloo", "nccl"):
            raise InputError(f"--backend must be gloo or nccl, got {backend!r}")
        _needs("torch", "profile", "profiling")
        from cost_models.netprofile import fit, fragment, measure

        samples = measure(backend, procs, repeats)
        fits = fit(samples, procs)
        write_text_atomic(out, fragment(fits, samples, backend, procs))
        for f in fits:
            typer.echo(f"{f.collective.value:15} alpha {f.alpha_s * 1e6:9.1f} us  "
                       f"busbw {f.busbw_bytes_per_s / 1e9:8.3f} GB/s")
        typer.echo(f"fragment written to {out}")

    _run(action)


@app.command()
def trial(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan` (with alternatives).")],
    to: Annotated[str, typer.Option("--to", help="Launcher: megatron, torchtitan or deepspeed.")],
    out: Annotated[Path, typer.Option(help="Folder for the trial scripts and their manifest.")],
    top_k: Annotated[int, typer.Option("--top-k", help="How many of the plan's best layouts to try.")] = 3,
    steps: Annotated[int, typer.Option(help="Training steps per trial.")] = 20,
) -> None:
    """Write launch scripts that train the plan's best layouts for a few steps, logging every step."""
    from planner.planfile import load_plan
    from planner.trial import MANIFEST, TrialLauncher, write_trials

    def action() -> None:
        try:
            launcher = TrialLauncher(to)
        except ValueError:
            raise InputError(f"--to must be one of {', '.join(t.value for t in TrialLauncher)}, got {to!r}") from None
        trials = write_trials(load_plan(plan_file), launcher, top_k, steps, out)
        for t in trials:
            where = f"{out / t.script}" if t.script else f"skipped: {t.skipped}"
            typer.echo(f"{t.name}  {t.layout}  predicted {t.predicted_step_s:.3f} s/step  {where}")
        if any(t.skipped for t in trials):
            typer.echo(f"note: plan with --launcher {launcher.value} to rank only layouts {launcher.value} can run")
        typer.echo(f"manifest: {out / MANIFEST}; after the runs: meshplan calibrate {out / MANIFEST} --hardware H")

    _run(action)


@app.command()
def calibrate(
    runs: Annotated[list[Path], typer.Argument(help="Measured runs: YAML (a list of runs or `runs:`) or CSV with "
                                                    "columns name, model, gpus, seq_len, global_batch, dtype, the "
                                                    "layout (tp, pp, cp, vpp, mbs, zero, recompute, sp, ...) and "
                                                    "step_time_s; Megatron-LM logs; or the trials.yaml of "
                                                    "`meshplan trial` with its logs.")],
    hardware: Annotated[str, typer.Option(help="Hardware preset or profile to calibrate (fragments allowed).")],
    out: Annotated[Path | None, typer.Option(help="Write the fitted profile fragment here; plan with "
                                                  "--hardware PRESET,FILE.")] = None,
) -> None:
    """Fit the hardware profile's physical parameters to your own measured runs (held-out check first)."""
    import yaml

    from planner.calibrate import calibrate as fit_runs
    from planner.calibrate import check, fragment, load_runs, report
    from planner.fileio import write_text_atomic

    def action() -> None:
        from hardware_profiles import load_hardware
        load_hardware(hardware, 1)  # a bad preset or fragment is named once, not per run
        measured = [run for path in runs for run in load_runs(path, hardware)]
        with _Progress("fitting (all runs, then each held out)") as progress:
            cal = fit_runs(measured, hardware, progress=progress.update)
        typer.echo(report(cal))
        check(cal)
        if out is not None:
            header = (f"# meshplan calibrate: {len(measured)} runs ({', '.join(str(p) for p in runs)}) on {hardware}; "
                      f"mean |error| {cal.before_pct:.1f} % -> {cal.after_pct:.1f} %, held out "
                      f"{cal.held_out_pct:.1f} %\n")
            write_text_atomic(out, header + yaml.safe_dump(fragment(cal, measured[0].cluster), sort_keys=False,
                                                      default_flow_style=None))
            typer.echo(f"fragment written to {out}; plan with --hardware {hardware},{out}")

    _run(action)


@app.command()
def models() -> None:
    """List the built-in model presets."""
    from cost_models.flops import active_params, total_params
    from planner.loaders import load_model, model_preset_names

    typer.echo(f"{'preset':16} {'params':>9} {'active':>9} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>4} "
               f"{'ffn':>6} {'vocab':>7}  mlp")
    for name in model_preset_names():
        m = load_model(name)
        mlp = "gated" if m.gated_mlp else "plain"
        if m.moe is not None:
            n_dense = m.num_layers - m.moe.count_moe_layers(m.num_layers)
            mlp = f"MoE top-{m.moe.top_k} of {m.moe.num_experts}" + (f", {n_dense} dense layers" if n_dense else "")
        extras = [x for x, present in (("MLA", m.mla is not None), (f"MTP {m.mtp_layers}", m.mtp_layers > 0),
                                       ("vision encoder", m.vision is not None)) if present]
        mlp += "".join(f", {x}" for x in extras)
        typer.echo(f"{name:16} {total_params(m) / 1e9:8.2f}B {active_params(m) / 1e9:8.2f}B {m.num_layers:>6} "
                   f"{m.hidden_size:>6} {m.num_attention_heads:>5} {m.num_kv_heads:>4} {m.ffn_hidden_size:>6} "
                   f"{m.vocab_size:>7}  {mlp}")


@app.command()
def hardware() -> None:
    """List the built-in hardware presets."""
    from hardware_profiles import load_hardware, preset_names

    typer.echo(f"{'preset':12} {'memory':>7} {'bf16 TF':>7} {'HBM GB/s':>8} {'GPUs/node':>9} {'scale-up':>8} "
               f"{'GB/s':>5} {'NIC Gb/s':>8}")
    for name in preset_names():
        c = load_hardware(name, 1)
        typer.echo(f"{name:12} {c.gpu.memory_gib:6.0f}G {c.gpu.peak_bf16_tflops:7.0f} {c.gpu.hbm_gbs:8.0f} "
                   f"{c.gpus_per_node:9} {c.scale_up_size:8} {c.scale_up.bandwidth_gbs:5.0f} "
                   f"{c.scale_out.bandwidth_gbs * 8:8.0f}")


def main() -> None:
    """Console-script entry point. Ctrl-C exits 130 without a traceback, also while typer builds the command line
    (the imports above have their own guard)."""
    try:
        app(prog_name="meshplan")
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
