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
    atoms: Annotated[int, typer.Option(help="Atoms per structure.")],
    structures: Annotated[int, typer.Option(help="Structures per training step (over all GPUs).")] = 1,
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
        try:
            job = MlipJob(atoms, structures, gpus, MlipMode(mode))
        except SpecError as exc:
            raise InputError(str(exc)) from None
        table = load_cost_table(costs)
        cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
        document = mlip_document(search_mlip(table, job, cluster, top_k), job, cluster, costs, table)
        write_and_print(document, out, as_json, dumps, mlip_summary)

    run(action)
