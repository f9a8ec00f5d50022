"""`meshplan recsys plan`: shard a recommendation model's embedding tables over GPUs (and host memory), print the
plan, write the plan file and the TorchRec sharding plan."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from meshcore.checks import MAX_GPUS, TIME_LIMIT_S, choice
from planner.commands.common import Hardware, MemoryGib, app, check, output_path, run, write_and_print

if TYPE_CHECKING:
    from planner.workloads.recsys.spec import ShardingKind

recsys_app = typer.Typer(no_args_is_help=True, help="Plan recommendation models (DLRM): embedding-table sharding.")
app.add_typer(recsys_app, name="recsys")


def _kinds(text: str) -> frozenset[ShardingKind]:
    from meshcore.errors import InputError
    from planner.workloads.recsys.spec import ShardingKind

    allowed = ", ".join(k.value for k in ShardingKind)
    names = [n.strip() for n in text.split(",") if n.strip()]
    try:
        kinds = frozenset(ShardingKind(n) for n in names)
    except ValueError:
        raise InputError(f"--shardings takes comma-separated {allowed}; got {text!r}") from None
    if not kinds:
        raise InputError(f"--shardings needs at least one of {allowed}")
    return kinds


@recsys_app.command("plan")
def plan_cmd(
    model: Annotated[str, typer.Option(help="Preset (dlrm-criteo-1tb, dlrm-dcnv2, dlrm-small) or a tables YAML.")],
    hardware: Hardware,
    gpus: Annotated[int, typer.Option(help="GPUs (every one holds tables and runs the dense part).")],
    batch: Annotated[int, typer.Option(help="Global batch: samples per step over all GPUs.")],
    host_gib: Annotated[float, typer.Option(help="Host memory per GPU that tables may use, GiB (0: HBM only).")]
    = 0.0,
    host_gbs: Annotated[float, typer.Option(help="Host-to-GPU bandwidth per GPU for cache misses, GB/s.")] = 32.0,
    cache_ratio: Annotated[float, typer.Option(help="Share of a host table's rows cached in HBM.")] = 0.2,
    shardings: Annotated[str, typer.Option(help="Allowed sharding types, comma-separated.")]
    = "data_parallel,table_wise,row_wise,column_wise",
    min_column_dim: Annotated[int, typer.Option(help="Narrowest column shard (TorchRec's MIN_CW_DIM).")] = 128,
    time_limit: Annotated[float, typer.Option(help="ILP time limit, seconds.")] = 30.0,
    runtime: Annotated[str, typer.Option(help="Training code: torchrec (FBGEMM's fused kernels) or dle (NVIDIA "
                                              "DeepLearningExamples' DLRM: sparse gradients, bottom MLP on GPU 0).")]
    = "torchrec",
    memory_gib: MemoryGib = None,
    out: Annotated[Path | None, typer.Option(parser=output_path, help="Write the plan here (.yaml, or .json).")] = None,
    emit: Annotated[str | None, typer.Option(help="Also print the sharding plan for: torchrec.")] = None,
    emit_out: Annotated[Path | None, typer.Option(parser=output_path,
                                                  help="Write the --emit output here instead of printing it.")]
    = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Shard each table data-parallel, table-wise, row-wise or column-wise (ILP over tables x options x GPUs)."""

    def action() -> None:
        from hardware_profiles import HardwareOverrides, load_hardware
        from meshcore.errors import InputError, SpecError
        from meshcore.fileio import write_text_atomic
        from planner.outputs.inferplan import dumps
        from planner.workloads.recsys.inputs import load_recsys_model
        from planner.workloads.recsys.plan import recsys_document, recsys_summary
        from planner.workloads.recsys.search import plan_sharding
        from planner.workloads.recsys.spec import RecJob, RecRuntime
        from planner.workloads.recsys.torchrec import torchrec_python

        check({"--gpus": (gpus, 1, MAX_GPUS), "--min-column-dim": (min_column_dim, 1, 2**24)},
              {"--time-limit": (time_limit, *TIME_LIMIT_S)})
        if emit not in (None, "torchrec"):
            raise InputError(f"--emit must be torchrec, got {emit!r}")
        if emit_out is not None and emit is None:
            raise InputError("--emit-out needs --emit torchrec")
        if emit is not None and runtime != "torchrec":
            raise InputError(f"--emit torchrec writes a TorchRec plan; --runtime {runtime} does not read one "
                             "(use --runtime torchrec)")
        kinds = _kinds(shardings)
        try:
            job = RecJob(batch, gpus, host_gib, host_gbs, cache_ratio,
                         runtime=choice(RecRuntime, runtime, "--runtime"))
        except SpecError as exc:
            raise InputError(str(exc)) from None
        spec = load_recsys_model(model)
        cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
        plan = plan_sharding(spec, job, cluster, kinds, min_column_dim, time_limit)
        document = recsys_document(plan, cluster)
        if emit is not None and emit_out is not None:
            write_text_atomic(emit_out, torchrec_python(document["torchrec"]))
        write_and_print(document, out, as_json, dumps, recsys_summary)
        if as_json:
            return
        if emit is not None:
            typer.echo(f"\nTorchRec plan written to {emit_out}" if emit_out is not None
                       else "\n" + torchrec_python(document["torchrec"]))

    run(action)
