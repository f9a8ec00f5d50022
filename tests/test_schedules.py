"""Pipeline schedules: the discrete-event simulator equals the closed forms (time and activations in
flight) on uniform stages; on uneven stages it is the truth the 1F1B formula approximates."""

from __future__ import annotations

import random

import pytest

from cost_models.pipeline import pipeline_time
from cost_models.schedules import closed_form, in_flight, program
from cost_models.simulator import Durations, Program, simulate
from planner.specs import Schedule

CASES = [(Schedule.GPIPE, 1), (Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED_1F1B, 2),
         (Schedule.INTERLEAVED_1F1B, 4), (Schedule.ZB_H1, 1), (Schedule.ZB_V, 2)]


def _durations(prog: Program, f: float, b: float, hop: float = 0.0) -> Durations:
    chunks = len(prog.placement)
    per = chunks // prog.num_devices
    b_in = b / 2 if prog.split_backward else b
    return Durations(forward=(f / per,) * chunks, backward=(b_in / per,) * chunks,
                     weight=((b - b_in) / per,) * chunks, activation=(1.0 / per,) * chunks, p2p_s=hop)


@pytest.mark.parametrize("schedule,vpp", CASES)
@pytest.mark.parametrize("pp,m", [(2, 6), (3, 9), (4, 8), (4, 16), (8, 8), (8, 24)])
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (1.0, 3.0), (2.0, 2.0)])
def test_simulator_equals_closed_form(schedule: Schedule, vpp: int, pp: int, m: int, f: float, b: float) -> None:
    if schedule is Schedule.INTERLEAVED_1F1B and m % pp:
        pytest.skip("interleaving needs micro-batches divisible by pp")
    if schedule is Schedule.ZB_V and m < 2 * pp - 1:
        pytest.skip("zb-v needs at least 2p - 1 micro-batches")
    prog = program(schedule, pp, m, vpp)
    result = simulate(prog, _durations(prog, f, b))
    assert result.makespan == pytest.approx(closed_form(schedule, pp, m, vpp, f, b), rel=1e-12)
    expected = [in_flight(schedule, d, pp, m, vpp) for d in range(pp)]
    assert list(result.peak_activation) == pytest.approx(expected, rel=1e-12)


def test_orders_of_schedules() -> None:
    """GPipe = 1F1B in time but m micro-batches in memory; interleaving and ZB-H1 cut the bubble."""
    pp, m = 8, 16
    t = {s: closed_form(s, pp, m, v, 1.0, 2.0) for s, v in CASES}
    assert t[Schedule.GPIPE] == t[Schedule.ONE_F_ONE_B] > t[Schedule.ZB_H1] > t[Schedule.ZB_V]
    assert t[Schedule.ONE_F_ONE_B] > t[Schedule.INTERLEAVED_1F1B]
    assert in_flight(Schedule.GPIPE, 0, pp, m, 1) > in_flight(Schedule.ONE_F_ONE_B, 0, pp, m, 1)


@pytest.mark.parametrize("seed", range(30))
def test_uneven_stages_1f1b_formula_against_simulator(seed: int) -> None:
    """With uneven stages the 1F1B closed form Σt + (m − 1)·max t holds exactly when the slowest stage is
    last or only stage times differ (no p2p): the simulator is the reference, the formula an upper bound
    within the slowest stage's bubble."""
    rng = random.Random(seed)
    pp, m = rng.randint(2, 6), rng.randint(2, 12)
    fwd = [rng.uniform(0.5, 2.0) for _ in range(pp)]
    bwd = [2 * x for x in fwd]
    prog = program(Schedule.ONE_F_ONE_B, pp, m, 1)
    sim = simulate(prog, Durations(tuple(fwd), tuple(bwd), (0.0,) * pp, (1.0,) * pp)).makespan
    formula = pipeline_time([a + b for a, b in zip(fwd, bwd, strict=True)], m, 1, Schedule.ONE_F_ONE_B)
    assert sim <= formula * (1 + 1e-12)
    assert sim >= max(fwd[i] + bwd[i] for i in range(pp)) * m


def test_p2p_latency_bounds() -> None:
    """A send/recv of `hop` seconds costs at least the 2(p − 1) hops of the fill and drain, and at most
    what the cost model charges (two exposed hops per micro-batch and stage, cost_models.step)."""
    pp, m, hop = 4, 8, 0.1
    prog = program(Schedule.ONE_F_ONE_B, pp, m, 1)
    base = simulate(prog, _durations(prog, 1.0, 2.0)).makespan
    with_hop = simulate(prog, _durations(prog, 1.0, 2.0, hop=hop)).makespan
    charged = pipeline_time([3.0 + 2 * hop] * pp, m, 1, Schedule.ONE_F_ONE_B)
    assert base + 2 * (pp - 1) * hop <= with_hop <= charged


def test_deadlock_is_reported() -> None:
    from cost_models.simulator import Op, OpKind

    bad = Program(2, (0, 1), ((Op(OpKind.B, 0, 0), Op(OpKind.F, 0, 0)), (Op(OpKind.F, 0, 1), Op(OpKind.B, 0, 1))),
                  False)
    with pytest.raises(ValueError, match="deadlocks"):
        simulate(bad, Durations((1.0, 1.0), (1.0, 1.0), (0.0, 0.0), (1.0, 1.0)))


@pytest.mark.parametrize("pp,m", [(2, 3), (2, 8), (4, 7), (4, 16), (8, 15), (8, 40), (4, 5)])
def test_zbv_order_is_torchs(pp: int, m: int) -> None:
    """Our ZB-V order is the one torch.distributed.pipelining's ScheduleZBVZeroBubble computes for each rank
    (torchtitan's "ZBVZeroBubble"): same forward, input-gradient and weight-gradient actions in the same order."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed (the [profile] extra)")
    from types import SimpleNamespace

    from cost_models.simulator import OpKind

    kinds = {"F": OpKind.F, "I": OpKind.B, "W": OpKind.W}
    ours = program(Schedule.ZB_V, pp, m, 2)
    for rank in range(pp):
        fake = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
        actions = schedules.ScheduleZBVZeroBubble._calculate_single_rank_operations(fake, rank)
        theirs = [(kinds[a.computation_type.value], a.microbatch_index, a.stage_index) for a in actions if a]
        assert [(op.kind, op.microbatch, op.chunk) for op in ours.orders[rank]] == theirs


def test_zbv_split_unloads_the_first_rank() -> None:
    """ZB-V puts the embedding and the LM head on rank 0: the per-rank split gives it fewer layers, beats the
    balanced chunks, halves each rank's layers over its two chunks, and the simulator runs the result."""
    from planner import plan as run_plan
    from planner.search import v_chunks
    from planner.space import SearchSpec

    result = run_plan("llama3-8b", "h100-sxm", gpus=16, seq_len=8192, global_batch=64,
                      spec=SearchSpec(pp=16, schedule=Schedule.ZB_V, top_k=3))
    lay = result.best.layout
    assert lay.schedule is Schedule.ZB_V and lay.stage_layers is not None
    per_rank = lay.rank_layers(32)
    assert per_rank[0] < max(per_rank) and lay.stage_layers == v_chunks(per_rank)
    balanced = [r for r in result.alternatives if r.layout.stage_layers is None]
    assert all(result.best.step_time_s < r.step_time_s for r in balanced)
    assert result.best.simulated_step_time_s is not None


@pytest.mark.parametrize("pp,vpp,schedule", [(4, 1, Schedule.ONE_F_ONE_B), (4, 3, Schedule.INTERLEAVED_1F1B),
                                             (5, 2, Schedule.ZB_V), (1, 1, Schedule.ONE_F_ONE_B)])
def test_rank_chunks_inverts_chunk_rank(pp: int, vpp: int, schedule: Schedule) -> None:
    from planner.specs import Layout

    lay = Layout(pp=pp, vpp=vpp, schedule=schedule)
    for rank in range(pp):
        assert lay.rank_chunks(rank) == tuple(c for c in range(pp * vpp) if lay.chunk_rank(c) == rank)
