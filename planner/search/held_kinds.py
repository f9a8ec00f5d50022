"""How many layers of each kind a rank of a V or wave schedule can hold, so that its solved-split path and memory
bounds (planner.search.split_paths, planner.search.sim_bounds) count what its layers take at the least, not each layer
at the cheapest kind present.

A rank of ZB-V, DualPipeV (rank d holds chunks d and 2p − 1 − d) or the wave (vpp chunks, one per sweep) holds its n
layers in v = vpp runs of consecutive layers apart. In every layout pricing returns for such a candidate the sizes of
those runs are ⌊n/v⌋ and ⌈n/v⌉, n mod v of the larger (`runs`): the solved split's chunks are
planner.search.splits.v_chunks of the rank's count (the down chunk half rounded down, the rest up; the wave per
`wave_chunks`), and the balanced chunks (`Pipeline.chunk_layers`) differ by at most one layer, so a rank's do too and,
summing to n, come in the same sizes (in another order, the larger first where the middle chunks take the extra
layers). So the MoE layers x among them lie between `fewest[n]` and `most[n]`, the fewest and most that v disjoint runs
of those sizes, in any order and anywhere in the stack, can cover (`covered`: an exact DP). A quantity that adds a
value per layer by kind, a for a dense and b for an MoE layer, is a·(n − x) + b·x, linear in x, so at least its value
at the end of [fewest[n], most[n]] that b − a points to (`HeldKinds.least`): the least over every such placement. In
an alternating dense/MoE stack (Llama 4 Maverick) a run of k layers covers ⌊k/2⌋ of each kind at least, so a V rank
of n = 2k layers holds at least k − 1 of each where counting every layer at the cheaper kind assumed none.

The least grows by at least the least value per layer from n to n + 1 layers: the sizes for n + 1 are those for n
with one run of the smaller size one longer, so dropping the last layer of a longer run of a placement for n + 1
leaves a placement for n, whose value is lower by that layer's. `SplitPaths.feasible` needs this (a later start, whose
budget is lower by at most the least layer time, never ends a rank earlier)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate


def runs(n: int, vpp: int) -> tuple[int, int, int]:
    """(size, smaller, larger): a rank's n layers over its vpp chunks come as `smaller` runs of `size` layers and
    `larger` of size + 1 (module docstring)."""
    size, extra = divmod(n, vpp)
    return size, vpp - extra, extra


def covered(marks: Sequence[bool], n: int, vpp: int) -> int:
    """The most marked layers that disjoint runs of consecutive layers of `runs(n, vpp)`'s sizes, in any order, cover
    in a stack of len(marks) >= n layers. best[e][i][j]: the most with i runs of the smaller size and j of the larger
    within the first e layers; the last layer either is in no run, or ends one of either size."""
    size, small, large = runs(n, vpp)
    if size == 0:
        small = 0  # runs of no layer cover nothing, anywhere
    prefix = list(accumulate((int(m) for m in marks), initial=0))
    width = large + 1
    best = [[-1] * ((small + 1) * width) for _ in prefix]  # -1: not placeable
    for e in range(len(prefix)):
        row = best[e]
        row[0] = 0
        if e == 0:
            continue
        above = best[e - 1]
        for i in range(small + 1):
            for j in range(large + 1):
                k = i * width + j
                found = above[k]
                if i and e >= size and best[e - size][k - width] >= 0:
                    found = max(found, best[e - size][k - width] + prefix[e] - prefix[e - size])
                if j and e > size and best[e - size - 1][k - 1] >= 0:
                    found = max(found, best[e - size - 1][k - 1] + prefix[e] - prefix[e - size - 1])
                row[k] = found
    return best[-1][-1]


@dataclass(frozen=True)
class HeldKinds:
    """fewest[n], most[n]: the fewest and most MoE layers a V or wave rank holding n layers can hold (module
    docstring), n = 0 .. the stack's layers."""

    fewest: tuple[int, ...]
    most: tuple[int, ...]

    @classmethod
    def of(cls, kinds: Sequence[bool], vpp: int) -> HeldKinds:
        """Counted off the stack's layer kinds (True: MoE) for ranks of vpp chunks."""
        dense = [not k for k in kinds]
        layers = range(len(kinds) + 1)
        return cls(tuple(n - covered(dense, n, vpp) for n in layers), tuple(covered(kinds, n, vpp) for n in layers))

    def least(self, dense: float, moe: float) -> list[float]:
        """Per n, the least of dense·(n − x) + moe·x over fewest[n] <= x <= most[n]: what n layers of a rank add at the
        least, for a quantity of `dense` per dense layer and `moe` per MoE layer."""
        return [dense * (n - x) + moe * x for n, x in enumerate(self.pick(dense, moe))]

    def pick(self, dense: float, moe: float) -> tuple[int, ...]:
        """Per n, the MoE layers x at which `least` takes its value: the fewest where an MoE layer adds at least a
        dense one's, else the most."""
        return self.fewest if moe >= dense else self.most
