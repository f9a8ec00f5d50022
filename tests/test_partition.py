"""Stage split: the DP, CP-SAT, HiGHS and brute-force enumeration agree on seeded random instances."""

from __future__ import annotations

import random

import numpy as np
import pytest

from planner.search.count_split import count_tables, solve_counts
from planner.search.count_split import least_bottleneck as count_bottleneck
from planner.search.ilp import solve_cpsat, solve_highs
from planner.search.partition import SplitProblem, brute_force, least_bottleneck, segments, solve_dp, stage_tables
from planner.search.plain_split import least_bottleneck as plain_bottleneck
from planner.search.plain_split import monotone_bottleneck, solve_plain


def _instance(seed: int) -> SplitProblem:
    """Integer microseconds and bytes, so CP-SAT's integer scaling is exact."""
    rng = random.Random(seed)
    layers = rng.randint(1, 12)
    stages = rng.randint(1, min(5, layers))
    m1 = [rng.randint(20, 60) for _ in range(stages)]
    return SplitProblem(
        num_layers=layers, num_microbatches=rng.randint(1, 16),
        t0=tuple(rng.randint(50, 400) * 1e-6 for _ in range(stages)), t1=rng.randint(100, 300) * 1e-6,
        tr=rng.randint(10, 120) * 1e-6,
        m0=tuple(float(rng.randint(50, 200)) for _ in range(stages)), m1=tuple(float(x) for x in m1),
        mr=tuple(float(rng.randint(0, x - 1)) for x in m1), transient=float(rng.randint(0, 30)),
        capacity=float(rng.randint(150, 600)), partial_recompute=rng.random() < 0.7,
        w0=tuple(rng.randint(0, 40) * 1e-6 for _ in range(stages)) if rng.random() < 0.4 else (),
        w1=rng.randint(0, 50) * 1e-6)


@pytest.mark.parametrize("seed", range(220))
def test_dp_ilp_and_brute_force_agree(seed: int) -> None:
    p = _instance(seed)
    ref, dp = brute_force(p), solve_dp(p)
    cpsat, highs = solve_cpsat(p).split, solve_highs(p).split
    assert (ref is None) == (dp is None) == (cpsat is None) == (highs is None)
    if ref is None:
        return
    for other in (dp, cpsat, highs):
        assert other is not None and other.objective == pytest.approx(ref.objective, rel=1e-9)
        assert sum(other.layers) == p.num_layers and min(other.layers) >= 1


def test_ends_get_fewer_layers_when_they_carry_more() -> None:
    """Uniform layers, embedding on the first stage and a big LM head on the last: layers move inward."""
    p = SplitProblem(16, 64, t0=(2.0, 1.0, 1.0, 3.0), t1=1.0, tr=0.3, m0=(0.0,) * 4, m1=(1.0,) * 4,
                     mr=(0.5,) * 4, transient=0.0, capacity=100.0, partial_recompute=False)
    split = solve_dp(p)
    assert split is not None and split.bottleneck == 5.0
    assert split.layers[0] < split.layers[1] and split.layers[-1] < split.layers[2]


def test_memory_forces_recomputation_on_the_first_stage() -> None:
    """Stage 0 keeps the most micro-batches in flight: it is the one that recomputes."""
    kw = dict(t0=(1.0,) * 4, t1=1.0, tr=0.3, m0=(120.0, 30.0, 20.0, 10.0), m1=(40.0, 30.0, 20.0, 10.0),
              mr=(30.0, 20.0, 10.0, 0.0), transient=5.0, capacity=100.0)
    split = solve_dp(SplitProblem(8, 32, partial_recompute=True, **kw))  # type: ignore[arg-type]
    assert split is not None and split.recompute[0] > 0 and split.recompute[-1] == 0
    assert solve_dp(SplitProblem(8, 32, partial_recompute=False, **kw)) is None  # type: ignore[arg-type]


def _large(seed: int) -> SplitProblem:
    """Stacks of up to 40 layers on up to 8 stages, memory tight enough that some stages recompute."""
    rng = random.Random(seed)
    layers = rng.randint(2, 40)
    stages = rng.randint(2, min(8, layers))
    m1 = [rng.uniform(20, 60) for _ in range(stages)]
    return SplitProblem(
        num_layers=layers, num_microbatches=rng.randint(1, 64),
        t0=tuple(rng.uniform(50, 400) * 1e-6 for _ in range(stages)), t1=rng.uniform(100, 300) * 1e-6,
        tr=rng.choice([0.0, rng.uniform(10, 120) * 1e-6]),
        m0=tuple(rng.uniform(50, 200) for _ in range(stages)), m1=tuple(m1),
        mr=tuple(rng.uniform(0, x * 0.99) for x in m1), transient=rng.uniform(0, 30),
        capacity=rng.uniform(150, 60 * layers / stages + 300), partial_recompute=rng.random() < 0.7,
        w0=tuple(rng.uniform(0, 40) * 1e-6 for _ in range(stages)) if rng.random() < 0.4 else (),
        w1=rng.uniform(0, 50) * 1e-6)


@pytest.mark.parametrize("seed", range(300))
def test_plain_dp_is_numpy_dp_bit_for_bit(seed: int) -> None:
    """The plain-Python DP (small problems, no numpy at start-up) returns the numpy DP's split exactly: the same
    layers, recomputation, stage times and objective, ties broken alike (on the small instances too)."""
    for p in (_instance(seed), _large(seed)):
        assert solve_plain(p) == solve_dp(p)


def _wide(seed: int) -> SplitProblem:
    """Stacks of up to 100 layers on up to 32 stages (the benchmark's large models), memory from loose to so tight that
    a stage holds a few layers or none fit."""
    rng = random.Random(seed)
    stages = rng.choice([2, 4, 8, 16, 32])
    layers = rng.randint(stages, 100)
    m1 = [rng.uniform(20, 60) for _ in range(stages)]
    return SplitProblem(
        num_layers=layers, num_microbatches=rng.randint(1, 64),
        t0=tuple(rng.uniform(50, 400) * 1e-6 for _ in range(stages)), t1=rng.uniform(100, 300) * 1e-6,
        tr=rng.choice([0.0, rng.uniform(10, 120) * 1e-6]),
        m0=tuple(rng.uniform(50, 200) for _ in range(stages)), m1=tuple(m1),
        mr=tuple(rng.choice([0.0, rng.uniform(0, x * 0.99)]) for x in m1), transient=rng.uniform(0, 30),
        capacity=rng.uniform(150, 60 * layers / stages * rng.uniform(1, 3) + 300),
        partial_recompute=rng.random() < 0.7,
        w0=tuple(rng.uniform(0, 40) * 1e-6 for _ in range(stages)) if rng.random() < 0.4 else (),
        w1=rng.uniform(0, 50) * 1e-6)


@pytest.mark.parametrize("seed", range(300))
def test_count_dp_is_numpy_dp_bit_for_bit(seed: int) -> None:
    """The count-table DP (`solve_counts`, what the search runs on a large uniform stack) returns the segment DP's
    split exactly, from the same tables (every float equal), on small, large and wide instances."""
    for p in (_instance(seed), _large(seed), _wide(seed)):
        (times, recs), (c_times, c_recs) = stage_tables(p), count_tables(p)
        assert times.tobytes() == c_times.tobytes() and recs.tobytes() == c_recs.tobytes()
        assert solve_counts(p) == solve_dp(p)


@pytest.mark.parametrize("seed", range(100))
def test_least_bottleneck_by_bisection_is_the_min_max_dp(seed: int) -> None:
    """The least bottleneck of a split's count tables (plain_split and count_split: a bisection over the listed times
    where each stage's counts run 1 .. c_s with times not falling, as every SplitProblem's do) equals the min-max DP
    over segments (partition.least_bottleneck) exactly; tables of random times, where the DP runs, likewise."""
    rng = random.Random(seed)
    for p in (_instance(seed), _large(seed), _wide(seed)):
        times, _ = stage_tables(p)
        width = p.num_layers + 1
        shuffled = times.copy()
        for row in shuffled:  # the finite counts in random order, some of them dropped: the DP's case
            finite = [n for n in range(1, width) if np.isfinite(row[n])]
            values = [float(row[n]) for n in finite]
            rng.shuffle(values)
            row[finite] = [v if rng.random() < 0.8 else np.inf for v in values]
        for table in (times, shuffled):
            finite = np.isfinite(table)
            finite[:, 0] = False
            reference = least_bottleneck(segments(table), np.isfinite(segments(table)))
            counts = [[n for n in range(width) if finite[s, n]] for s in range(p.num_stages)]
            assert plain_bottleneck(table.tolist(), counts, width) == reference
            assert count_bottleneck(table, [np.flatnonzero(row)[::-1] for row in finite], width) == reference
            if table is times:
                assert monotone_bottleneck(table.tolist(), counts, p.num_layers) == reference
