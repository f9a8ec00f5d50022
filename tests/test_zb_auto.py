"""ZB-1p and ZB-2p, the zero-bubble paper's automatic schedules (cost_models.pipeline.zb_auto): the paper's bubble
rates on its settings, its memory limits, and the simulator running the orders to the heuristic's own clock."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cost_models.pipeline.simulator import Durations, OpKind, Program, simulate
from cost_models.pipeline.zb_auto import PassTimes, auto_schedule, zb_auto_bubble, zb_auto_order, zb_auto_program

TABLE5 = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "schedules" / "zero_bubble_table5.yaml"
DATA = yaml.safe_load(TABLE5.read_text())


def _w_share(model: str) -> float:
    """M_W / M_B from the paper's Table 1 (M_B = sb(34h + 5as), M_W = 32sbh) and Table 3's h, a, s."""
    g = DATA["models"][model]
    return 32 * g["h"] / (34 * g["h"] + 5 * g["a"] * g["s"])


def _times(row: dict[str, float]) -> PassTimes:
    return PassTimes(row["t_f"], row["t_b"], row["t_w"], row["t_comm"])


@pytest.mark.parametrize("row", [r for r in DATA["rows"] if r["p"] <= 16], ids=lambda r: f"{r['model']}-m{r['m']}")
def test_bubble_rates_are_the_papers_table_5(row: dict[str, float]) -> None:
    """Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, Table 5 (bubble rates of ZB-1p and ZB-2p on
    the profiled times of Table 9): within 0.05 percentage points (the table prints four decimals), and the
    simulator, running the orders with the same times and sends, finds the same longest stage."""
    pp, m, times = int(row["p"]), int(row["m"]), _times(row)
    share = _w_share(str(row["model"]))
    for key, limit in (("zb-2p", 2 * pp), ("zb-1p", pp)):
        found = auto_schedule(pp, m, times, limit, share)
        assert found.bubble_rate(m, times) == pytest.approx(row[key], abs=5e-4)
        assert max(found.peak) <= limit + 1e-9
        durations = Durations((times.forward,) * pp, (times.input_grad,) * pp, (times.weight_grad,) * pp,
                              (1.0,) * pp, p2p_s=times.comm, w_share=share)
        result = simulate(Program(pp, tuple(range(pp)), found.orders, True, explicit_w=True), durations)
        assert max(result.stage_spans) == pytest.approx(found.cost)
        assert max(result.peak_activation) == pytest.approx(max(found.peak))


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8), (4, 12), (8, 24), (8, 32)])
def test_equal_passes_zero_bubble_at_two_p(pp: int, m: int) -> None:
    """The authors' table (sail-sg/zero-bubble-pipeline-parallelism README, "Comparison of Schedules", T_F = T_B =
    T_W): ZB-2p has no bubble at twice 1F1B's activations, ZB-1p a third of 1F1B's at 1F1B's."""
    unit = PassTimes(1.0, 1.0, 1.0)
    two, one = auto_schedule(pp, m, unit, 2 * pp), auto_schedule(pp, m, unit, pp)
    assert two.cost == pytest.approx(3 * m) and max(two.peak) <= 2 * pp
    assert one.cost - 3 * m == pytest.approx(pp - 1) and max(one.peak) <= pp


@pytest.mark.parametrize("pp,m", [(1, 3), (2, 1), (3, 2), (4, 4), (5, 7)])
def test_every_pass_once_and_after_its_input(pp: int, m: int) -> None:
    """Each stage runs every micro-batch's F, B and W once, B after F and W after B, even with m < p."""
    for stage in range(pp):
        order = zb_auto_order(stage, pp, m, 2)
        seen = {kind: [op.microbatch for op in order if op.kind is kind] for kind in OpKind if kind is not OpKind.BW}
        assert all(seen[kind] == list(range(m)) for kind in seen)
        at = {(op.kind, op.microbatch): i for i, op in enumerate(order)}
        assert all(at[(OpKind.F, i)] < at[(OpKind.B, i)] < at[(OpKind.W, i)] for i in range(m))


def test_limit_below_one_microbatch_is_refused() -> None:
    with pytest.raises(ValueError, match="below one micro-batch"):
        auto_schedule(4, 8, PassTimes(1.0, 1.0, 1.0), 0.5)
    with pytest.raises(ValueError, match="p >= 1 and m >= 1"):
        auto_schedule(0, 8, PassTimes(1.0, 1.0, 1.0), 2.0)


@pytest.mark.parametrize("pp,m", [(2, 8), (4, 4), (4, 5), (4, 8), (8, 8), (8, 24)])
def test_synchronised_step(pp: int, m: int) -> None:
    """With T_F = T_B = T_W the optimizer-synchronised step (the makespan) of ZB-2p's order is m(T_F + T_B + T_W) +
    (p − 1)·T_F, ZB-H2's (Qi et al. 2024, Table 2: ZB-H2's stages idle (p − 1)(T_F + T_B − 2T_W) = 0, the last one
    starting (p − 1)·T_F late), from m = p micro-batches on where ZB-H2 needs 2p − 1."""
    assert zb_auto_bubble(2, pp, m, 1.0, 1.0, 1.0) == pytest.approx(pp - 1)


@pytest.mark.parametrize("memory", [1, 2])
@pytest.mark.parametrize("pp,m", [(2, 1), (2, 8), (3, 5), (4, 8), (4, 13)])
def test_orders_run_in_torch(memory: int, pp: int, m: int) -> None:
    """torch.distributed.pipelining's validator accepts ZB-1p's and ZB-2p's orders as action lists (one stage per
    rank, input and weight gradients apart), and its lowering adds the sends and receives and dry-runs them without
    a deadlock."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules",
                                    reason="torch is not installed (the [profile] extra)")
    kinds = {OpKind.F: schedules._ComputationType.FORWARD, OpKind.B: schedules._ComputationType.BACKWARD_INPUT,
             OpKind.W: schedules._ComputationType.BACKWARD_WEIGHT}
    prog = zb_auto_program(memory, pp, m)
    actions = {rank: [schedules._Action(op.chunk, kinds[op.kind], op.microbatch) for op in order]
               for rank, order in enumerate(prog.orders)}
    mapping = schedules._validate_schedule(actions, pp, pp, m)
    assert tuple(mapping[c] for c in range(pp)) == prog.placement
    with_comms = schedules._add_send_recv(actions, stage_to_rank=lambda s: mapping[s], num_stages=pp)
    schedules._simulate_comms_compute(with_comms, lambda s: mapping[s], pp)
