"""One MD step of a graph interatomic potential in LAMMPS over a px x py x pz grid of spatial domains, one MPI rank
and GPU each: a pure function of the cost table (measured forces-only: `mode: md`), the job and the cluster.

How LAMMPS runs it (LAMMPS manual, "Parallel algorithms" and comm_modify; pair_style mace / allegro docs):
- every rank owns the atoms in its brick (N/d of a box of N atoms at density ρ) and holds ghost copies of the atoms
  within the ghost cutoff g of its brick, periodic images included;
- a model of `layers` message-passing layers of cutoff r run once per step on owned + ghost atoms needs the ghosts'
  own neighbourhoods up to the last layer: g = layers·r (pair_style mace), or g = r for a strictly local model
  (Allegro: `ghost_depth_a` in the table). The ghost count is the shell volume
      ghosts = ρ·((a + 2g)(b + 2g)(c + 2g) − a·b·c),  a, b, c = L/px, L/py, L/pz,  L = (N/ρ)^(1/3);
  on one GPU pair_style mace's no_domain_decomposition takes the periodic images without ghosts (0);
- each step LAMMPS sends the ghosts' positions forward (3 doubles each) before the force call and their forces back
  (reverse communication, newton on) after it, in six swaps (±x, ±y, ±z) one after another:
      comm = 2 · 6 · p2p(ghosts · 24 B / 6)
  over NVLink while the grid fits one scale-up domain, else the NIC;
- the model's forward and force backward on N/d + ghosts atoms is the table's time at that count (ghost work is paid:
  the redundancy DistMLIP's paper measures against); memory is the table's at that count plus fp32 weights.
Not priced: the neighbour-list rebuild and atom migration every few steps (LAMMPS's `neigh_modify every`), the
integrator (a few vector operations per atom), thermo output.
"""

from __future__ import annotations

from cost_models.comm.collectives import p2p_time
from meshcore import GIB, ClusterSpec
from planner.workloads.mlip.cost import BUFFER_GIB, MlipPrediction, interpolate
from planner.workloads.mlip.spec import MlipCostTable, MlipJob, MlipSplit

SWAPS = 6  # LAMMPS's Comm: one swap per direction per dimension
GHOST_BYTES = 24  # three float64 coordinates forward, three force components back


def ghost_depth(table: MlipCostTable) -> float:
    """The ghost cutoff g in Å: the table's `ghost_depth_a`, else layers x cutoff (a message-passing model run once
    per step on owned and ghost atoms)."""
    return table.ghost_depth_a or table.layers * table.cutoff_a


def md_ghosts(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> float:
    """Ghost atoms of one brick at depth `ghost_depth` (module docstring), periodic images included; 0 on one GPU."""
    if grid == (1, 1, 1):
        return 0.0
    side = float((atoms / table.density) ** (1.0 / 3.0))
    a, b, c = (side / p for p in grid)
    g = ghost_depth(table)
    return float(table.density * ((a + 2 * g) * (b + 2 * g) * (c + 2 * g) - a * b * c))


def evaluate_md(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec, grid: tuple[int, int, int]) -> MlipPrediction:
    """One MD step = the table's forces-only time at N/d + ghosts atoms + LAMMPS's forward and reverse ghost
    communication; `structures_per_s` is MD steps per second."""
    d = grid[0] * grid[1] * grid[2]
    ghosts = md_ghosts(table, job.atoms, grid)
    seconds, memory = interpolate(table, job.atoms / d + ghosts)
    stride = 1 if d <= cluster.scale_up_size else cluster.scale_up_size
    comm = 2 * SWAPS * p2p_time(ghosts * GHOST_BYTES / SWAPS, stride, cluster) if d > 1 else 0.0
    step = seconds + comm
    memory += table.params * 4.0 + BUFFER_GIB * GIB
    return MlipPrediction(MlipSplit(1, grid), step, seconds, comm, 0.0, memory, cluster.gpu.memory_gib * GIB,
                          1.0 / step)
