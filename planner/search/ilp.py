"""The stage split with per-stage recomputation as a small mixed-integer program, for OR-Tools CP-SAT
and for HiGHS through PuLP. Model building, solving and reading the solution are kept apart.

Variables per stage s: n_s in [1, L] layers, r_s in [0, L] fully recomputed layers, y_s = [r_s > 0];
one continuous bottleneck z. Every constraint is named:
    layers:        Σ_s n_s = L
    rec_le_layers: r_s <= n_s            rec_flag: r_s <= L·y_s
    memory_s:      m0_s + (n_s − 1)·m1_s − r_s·mr_s + transient·y_s <= capacity
    bottleneck_s:  z >= t0_s + (n_s − 1)·t1 + r_s·tr
    minimise       (m − 1)·z + Σ_s (t0_s + (n_s − 1)·t1 + r_s·tr − hidden W_s)  (W_s: ZB-H1 only)
Counting layers per stage (not a binary per layer and stage, as the naive formulation of
REFERENCE.md section 8 does) keeps the model at 3P + 1 variables: it solves in milliseconds.
CP-SAT needs integers: times are scaled to nanoseconds and bytes rounded (memory terms rounded up,
savings down, so a solution it accepts fits); the caller re-checks the split with the cost model.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the solvers load when a split is solved, not at start-up
    import pulp
    from ortools.sat.python import cp_model

from planner.search.split_model import Split, SplitProblem

NS = 1e9


class Solver(str, Enum):
    DP = "dp"
    CPSAT = "cpsat"
    HIGHS = "highs"


@dataclass(frozen=True)
class SolveOptions:
    time_limit_s: float = 10.0
    threads: int = 1


@dataclass(frozen=True)
class IlpResult:
    split: Split | None
    optimal: bool
    gap: float  # relative gap the solver reports (0 when proven optimal)
    solve_time_s: float


@dataclass(frozen=True)
class Outcome:
    """What a solver run left: whether it found a solution, whether it proved it optimal (or, with none
    found, proved there is none), and the relative gap it reports."""

    found: bool
    proven: bool
    gap: float


def run_cpsat(model: cp_model.CpModel, options: SolveOptions) -> tuple[cp_model.CpSolver, Outcome]:
    """Solve `model` with CP-SAT under the options; the solver holds the values."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = options.time_limit_s
    solver.parameters.num_workers = options.threads
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver, Outcome(False, status == cp_model.INFEASIBLE, 0.0)
    bound, value = solver.best_objective_bound, solver.objective_value
    gap = 0.0 if status == cp_model.OPTIMAL else abs(value - bound) / max(abs(value), 1.0)
    return solver, Outcome(True, status == cp_model.OPTIMAL, gap)


def run_highs(prob: pulp.LpProblem, variables: list[pulp.LpVariable], options: SolveOptions) -> Outcome:
    """Solve `prob` with HiGHS to optimality (or the time limit); found only when `variables` have values."""
    import pulp

    status = pulp.LpStatus[prob.solve(pulp.HiGHS(msg=False, gapRel=1e-9, gapAbs=0.0,
                                                 timeLimit=options.time_limit_s, threads=options.threads))]
    if status != "Optimal" or any(v.value() is None for v in variables):
        return Outcome(False, status == "Infeasible", 0.0)
    return Outcome(True, True, 0.0)


def _split_from(p: SplitProblem, layers: list[int]) -> Split:
    """Recompute times from the exact tables so every method reports the same numbers."""
    from planner.search.partition import make_split, stage_tables  # numpy, loaded when a split is solved

    times, recs = stage_tables(p)
    return make_split(p, times, recs, layers)


def _hidden(p: SplitProblem, s: int) -> tuple[float, float]:
    """(w0, w1) of the weight-gradient time stage s hides (ZB-H1; none on the last stage)."""
    if not p.w0 or s == p.num_stages - 1:
        return 0.0, 0.0
    return p.w0[s], p.w1


def build_cpsat(p: SplitProblem, hint: Split | None = None) -> tuple[cp_model.CpModel, list[cp_model.IntVar]]:
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    L, P = p.num_layers, p.num_stages
    n = [model.new_int_var(1, L, f"n_{s}") for s in range(P)]
    r = [model.new_int_var(0, L if p.partial_recompute else 0, f"r_{s}") for s in range(P)]
    y = [model.new_bool_var(f"y_{s}") for s in range(P)]
    t1, tr = round(p.t1 * NS), round(p.tr * NS)
    horizon = int(sum(round(t * NS) for t in p.t0) + L * (t1 + tr) + 1)
    z = model.new_int_var(0, horizon, "z")
    model.add(sum(n) == L).with_name("layers")
    stage_time = []
    for s in range(P):
        model.add(r[s] <= n[s]).with_name(f"rec_le_layers_{s}")
        model.add(r[s] <= L * y[s]).with_name(f"rec_flag_{s}")
        m0, m1 = math.ceil(p.m0[s]), math.ceil(p.m1[s])
        mr, tb = math.floor(p.mr[s]), math.ceil(p.transient)
        model.add(m0 + (n[s] - 1) * m1 - r[s] * mr + tb * y[s] <= math.floor(p.capacity)).with_name(f"memory_{s}")
        t = round(p.t0[s] * NS) + (n[s] - 1) * t1 + r[s] * tr
        model.add(z >= t).with_name(f"bottleneck_{s}")
        w0, w1 = _hidden(p, s)
        stage_time.append(t - round(w0 * NS) - (n[s] - 1) * round(w1 * NS))
    model.minimize((p.num_microbatches - 1) * z + sum(stage_time))
    if hint is not None:
        for s in range(P):
            model.add_hint(n[s], hint.layers[s])
            model.add_hint(r[s], hint.recompute[s])
    return model, n


def solve_cpsat(p: SplitProblem, options: SolveOptions = SolveOptions(), hint: Split | None = None) -> IlpResult:
    start = time.perf_counter()
    model, n = build_cpsat(p, hint)
    solver, out = run_cpsat(model, options)
    split = _split_from(p, [int(solver.value(v)) for v in n]) if out.found else None
    return IlpResult(split, out.proven, out.gap, time.perf_counter() - start)


def build_highs(p: SplitProblem) -> tuple[pulp.LpProblem, list[pulp.LpVariable]]:
    import pulp

    L, P = p.num_layers, p.num_stages
    prob = pulp.LpProblem("stage_split", pulp.LpMinimize)
    n = [prob.add_variable(f"n_{s}", 1, L, cat="Integer") for s in range(P)]
    r = [prob.add_variable(f"r_{s}", 0, L if p.partial_recompute else 0, cat="Integer") for s in range(P)]
    y = [prob.add_variable(f"y_{s}", 0, 1, cat="Integer") for s in range(P)]
    z = prob.add_variable("z", 0)
    times = [p.t0[s] + (n[s] - 1) * p.t1 + r[s] * p.tr for s in range(P)]
    hidden = [_hidden(p, s)[0] + (n[s] - 1) * _hidden(p, s)[1] for s in range(P)]
    prob += (p.num_microbatches - 1) * z + pulp.lpSum(times) - pulp.lpSum(hidden)
    prob += pulp.lpSum(n) == L, "layers"
    for s in range(P):
        prob += r[s] <= n[s], f"rec_le_layers_{s}"
        prob += r[s] <= L * y[s], f"rec_flag_{s}"
        prob += (p.m0[s] + (n[s] - 1) * p.m1[s] - r[s] * p.mr[s] + p.transient * y[s] <= p.capacity,
                 f"memory_{s}")
        prob += z >= times[s], f"bottleneck_{s}"
    return prob, n


def solve_highs(p: SplitProblem, options: SolveOptions = SolveOptions()) -> IlpResult:
    start = time.perf_counter()
    prob, n = build_highs(p)
    out = run_highs(prob, n, options)
    split = _split_from(p, [int(round(v.value())) for v in n]) if out.found else None
    return IlpResult(split, out.proven, out.gap, time.perf_counter() - start)


def solve_ilp(p: SplitProblem, solver: Solver, options: SolveOptions = SolveOptions(),
              hint: Split | None = None) -> IlpResult:
    if solver is Solver.CPSAT:
        return solve_cpsat(p, options, hint)
    if solver is Solver.HIGHS:
        return solve_highs(p, options)
    raise ValueError(f"{solver.value} is not an integer-programming solver")


__all__ = ["IlpResult", "Outcome", "Solver", "SolveOptions", "build_cpsat", "build_highs", "run_cpsat", "run_highs",
           "solve_cpsat", "solve_highs", "solve_ilp"]
