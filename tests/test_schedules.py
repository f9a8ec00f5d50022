"""Pipeline schedules: the discrete-event simulator equals the closed forms (time and activations in
flight) on uniform stages; on uneven stages it is the truth the 1F1B formula approximates."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from cost_models.pipeline.controllable_memory import VMemory, paper_peak
from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.registry import pricing
from cost_models.pipeline.schedules import closed_form, in_flight, order_peaks, program
from cost_models.pipeline.simulator import Durations, Op, OpKind, Program, simulate
from cost_models.pipeline.stages import pipeline_time
from meshcore import SCHEDULES, Runtime, Schedule

ANY = Runtime(framework="any")  # ZB-V and the wave with two waves: the research space

CASES = [(Schedule.GPIPE, 1), (Schedule.ONE_F_ONE_B, 1), (Schedule.INTERLEAVED_1F1B, 2),
         (Schedule.INTERLEAVED_1F1B, 4), (Schedule.ZB_H1, 1), (Schedule.ZB_H2, 1), (Schedule.ZB_2P, 1),
         (Schedule.ZB_V, 2), (Schedule.DUALPIPE_V, 2), (Schedule.V_HALF, 2), (Schedule.V_MIN, 2)]


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
    if schedule in (Schedule.ZB_V, Schedule.ZB_H2) and m < 2 * pp - 1:
        pytest.skip("zb-v and zb-h2 need at least 2p - 1 micro-batches")
    if schedule is Schedule.DUALPIPE_V and m < 2 * pp:
        pytest.skip("dualpipe-v needs at least 2p micro-batches")
    prog = program(schedule, pp, m, vpp)
    result = simulate(prog, _durations(prog, f, b))
    if schedule is Schedule.DUALPIPE_V and b > 2 * f:  # per chunk 2·b_in − w = b/4 > f/2: an upper bound
        assert result.makespan <= closed_form(schedule, pp, m, vpp, f, b) * (1 + 1e-12)
    else:
        assert result.makespan == pytest.approx(closed_form(schedule, pp, m, vpp, f, b), rel=1e-12)
    expected = [in_flight(schedule, d, pp, m, vpp) for d in range(pp)]
    assert list(result.peak_activation) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("schedule,vpp", CASES + [(Schedule.WAVE, 2), (Schedule.WAVE, 4)])
@pytest.mark.parametrize("pp,m", [(4, 16), (8, 32)])
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (1.0, 3.0), (2.0, 2.0)])
def test_uneven_form_on_uniform_stages_is_the_uniform_form(schedule: Schedule, vpp: int, pp: int, m: int, f: float,
                                                           b: float) -> None:
    """Each schedule's form for stages of unequal cost (what pricing uses) reduces to its uniform closed form when the
    stages are alike (cost_models.pipeline.stages): stage times f + b, forwards f, weight gradients W_SHARE·b. The
    DualPipeV form once counted its 2b − w term twice (51 s for 49.5 s at p = 4, m = 16, f = 1, b = 2)."""
    uneven = pipeline_time([f + b] * pp, m, vpp, schedule, [W_SHARE * b] * pp, [f] * pp)
    assert uneven == pytest.approx(closed_form(schedule, pp, m, vpp, f, b), rel=1e-12)


@pytest.mark.parametrize("vpp,pp,m", [(2, 2, 4), (2, 3, 7), (2, 4, 8), (2, 4, 16), (2, 8, 16), (2, 8, 24),
                                      (4, 2, 8), (4, 3, 13), (4, 4, 16), (6, 2, 12)])
@pytest.mark.parametrize("f,b", [(1.0, 2.0), (1.0, 3.0), (2.0, 2.0)])
def test_wave_simulator_equals_closed_form(vpp: int, pp: int, m: int, f: float, b: float) -> None:
    """From v·p micro-batches on, the wave's closed form is its simulated step, and its in-flight formula the
    simulated peaks (below that, `test_wave_below_vp_microbatches`)."""
    prog = program(Schedule.WAVE, pp, m, vpp)
    result = simulate(prog, _durations(prog, f, b))
    assert result.makespan == pytest.approx(closed_form(Schedule.WAVE, pp, m, vpp, f, b), rel=1e-12)
    expected = [in_flight(Schedule.WAVE, d, pp, m, vpp) for d in range(pp)]
    assert list(result.peak_activation) == pytest.approx(expected, rel=1e-12)


def test_wave_worked_by_hand() -> None:
    """The wave's closed form is not only the simulator agreeing with itself: one case worked on paper.

    p = 2 ranks, one wave (v = 2: chunk 0 on rank 0, chunks 1 and 2 on rank 1, chunk 3 on rank 0), m = 4,
    per-chunk forward f = 1 and backward b = 2, free sends. `wave_slot` over 4 chunks orders the ranks
    (F/B, micro-batch, chunk):
      rank 0: F00 F10 F20 F03 F30 B03 F13 B13 B00 F23 B23 B10 F33 B33 B20 B30
      rank 1: F01 F02 F11 F12 F21 B02 B01 F22 B12 F31 B11 F32 B22 B21 B32 B31
    Each op starts when its rank is free and its input is ready (F(i, c) after F(i, c − 1), B(i, c) after
    B(i, c + 1), B(i, 3) after F(i, 3)):
      rank 0: F00 0-1, F10 1-2, F20 2-3, F03 3-4, F30 4-5, B03 5-7, F13 7-8, B13 8-10, B00 11-13, F23 13-14,
              B23 14-16, B10 17-19, F33 19-20, B33 20-22, B20 22-24, B30 26-28
      rank 1: F01 1-2, F02 2-3, F11 3-4, F12 4-5, F21 5-6, B02 7-9, B01 9-11, F22 11-12, B12 12-14, F31 14-15,
              B11 15-17, F32 17-18, B22 18-20, B21 20-22, B32 22-24, B31 24-26
    so the step ends at 28 = m·v·(f + b) + 2(p − 1)·max(f, b) = 24 + 4."""
    def ops(text: str) -> tuple[Op, ...]:
        return tuple(Op(OpKind.F if k == "F" else OpKind.B, int(i), int(c)) for k, i, c in text.split())

    prog = program(Schedule.WAVE, 2, 4, 2)
    assert prog.orders[0] == ops("F00 F10 F20 F03 F30 B03 F13 B13 B00 F23 B23 B10 F33 B33 B20 B30")
    assert prog.orders[1] == ops("F01 F02 F11 F12 F21 B02 B01 F22 B12 F31 B11 F32 B22 B21 B32 B31")
    result = simulate(prog, _durations(prog, 2.0, 4.0))
    assert result.makespan == 28.0
    assert closed_form(Schedule.WAVE, 2, 4, 2, 2.0, 4.0) == 28.0
    ends = {(e.device, e.op.kind, e.op.microbatch, e.op.chunk): e.end for e in result.events}
    assert ends[(0, OpKind.B, 0, 0)] == 13.0 and ends[(1, OpKind.F, 3, 2)] == 18.0


def test_orders_of_schedules() -> None:
    """GPipe = 1F1B in time but m micro-batches in memory; interleaving and ZB-H1 cut the bubble."""
    pp, m = 8, 16
    t = {(s, v): closed_form(s, pp, m, v, 1.0, 2.0) for s, v in [*CASES, (Schedule.WAVE, 2), (Schedule.WAVE, 4)]}
    assert t[Schedule.GPIPE, 1] == t[Schedule.ONE_F_ONE_B, 1] > t[Schedule.ZB_H1, 1] > t[Schedule.ZB_V, 2]
    assert t[Schedule.ONE_F_ONE_B, 1] > t[Schedule.WAVE, 2] > t[Schedule.INTERLEAVED_1F1B, 2]
    assert t[Schedule.WAVE, 2] > t[Schedule.WAVE, 4]
    # with B = F the wave's bubble is the interleaved one; it holds less than interleaving's first stage
    assert closed_form(Schedule.WAVE, pp, m, 2, 1.0, 1.0) == closed_form(Schedule.INTERLEAVED_1F1B, pp, m, 2, 1.0, 1.0)
    assert in_flight(Schedule.WAVE, 0, pp, m, 2) < in_flight(Schedule.INTERLEAVED_1F1B, 0, pp, m, 2)
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
    from cost_models.pipeline.simulator import Op, OpKind

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

    from cost_models.pipeline.simulator import OpKind

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
    from planner.search.space import SearchSpec
    from planner.search.splits import v_chunks

    result = run_plan("llama3-8b", "h100-sxm", gpus=16, seq_len=8192, global_batch=64, runtime=ANY,
                      spec=SearchSpec(pp=16, schedule=Schedule.ZB_V, top_k=3))
    lay = result.best.layout
    assert lay.schedule is Schedule.ZB_V and lay.stage_layers is not None
    per_rank = lay.rank_layers(32)
    assert per_rank[0] < max(per_rank) and lay.stage_layers == v_chunks(per_rank)
    balanced = [r for r in result.alternatives if r.layout.stage_layers is None]
    assert all(result.best.step_time_s < r.step_time_s for r in balanced)
    assert result.best.simulated_step_time_s is not None


@pytest.mark.parametrize("pp,vpp,schedule", [(4, 1, Schedule.ONE_F_ONE_B), (4, 3, Schedule.INTERLEAVED_1F1B),
                                             (5, 2, Schedule.ZB_V), (1, 1, Schedule.ONE_F_ONE_B),
                                             (3, 2, Schedule.WAVE), (4, 6, Schedule.WAVE)])
def test_rank_chunks_inverts_chunk_rank(pp: int, vpp: int, schedule: Schedule) -> None:
    from meshcore import Layout

    lay = Layout(pp=pp, vpp=vpp, schedule=schedule)
    for rank in range(pp):
        assert lay.rank_chunks(rank) == tuple(c for c in range(pp * vpp) if lay.chunk_rank(c) == rank)


@pytest.mark.parametrize("vpp", [2, 4, 6])
@pytest.mark.parametrize("pp", [2, 3, 5])
def test_wave_below_vp_microbatches(pp: int, vpp: int) -> None:
    """From 2p up to v·p micro-batches the wave's closed form bounds the simulated step from above (so the
    search never prefers it on a bubble it does not have); at every m its order runs without deadlock and
    its activation peaks are the closed form's."""
    for m in range(1, vpp * pp + 1):
        prog = program(Schedule.WAVE, pp, m, vpp)
        for f, b in ((1.0, 2.0), (1.0, 1.0), (1.0, 3.0)):
            result = simulate(prog, _durations(prog, f, b))
            if m >= 2 * pp:
                assert result.makespan <= closed_form(Schedule.WAVE, pp, m, vpp, f, b) * (1 + 1e-12)
            assert list(result.peak_activation) == pytest.approx([in_flight(Schedule.WAVE, d, pp, m, vpp)
                                                                  for d in range(pp)], rel=1e-12)


def _dry_run_in_torch(schedule: Schedule, pp: int, m: int) -> None:
    """Hand `schedule`'s two-chunk order on `pp` ranks to torch.distributed.pipelining as an action list (a whole
    backward as FULL_BACKWARD, a split one as BACKWARD_INPUT and BACKWARD_WEIGHT): its validator must infer our
    chunk placement, and its lowering must add the sends and receives and dry-run them without a deadlock."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed (the [profile] extra)")
    kinds = {OpKind.F: schedules._ComputationType.FORWARD, OpKind.B: schedules._ComputationType.FULL_BACKWARD}
    ours = program(schedule, pp, m, 2)
    if SCHEDULES[schedule].split_backward:
        kinds |= {OpKind.B: schedules._ComputationType.BACKWARD_INPUT,
                  OpKind.W: schedules._ComputationType.BACKWARD_WEIGHT}
    actions = {rank: [schedules._Action(op.chunk, kinds[op.kind], op.microbatch) for op in order]
               for rank, order in enumerate(ours.orders)}
    mapping = schedules._validate_schedule(actions, pp, 2 * pp, m)
    assert tuple(mapping[c] for c in range(2 * pp)) == ours.placement
    with_comms = schedules._add_send_recv(actions, stage_to_rank=lambda s: mapping[s], num_stages=2 * pp)
    schedules._simulate_comms_compute(with_comms, lambda s: mapping[s], 2 * pp)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 13), (8, 16)])
def test_wave_order_runs_in_torch(pp: int, m: int) -> None:
    """torch.distributed.pipelining's own checks accept the wave's order as an action list: its validator
    infers the wave placement from it (chunk k on rank k going down, 2p − 1 − k coming back), and its runtime's
    lowering adds the sends and receives and dry-runs the result without a deadlock."""
    _dry_run_in_torch(Schedule.WAVE, pp, m)


def test_wave_chunks_and_layout_rules() -> None:
    """A wave layout needs an even vpp, pp > 1 and 2p micro-batches; its per-rank split is shared over the
    rank's chunks in wave order (ZB-V's halving is the two-chunk case)."""
    from meshcore import JobSpec, Layout
    from meshcore.errors import LayoutError
    from planner.inputs.loaders import load_model
    from planner.search.splits import v_chunks

    per_rank = (3, 5, 4, 7)
    sizes = v_chunks(per_rank, 4)
    lay = Layout(pp=4, vpp=4, schedule=Schedule.WAVE, stage_layers=sizes)
    assert lay.rank_layers(sum(per_rank)) == per_rank
    assert all(max(sizes[c] for c in lay.rank_chunks(r)) - min(sizes[c] for c in lay.rank_chunks(r)) <= 1
               for r in range(4))
    assert v_chunks(per_rank, 2) == (1, 2, 2, 3, 4, 2, 3, 2)  # down halves rounded down, up the rest
    model = load_model("llama3-8b")
    with pytest.raises(LayoutError, match="even vpp"):
        Layout(pp=4, dp=2, vpp=3, schedule=Schedule.WAVE).validate(model, JobSpec(seq_len=4096, global_batch=16), 8)
    with pytest.raises(LayoutError, match=r"wave needs at least 8 micro-batches \(2 \* pp\), got 7"):
        Layout(pp=4, dp=2, vpp=2, schedule=Schedule.WAVE).validate(model, JobSpec(seq_len=4096, global_batch=14), 8)


def test_wave_search_splits_per_rank_and_simulates() -> None:
    """A pinned wave is searched with one or two waves, its uniform stack split exactly per rank (rank 0
    carries embedding and head) and shared over each rank's chunks, and its finalists are simulated."""
    from planner import plan as run_plan
    from planner.search.space import SearchSpec
    from planner.search.splits import v_chunks

    result = run_plan("llama3-8b", "h100-sxm", gpus=16, seq_len=8192, global_batch=64, runtime=ANY,
                      spec=SearchSpec(pp=8, schedule=Schedule.WAVE, top_k=4))
    assert {r.layout.vpp for r in (result.best, *result.alternatives)} <= {2, 4}
    lay = result.best.layout
    assert lay.schedule is Schedule.WAVE and lay.stage_layers is not None
    per_rank = lay.rank_layers(32)
    assert per_rank[0] < max(per_rank) and lay.stage_layers == v_chunks(per_rank, lay.vpp)
    assert result.best.simulated_step_time_s is not None


def test_interleaved_pipeline_sends_overlap_compute() -> None:
    """Megatron-LM's interleaved schedule posts its sends and receives asynchronously (overlap_p2p_comm, on by
    default): only the contention κ = 1 − overlap_efficiency of their time stays on the critical path. Without
    it, and in plain 1F1B (which waits on each), all of it does."""
    from hardware_profiles import load_hardware
    from meshcore import Runtime
    from planner import evaluate
    kw = dict(gpus=64, seq_len=8192, global_batch=128, tp=4, pp=8, mbs=1, dtype="fp8")
    kappa = 1 - load_hardware("h100-sxm", 64).gpu.overlap_efficiency
    waits = evaluate("llama3-70b", "h100-sxm", vpp=5, runtime=Runtime(overlap_p2p_comm=False), **kw)
    overlapped = evaluate("llama3-70b", "h100-sxm", vpp=5, **kw)
    assert waits.breakdown.pp_p2p_s > 0
    assert overlapped.breakdown.pp_p2p_s == pytest.approx(kappa * waits.breakdown.pp_p2p_s, rel=1e-9)
    assert overlapped.step_time_s < waits.step_time_s
    plain = [evaluate("llama3-70b", "h100-sxm", runtime=Runtime(overlap_p2p_comm=on), **kw) for on in (True, False)]
    assert plain[0].breakdown.pp_p2p_s == plain[1].breakdown.pp_p2p_s > 0


@pytest.mark.parametrize("seed", range(40))
def test_sweep_equals_event_loop(seed: int) -> None:
    """Where the orders fix every op the simulator advances one device at a time (`_sweep`); the event loop, which
    the deferred weight gradients of ZB-H1 need, gives the same events, times, peaks and busy seconds on those
    programs, with random per-chunk durations and hops."""
    from cost_models.pipeline.simulator import _simulate_deferred, _sweep, makespan

    rng = random.Random(seed)
    schedule = rng.choice([s for s in Schedule if s is not Schedule.ZB_H1])
    pp = rng.randint(2, 6)
    vpp = {Schedule.INTERLEAVED_1F1B: rng.randint(2, 4), Schedule.ZB_V: 2, Schedule.DUALPIPE_V: 2,
           Schedule.WAVE: rng.choice([2, 4])}.get(
        schedule, 1)
    m = pp * rng.randint(1, 4) if schedule is Schedule.INTERLEAVED_1F1B else rng.randint(2 * pp, 3 * pp)
    prog = program(schedule, pp, m, vpp)
    chunks = len(prog.placement)

    def draw(low: float, high: float) -> tuple[float, ...]:
        return tuple(rng.uniform(low, high) for _ in range(chunks))

    d = Durations(draw(0.1, 2.0), draw(0.1, 3.0), draw(0.0, 1.0) if prog.split_backward else (0.0,) * chunks,
                  draw(0.0, 1.0), p2p_s=rng.choice([0.0, 0.05, 0.5]))
    swept, looped = _sweep(prog, d, record=True), _simulate_deferred(prog, d)
    assert swept == looped
    assert makespan(prog, d) == looped.makespan == simulate(prog, d).makespan


@pytest.mark.parametrize("pp,m", [(4, 12), (8, 24), (8, 32), (16, 48)])
def test_zb_h1_and_zb_h2_bubbles_are_the_papers(pp: int, m: int) -> None:
    """Qi et al. 2024 (Zero Bubble Pipeline Parallelism, ICLR) section 2.1 and Figure 3, with T_F = T_B = T_W = 1:
    1F1B's bubble is (p − 1)(T_F + T_B + T_W); ZB-H1's (p − 1)(T_F + T_B − T_W), a third of it, at 1F1B's peak memory
    of p micro-batches; ZB-H2's (p − 1)(T_F + T_B − 2T_W) = 0 in each stage's own span (the paper's measure: the
    optimizer step validated afterwards), at 2p − 1 micro-batches. p = 8, m = 24 is the paper's 1.5B setting."""
    def bubble(schedule: Schedule) -> tuple[float, float]:
        prog = program(schedule, pp, m, 1)
        result = simulate(prog, _durations(prog, 1.0, 2.0))  # F = 1; B = 2 split into B_in = W = 1 when split
        return max(result.stage_spans) - 3 * m, max(result.peak_activation)

    assert bubble(Schedule.ONE_F_ONE_B) == (3 * (pp - 1), pp)
    assert bubble(Schedule.ZB_H1) == (pp - 1, pp)  # (p − 1)(1 + 1 − 1), memory p·M_B
    assert bubble(Schedule.ZB_H2) == (0, 2 * pp - 1)  # (p − 1)(1 + 1 − 2), memory (2p − 1)·M_B
    # the step as meshplan's runtimes run it (optimizer synchronised): ZB-H2 still waits for the last stage's start
    assert closed_form(Schedule.ZB_H2, pp, m, 1, 1.0, 2.0) == 3 * m + pp - 1


@pytest.mark.parametrize("schedule", [Schedule.ZB_H1, Schedule.ZB_H2])
@pytest.mark.parametrize("f,b_in,w", [(1.0, 1.0, 1.0), (1.0, 2.0, 0.5), (2.0, 1.0, 1.0), (1.0, 1.5, 0.75)])
def test_zb_h_bubble_formula_on_uneven_parts(schedule: Schedule, f: float, b_in: float, w: float) -> None:
    """The papers' bubbles with T_F, T_B, T_W apart (Qi et al. 2024 Figure 3 text): ZB-H1 (p − 1)(T_F + T_B − T_W) and
    ZB-H2 (p − 1)(T_F + T_B − 2T_W) per stage, wherever T_W <= T_F and T_W <= T_B (ZB-H1) or T_F + T_B >= 2T_W."""
    pp, m = 6, 18
    prog = program(schedule, pp, m, 1)
    result = simulate(prog, Durations((f,) * pp, (b_in,) * pp, (w,) * pp, (1.0,) * pp))
    paper = (pp - 1) * (f + b_in - (w if schedule is Schedule.ZB_H1 else 2 * w))
    assert max(result.stage_spans) - m * (f + b_in + w) == pytest.approx(paper, rel=1e-12)


@pytest.mark.parametrize("pp,m", [(2, 4), (2, 7), (3, 6), (4, 8), (4, 13), (8, 16), (8, 40)])
def test_dualpipev_order_is_torchs(pp: int, m: int) -> None:
    """Our DualPipeV order (from DeepSeek's dualpipev.py steps) is the one torch.distributed.pipelining's
    ScheduleDualPipeV computes for each rank (torchtitan's "DualPipeV"), its overlapped F&B pairs taken as their
    forward then their full backward: the same forwards, split and full backwards and weight gradients in order."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed (the [profile] extra)")
    from types import SimpleNamespace

    kinds = {"F": OpKind.F, "I": OpKind.B, "W": OpKind.W, "B": OpKind.BW}
    ours = program(Schedule.DUALPIPE_V, pp, m, 2)
    for rank in range(pp):
        fake = SimpleNamespace(pp_group_size=pp, _n_microbatches=m, num_stages=2 * pp)
        actions = schedules.ScheduleDualPipeV._calculate_single_rank_operations(fake, rank)
        theirs = [(kinds[a.computation_type.value], a.microbatch_index, a.stage_index)
                  for action in actions if action for a in (action.sub_actions or (action,))]
        assert [(op.kind, op.microbatch, op.chunk) for op in ours.orders[rank]] == theirs


@pytest.mark.parametrize("pp,m", [(4, 8), (8, 24), (16, 64)])
def test_dualpipev_memory_is_the_repositorys(pp: int, m: int) -> None:
    """DeepSeek's DualPipe repository (README, "Pipeline Bubbles and Memory Usage Comparison"): DualPipeV keeps
    PP + 1 chunk activations per device (PP = 2p stages), p + 1/2 stages' worth, on every rank; its bubble with the
    pairs run back to back (F&B = F + B) is (p − 1)·max(f, 2b − w) per chunk, within the table's
    (PP/2 − 1)(F&B + B − 3W), which charges the pair's forward output at the pair's end."""
    prog = program(Schedule.DUALPIPE_V, pp, m, 2)
    result = simulate(prog, _durations(prog, 1.0, 2.0))  # per chunk f = b_in = w = 1/2
    assert list(result.peak_activation) == pytest.approx([pp + 0.5] * pp, rel=1e-12)
    assert [in_flight(Schedule.DUALPIPE_V, d, pp, m, 2) for d in range(pp)] == list(result.peak_activation)
    table = (pp - 1) * ((0.5 + 1.0) + 1.0 - 3 * 0.5)
    assert result.makespan - 3 * m == pytest.approx((pp - 1) * 0.5) and (pp - 1) * 0.5 <= table


AUTHORS = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "schedules" / "controllable_memory_authors.yaml"
V_MEMORY = {Schedule.V_HALF: VMemory.HALF, Schedule.V_MIN: VMemory.MIN}


def _v_unit(schedule: Schedule, pp: int, m: int) -> tuple[float, float]:
    """(idle slots of the longest stage span, peak micro-batches) with one unit per chunk op and the weight gradient
    freeing the whole activation (the controllable-memory paper's accounting)."""
    prog = program(schedule, pp, m, 2)
    n = 2 * pp
    result = simulate(prog, Durations((1.0,) * n, (1.0,) * n, (1.0,) * n, (0.5,) * n, w_share=1.0))
    return max(result.stage_spans) - 6 * m, max(result.peak_activation)


@pytest.mark.parametrize("schedule", [Schedule.V_HALF, Schedule.V_MIN])
@pytest.mark.parametrize("pp", range(2, 13))
def test_v_schedules_hold_the_papers_memory(schedule: Schedule, pp: int) -> None:
    """Qi et al. 2024, "Pipeline Parallelism with Controllable Memory" (the authors' table, their scheduler space's
    description): V-Min holds (p + 4) // 3 micro-batches of activations, V-Half (p + 2) // 2, against 1F1B's p."""
    assert _v_unit(schedule, pp, 3 * pp)[1] == paper_peak(V_MEMORY[schedule], pp)


@pytest.mark.parametrize("run", [r for r in yaml.safe_load(AUTHORS.read_text())["runs"] if r["p"] <= 16])
def test_v_schedules_bubble_is_the_authors(run: dict[str, object]) -> None:
    """The longest stage's idle time is what the authors' scheduler (sail-sg zbv_greedy.py, its output in
    benchmarks/data/schedules) lays out with T_F = T_B = T_W, and on the zero-bubble papers' settings (p >= 8) V-Min's
    is within 1 percentage point of the table's 2B/3 (B = (p − 1)/(m + p − 1), 1F1B's share of its own step); V-Half's
    is below the table's B/2, which rounds (3p − 7) slots up to 3(p − 1)."""
    schedule, pp, m = Schedule(run["schedule"]), int(str(run["p"])), int(str(run["m"]))
    idle = _v_unit(schedule, pp, m)[0]
    assert idle == run["idle"]
    one_f_one_b = (pp - 1) / (m + pp - 1)
    rate = idle / (6 * (m + pp - 1))
    if pp < 8:
        return
    if schedule is Schedule.V_MIN:
        assert abs(rate - 2 * one_f_one_b / 3) < 0.01
    else:
        assert rate < one_f_one_b / 2


@pytest.mark.parametrize("schedule", [Schedule.V_HALF, Schedule.V_MIN])
@pytest.mark.parametrize("pp,m", [(2, 1), (2, 8), (3, 5), (4, 8), (4, 13), (8, 16)])
def test_v_schedules_run_in_torch(schedule: Schedule, pp: int, m: int) -> None:
    """torch.distributed.pipelining's validator infers the V placement from V-Half's and V-Min's action lists (input
    and weight gradients apart), and its lowering adds the sends and receives and dry-runs them without a
    deadlock."""
    _dry_run_in_torch(schedule, pp, m)


@pytest.mark.parametrize("schedule,vpp", [(Schedule.ZB_H1, 1), (Schedule.ZB_H2, 1), (Schedule.DUALPIPE_V, 2)])
def test_in_flight_forms_count_what_the_orders_hold(schedule: Schedule, vpp: int) -> None:
    """The closed forms of the orders that place their own W passes (forms.zb_h1_in_flight, zb_h2_in_flight,
    dualpipev_in_flight: what memory and the search's floors read, without building an order of m micro-batches) are
    the peaks counted off those orders, exactly, for every p up to 16 and m up to 4p + 2, below the schedules' own
    minimum m included (what the order generators emit there)."""
    count = pricing(schedule).in_flight
    assert count is not None
    for pp in range(1, 17):
        for m in range(1, 4 * pp + 3):
            assert tuple(count(d, pp, m, vpp) for d in range(pp)) == order_peaks(schedule, pp, m, vpp), (pp, m)
