"""`meshplan sweep`, `trial` and `calibrate`: parse the flags, call planner.studies, print."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from meshcore import (
    AttentionKernel,
    Dtype,
    Runtime,
)
from meshcore.checks import (
    MAX_GPUS,
    MAX_WORKERS,
)
from meshcore.errors import InfeasibleError, InputError
from meshcore.framework import DEFAULT_FRAMEWORK
from meshcore.text import comment
from planner.commands.common import (
    Attention,
    DtypeOpt,
    GlobalBatch,
    GlobalBatchTokens,
    Hardware,
    Model,
    Progress,
    RuntimeOpt,
    SeqLen,
    app,
    check,
    global_batch_of,
    output_path,
    png_needs_matplotlib,
    report_to_stderr,
    run,
)
from planner.studies.sweep import Varied


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
    csv: Annotated[Path | None, typer.Option(parser=output_path, help="Write the table as CSV.")] = None,
    png: Annotated[Path | None, typer.Option(parser=output_path,
                                             help="Plot tokens/s per GPU (and total tokens/s, MFU or step time "
                                                  "where that is not a rescaling of it) against the varied "
                                                  "quantity, each point labelled with its layout.")] = None,
    dtype: DtypeOpt = Dtype.BF16,
    attention: Attention = AttentionKernel.FLASH,
    runtime_name: RuntimeOpt = DEFAULT_FRAMEWORK,
    workers: Annotated[int | None, typer.Option(help="Processes that plan the points (default: the cores "
                                                     "there are).")] = None,
    ray: Annotated[str | None, typer.Option("--ray", help="Plan the points as tasks on a Ray cluster: HOST:PORT, "
                                                          "ray://HOST:PORT, auto, or local (a fresh local instance; "
                                                          "the ray extra).")] = None,
) -> None:
    """What-if studies: best plan against GPU count, hardware, bandwidth, sequence or batch; or the GPUs
    needed to train --tokens in --days."""
    from meshcore.fileio import write_bytes_atomic, write_text_atomic
    from planner.outputs.report import plan_table
    from planner.studies.sweep import Job, capacity, sweep_plot, sweep_table, sweep_title
    from planner.studies.sweep import sweep as run_sweep

    def action() -> None:
        check({"--gpus": (gpus, 1, MAX_GPUS), "--max-gpus": (max_gpus, 1, MAX_GPUS),
                "--workers": (workers, 1, MAX_WORKERS)})
        batch = global_batch_of(seq_len, global_batch, global_batch_tokens)
        runtime = Runtime(framework=runtime_name, attention=attention)
        if tokens is not None or days is not None:
            if tokens is None or days is None:
                raise InputError("capacity mode needs both --tokens and --days")
            if ray is not None:
                raise InputError("--ray runs --vary sweeps; capacity mode plans GPU counts one after another (it "
                                 "stops at the first that fits), so it runs here")
            job = Job(model, hardware, 1, seq_len, batch, runtime, dtype)
            with Progress("planning GPU counts") as progress:
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
        with Progress(f"planning {vary.value} values") as progress:
            job = Job(model, hardware, gpus, seq_len, batch, runtime, dtype)
            frame = run_sweep(job, vary,
                              [v.strip() for v in values.split(",") if v.strip()], progress=progress.update,
                              workers=procs, ray_address=ray)
        from planner.inputs.runtimes import load_runtime

        typer.echo(f"runtime: {load_runtime(runtime_name).title}", err=report_to_stderr(csv, png))
        typer.echo(sweep_table(frame), err=report_to_stderr(csv, png))
        if csv is not None:
            write_text_atomic(csv, frame.to_csv(index=False))
        if png is not None:
            png_needs_matplotlib("the table" + (f" and {csv}" if csv is not None else ""))
            write_bytes_atomic(png, sweep_plot(frame, vary, sweep_title(job, vary)))

    run(action)


@app.command()
def trial(
    plan_file: Annotated[Path, typer.Argument(help="A plan file written by `meshplan plan` (with alternatives).")],
    out: Annotated[Path, typer.Option(parser=output_path, help="Folder for the trial scripts and their manifest.")],
    to: Annotated[str | None, typer.Option("--to", help="Launcher: megatron, torchtitan or deepspeed (default: the "
                                                        "plan's runtime).")] = None,
    top_k: Annotated[int, typer.Option("--top-k", help="How many of the plan's best layouts to try.")] = 3,
    steps: Annotated[int, typer.Option(help="Training steps per trial.")] = 20,
    megatron_lm: Annotated[Path | None, typer.Option("--megatron-lm", help="Megatron-LM checkout (the folder of "
                                                                          "pretrain_gpt.py), checked and written "
                                                                          "into launch.sh as an absolute path "
                                                                          "(default: $MEGATRON_LM when it runs).")
                           ] = None,
) -> None:
    """Write launch scripts that train the plan's best layouts for a few steps, logging every step."""
    from planner.outputs.planread import load_plan
    from planner.studies.trial import MANIFEST, TrialLauncher, write_trials

    def action() -> None:
        plan = load_plan(plan_file)
        name = to if to is not None else plan.job.runtime.framework.value
        try:
            launcher = TrialLauncher(name)
        except ValueError:
            given = f"got {to!r}" if to is not None else f"the plan's runtime is {name}"
            raise InputError(f"--to must be one of {', '.join(t.value for t in TrialLauncher)}, {given}") from None
        trials = write_trials(plan, launcher, top_k, steps, out, megatron_lm)
        for t in trials:
            where = f"{out / t.script}" if t.script else f"skipped: {t.skipped}"
            typer.echo(f"{t.name}  {t.layout}  predicted {t.predicted_step_s:.3f} s/step  {where}")
        typer.echo(f"manifest: {out / MANIFEST}; after the runs: meshplan calibrate {out / MANIFEST} --hardware H")
        if all(t.skipped for t in trials):
            raise InfeasibleError(f"{launcher.value} runs none of the plan's {len(trials)} layouts tried: re-plan with "
                                  f"--runtime {launcher.target.value} so that every layout it ranks can run")
        if any(t.skipped for t in trials):
            typer.echo(f"note: plan with --runtime {launcher.value} to rank only layouts {launcher.value} can run")
        if launcher is TrialLauncher.MEGATRON and megatron_lm is None:
            typer.echo("note: launch.sh runs $MEGATRON_LM/pretrain_gpt.py (default: the folder it is started in) "
                       "and stops if it is not there; --megatron-lm DIR writes the checkout in")

    run(action)


@app.command()
def calibrate(
    runs: Annotated[list[Path], typer.Argument(help="Measured runs: YAML (a list of runs or `runs:`) or CSV with "
                                                    "columns name, model, gpus, seq_len, global_batch, dtype, the "
                                                    "layout (tp, pp, cp, vpp, mbs, zero, recompute, sp, ...) and "
                                                    "step_time_s; Megatron-LM logs; or the trials.yaml of "
                                                    "`meshplan trial` with its logs.")],
    hardware: Annotated[str, typer.Option(help="Hardware preset or profile to calibrate (fragments allowed).")],
    out: Annotated[Path | None, typer.Option(parser=output_path,
                                             help="Write the fitted profile fragment here; plan with "
                                                  "--hardware PRESET,FILE.")] = None,
) -> None:
    """Fit the hardware profile's physical parameters to your own measured runs (held-out check first)."""
    import yaml

    from meshcore.fileio import write_text_atomic
    from planner.studies.calibrate import calibrate as fit_runs
    from planner.studies.calibrate import check, fragment, load_runs, report

    def action() -> None:
        from hardware_profiles import load_hardware
        load_hardware(hardware, 1)  # a bad preset or fragment is named once, not per run
        measured = [run for path in runs for run in load_runs(path, hardware)]
        with Progress("fitting (all runs, then each held out)") as progress:
            cal = fit_runs(measured, hardware, progress=progress.update)
        typer.echo(report(cal))
        check(cal)
        if out is not None:
            header = comment(f"meshplan calibrate: {len(measured)} runs ({', '.join(str(p) for p in runs)}) on "
                             f"{hardware}; mean |error| {cal.before_pct:.1f} % -> {cal.after_pct:.1f} %, held out "
                             f"{cal.held_out_pct:.1f} %") + "\n"
            write_text_atomic(out, header + yaml.safe_dump(fragment(cal, measured[0].cluster), sort_keys=False,
                                                      default_flow_style=None))
            typer.echo(f"fragment written to {out}; plan with --hardware {hardware},{out}")

    run(action)
