"""One MD step of a graph interatomic potential in LAMMPS over a px x py x pz grid of spatial domains, one MPI rank
and GPU each: a pure function of the cost table (measured forces-only: `mode: md`), the job and the cluster.

How LAMMPS runs it (LAMMPS manual: "Parallel algorithms", `neighbor`, `comm_modify`; the pair styles' sources):
- every rank owns the atoms in its brick (N/d of a box of N atoms at density ρ, a, b, c = L/px, L/py, L/pz with
  L = (N/ρ)^(1/3)) and holds ghost copies of the atoms within the communication cutoff g + skin of its brick,
  periodic images included (the skin, 2 Å in metal units, is LAMMPS's neighbour-list margin);
- g is the table's `ghost_depth_a`, else layers x cutoff (pair_style mace; pair_style symmetrix/mace enforces
  2 x cutoff + skin for its two layers);
- Comm::borders fills the shell dimension by dimension, each dimension's two swaps carrying a slab that includes the
  ghosts already received:  x: ρ·2h·b·c,  y: ρ·2h·(a+2h)·c,  z: ρ·2h·(a+2h)(b+2h),  h = g + skin,
  whose sum is the shell ρ·((a+2h)(b+2h)(c+2h) − abc); one forward (or reverse) communication runs the six swaps
  one after another, half a slab each, to the neighbour in that dimension (a shell deeper than a brick takes one
  more swap per brick width, CommBrick's maxneed; a dimension of one domain swaps with itself: a copy on the GPU,
  not priced); ranks are numbered as MPI_Cart_create numbers them (z fastest), so the
  neighbour in z is 1 rank away, in y pz, in x py·pz: over NVLink while that is inside a node, else the NIC;
- every step sends the ghosts' positions forward (3 doubles) before the force call and their forces back (newton
  on) after it;
- where the work goes (`md_scheme`): GHOSTS runs the model on the N/d owned atoms and every ghost (pair_style
  mace: its ghost work is the redundancy DistMLIP's paper measures against); MESSAGE_PASSING runs it on the owned
  atoms only and, between consecutive layers, sends the ghosts' node features forward (`halo_bytes` each) and
  their gradients back after the backward pass (pair_symmetrix_mace_kokkos.cpp, compute_mpi_message_passing:
  nodes = the owned atoms, comm->forward_comm of H1 = num_LM x num_channels doubles, comm->reverse_comm of its
  gradient): layers − 1 exchanges each way;
- each swap also has a fixed cost the transfer does not show (pack and unpack kernels, fences, host staging without
  GPU-aware MPI), the table's `swap_s`, measured on the pair style (a multi-rank run of a box with next to nothing
  to compute, less its one-rank step and the modelled transfer, over its added swaps); it is priced on the swaps the
  multi-rank step adds to the one-rank step the table timed: the feature exchanges' swaps, self-swaps included (a
  one-rank run of symmetrix or ML-IAP exchanges no features); positions and forces swap on one rank too (periodic
  images), so their fixed cost is in the table already;
- time on the owned (and ghost) atoms is the table's at that count; memory is the table's at that count, plus the
  ghosts' feature buffers and their gradients under message passing, plus fp32 weights.
Not priced: the neighbour-list rebuild and atom migration every few steps (LAMMPS's `neigh_modify every`), the
integrator (a few vector operations per atom), thermo output.
"""

from __future__ import annotations

import math

from cost_models.comm.collectives import p2p_time
from meshcore import GIB, ClusterSpec
from planner.workloads.mlip.cost import BUFFER_GIB, MlipPrediction, interpolate
from planner.workloads.mlip.spec import MdScheme, MlipCostTable, MlipJob, MlipSplit

GHOST_BYTES = 24  # three float64 coordinates forward, three force components back
SKIN_A = 2.0  # LAMMPS's default neighbour skin in metal units (Å)


def ghost_depth(table: MlipCostTable) -> float:
    """The pair style's ghost cutoff g in Å: the table's `ghost_depth_a`, else layers x cutoff (a message-passing
    model run once per step on owned and ghost atoms)."""
    return table.ghost_depth_a or table.layers * table.cutoff_a


def ghost_slabs(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> tuple[float, float, float]:
    """Ghost atoms of one brick brought by the x, y and z swaps (module docstring); none on one GPU."""
    if grid == (1, 1, 1):
        return 0.0, 0.0, 0.0
    side = float((atoms / table.density) ** (1.0 / 3.0))
    a, b, c = (side / p for p in grid)
    h = ghost_depth(table) + SKIN_A
    rho = table.density
    return rho * 2 * h * b * c, rho * 2 * h * (a + 2 * h) * c, rho * 2 * h * (a + 2 * h) * (b + 2 * h)


def md_ghosts(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> float:
    """Ghost atoms of one brick, periodic images included: the shell g + skin deep; 0 on one GPU."""
    return sum(ghost_slabs(table, atoms, grid))


def swaps(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """Swaps per direction in each dimension: LAMMPS's CommBrick::setup, maxneed = int(cutghost·procgrid/prd) + 1,
    so one while the shell g + skin is thinner than a brick and one more per brick width it spans."""
    side = float((atoms / table.density) ** (1.0 / 3.0))
    h = ghost_depth(table) + SKIN_A
    return tuple(int(h * p / side) + 1 for p in grid)  # type: ignore[return-value]


def exchange_s(bytes_per_ghost: float, slabs: tuple[float, float, float], grid: tuple[int, int, int],
               need: tuple[int, int, int], cluster: ClusterSpec) -> float:
    """One LAMMPS forward (or reverse) communication of `bytes_per_ghost` per ghost: the swaps one after another,
    2·need of them per dimension, each carrying an equal share of its dimension's slab to the neighbour `stride`
    ranks away (z: 1, y: pz, x: py·pz)."""
    strides = (grid[1] * grid[2], grid[2], 1)
    return sum(2 * n * p2p_time(ghosts / (2 * n) * bytes_per_ghost, stride, cluster)
               for p, ghosts, stride, n in zip(grid, slabs, strides, need, strict=True) if p > 1)


def added_swaps(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> int:
    """Swaps a multi-rank step adds to the one-rank step: 2·(layers − 1) feature exchanges under message passing,
    each 2·need swaps per dimension, self-swaps included; none under `ghosts` or on one GPU."""
    if grid == (1, 1, 1) or table.md_scheme is not MdScheme.MESSAGE_PASSING:
        return 0
    return 2 * (table.layers - 1) * 2 * sum(swaps(table, atoms, grid))


def lammps_grid(domains: int) -> tuple[int, int, int]:
    """The grid LAMMPS picks by default (`processors * * *`) for a cubic box: the factorisation with the least brick
    surface, 2L²(px + py + pz)/domains, i.e. the least px + py + pz (ProcMap::factor/best_factors)."""
    return min(((px, py, domains // px // py) for px in range(1, domains + 1) if domains % px == 0
                for py in range(1, domains // px + 1) if (domains // px) % py == 0),
               key=lambda g: (sum(g), g))


def evaluate_md(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec, grid: tuple[int, int, int]) -> MlipPrediction:
    """One MD step = the table's forces-only time at the atoms the scheme computes + LAMMPS's position and force
    communication + (message passing) the features' exchanges and their swaps' fixed cost; `structures_per_s` is
    MD steps per second."""
    d = math.prod(grid)
    slabs = ghost_slabs(table, job.atoms, grid)
    ghosts = sum(slabs)
    passing = table.md_scheme is MdScheme.MESSAGE_PASSING
    seconds, memory = interpolate(table, job.atoms / d + (0.0 if passing else ghosts))
    exchanges = 2 * (table.layers - 1) if passing else 0
    need = swaps(table, job.atoms, grid)
    comm = (2 * exchange_s(GHOST_BYTES, slabs, grid, need, cluster)
            + exchanges * exchange_s(table.halo_bytes, slabs, grid, need, cluster)
            + added_swaps(table, job.atoms, grid) * table.swap_s)
    step = seconds + comm
    memory += exchanges * ghosts * table.halo_bytes + table.params * 4.0 + BUFFER_GIB * GIB
    return MlipPrediction(MlipSplit(1, grid), step, seconds, comm, 0.0, memory, cluster.gpu.memory_gib * GIB,
                          1.0 / step)
