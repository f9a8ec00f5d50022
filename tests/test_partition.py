"""The exact stage-split DP against brute-force enumeration on seeded random instances."""

from __future__ import annotations

import random

import pytest

from planner.partition import ChainCosts, StageBudget, best_split, brute_force_split


def _instance(rng: random.Random) -> tuple[ChainCosts, StageBudget]:
    n = rng.randint(1, 10)
    p = rng.randint(1, min(4, n))
    costs = ChainCosts(time=tuple(rng.uniform(0.1, 2.0) for _ in range(n)),
                       static_bytes=tuple(rng.uniform(1, 5) for _ in range(n)),
                       activation_bytes=tuple(rng.uniform(0.5, 3) for _ in range(n)))
    budget = StageBudget(extra_time=tuple(rng.uniform(0, 1) for _ in range(p)),
                         extra_bytes=tuple(rng.uniform(0, 4) for _ in range(p)),
                         in_flight=tuple(float(p - i) for i in range(p)),
                         capacity_bytes=rng.uniform(5, 40))
    return costs, budget


@pytest.mark.parametrize("seed", range(250))
def test_dp_equals_brute_force(seed: int) -> None:
    costs, budget = _instance(random.Random(seed))
    dp, bf = best_split(costs, budget), brute_force_split(costs, budget)
    assert (dp is None) == (bf is None)
    if dp is not None and bf is not None:
        assert dp.bottleneck == pytest.approx(bf.bottleneck, rel=1e-9)
        assert sum(dp.layers) == len(costs.time) and min(dp.layers) >= 1


def test_ends_get_fewer_layers_when_they_carry_more() -> None:
    """Uniform layers, embedding on the first stage and LM head on the last: the DP moves layers inward."""
    costs = ChainCosts(time=(1.0,) * 16, static_bytes=(0.0,) * 16, activation_bytes=(0.0,) * 16)
    budget = StageBudget(extra_time=(1.0, 0.0, 0.0, 2.0), extra_bytes=(0.0,) * 4, in_flight=(4, 3, 2, 1),
                         capacity_bytes=1.0)
    split = best_split(costs, budget)
    assert split is not None and split.bottleneck == 5.0  # 16 + 3 extra over 4 stages cannot beat 5
    assert split.layers[0] < split.layers[1] and split.layers[-1] < split.layers[2]


def test_memory_cap_binds_first_stage() -> None:
    """Stage 0 holds 4 micro-batches of activations, so it must take fewer layers."""
    costs = ChainCosts(time=(1.0,) * 8, static_bytes=(1.0,) * 8, activation_bytes=(1.0,) * 8)
    budget = StageBudget(extra_time=(0.0,) * 4, extra_bytes=(0.0,) * 4, in_flight=(4, 3, 2, 1), capacity_bytes=8.0)
    split = best_split(costs, budget)
    assert split is not None and split.layers[0] == 1 and split.bottleneck == 3.0
    assert best_split(costs, StageBudget((0.0,) * 4, (0.0,) * 4, (4, 3, 2, 1), capacity_bytes=4.0)) is None
