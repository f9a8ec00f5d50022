"""The layer kinds a V or wave rank can hold (planner.search.held_kinds): the DP is every placement of the rank's runs,
every layout pricing can return has each rank within it, and the least grows by at least the least value a layer."""

from __future__ import annotations

import itertools
import random

import pytest

from meshcore import Schedule
from meshcore.layout import Pipeline
from planner.search.held_kinds import HeldKinds, covered, runs
from planner.search.splits import v_chunks


def _kinds(rng: random.Random, layers: int) -> tuple[bool, ...]:
    """Random layer kinds: alternating (Llama 4 Maverick), dense first then MoE (DeepSeek-V3), or any."""
    shape = rng.choice(["alternate", "first", "any"])
    if shape == "alternate":
        every, first = rng.choice([2, 3]), rng.randint(0, 2)
        return tuple(i >= first and (i - first) % every == every - 1 for i in range(layers))
    if shape == "first":
        first = rng.randint(1, layers)
        return tuple(i >= first for i in range(layers))
    return tuple(rng.random() < 0.5 for _ in range(layers))


def _every_placement(marks: tuple[bool, ...], sizes: list[int]) -> list[int]:
    """Marked layers covered by every placement of disjoint runs of these sizes, in every order."""
    found = []
    for order in set(itertools.permutations(sizes)):
        total = sum(order)
        gaps = len(marks) - total  # spread over the len(order) + 1 places between and around the runs
        for cut in itertools.combinations_with_replacement(range(gaps + 1), len(order)):
            pos, covered_now = 0, 0
            for (before, after), size in zip(itertools.pairwise((0, *cut)), order, strict=True):
                pos += after - before
                covered_now += sum(marks[pos:pos + size])
                pos += size
            found.append(covered_now)
    return found


@pytest.mark.parametrize("seed", range(60))
def test_covered_is_every_placement(seed: int) -> None:
    """`covered` is the most marked layers over every placement of the runs (brute force over orders and gaps)."""
    rng = random.Random(seed)
    layers, vpp = rng.randint(1, 10), rng.choice([2, 3, 4])
    marks = _kinds(rng, layers)
    for n in range(layers + 1):
        size, small, large = runs(n, vpp)
        assert covered(marks, n, vpp) == max(_every_placement(marks, [size] * small + [size + 1] * large))


def _rank_layers(chunks: tuple[int, ...], placement: list[int], rank: int) -> list[int]:
    """The layer indices rank `rank` holds when chunk c (sizes in model order) lives on placement[c]."""
    edges = list(itertools.accumulate(chunks, initial=0))
    return [i for c, r in enumerate(placement) if r == rank for i in range(edges[c], edges[c + 1])]


@pytest.mark.parametrize("seed", range(60))
def test_every_priced_layout_holds_within_the_counts(seed: int) -> None:
    """Each rank of every solved split (v_chunks of every per-rank count) and of the balanced chunks, for ZB-V and the
    wave, holds between fewest[n] and most[n] MoE layers of its n, so any per-kind quantity of its layers is at least
    `HeldKinds.least` of n."""
    rng = random.Random(seed)
    schedule = rng.choice([Schedule.ZB_V, Schedule.WAVE])
    pp = rng.randint(2, 4)
    vpp = 2 if schedule is Schedule.ZB_V else rng.choice([2, 3, 4])
    layers = rng.randint(pp * vpp, pp * vpp + 8)
    kinds = _kinds(rng, layers)
    held = HeldKinds.of(kinds, vpp)
    pipe = Pipeline(pp=pp, vpp=vpp, schedule=schedule)
    placement = [pipe.chunk_rank(c) for c in range(pp * vpp)]
    dense, moe = rng.uniform(0.1, 2), rng.uniform(0.1, 2)
    least = held.least(dense, moe)
    layouts = [pipe.chunk_layers(layers)]
    for cuts in itertools.combinations(range(1, layers), pp - 1):
        layouts.append(v_chunks(tuple(b - a for a, b in itertools.pairwise([0, *cuts, layers])), vpp))
    for chunks in layouts:
        for rank in range(pp):
            ids = _rank_layers(chunks, placement, rank)
            x = sum(kinds[i] for i in ids)
            assert held.fewest[len(ids)] <= x <= held.most[len(ids)], (chunks, rank)
            assert least[len(ids)] <= dense * (len(ids) - x) + moe * x + 1e-12


@pytest.mark.parametrize("seed", range(30))
def test_least_grows_by_the_least_layer(seed: int) -> None:
    """P(n + 1) − P(n) >= the least per-layer value (what `SplitPaths.feasible`'s greedy needs)."""
    rng = random.Random(seed)
    layers = rng.randint(1, 30)
    held = HeldKinds.of(_kinds(rng, layers), rng.choice([2, 3, 4, 8]))
    dense, moe = rng.uniform(0.1, 2), rng.uniform(0.1, 2)
    least = held.least(dense, moe)
    assert least[0] == 0
    assert all(b - a >= min(dense, moe) * (1 - 1e-12) for a, b in itertools.pairwise(least))


def test_alternating_v_rank_holds_all_but_one_of_each() -> None:
    """Llama 4 Maverick's stack (48 layers, MoE every second): a ZB-V rank of 2k layers holds at least k − 1 MoE and
    k − 1 dense layers (two runs of k, each at least ⌊k/2⌋ of each kind), where every layer at the cheaper kind
    assumed none."""
    kinds = tuple(i % 2 == 1 for i in range(48))
    held = HeldKinds.of(kinds, 2)
    for k in range(1, 24):
        low = 2 * (k // 2)
        assert held.fewest[2 * k] == low and held.most[2 * k] == 2 * k - low
