"""What a LAMMPS user applies from an MD plan: the domain grid (`processors`), the ghost cutoff (`comm_modify
cutoff`, the shell md.py priced plus the default metal-units neighbour skin), and the launch line (one MPI rank
per GPU with the KOKKOS package, newton on as the MLIP pair styles require). The pair_style line itself names the
user's deployed model file and is left to them (pair_style mace / allegro, pair_coeff * * model.pt ...)."""

from __future__ import annotations

from typing import Any

from meshcore import ClusterSpec
from planner.workloads.mlip.cost import MlipPrediction
from planner.workloads.mlip.md import SKIN_A, ghost_depth
from planner.workloads.mlip.spec import MlipCostTable


def lammps_input(best: MlipPrediction, table: MlipCostTable, cluster: ClusterSpec) -> dict[str, Any]:
    """The input-script lines and the launch command for `best` (an MD prediction)."""
    px, py, pz = best.grid
    ranks = px * py * pz
    per_node = min(ranks, cluster.gpus_per_node)
    lines = [f"processors {px} {py} {pz}", "newton on"]
    if ranks > 1:
        lines.append(f"comm_modify cutoff {ghost_depth(table) + SKIN_A:g}")
    nodes = -(-ranks // per_node)
    launch = (f"mpirun -np {ranks}{f' --npernode {per_node}' if nodes > 1 else ''} lmp -k on g {per_node} -sf kk "
              "-pk kokkos newton on neigh half -in in.lammps")
    note = ("one GPU: pair_style mace takes no_domain_decomposition here (no ghosts)" if ranks == 1 else
            f"ghost cutoff {ghost_depth(table):g} A ({'ghost_depth_a' if table.ghost_depth_a else 'layers x cutoff'})"
            f" + {SKIN_A:g} A skin")
    return {"input": lines, "launch": launch, "note": note}
