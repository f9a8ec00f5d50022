"""`meshplan mlip plan`: split GPUs between data-parallel replicas and spatial domains for a graph interatomic
potential, from a profiled cost table; print the plan and write the plan file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from planner.commands.common import Hardware, MemoryGib, app, output_path, run, write_and_print

mlip_app = typer.Typer(no_args_is_help=True, help="Plan graph interatomic potentials (MACE, NequIP, Allegro): "
                                                  "domain decomposition or data parallelism.")
app.add_typer(mlip_app, name="mlip")


@mlip_app.command("plan")
def plan_cmd(
    costs: Annotated[str, typer.Option(help="Cost table CSV (format: planner/workloads/mlip/inputs.py, README).")],
    hardware: Hardware,
    gpus: Annotated[int, typer.Option(help="GPUs.")],
    atoms: Annotated[int | None, typer.Option(help="Atoms per structure (or --sizes).")] = None,
    structures: Annotated[int, typer.Option(help="Structures per training step (over all GPUs).")] = 1,
    sizes: Annotated[str | None, typer.Option(help="A training step's structures of different sizes, CSV atoms,count "
                                                   "(instead of --atoms and --structures): data parallel, balanced "
                                                   "by atoms.")] = None,
    mode: Annotated[str, typer.Option(help="train (a training step) or md (one LAMMPS MD step, forces only, "
                                           "one box over all GPUs; needs a '# mode: md' cost table).")] = "train",
    top_k: Annotated[int, typer.Option(min=1, max=100, help="Alternatives to keep and show.")] = 5,
    memory_gib: MemoryGib = None,
    out: Annotated[Path | None, typer.Option(parser=output_path, help="Write the plan here (.yaml, or .json).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Pick replicas x domains (and the domain grid) for the fastest step that fits."""

    def action() -> None:
        from hardware_profiles import HardwareOverrides, load_hardware
        from meshcore.errors import InputError, SpecError
        from planner.outputs.inferplan import dumps
        from planner.workloads.mlip.inputs import load_cost_table
        from planner.workloads.mlip.plan import mlip_document, mlip_summary
        from planner.workloads.mlip.search import search_mlip
        from planner.workloads.mlip.spec import MlipJob, MlipMode

        if mode not in {m.value for m in MlipMode}:
            raise InputError(f"--mode must be one of {', '.join(m.value for m in MlipMode)}, got {mode!r}")
        if (atoms is None) == (sizes is None):
            raise InputError("give --atoms (structures of one size) or --sizes (a CSV of atoms,count), not both or "
                             "neither")
        if sizes is not None:
            _plan_sizes(sizes, costs, hardware, gpus, mode, structures, memory_gib, out, as_json)
            return
        assert atoms is not None
        try:
            job = MlipJob(atoms, structures, gpus, MlipMode(mode))
        except SpecError as exc:
            raise InputError(str(exc)) from None
        table = load_cost_table(costs)
        cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
        document = mlip_document(search_mlip(table, job, cluster, top_k), job, cluster, costs, table)
        write_and_print(document, out, as_json, dumps, mlip_summary)

    run(action)


def _plan_sizes(sizes: str, costs: str, hardware: str, gpus: int, mode: str, structures: int,
                memory_gib: float | None, out: Path | None, as_json: bool) -> None:
    """`mlip plan --sizes`: a data-parallel step over structures of different sizes (workloads/mlip/mixed.py)."""
    from hardware_profiles import HardwareOverrides, load_hardware
    from meshcore.checks import MAX_GPUS, optional_integer
    from meshcore.errors import InputError
    from planner.outputs.inferplan import dumps
    from planner.workloads.mlip.inputs import load_cost_table, load_sizes
    from planner.workloads.mlip.mixed import evaluate_mixed
    from planner.workloads.mlip.plan import mixed_document, mixed_summary

    if mode != "train" or structures != 1:
        raise InputError("--sizes plans a training step (--mode train) and counts the structures itself (no "
                         "--structures)")
    optional_integer(gpus, "--gpus", 1, MAX_GPUS)
    table = load_cost_table(costs)
    if table.mode.value != "train":
        raise InputError(f"cost table {table.name!r} times {table.mode.value} steps; --sizes needs a training table")
    step = load_sizes(sizes)
    cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
    document = mixed_document(evaluate_mixed(table, step, gpus, cluster), step, cluster, costs, sizes)
    write_and_print(document, out, as_json, dumps, mixed_summary)
