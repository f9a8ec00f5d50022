"""partition.kind_segment_tables computes a memory line (m0_s, m1_s, mr_s) once for all the stages that share it: each
stage's segment times and recomputed layers are those of the stage posed alone, bit for bit."""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from planner.search.partition import kind_segment_tables
from planner.search.split_model import KindSplitProblem


def _shared_lines(seed: int) -> KindSplitProblem:
    """A random layer-kind problem of 2-6 stages, some of them repeating an earlier stage's memory line."""
    rng = random.Random(seed)
    layers, stages = rng.randint(4, 14), rng.randint(2, 6)
    lines = [(float(rng.randint(50, 200)), tuple(rng.randint(20, 60) * 1.1 for _ in range(2)))
             for _ in range(rng.randint(1, stages))]
    chosen = [lines[rng.randrange(len(lines))] for _ in range(stages)]
    return KindSplitProblem(
        kinds=tuple(rng.randint(0, 1) for _ in range(layers)), num_microbatches=rng.randint(1, 16),
        t0=tuple(rng.randint(50, 400) * 1e-6 for _ in range(stages)),
        t1=tuple(rng.randint(100, 300) * 1e-6 for _ in range(2)),
        tr=tuple(rng.randint(10, 120) * 1e-6 for _ in range(2)),
        m0=tuple(m0 for m0, _ in chosen), m1=tuple(m1 for _, m1 in chosen),
        mr=tuple(tuple(x * 0.7 for x in m1) for _, m1 in chosen),
        transient=float(rng.randint(0, 30)), capacity=float(rng.randint(150, 600)),
        partial_recompute=rng.random() < 0.8)


@pytest.mark.parametrize("seed", range(40))
def test_stages_sharing_a_memory_line_get_the_tables_of_each_posed_alone(seed: int) -> None:
    p = _shared_lines(seed)
    times, _, recs = kind_segment_tables(p)
    assert len(set(zip(p.m0, p.m1, p.mr, strict=True))) <= p.num_stages
    for s in range(p.num_stages):
        alone = replace(p, t0=(p.t0[s],), m0=(p.m0[s],), m1=(p.m1[s],), mr=(p.mr[s],))
        one_times, _, one_recs = kind_segment_tables(alone)
        assert np.array_equal(times[s], one_times[0]) and np.array_equal(recs[s], one_recs[0])
