"""How good is the wave schedule's op order? Against the best order CP-SAT finds for the same chunks.

    python benchmarks/wave_order.py [--seconds S]

For one wave (two chunks per rank, placed down and back up) and unit-free per-chunk times f = 1, b = 2
(backward twice forward), each row prints the step of meshplan's order (cost_models.pipeline.schedules, simulated),
the optimum over all orders whose per-rank activation peak is no larger than ours (CP-SAT: one interval per
F and B, no overlap on a rank, the pipeline's dependencies, a reservoir of chunk activations per rank), the
optimum with no memory limit, and the lower bound m(F + B) + (p − 1)(f + b) (rank p − 1 cannot start before
(p − 1)f nor finish later than (p − 1)b before the end). Status OPTIMAL means CP-SAT proved the optimum
within the time limit; FEASIBLE gives its best order and its bound.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import machine_line  # noqa: E402
from ortools.sat.python import cp_model  # noqa: E402

from cost_models.pipeline.schedules import in_flight, program  # noqa: E402
from cost_models.pipeline.simulator import Durations, simulate  # noqa: E402
from meshcore import Schedule, wave_chunks, wave_rank  # noqa: E402

CASES = [(2, 4), (3, 6), (4, 8), (4, 12), (6, 12)]  # (pp, micro-batches)
F_CHUNK, B_CHUNK = 1, 2


def best_order(pp: int, m: int, vpp: int, cap: int | None, seconds: float) -> tuple[str, float, float]:
    """(status, best makespan found, proven lower bound) over all orders, activations per rank <= cap chunks."""
    chunks = pp * vpp
    horizon = 2 * (m + pp) * vpp * (F_CHUNK + B_CHUNK)
    model = cp_model.CpModel()
    start: dict[tuple[str, int, int], cp_model.IntVar] = {}
    end: dict[tuple[str, int, int], cp_model.IntVar] = {}
    on_rank: list[list[cp_model.IntervalVar]] = [[] for _ in range(pp)]
    for c in range(chunks):
        for i in range(m):
            for kind, length in (("F", F_CHUNK), ("B", B_CHUNK)):
                s, e = model.new_int_var(0, horizon, ""), model.new_int_var(0, horizon, "")
                on_rank[wave_rank(c, pp)].append(model.new_interval_var(s, length, e, ""))
                start[kind, c, i], end[kind, c, i] = s, e
    for c in range(chunks):
        for i in range(m):
            model.add(start["B", c, i] >= end["F", c, i])
            if c > 0:
                model.add(start["F", c, i] >= end["F", c - 1, i])
            if c < chunks - 1:
                model.add(start["B", c, i] >= end["B", c + 1, i])
            if i > 0:  # micro-batches are interchangeable: keep them in order on each chunk
                model.add(start["F", c, i] >= end["F", c, i - 1])
                model.add(start["B", c, i] >= end["B", c, i - 1])
    for rank in range(pp):
        model.add_no_overlap(on_rank[rank])
        if cap is not None:
            mine = wave_chunks(rank, pp, vpp)
            times = ([start["F", c, i] for c in mine for i in range(m)]
                     + [end["B", c, i] for c in mine for i in range(m)])
            model.add_reservoir_constraint(times, [1] * (len(times) // 2) + [-1] * (len(times) // 2), 0, cap)
    makespan = model.new_int_var(0, horizon, "makespan")
    model.add_max_equality(makespan, list(end.values()))
    model.minimize(makespan)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = seconds
    solver.parameters.num_workers = 2
    status = solver.solve(model)
    found = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)  # else there is no order to report, not a 0
    return solver.status_name(status), solver.objective_value if found else None, solver.best_objective_bound


def _shown(makespan: float | None) -> str:
    """A makespan, or '-' where the solver found no order in its time."""
    return "-" if makespan is None else f"{makespan:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="CP-SAT time limit per solve")
    args = parser.parse_args(argv)
    vpp = 2
    print(machine_line())
    print(f"{'pp':>3} {'m':>3} {'ours':>6} {'best, same memory':>22} {'best, any memory':>22} {'bound':>6}")
    for pp, m in CASES:
        chunks = pp * vpp
        prog = program(Schedule.WAVE, pp, m, vpp)
        ours = simulate(prog, Durations((F_CHUNK,) * chunks, (B_CHUNK,) * chunks, (0.0,) * chunks,
                                        (1.0,) * chunks)).makespan
        cap = round(max(in_flight(Schedule.WAVE, d, pp, m, vpp) for d in range(pp)) * vpp)
        same = best_order(pp, m, vpp, cap, args.seconds)
        free = best_order(pp, m, vpp, None, args.seconds)
        bound = m * vpp * (F_CHUNK + B_CHUNK) + (pp - 1) * (F_CHUNK + B_CHUNK)
        print(f"{pp:>3} {m:>3} {ours:>6.0f} {_shown(same[1]):>6} {same[0]:>9} ({cap:>2}) {_shown(free[1]):>6} "
              f"{free[0]:>15} {bound:>6}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
