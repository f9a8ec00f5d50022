"""Pipeline schedules against the bubbles their papers publish, on the papers' own (p, m).

    python benchmarks/schedules_papers.py

The zero-bubble papers state their schedules' bubbles for T_F = T_B = T_W (forward, input gradient, weight gradient
of one stage and micro-batch), as fractions of the 1F1B step (m + p − 1)(T_F + T_B + T_W): 1F1B B = (p − 1)/(m + p − 1),
ZB-H1 B/3, ZB-H2 and ZB-V 0 (Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, section 2.1 and
Figure 3, section 6; the table of the authors' repository sail-sg/zero-bubble-pipeline-parallelism, README,
"Comparision of Schedules"), and measure a schedule by its longest stage: each stage's span from its first op to its
last (with the optimizer step validated afterwards, the paper's "post-validation", a stage starts its next iteration
when its own work ends). The (p, m) are the paper's experiments: 1.5B and 6.2B models on 8 stages with 24, 32 and 64
micro-batches, 14.6B on 16 with 48, 64, 128, 28.3B on 32 with 96, 128, 256.

Each row prints the paper's bubble rate, meshplan's (its op order in the discrete-event simulator, per-chunk times a
half of the stage's on two-chunk schedules, no send latency: the papers' setting), the difference in percentage
points, meshplan's step with the optimizer synchronised (makespan, what its runtimes run), and the peak activations
in flight against the paper's (micro-batches of one stage).

DualPipeV (DeepSeek-AI's DualPipe repository, README table "Pipeline Bubbles and Memory Usage Comparison"): bubble
(PP/2 − 1)(F&B + B − 3W) with F, B (the whole backward), W per chunk and PP = 2p stages, PP + 1 chunk activations
per device, on the repository's examples (4 ranks and 10 micro-batches, the DualPipeV figure; 8 ranks and 20, the
DualPipe figure), F&B = F + B (no overlap), measured on the makespan (DualPipe synchronises its optimizer step).
meshplan runs a pair as its forward, then its backward, and the forward's output leaves when the forward ends; the
table charges it at the pair's end, so meshplan's bubble is the smaller, (p − 1)·max(f, 2b − w).

V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024; the authors' table in
sail-sg/zero-bubble-pipeline-parallelism's README): bubble B/2 and 2B/3 "+ O(n) overhead", B = (p − 1)/(m + p − 1),
at (p + 2)//2 and (p + 4)//3 micro-batches of activations (a W frees the whole activation in the paper's count;
the memory column is counted so). Beside the table's closed forms, the bubble the authors' own scheduler lays out on
the same (p, m) (benchmarks/data/schedules/controllable_memory_authors.yaml): the closed forms round, and V-Half's
(3p − 7 chunk slots) is below its B/2 (3(p − 1)) by 4 slots, 1-2 points at m = 3p.

ZB-1p and ZB-2p (the paper's automatic schedules, section 3.1's heuristic; cost_models.pipeline.zb_auto): with
T_F = T_B = T_W the repository's table gives ZB-2p no bubble at 2p micro-batches of activations (ZB-1p is ZB-H1's
B/3 at p). Then the paper's Table 5 on its own settings: bubble rates (cost − m(T_F + T_B + T_W)) / cost, cost the
longest stage's span, on the pass and send times it profiled (Table 9; benchmarks/data/schedules/
zero_bubble_table5.yaml), for 1F1B, ZB-H1, ZB-H2 (meshplan's orders in its simulator, sends T_comm) and ZB-1p, ZB-2p
(the heuristic at p·M_B and 2p·M_B, M_W / M_B from Table 1 and Table 3's model shapes, its orders run in the
simulator). The paper's 1F1B-I column is left out (one layer a chunk, uneven first and last stages).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml  # noqa: E402
from machine import machine_line  # noqa: E402

from cost_models.pipeline.schedules import program  # noqa: E402
from cost_models.pipeline.simulator import Durations, Program, simulate  # noqa: E402
from cost_models.pipeline.zb_auto import PassTimes, auto_schedule  # noqa: E402
from meshcore import Schedule  # noqa: E402

SETTINGS = [(8, 24), (8, 32), (8, 64), (16, 48), (16, 64), (16, 128), (32, 96), (32, 128), (32, 256)]
# schedule, chunks per rank, the paper's bubble as a share of 1F1B's step (p, m), its peak activations (p), source
PAPER = [
    (Schedule.ONE_F_ONE_B, 1, lambda p, m: (p - 1) / (m + p - 1), lambda p: p, "Qi et al. 2024 section 2; repo table"),
    (Schedule.ZB_H1, 1, lambda p, m: (p - 1) / (m + p - 1) / 3, lambda p: p, "Qi et al. 2024 Fig. 3 top; repo table"),
    (Schedule.ZB_H2, 1, lambda p, m: 0.0, lambda p: 2 * p - 1, "Qi et al. 2024 Fig. 3 bottom"),
    (Schedule.ZB_V, 2, lambda p, m: 0.0, lambda p: p, "Qi et al. 2024 section 6; repo table"),
]
# DualPipeV: bubble (P − 1)(F&B + B − 3W) per chunk, F&B = F + B, F = B_in = W = 1/2 of a stage's unit: (P − 1)·1
DUALPIPE = (lambda p, m: (p - 1) * 1.0 / (3.0 * (m + p - 1)), lambda p: p + 0.5, [(4, 10), (8, 20)],
            "DualPipe README table")


AUTHORS = Path(__file__).resolve().parent / "data" / "schedules" / "controllable_memory_authors.yaml"
TABLE5 = Path(__file__).resolve().parent / "data" / "schedules" / "zero_bubble_table5.yaml"
# V-Half and V-Min: the table's bubble, its memory (W frees the whole activation), the authors' scheduler's runs
V_PAPER = [
    (Schedule.V_HALF, lambda p, m: (p - 1) / (m + p - 1) / 2, lambda p: (p + 2) // 2, "Qi et al. 2024 (CM); table"),
    (Schedule.V_MIN, lambda p, m: 2 * (p - 1) / (m + p - 1) / 3, lambda p: (p + 4) // 3, "Qi et al. 2024 (CM); table"),
]


def measured(schedule: Schedule, chunks: int, pp: int, m: int, w_frees_all: bool = False
             ) -> tuple[float, float, float]:
    """(bubble of the longest stage span, bubble of the makespan, both over 1F1B's step; peak activations in stages)
    with T_F = T_B = T_W = 1 per stage, shared evenly over a rank's chunks (`w_frees_all`: the W frees the whole
    activation, the controllable-memory paper's count)."""
    prog = program(schedule, pp, m, chunks)
    n = len(prog.placement)
    unit = 1.0 / chunks
    split = prog.split_backward
    d = Durations((unit,) * n, (unit if split else 2 * unit,) * n, (unit if split else 0.0,) * n, (unit,) * n,
                  w_share=1.0 if w_frees_all else 0.5)
    result = simulate(prog, d)
    busy, one_f_one_b = 3.0 * m, 3.0 * (m + pp - 1)
    return ((max(result.stage_spans) - busy) / one_f_one_b, (result.makespan - busy) / one_f_one_b,
            max(result.peak_activation))


def main() -> int:
    print(machine_line())
    print(f"{'schedule':<10} {'p':>3} {'m':>4} {'paper':>7} {'meshplan':>9} {'diff pp':>8} {'makespan':>9} "
          f"{'memory':>7} {'paper':>6}  source")
    worst = 0.0
    for schedule, chunks, paper, memory, source in PAPER:
        for pp, m in SETTINGS:
            span, whole, peak = measured(schedule, chunks, pp, m)
            expected = paper(pp, m)
            worst = max(worst, abs(span - expected))
            print(f"{schedule.value:<10} {pp:>3} {m:>4} {100 * expected:>6.2f}% {100 * span:>8.2f}% "
                  f"{100 * (span - expected):>+8.2f} {100 * whole:>8.2f}% {peak:>7.2f} {memory(pp):>6}  {source}")
    print(f"largest difference: {100 * worst:.2f} percentage points")
    v_memory_rows()
    auto_rows()
    table5_rows()
    paper, memory, settings, source = DUALPIPE
    for pp, m in settings:
        _, whole, peak = measured(Schedule.DUALPIPE_V, 2, pp, m)
        expected = paper(pp, m)
        print(f"{Schedule.DUALPIPE_V.value:<10} {pp:>3} {m:>4} {100 * expected:>6.2f}% {100 * whole:>8.2f}% "
              f"{100 * (whole - expected):>+8.2f} {100 * whole:>8.2f}% {peak:>7.2f} {memory(pp):>6}  {source} "
              "(makespan; the pair's forward output at the pair's end in the table)")
    return 0


def v_memory_rows() -> None:
    """V-Half and V-Min against the table's closed forms and the authors' scheduler on the same (p, m)."""
    authors = {(r["schedule"], r["p"], r["m"]): r["idle"] for r in yaml.safe_load(AUTHORS.read_text())["runs"]}
    print(f"{'schedule':<10} {'p':>3} {'m':>4} {'paper':>7} {'authors':>8} {'meshplan':>9} {'vs paper':>9} "
          f"{'vs authors':>10} {'memory':>7} {'paper':>6}  source")
    for schedule, paper, memory, source in V_PAPER:
        for pp, m in SETTINGS:
            span, _, peak = measured(schedule, 2, pp, m, w_frees_all=True)
            theirs = authors[(schedule.value, pp, m)] / (6 * (m + pp - 1))  # chunk slots over 1F1B's step
            expected = paper(pp, m)
            print(f"{schedule.value:<10} {pp:>3} {m:>4} {100 * expected:>6.2f}% {100 * theirs:>7.2f}% "
                  f"{100 * span:>8.2f}% {100 * (span - expected):>+9.2f} {100 * (span - theirs):>+10.2f} "
                  f"{peak:>7.2f} {memory(pp):>6}  {source}")


def auto_rows() -> None:
    """ZB-1p and ZB-2p with T_F = T_B = T_W and no send time against the repository's table (B/3 and 0)."""
    unit = PassTimes(1.0, 1.0, 1.0)
    for name, stages, paper in (("zb-1p", 1, 1 / 3), ("zb-2p", 2, 0.0)):
        for pp, m in SETTINGS:
            found = auto_schedule(pp, m, unit, stages * pp)
            ours, expected = (found.cost - 3 * m) / (3 * (m + pp - 1)), paper * (pp - 1) / (m + pp - 1)
            print(f"{name:<10} {pp:>3} {m:>4} {100 * expected:>6.2f}% {100 * ours:>8.2f}% "
                  f"{100 * (ours - expected):>+8.2f} {'':>9} {max(found.peak):>7.2f} {stages * pp:>6}  "
                  "sail-sg repo table (T_F = T_B = T_W)")


def table5_rows() -> None:
    """The paper's Table 5 on its profiled times (Table 9): meshplan's orders in its simulator, bubble rate over the
    longest stage's span."""
    data = yaml.safe_load(TABLE5.read_text())
    names = ("1f1b", "zb-h1", "zb-h2", "zb-1p", "zb-2p")
    print("Table 5 of Qi et al. 2024 (paper / meshplan, bubble rate over the cost): model p m  " + "  ".join(names))
    worst = 0.0
    for row in data["rows"]:
        g = data["models"][row["model"]]
        share = 32 * g["h"] / (34 * g["h"] + 5 * g["a"] * g["s"])  # M_W / M_B, the paper's Table 1
        ours = table5_measured(row, share)
        worst = max(worst, *(abs(ours[k] - row[k]) for k in names))
        cells = "  ".join(f"{100 * row[k]:.2f}/{100 * ours[k]:.2f}" for k in names)
        print(f"{row['model']:<6} {row['p']:>3} {row['m']:>4}  {cells}")
    print(f"Table 5: largest difference {100 * worst:.2f} percentage points")


def table5_measured(row: dict[str, float], share: float) -> dict[str, float]:
    """Bubble rates of meshplan's 1F1B, ZB-H1, ZB-H2, ZB-1p and ZB-2p on one row's times."""
    pp, m = int(row["p"]), int(row["m"])
    f, b, w, comm = row["t_f"], row["t_b"], row["t_w"], row["t_comm"]
    busy = m * (f + b + w)
    split = Durations((f,) * pp, (b,) * pp, (w,) * pp, (1.0,) * pp, p2p_s=comm, w_share=share)
    whole = Durations((f,) * pp, (b + w,) * pp, (0.0,) * pp, (1.0,) * pp, p2p_s=comm)
    progs = {"1f1b": (program(Schedule.ONE_F_ONE_B, pp, m), whole), "zb-h1": (program(Schedule.ZB_H1, pp, m), split),
             "zb-h2": (program(Schedule.ZB_H2, pp, m), split)}
    for name, stages in (("zb-1p", 1), ("zb-2p", 2)):
        orders = auto_schedule(pp, m, PassTimes(f, b, w, comm), stages * pp, share).orders
        progs[name] = (Program(pp, tuple(range(pp)), orders, True, explicit_w=True), split)
    rates = {}
    for name, (prog, durations) in progs.items():
        cost = max(simulate(prog, durations).stage_spans)
        rates[name] = (cost - busy) / cost
    return rates


if __name__ == "__main__":
    raise SystemExit(main())
