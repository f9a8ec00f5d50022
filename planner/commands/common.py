"""What every command shares: the Typer apps, the option types, the range checks of command-line numbers,
the error-to-exit-code wrapper and the progress bar."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from cost_models.prediction import Prediction
from meshcore import (
    AttentionKernel,
    ClusterSpec,
    Dtype,
    JobSpec,
    Layout,
    ModelSpec,
    Runtime,
)
from meshcore.checks import (
    MAX_GLOBAL_BATCH,
    MAX_GPUS,
    MAX_SEQ_LEN,
    MOE_LOAD_FACTOR,
    optional_integer,
    physical,
    real,
)
from meshcore.errors import InputError, MeshplanError, SpecError
from meshcore.execution import Fp8Recipe
from meshcore.framework import DEFAULT_FRAMEWORK, Framework
from planner.commands.lazy import app as lazy_app

app = lazy_app  # the root app (planner.commands.lazy builds each command from its module when it runs)


T = TypeVar("T")


def run(action: Callable[[], T]) -> T:
    """Run `action`; turn meshplan's errors into a one-line message and their exit code."""
    try:
        return action()
    except MeshplanError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(exc.exit_code) from None


def needs(module: str, extra: str, what: str) -> None:
    """Refuse, before any work, a command whose optional dependency is not installed (other import errors
    surface as they are)."""
    if importlib.util.find_spec(module) is None:
        raise InputError(f"{what} needs {module}: pip install -e '.[{extra}]'")


def png_needs_matplotlib(written: str) -> None:
    """Before a PNG is drawn: without matplotlib, an error that says what was written all the same (the text, CSV or
    HTML beside it: issue 31, the whole command used to stop before any work)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise InputError(f"--png needs matplotlib: pip install -e '.[plot]' ({written} written; the PNG was not)")


def check(ints: dict[str, tuple[int | None, int, int]] | None = None,
           reals: dict[str, tuple[float | None, float, float]] | None = None) -> None:
    """Range checks of command-line numbers before any work: {flag: (value, low, high)}; None is not given."""
    for name, (value, low, high) in (ints or {}).items():
        optional_integer(value, name, low, high)
    for name, (number, low_f, high_f) in (reals or {}).items():
        if number is not None:
            real(number, name, low_f, high_f)


def global_batch_of(seq_len: int, global_batch: int | None, global_batch_tokens: int | None) -> int:
    check({"--seq-len": (seq_len, 1, MAX_SEQ_LEN), "--global-batch": (global_batch, 1, MAX_GLOBAL_BATCH),
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


def degrees(**pins: int | None) -> None:
    """Parallel degrees and micro-batch size given on the command line: integers >= 1 (not checked: absent)."""
    check({f"--{name.replace('_', '-')}": (value, 1, MAX_GLOBAL_BATCH if "mbs" in name else MAX_GPUS)
            for name, value in pins.items()})


def echo_prediction(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, layout: Layout, pred: Prediction,
                     as_json: bool) -> None:
    from planner.outputs.bands import band_for, load_bands, step_band
    from planner.outputs.planfile import runtime_dict
    from planner.outputs.report import layout_dict, prediction_dict, prediction_table

    band = step_band(pred.step_time_s, band_for(load_bands(), model, cluster, job))
    if as_json:
        out: dict[str, Any] = {**prediction_dict(pred, band), "layout": layout_dict(layout), "model": model.name,
                               "hardware": cluster.name, "gpus": cluster.num_gpus, "seq_len": job.seq_len,
                               "global_batch": job.global_batch, "runtime": runtime_dict(job.runtime.framework)}
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(prediction_table(model, cluster, job, layout, pred, band))


LoraRank = Annotated[int, typer.Option(
    help="Fine-tune LoRA adapters of this rank on every decoder linear layer over frozen weights (0: train every "
         "weight).")]
PackedDocLen = Annotated[str | None, typer.Option(
    "--packed-doc-len",
    help="Packed sequences: the length of the documents packed into each sequence, or comma-separated lengths laid "
         "in order and repeated (the last cut at --seq-len); each document attends only to itself. Default: one "
         "document per sequence.")]
OffloadOpt = Annotated[str | None, typer.Option(
    help="What lives in host memory: none, or comma-separated optimizer (ZeRO-Offload: Adam on the CPU), gradients "
         "(sent to the host in each backward), params (the weights too, streamed per layer; needs ZeRO-3), "
         "activations (stored activations), nvme (the offloaded state on the host's NVMe); plan: also auto (search "
         "them).")]
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
RuntimeOpt = Annotated[Framework, typer.Option(
    "--runtime", help="The training runtime the plan is for; the search considers only what it runs: megatron "
                      "(Megatron-LM, the default), nemo, torchtitan, deepspeed, or any (research mode: every layout "
                      "meshplan prices, launchable or not).")]


CapacityFactor = Annotated[float | None, typer.Option(
    help="MoE: pad every expert's buffer to this x its mean load, 1 to 64 (default: dropless routing).")]


LoadImbalance = Annotated[float, typer.Option(
    help="MoE dropless routing: tokens on the busiest expert rank over the mean, 1 to 64.")]


CommOverlap = Annotated[bool, typer.Option(
    "--moe-comm-overlap", help="MoE: hide expert all-to-alls behind another micro-batch's compute (Megatron-LM "
                               "--overlap-moe-expert-parallel-comm, DualPipe).")]


DedupDispatch = Annotated[bool, typer.Option(
    "--moe-dedup-dispatch", help="MoE: send a token once to each remote node holding its experts and forward it "
                                 "over NVLink (DeepEP; Megatron-LM's flex dispatcher).")]


CompileOpt = Annotated[bool | None, typer.Option(
    "--compile/--no-compile", help="torch.compile each transformer block (torchtitan training.compile / [compile]); "
                                   "default: the runtime's (off in torchtitan; Megatron-LM runs fused kernels).")]


Fp8RecipeOpt = Annotated[Fp8Recipe | None, typer.Option(
    help="FP8 recipe of an fp8 job: delayed or current (Transformer Engine), tensorwise or rowwise (torchao); "
         "default: the runtime's first (hardware_profiles/runtimes/).")]


def runtime_of(attention: AttentionKernel, capacity: float | None, imbalance: float, overlap: bool,
             dedup: bool, framework: Framework = DEFAULT_FRAMEWORK, compile_blocks: bool | None = None,
             fp8_recipe: Fp8Recipe | None = None) -> Runtime:
    """The runtime of `--runtime`, the MoE options, --compile and --fp8-recipe, each checked under its flag's name
    (the option's range check lets NaN by; a recipe the runtime does not run is refused naming its recipes)."""
    physical(imbalance, "--moe-load-imbalance", MOE_LOAD_FACTOR)
    if capacity is not None:
        physical(capacity, "--moe-capacity-factor", MOE_LOAD_FACTOR)
    from planner.inputs.runtimes import with_execution

    try:
        return with_execution(Runtime(framework=framework, attention=attention, moe_capacity_factor=capacity,
                                      moe_load_imbalance=imbalance, moe_comm_overlap=overlap,
                                      moe_dedup_dispatch=dedup, compile=compile_blocks, fp8_recipe=fp8_recipe))
    except SpecError as exc:
        raise InputError(f"--fp8-recipe: {exc}") from None


class Progress:
    """Progress on stderr that appears only once the work has run for `delay` seconds (and only on a terminal).

    `exact`: the total is the work there is (a sweep's points, a chain search's stages), shown as a bar with its
    time left. Otherwise the total is only a ceiling (the layout search's best-first order stops once no candidate
    left can enter the top-k, usually after a small share of them): a spinner with what was done and the time it
    has run, no percentage and no time left (issue 31: the bar sat at 0 % with 26 minutes left, then finished)."""

    def __init__(self, label: str = "searching layouts", exact: bool = True, delay: float = 1.0,
                 console: Any = None) -> None:
        self.label, self.exact, self.delay, self.console = label, exact, delay, console
        self.start = time.perf_counter()
        self.bar: Any = None
        self.task: Any = None
        self.timer: Any = None  # `silent`'s
        self.closed = False

    def __enter__(self) -> Progress:
        return self

    def update(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.perf_counter() - self.start < self.delay or (self.console is None and not sys.stderr.isatty()):
                return
            self.bar = self._bar()
            self.bar.start()
            self.task = self.bar.add_task(self.label, total=total if self.exact else None, ceiling=total)
        if self.exact:
            self.bar.update(self.task, completed=done, total=total)
        else:
            self.bar.update(self.task, completed=done, ceiling=total)

    def silent(self) -> None:
        """For work that reports nothing as it goes (the search over --workers processes): a spinner with the time it
        has run, shown from a timer once it has run for `delay` seconds."""
        if self.console is None and not sys.stderr.isatty():
            return
        import threading

        self.timer = threading.Timer(self.delay, self._spin)
        self.timer.daemon = True
        self.timer.start()

    def _spin(self) -> None:
        from rich.console import Console
        from rich.progress import Progress as Bar
        from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

        if self.closed:
            return
        self.bar = Bar(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                       console=self.console or Console(stderr=True), transient=True)
        self.bar.start()
        self.task = self.bar.add_task(self.label, total=None)

    def _bar(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            SpinnerColumn,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import Progress as Bar

        console = self.console or Console(stderr=True)
        if self.exact:
            return Bar(TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(),
                       TextColumn("{task.completed:,.0f}/{task.total:,.0f}"), TimeElapsedColumn(),
                       TextColumn("left"), TimeRemainingColumn(), console=console, transient=True)
        return Bar(SpinnerColumn(), TextColumn("{task.description}: {task.completed:,.0f} candidates checked of "
                                               "at most {task.fields[ceiling]:,} (it stops once the rest cannot "
                                               "win)"), TimeElapsedColumn(), console=console, transient=True)

    def __exit__(self, *exc: object) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()  # a spinner it was starting is up before it is stopped below
        if self.bar is not None:
            self.bar.stop()


profile_app = typer.Typer(no_args_is_help=True,
                          help="Measure layers, the network and the host's fixed costs with PyTorch (needs the profile "
                               "extra), or an interatomic potential with MACE (the mlip extra).")


app.add_typer(profile_app, name="profile")


def int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(f"{flag} takes comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise InputError(f"{flag} takes comma-separated positive integers, got {text!r}")
    return values


def report_to_stderr(*outputs: Path | None) -> bool:
    """Whether one of `outputs` is standard output (`--out -`): the report printed beside it then goes to standard
    error, so that what is piped on is the output file alone."""
    from meshcore.fileio import writes_stdout

    return any(o is not None and writes_stdout(o) for o in outputs)


def output_path(value: str) -> Path:
    """An output option's path (typer `parser`): refuses the empty string, which a Path would read as '.'."""
    if not value:
        raise typer.BadParameter("must name a file, or - for standard output")
    return Path(value)


def write_and_print(document: dict[str, Any], out: Path | None, as_json: bool,
                    dumps: Callable[[dict[str, Any], Path], str], summary: Callable[[dict[str, Any]], str]) -> None:
    """Write a plan document to `out` (atomically, in the format its suffix names) when given, then print it as JSON,
    or as its summary and where it was written (to standard error when `out` is standard output)."""
    from meshcore.fileio import write_text_atomic

    if out is not None:
        write_text_atomic(out, dumps(document, out))
    err = report_to_stderr(out)
    if as_json:
        typer.echo(json.dumps(document, indent=2), err=err)
        return
    typer.echo(summary(document), err=err)
    if out is not None:
        typer.echo(f"\nplan written to {out}", err=err)
