"""A data-parallel training step over structures of different sizes (`meshplan mlip plan --sizes`): every GPU a
replica, each replica's share of the step's structures collated into one graph (as MACE's loader batches them) and
priced by the cost table at its total atoms (same density, so the same edges per atom as the table's boxes); the
step waits for the slowest replica, then all-reduces the gradients (cost.py's all-reduce). The table's time never
falls as atoms grow, so the slowest replica is the one with the most atoms: the shares come from balance.balance
(the least largest atom sum; exact or within LPT's bound) and, beside it, from MACE's deal by count
(DistributedSampler over a shuffled order: the mean over SHUFFLES seeded shuffles, and how many of them leave a
replica a share that does not fit). Memory: the table's at the largest share plus the optimizer state and buffers,
as cost.py counts them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from cost_models.comm.collectives import Collective, collective_time
from meshcore import GIB, ClusterSpec
from meshcore.errors import InfeasibleError
from planner.workloads.mlip.balance import Partition, balance, by_count
from planner.workloads.mlip.cost import BUFFER_GIB, PARAM_STATE_BYTES, interpolate
from planner.workloads.mlip.spec import MlipCostTable

SHUFFLES = 200


@dataclass(frozen=True)
class MixedPrediction:
    """The balanced step and, for comparison, MACE's deal by count on the same structures."""

    partition: Partition
    step_s: float
    compute_s: float
    allreduce_s: float
    memory_bytes: float
    memory_capacity: float
    by_count_step_s: float  # mean over the shuffles
    by_count_max_atoms: float  # mean over the shuffles of the largest share
    by_count_too_big: float  # share of the shuffles whose largest share does not fit
    structures: int

    @property
    def replicas(self) -> int:
        return len(self.partition.groups)

    @property
    def structures_per_s(self) -> float:
        return self.structures / self.step_s


def _memory(table: MlipCostTable, atoms: float) -> float:
    return interpolate(table, atoms)[1] + table.params * PARAM_STATE_BYTES + BUFFER_GIB * GIB


def evaluate_mixed(table: MlipCostTable, sizes: Sequence[int], gpus: int, cluster: ClusterSpec) -> MixedPrediction:
    allreduce = collective_time(Collective.ALL_REDUCE, table.params * 4.0, gpus, 1, cluster)
    part = balance(sizes, gpus)
    compute = interpolate(table, part.makespan)[0]
    memory, capacity = _memory(table, part.makespan), cluster.gpu.memory_gib * GIB
    if memory > capacity:
        raise InfeasibleError(f"the step's {len(sizes)} structures ({sum(sizes)} atoms) do not fit on {gpus} GPUs: "
                              f"the largest balanced share, {part.makespan} atoms, needs {memory / GIB:.1f} GiB of "
                              f"{cluster.gpu.memory_gib:g} GiB; use more GPUs or fewer structures per step")
    rng = random.Random(0)
    shuffled = list(sizes)
    largest = []
    for _ in range(SHUFFLES):
        rng.shuffle(shuffled)
        largest.append(max(sum(g) for g in by_count(shuffled, gpus)))
    by_count_s = sum(interpolate(table, a)[0] for a in largest) / SHUFFLES + allreduce
    too_big = sum(_memory(table, a) > capacity for a in largest) / SHUFFLES
    return MixedPrediction(part, compute + allreduce, compute, allreduce, memory, capacity, by_count_s,
                           sum(largest) / SHUFFLES, too_big, len(sizes))
