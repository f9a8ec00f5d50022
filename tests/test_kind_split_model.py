"""The layer-kind split problem (planner.search.splits.kind_split_problem) holds the cost model's memory: for every
stage of one layer or more, whatever its kinds and its fully recomputed layers, the DP's affine line
M_s = m0_s + Σ m1 − Σ_{first r} mr + transient·[r > 0] is `stage_cost`'s peak, under every ZeRO stage. Before, the
per-layer bytes were read off one layer against none, and every layer counted ZeRO-3's gathered working set again:
Llama 4 Maverick's stages were priced up to 54 GiB over, and the DP recomputed 20 of 25 layers where 6 fit."""

from __future__ import annotations

import random

import pytest

from cost_models.prediction import StageLayers
from cost_models.step import layout_costs, stage_cost
from hardware_profiles import load_hardware
from meshcore import GIB, JobSpec, Layout, Recompute, Runtime, Schedule, ZeroStage
from planner.inputs.loaders import load_model
from planner.search.splits import kind_split_problem

CASES = [  # (model, hardware, GPUs, sequence, batch, layout)
    ("llama4-maverick", "h100-sxm", 256, 8192, 512,
     dict(tp=1, pp=2, dp=128, ep=128, schedule=Schedule.ZB_H1, recompute=Recompute.SELECTIVE)),
    ("deepseek-v3", "h800", 2048, 4096, 15360,
     dict(tp=2, sp=True, pp=16, dp=64, ep=8, schedule=Schedule.ONE_F_ONE_B, recompute=Recompute.SELECTIVE)),
    ("deepseek-v3", "h800", 2048, 4096, 15360,
     dict(tp=2, sp=True, pp=8, dp=128, ep=64, vpp=2, schedule=Schedule.ZB_V, recompute=Recompute.FULL)),
]


def _stages(kinds: tuple[int, ...], partial: bool, rng: random.Random) -> list[tuple[int, int, int]]:
    """Random segments [i, j) of one layer or more with how many leading layers are fully recomputed."""
    out = []
    for _ in range(60):
        i = rng.randrange(len(kinds))
        j = rng.randrange(i + 1, min(len(kinds), i + 30) + 1)
        out.append((i, j, rng.randrange(j - i + 1) if partial else 0))
    return out


@pytest.mark.parametrize("zero", list(ZeroStage), ids=lambda z: f"zero{int(z)}")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[5]['schedule'].value}")
def test_the_kind_split_line_is_the_cost_models_memory(case: tuple, zero: ZeroStage) -> None:  # type: ignore[type-arg]
    name, hardware, gpus, seq, batch, degrees = case
    model, cluster = load_model(name), load_hardware(hardware, gpus)
    job = JobSpec(seq_len=seq, global_batch=batch, runtime=Runtime(framework="any"))
    layout = Layout(zero=zero, **degrees)
    layout.validate(model, job, gpus)
    costs = layout_costs(model, cluster, job, layout)
    problem = kind_split_problem(costs, partial_recompute=True)
    full_base = layout.recompute is Recompute.FULL
    rng = random.Random(f"{name}{int(zero)}")
    for i, j, r in _stages(problem.kinds, problem.partial_recompute, rng):
        seg = problem.kinds[i:j]
        for s in {0, layout.pp // 2, layout.pp - 1}:
            line = (problem.m0[s] + sum(problem.m1[s][k] for k in seg) - sum(problem.mr[s][k] for k in seg[:r])
                    + (problem.transient if r else 0.0))
            dense_full = seg.count(0) if full_base else seg[:r].count(0)
            moe_full = seg.count(1) if full_base else seg[:r].count(1)
            st = stage_cost(costs, s, StageLayers(dense=seg.count(0), moe=seg.count(1), dense_full=dense_full,
                                                  moe_full=moe_full))
            assert line == pytest.approx(st.peak_memory_gib * GIB, rel=1e-9, abs=1024), (s, i, j, r)
            if zero is ZeroStage.OPTIMIZER:  # no sharded traffic to linearise: the time is exact too
                time = problem.t0[s] + sum(problem.t1[k] for k in seg) + sum(problem.tr[k] for k in seg[:r])
                assert time == pytest.approx(st.compute_s, rel=1e-9), (s, i, j, r)
