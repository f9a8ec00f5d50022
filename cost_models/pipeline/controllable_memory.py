"""V-Half and V-Min: the memory-bounded V schedules of Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable
Memory" (NeurIPS 2024, arXiv 2405.15362), built the way its section 4 builds them.

Two chunks per rank placed as a V (chunk i going down on rank i, chunk 2p − 1 − i coming back up, as ZB-V), the
backward split into input gradient B and weight gradient W. On a grid of unit slots (T_F = T_B = T_W, six slots a
micro-batch per rank) a building block fixes, per rank i, the slots of one micro-batch's four F and B passes
(`building_block`); the schedule repeats it every six slots, puts each W into the first free slot after its B
(`fill_w`), and squeezes the warm-up and the cool-down: every op there moves to the earliest free slot its inputs
allow that does not raise the peak activation memory the repeated block has (`squeeze`). The paper's blocks
(section 4.2, Figure 4; the authors' repository, zbv_greedy.py, gives their slot offsets):

  V-Min   offsets i, 2p − 1 − i, 2p + g + i, 4p + g − 1 − i   (g = 2 when 3 | p, else 0)
  V-Half  offsets 2i, 3p − 2 − i, 3p + g + 2i − 1, 6p + g − 2 − i   (g = 3 when 2 | p, else 0)

(F down, F up, B up, B down). A block's lifespan, first F to last W, sets the peak: about (p + 4)/3 micro-batches
of a stage for V-Min and (p + 2)/2 for V-Half, against p for 1F1B and ZB-V (the repository's table). Bubbles, same
table, as shares of 1F1B's step (m + p − 1)(T_F + T_B + T_W): V-Half B/2 and V-Min 2B/3 plus an O(p) overhead,
B = (p − 1)/(m + p − 1) being 1F1B's.

The orders are per rank, tuples of `Op`; the simulator (cost_models.simulator) runs them with any op times.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from cost_models.pipeline.simulator import Op, OpKind

PERIOD = 6  # slots one micro-batch takes on a rank: F, B and W of two chunks


class VMemory(str, Enum):
    """How much activation memory the V schedule may hold (the paper's building blocks)."""

    MIN = "min"  # about a third of 1F1B's
    HALF = "half"  # about half of 1F1B's


# the four passes of a micro-batch on a rank, in the order the building block lists them
F_DOWN, F_UP, B_UP, B_DOWN = range(4)


def building_block(memory: VMemory, pp: int) -> tuple[tuple[int, int, int, int], ...]:
    """Per rank, the slots of one micro-batch's F down, F up, B up and B down in the paper's V-Min or V-Half block
    (2405.15362 section 4.2, Figure 4): the down chunk's forward walks one slot a rank (V-Min) or two (V-Half), the
    up chunk's comes back one a rank, and the gap g keeps the four passes on distinct slots modulo the period."""
    if memory is VMemory.MIN:
        g = 2 if pp % 3 == 0 else 0
        return tuple((i, 2 * pp - 1 - i, 2 * pp + g + i, 4 * pp + g - 1 - i) for i in range(pp))
    g = 3 if pp % 2 == 0 else 0
    return tuple((2 * i, 3 * pp - 2 - i, 3 * pp + g + 2 * i - 1, 6 * pp + g - 2 - i) for i in range(pp))


@dataclass
class RankSlots:
    """One rank's slots: per pass kind (F down, F up, B up, B down) a slot per micro-batch, and the W passes' slots
    (per chunk, up first, when `fill_w` split them; one list of both otherwise)."""

    passes: list[list[int]]
    weights: list[list[int]]

    def taken(self) -> set[int]:
        return {s for slots in self.passes + self.weights for s in slots}

    def peak(self) -> int:
        """Most chunk activations held at once: an F adds one, a W frees one; where the W passes are not placed yet
        each free slot runs one that waits (the building blocks' accounting, B frees nothing). The waiting W are a
        queue served one a free slot, so by slot t D(t) = min over u <= t of A(u) + S(t) − S(u) have run (A the B
        passes, S the free slots, both counted to the slot). numpy loads here, with the first V-Half or V-Min order,
        not at start-up."""
        import numpy as np

        forwards = np.fromiter((s for k in (F_DOWN, F_UP) for s in self.passes[k]), int)
        backwards = np.fromiter((s for k in (B_UP, B_DOWN) for s in self.passes[k]), int)
        weights = np.fromiter((s for w in self.weights for s in w), int)
        horizon = int(max(forwards.max(), backwards.max(), weights.max() if weights.size else 0)) + 1
        held = np.zeros(horizon, int)
        np.add.at(held, forwards, 1)
        if weights.size:
            np.add.at(held, weights, -1)
            return int(np.cumsum(held).max())
        arrived = np.zeros(horizon, int)
        arrived[backwards] = 1
        free = np.ones(horizon, int)
        free[forwards] = free[backwards] = 0
        a, f = np.cumsum(arrived), np.cumsum(free)
        done = f + np.minimum(np.minimum.accumulate(a - f), 0)
        return int((np.cumsum(held) - done).max())


def fill_w(rank: RankSlots, split: bool) -> None:
    """Put each W into the first free slot after its B (the paper's rule for W: fill what would idle), the up
    chunk's first when both wait; the rest after the last slot. `split` keeps the two chunks' W apart."""
    backwards = sorted((s, k) for k in (B_UP, B_DOWN) for s in rank.passes[k])
    taken = {s for slots in rank.passes for s in slots}  # any W placed before is placed again
    rank.weights = [[], []] if split else [[]]
    waiting = [0, 0]
    slot, nxt = 0, 0
    while nxt < len(backwards) or any(waiting):
        if nxt < len(backwards) and backwards[nxt][0] == slot:
            waiting[(backwards[nxt][1] == B_DOWN) if split else 0] += 1
            nxt += 1
        elif slot not in taken:
            for w in range(2):
                if waiting[w]:
                    rank.weights[w].append(slot)
                    waiting[w] -= 1
                    break
        slot += 1


def _ready(ranks: list[RankSlots], r: int, kind: int, mb: int) -> int:
    """The first slot pass `kind` of micro-batch `mb` on rank `r` may take: after its inputs (the same pass on the
    rank before for F down and B up, after for F up and B down; the rank's previous pass of the micro-batch) and
    after the same pass of the micro-batch before."""
    own = ranks[r].passes
    ready = -1
    if kind in (F_DOWN, B_UP) and r > 0:
        ready = ranks[r - 1].passes[kind][mb]
    if kind in (F_UP, B_DOWN) and r + 1 < len(ranks):
        ready = max(ready, ranks[r + 1].passes[kind][mb])
    if kind > F_DOWN:
        ready = max(ready, own[kind - 1][mb])
    if mb > 0:
        ready = max(ready, own[kind][mb - 1])
    return ready + 1


def squeeze(ranks: list[RankSlots], with_w: bool) -> None:
    """Move each op of the warm-up (only `with_w`, W placed) and of the cool-down to the earliest free slot its
    inputs allow that keeps the rank's peak within the schedule's (2405.15362 section 4: the repeated blocks'
    start and end are squeezed, the steady phase stays). Ops are visited in slot order, so what an op waits on has
    already moved. The warm-up ends at rank 0's first B down, the cool-down starts at the first last F down."""
    limit = max(rank.peak() for rank in ranks)
    m = len(ranks[0].passes[F_DOWN])
    kinds = 5 if with_w else 4
    ops = sorted((rank.passes[k][mb] if k < 4 else rank.weights[0][mb], r, k, mb)
                 for r, rank in enumerate(ranks) for k in range(kinds) for mb in range(m * (2 if k == 4 else 1)))
    placed: list[set[int]] = [set() for _ in ranks]
    phase = 0
    for slot, r, kind, mb in ops:
        if phase == 0 and kind == B_DOWN and r == 0:
            phase = 1
        if phase == 1 or (phase == 0 and not with_w):
            phase += phase == 1 and kind == F_DOWN and mb == m - 1
            placed[r].add(slot)
            continue
        rank = ranks[r]
        times = rank.passes[kind] if kind < 4 else rank.weights[0]
        if kind < 4:
            ready = _ready(ranks, r, kind, mb)
        else:  # after its B, and after the W before it
            ready = max(sorted(rank.passes[B_UP] + rank.passes[B_DOWN])[mb], times[mb - 1] if mb else -1) + 1
        for earlier in range(ready, slot):
            if earlier not in placed[r]:
                times[mb] = earlier
                if rank.peak() <= limit:
                    break
        else:
            times[mb] = slot
        placed[r].add(times[mb])


def compact(ranks: list[RankSlots]) -> None:
    """Each op at the first slot its rank's previous op and its inputs leave it, the order kept (unit times, no
    send latency): what running the squeezed order does, before the next squeeze."""
    m = len(ranks[0].passes[F_DOWN])
    ops = sorted((rank.passes[k][mb], r, k, mb) for r, rank in enumerate(ranks) for k in range(4) for mb in range(m))
    ops += [(s, r, 4, mb) for r, rank in enumerate(ranks) for mb, s in enumerate(rank.weights[0] if rank.weights
                                                                                   else ())]
    ops.sort()
    free = [0] * len(ranks)
    for _, r, kind, mb in ops:
        rank = ranks[r]
        if kind < 4:
            start = max(_ready(ranks, r, kind, mb), free[r])
            rank.passes[kind][mb] = start
        else:
            start = max(rank.weights[0][mb - 1] + 1 if mb else 0, free[r])
            rank.weights[0][mb] = start
        free[r] = start + 1


def v_slots(memory: VMemory, pp: int, m: int) -> list[RankSlots]:
    """The schedule on the slot grid: the block repeated for m micro-batches, squeezed with its W placed and run
    (`compact`), squeezed again without them (the cool-down's F and B, W free to follow) and run, and the W put
    back per chunk."""
    ranks = [RankSlots([[s + PERIOD * j for j in range(m)] for s in block], [])
             for block in building_block(memory, pp)]
    for rank in ranks:
        fill_w(rank, split=False)
    squeeze(ranks, with_w=True)
    compact(ranks)
    for rank in ranks:
        rank.weights = []
    squeeze(ranks, with_w=False)
    for rank in ranks:
        fill_w(rank, split=False)
    compact(ranks)
    for rank in ranks:
        fill_w(rank, split=True)
    return ranks


def v_memory_order(memory: VMemory, rank: int, pp: int, m: int) -> tuple[Op, ...]:
    """Rank `rank`'s ops of V-Min or V-Half (module docstring) in slot order: chunk `rank` going down, chunk
    2p − 1 − rank coming back up; the k-th W of a chunk is micro-batch k's."""
    slots = v_slots(memory, pp, m)[rank]
    down, up = rank, 2 * pp - 1 - rank
    kinds = ((OpKind.F, down), (OpKind.F, up), (OpKind.B, up), (OpKind.B, down))
    timed = [(s, Op(kind, mb, chunk)) for (kind, chunk), times in zip(kinds, slots.passes, strict=True)
             for mb, s in enumerate(times)]
    timed += [(s, Op(OpKind.W, mb, chunk)) for chunk, times in zip((up, down), slots.weights, strict=True)
              for mb, s in enumerate(times)]
    return tuple(op for _, op in sorted(timed, key=lambda t: t[0]))


def paper_peak(memory: VMemory, pp: int) -> float:
    """The peak activations the paper states, in micro-batches of a whole stage: (p + 4) // 3 for V-Min and
    (p + 2) // 2 for V-Half (the authors' table; 1F1B holds p)."""
    return float((pp + 4) // 3 if memory is VMemory.MIN else (pp + 2) // 2)
