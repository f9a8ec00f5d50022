"""The caches of cost_models.step.LayoutCosts change no number: a stage priced from costs that have priced many other
stages (bodies and held memory cached per embedding, head, layers and micro-batches in flight at an end; rank places
read once) equals the stage priced from fresh costs, `with_split` prices a solved split as fresh costs of that
layout do, and the layer-kind split problem, read once per rank place, is that of every rank read on its own."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.pipeline.hops import every_rank_hops, pipeline_hops
from cost_models.prediction import StageLayers
from cost_models.step import evaluate_costs, evaluate_layout, layout_costs, stage_cost
from hardware_profiles import load_hardware
from meshcore import JobSpec, Layout, Offload, Recompute, Runtime, Schedule, ZeroStage
from planner.inputs.loaders import load_model
from planner.search.splits import kind_row, kind_split_problem

MODEL = load_model("deepseek-v3")  # dense and MoE layers, multi-token prediction
CLUSTER = load_hardware("h800", 2048)
JOB = JobSpec(seq_len=4096, global_batch=15360, runtime=Runtime(framework="any"))
LAYOUTS = [
    Layout(tp=1, pp=16, dp=128, ep=64, zero=ZeroStage.OPTIMIZER, recompute=Recompute.FULL),
    Layout(tp=2, sp=True, pp=8, dp=128, ep=64, vpp=2, schedule=Schedule.ZB_V, zero=ZeroStage.OPTIMIZER,
           recompute=Recompute.SELECTIVE),
    Layout(tp=2, sp=True, pp=8, dp=128, ep=64, vpp=2, schedule=Schedule.INTERLEAVED_1F1B, zero=ZeroStage.WEIGHTS,
           recompute=Recompute.SELECTIVE, offload=frozenset({Offload.ACTIVATIONS})),
]
LAYERS = [StageLayers(), StageLayers(dense=1), StageLayers(moe=1, moe_full=1), StageLayers(dense=3, moe=2, moe_full=1),
          StageLayers(moe=4)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"pp{lay.pp}-{lay.schedule.value}")
def test_a_stage_priced_from_warm_caches_is_the_stage_priced_fresh(layout: Layout) -> None:
    layout.validate(MODEL, JOB, 2048)
    warm = layout_costs(MODEL, CLUSTER, JOB, layout)
    for layers in LAYERS:
        for rank in reversed(range(layout.pp)):
            fresh = stage_cost(layout_costs(MODEL, CLUSTER, JOB, layout), rank, layers)
            assert stage_cost(warm, rank, layers) == fresh, (rank, layers)
    assert len(warm._bodies) < layout.pp * len(LAYERS)  # the caches did serve ranks that share a body


def test_with_split_prices_a_solved_split_as_fresh_costs_do() -> None:
    balanced = LAYOUTS[0]
    solved = replace(balanced, stage_layers=(3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4))
    solved.validate(MODEL, JOB, 2048)
    costs = layout_costs(MODEL, CLUSTER, JOB, balanced)
    before = evaluate_costs(costs)
    assert evaluate_costs(costs.with_split(solved)) == evaluate_layout(MODEL, CLUSTER, JOB, solved)
    assert evaluate_costs(costs) == before == evaluate_layout(MODEL, CLUSTER, JOB, balanced)
    assert costs.with_split(solved)._bodies is costs._bodies


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: f"pp{lay.pp}-{lay.schedule.value}")
def test_the_kind_split_problem_read_per_place_is_that_read_per_rank(layout: Layout) -> None:
    costs = layout_costs(MODEL, CLUSTER, JOB, layout)
    problem = kind_split_problem(costs, partial_recompute=True)
    rows = [kind_row(layout_costs(MODEL, CLUSTER, JOB, layout), rank) for rank in range(layout.pp)]
    assert problem.t0 == tuple(r.t0 for r in rows) and problem.m0 == tuple(r.m0 for r in rows)
    assert problem.m1 == tuple(r.m1 for r in rows) and problem.mr == tuple(r.mr for r in rows)
    assert (problem.t1, problem.tr, problem.transient) == (rows[-1].t1, rows[-1].tr, rows[-1].transient)
    shared = len({(p.first, p.last, p.p2p_s, p.alive) for p in costs.places}) < layout.pp
    assert shared == (layout.schedule is Schedule.ZB_V)  # ZB-V's middle ranks keep as many micro-batches in flight


@pytest.mark.parametrize("schedule", list(Schedule))
@pytest.mark.parametrize(("pp", "vpp"), [(1, 1), (2, 1), (4, 2), (8, 2), (4, 4), (6, 3)])
def test_every_rank_hops_are_each_ranks_pipeline_hops(schedule: Schedule, pp: int, vpp: int) -> None:
    layout = Layout(pp=pp, vpp=vpp, schedule=schedule)
    assert every_rank_hops(layout) == [pipeline_hops(layout, rank) for rank in range(pp)]
