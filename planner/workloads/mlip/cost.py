"""Costs of a graph interatomic potential's training step under a split of the GPUs into data-parallel replicas and
spatial domains: pure functions of the cost table, the job and the cluster.

Domain decomposition (the LAMMPS/ML-IAP scheme used to run NequIP, Allegro and MACE over many GPUs; Musaelian et
al. 2023, "Scaling the leading accuracy of deep equivariant potentials to biomolecular simulations of realistic
size"): a cubic periodic box of N atoms at density ρ has side L = (N/ρ)^(1/3); a px x py x pz grid gives each GPU
a brick of a = L/px, b = L/py, c = L/pz holding N/d atoms, and a ghost shell one cutoff r deep,
    ghosts = ρ·((a + 2r)(b + 2r)(c + 2r) − a·b·c)   (capped at N − N/d: a brick never has more ghosts than others),
whose node features are refreshed before every message-passing layer (forward) and whose feature gradients are
sent back after it (backward): 2·layers exchanges of ghosts·halo_bytes per GPU. A GPU computes on its atoms and
its ghosts, priced by the cost table at N/d + ghosts atoms (ghost work is paid, not saved: conservative for
strictly local models such as Allegro, which need no per-layer exchange).
Data parallelism runs ceil(S / replicas) structures one after the other on each replica, then all-reduces the
gradients of every GPU (fp32, not overlapped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.comm.collectives import Collective, collective_time, p2p_time
from meshcore import GIB, ClusterSpec
from planner.workloads.mlip.spec import MlipCostTable, MlipJob, MlipSplit, MlipStrategy

BUFFER_GIB = 2.0  # CUDA context, NCCL and allocator slack per GPU (the transformer model's allowance)
PARAM_STATE_BYTES = 16  # fp32 weights, gradients, Adam moments


def interpolate(table: MlipCostTable, atoms: float) -> tuple[float, float]:
    """(seconds, bytes) at `atoms` by linear interpolation between the table's rows, extended linearly past its ends
    with the slope of the nearest segment (cost of equivariant message passing is linear in atoms at fixed density:
    edges per atom are ρ·4/3·π·r³), never below the first row's fixed cost share."""
    rows = table.rows
    if atoms <= rows[0].atoms:
        lo, hi = rows[0], rows[1]
    elif atoms >= rows[-1].atoms:
        lo, hi = rows[-2], rows[-1]
    else:
        i = next(k for k in range(1, len(rows)) if rows[k].atoms >= atoms)
        lo, hi = rows[i - 1], rows[i]
    w = (atoms - lo.atoms) / (hi.atoms - lo.atoms)
    seconds = lo.step_s + w * (hi.step_s - lo.step_s)
    memory = lo.memory_bytes + w * (hi.memory_bytes - lo.memory_bytes)
    return max(seconds, 0.0), max(memory, 0.0)


def ghost_atoms(table: MlipCostTable, atoms: int, grid: tuple[int, int, int]) -> float:
    """Ghost atoms of one brick (formula in the module docstring); 0 without decomposition."""
    d = grid[0] * grid[1] * grid[2]
    if d == 1:
        return 0.0
    side = float((atoms / table.density) ** (1.0 / 3.0))
    a, b, c = (side / p for p in grid)
    r = table.cutoff_a
    shell = table.density * ((a + 2 * r) * (b + 2 * r) * (c + 2 * r) - a * b * c)
    return min(shell, atoms - atoms / d)


@dataclass(frozen=True)
class MlipPrediction:
    split: MlipSplit
    step_s: float
    compute_s: float
    halo_s: float
    allreduce_s: float
    memory_bytes: float
    memory_capacity: float
    structures_per_s: float

    @property
    def fits(self) -> bool:
        return self.memory_bytes <= self.memory_capacity

    @property
    def strategy(self) -> MlipStrategy:
        return self.split.strategy

    @property
    def replicas(self) -> int:
        return self.split.replicas

    @property
    def domains(self) -> int:
        return self.split.domains

    @property
    def grid(self) -> tuple[int, int, int]:
        return self.split.grid


def evaluate_split(table: MlipCostTable, job: MlipJob, cluster: ClusterSpec, split: MlipSplit) -> MlipPrediction:
    """Step = ceil(S / replicas) x (table time at N/d + ghosts atoms + 2·layers halo exchanges) + gradient
    all-reduce. Halo exchanges run at the scale-up link while a structure's domains share a scale-up domain,
    else through the NIC (cost_models.comm.collectives.p2p_time; neighbours exchange concurrently, so one exchange
    costs one
    message of the brick's whole ghost shell)."""
    d = split.domains
    ghosts = ghost_atoms(table, job.atoms, split.grid)
    per_gpu = job.atoms / d + ghosts
    seconds, memory = interpolate(table, per_gpu)
    stride = 1 if d <= cluster.scale_up_size else cluster.scale_up_size
    halo = 2 * table.layers * p2p_time(ghosts * table.halo_bytes, stride, cluster) if d > 1 else 0.0
    rounds = math.ceil(job.structures / split.replicas)
    allreduce = collective_time(Collective.ALL_REDUCE, table.params * 4.0, job.gpus, 1, cluster)
    step = rounds * (seconds + halo) + allreduce
    memory += table.params * PARAM_STATE_BYTES + BUFFER_GIB * GIB
    return MlipPrediction(split, step, rounds * seconds, rounds * halo, allreduce, memory,
                          cluster.gpu.memory_gib * GIB, job.structures / step)
