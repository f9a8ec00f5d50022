"""A group's memory floor (planner.search.exact): whether no member of a group of candidates can fit, decided once when
its family is expanded instead of member by member when the group comes up (torchtitan's DeepSeek-V3 on 2,048 GPUs:
5,543 of its 5,727 groups dropped so, of which the search had brought 4,965 up to drop them there).

A group's members share their knobs, degrees and ZeRO stage; they differ in pipeline shape (schedule, vpp: the
micro-batches each rank keeps in flight, where the embedding and head sit) and offload choice. Each member's memory
floor (planner.search.memory_floors) bounds the least over its layouts of the largest rank's
    fixed_r + Σ over rank r's layers of (states of the layer + its stored bytes · micro-batches in flight on r),
its end ranks' fixed_r holding the embedding's and the head's states, activations and logits. The members of one head
placement (beside the embedding, or not) and one offload choice hold the same parts (`RankMemory.parts_of`) and, in
the shapes the search builds, their ends on the same ranks; they differ in the micro-batches in flight. Taking rank by
rank the least of those over the shapes (and each layer's least stored bytes: a layer fully recomputed keeps its
input only), every member's ranks cost at least these, so the least over assignments of the layers (each rank at
least one, as every layout priced gives it) of the largest rank's cost is at most each member's, and `packing_floor`
bounds that least from below. When it exceeds the GPU for every placement and offload choice, no member fits: the
group is dropped with them, its floor (`ReportedBounds.shape_floor`) never computed. Not tried: a group whose shapes
place their ends apart, or whose schedule counts its micro-batches off its orders; and one whose members' next module
sets would still be searched (`space.next_module_set`): they store less. Where few of the groups tried drop, the
search stops trying most (`GroupFloors.worth_trying`).

The test that matters is the converse of a prune's: the group floor never exceeds a member's own floor
(tests/test_search_bounds.py), so the search keeps every layout it kept before.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.pipeline.registry import pricing
from meshcore import Offload, Schedule
from planner.search.floors import packing_exceeds
from planner.search.memory_floors import ROUNDING, RankMemory
from planner.search.pricing import zero_twin
from planner.search.space import Candidate

# a group's shapes as the search holds them: (schedule, vpp, the head beside the embedding, the offload choices within
# its state bound)
Shaped = tuple[Schedule, int, bool, Sequence[frozenset[Offload]]]
GroupShapes = Sequence[Shaped]


# the least of a group's shapes with one head placement (`GroupFloors.least_shape`): embedding rank, head rank,
# micro-batches in flight per rank, those on the embedding and the head rank rounded up
Least = tuple[int, int, tuple[float, ...], int, int]


def worth_trying(asked: int, tried: int, hits: int) -> bool:
    """Whether to try a test that may settle work early (`asked` times asked so far, this one included; `hits` of the
    `tried` settled it): always for the first 16, then while one in four or more of those tried hit, and one in 32
    otherwise, to follow the search as it moves on (`GroupFloors.worth_trying`, `StateFit.none_fit`)."""
    return tried < 16 or 4 * hits >= tried or asked % 32 == 0


class GroupFloors:
    """`exceeds` for one search's groups, with the least of a group's shapes (`least_shape`) cached by (pp,
    micro-batches, shapes): the families of one pipeline depth share them."""

    def __init__(self, memory: RankMemory, capacity: float) -> None:
        self.memory, self.capacity = memory, capacity
        self._least: dict[tuple[object, ...], Least | None] = {}
        self.asked = self.tried = self.dropped = 0
        self._twins: dict[tuple[object, ...], bool] = {}  # `exceeds` of a group at ZeRO-2 whose ZeRO-3 prices alike

    def drops(self, first: Candidate, shapes: GroupShapes) -> bool:
        """Whether the group is dropped here: `exceeds`, where it is `worth_trying` (counted for that); once for a
        group and its twin at the other ZeRO stage where the two price alike (cost_models.sync.gathered_alike: the
        same bytes, so the same floor; torchtitan's pipelines, 2,472 of DeepSeek-V3's 5,727 groups)."""
        if not self.worth_trying():
            return False
        self.tried += 1
        at_two = zero_twin(first, self.memory.job)
        twin = None if at_two is None else (at_two, tuple((s, v, side, tuple(o)) for s, v, side, o in shapes))
        dropped = self._twins.get(twin) if twin is not None else None
        if dropped is None:
            dropped = self.exceeds(first, shapes)
            if twin is not None:
                self._twins[twin] = dropped
        self.dropped += dropped
        return dropped

    def worth_trying(self) -> bool:
        """Whether to try the next group (`worth_trying`, a hit a group dropped). A group's members left to their own
        floors are dropped there all the same: this decides where the search spends its time, not what it finds.
        (Every group tried, torchtitan's DeepSeek-V3 drops 97 % of its groups so and the research space's Llama-3-70B
        6 %, whose groups mostly hold a shape that fits: there the floors of the groups that never come up cost it
        7 % of its search, its 405B 10 %.)"""
        self.asked += 1
        return worth_trying(self.asked, self.tried, self.dropped)

    def exceeds(self, first: Candidate, shapes: GroupShapes) -> bool:
        """Whether no member of the group (`first` with each of `shapes` and its offload choices) can fit on the GPU:
        for each placement of the head (the shapes that hold it beside the embedding, and the others) and each
        offload choice, the packing floor of `rows` above its capacity (module docstring)."""
        placed: dict[bool, list[Shaped]] = {}
        for held in shapes:
            placed.setdefault(held[2], []).append(held)
        for alike in placed.values():
            least = self.least_shape(first, alike)
            if least is None:
                return False
            schedule, vpp, _, offloads = alike[0]
            shape = first if (schedule, vpp) == (first.schedule, first.vpp) else first.but(schedule=schedule, vpp=vpp)
            for offload in offloads:
                c = shape if offload == shape.offload else shape.but(offload=offload)
                fixed, dense, moe = self.rows(c, least)
                if not packing_exceeds(fixed, *self.memory.kind_rows(dense, moe), self.capacity, 1 - ROUNDING):
                    return False
        return True

    def least_shape(self, first: Candidate, shapes: GroupShapes) -> Least | None:
        """The ranks of the embedding and the head, which shapes of one head placement share, and rank by rank the
        least micro-batches any of them keeps in flight; None where they place the ends apart, a shape leaves a rank
        with no layer (the floors' one-layer-per-rank premise fails) or its schedule counts its micro-batches off its
        orders (built once a process, when a member of that shape comes up: not for a group that may never)."""
        m = self.memory.job.global_batch // (first.dp * first.mbs)
        key = (first.pp, m, *[(schedule, vpp) for schedule, vpp, *_ in shapes])
        if key not in self._least:
            self._least[key] = self._least_shape(first, shapes)
        return self._least[key]

    def _least_shape(self, first: Candidate, shapes: GroupShapes) -> Least | None:
        least: Least | None = None
        for schedule, vpp, *_ in shapes:
            if pricing(schedule).in_flight is None:
                return None
            emb, head, alive, at_emb, at_head, counts = self.memory.shape_of(first.but(schedule=schedule, vpp=vpp))
            if any(n_dense + n_moe == 0 for n_dense, n_moe in counts) or (
                    least is not None and (emb, head) != least[:2]):
                return None
            least = (emb, head, alive, at_emb, at_head) if least is None else (
                emb, head, tuple(map(min, least[2], alive)), min(least[3], at_emb), min(least[4], at_head))
        return least

    def rows(self, c: Candidate, least: Least) -> tuple[list[float], list[float], list[float]]:
        """(fixed_r, a dense layer's c_r, an MoE layer's c_r) per rank of the members with `c`'s head placement and
        offload choice, with `least`'s micro-batches in flight (module docstring)."""
        memory = self.memory
        acts = memory.activations(c)
        every, s_emb, first, s_head, logits, mtp, s_dense, s_moe = memory.parts_of(c, acts)
        a_dense, a_moe = memory.stored(c, acts, False)
        emb, head, alive, at_emb, at_head = least
        fixed = memory.fixed_of(c.pp, emb, head, at_emb, at_head, every, s_emb, first, s_head, logits, mtp)
        return fixed, [s_dense + a_dense * a for a in alive], [s_moe + a_moe * a for a in alive]
