"""The split of a stack whose layers differ in kind (`planner.search.partition.KindSplitProblem`) as a mixed-integer
program, for HiGHS through PuLP and for OR-Tools CP-SAT: the ILP counterpart of the segment DP.

Counting layers per stage (as `planner.search.ilp` does for uniform stacks) no longer suffices once layers differ,
so the model places each layer. Binaries per stage s and layer l: x[s, l] (layer l runs on stage s) and
z[s, l] (it is fully recomputed); a flag u_s (the stage recomputes something) and a continuous bottleneck B.
    one_stage_l:   Σ_s x[s, l] = 1
    order_l:       0 <= Σ_s s·x[s, l+1] − Σ_s s·x[s, l] <= 1, the first layer on stage 0, the last on P − 1
                   (stages are contiguous, in order and none is empty)
    rec_on_stage:  z[s, l] <= x[s, l]
    rec_prefix:    z[s, l] <= z[s, l−1] + 1 − x[s, l−1]   (the recomputed layers are the stage's first ones)
    rec_flag:      u_s >= z[s, l]
    memory_s:      m0_s + Σ_l x·m1[s][k_l] − Σ_l z·mr[s][k_l] + transient·u_s <= capacity
    bottleneck_s:  B >= T_s = t0_s + Σ_l x·t1[k_l] + Σ_l z·tr[k_l]
    minimise       (m − 1)·B + Σ_s (T_s − hidden W_s)
CP-SAT gets nanoseconds and bytes rounded as in `planner.search.ilp` (memory up, savings down). The split is read
back through the DP's own tables so every method reports the same stage times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the solvers load when a split is solved, not at start-up
    pass

from planner.search.ilp import NS, IlpResult, SolveOptions, Solver, run_cpsat, run_highs
from planner.search.split_model import KindSplitProblem, Split


def _hidden(p: KindSplitProblem, s: int) -> tuple[float, tuple[float, ...]]:
    """(w0, w1 per kind) of the weight-gradient time stage s hides (zero-bubble; none on the last stage)."""
    if not p.w0 or s == p.num_stages - 1:
        return 0.0, (0.0,) * len(p.t1)
    return p.w0[s], p.w1


def _add_structure(p: KindSplitProblem, add: Callable[[Any, str], None], x: list[list[Any]],
                   z: list[list[Any]], u: list[Any]) -> None:
    """The placement and recomputation constraints both solvers share (linear in x, z, u)."""
    L, P = p.num_layers, p.num_stages
    index = [sum(s * x[s][layer] for s in range(P)) for layer in range(L)]
    for layer in range(L):
        add(sum(x[s][layer] for s in range(P)) == 1, f"one_stage_{layer}")
        if layer + 1 < L:
            add(index[layer + 1] - index[layer] >= 0, f"order_lo_{layer}")
            add(index[layer + 1] - index[layer] <= 1, f"order_hi_{layer}")
    add(x[0][0] == 1, "first_layer")
    add(x[P - 1][L - 1] == 1, "last_layer")
    for s in range(P):
        for layer in range(L):
            add(z[s][layer] <= x[s][layer], f"rec_on_stage_{s}_{layer}")
            add(u[s] >= z[s][layer], f"rec_flag_{s}_{layer}")
            if layer > 0:
                add(z[s][layer] <= z[s][layer - 1] + 1 - x[s][layer - 1], f"rec_prefix_{s}_{layer}")


def _read(p: KindSplitProblem, placed: list[list[float]]) -> Split:
    """The split of a solved placement, priced by the DP's tables."""
    from planner.search.partition import kind_segment_tables, kind_split  # numpy, loaded when a split is solved

    times, sums, recs = kind_segment_tables(p)
    layers = [sum(1 for v in row if v > 0.5) for row in placed]
    bounds = [0]
    for n in layers:
        bounds.append(bounds[-1] + n)
    return kind_split(p, times, sums, recs, bounds)


def solve_highs_kinds(p: KindSplitProblem, options: SolveOptions | None = None) -> IlpResult:
    import pulp

    options = options or SolveOptions()
    start = time.perf_counter()
    L, P, kinds = p.num_layers, p.num_stages, p.kinds
    prob = pulp.LpProblem("kind_split", pulp.LpMinimize)
    x = [[prob.add_variable(f"x_{s}_{layer}", 0, 1, cat="Integer") for layer in range(L)] for s in range(P)]
    hi = 1 if p.partial_recompute else 0
    z = [[prob.add_variable(f"z_{s}_{layer}", 0, hi, cat="Integer") for layer in range(L)] for s in range(P)]
    u = [prob.add_variable(f"u_{s}", 0, 1, cat="Integer") for s in range(P)]
    bottleneck = prob.add_variable("B", 0)

    def add(constraint: Any, name: str) -> None:
        prob.addConstraint(constraint, name)

    _add_structure(p, add, x, z, u)
    stage_sums = []
    for s in range(P):
        t = p.t0[s] + pulp.lpSum(x[s][i] * p.t1[kinds[i]] + z[s][i] * p.tr[kinds[i]] for i in range(L))
        mem = (p.m0[s] + pulp.lpSum(x[s][i] * p.m1[s][kinds[i]] - z[s][i] * p.mr[s][kinds[i]] for i in range(L))
               + p.transient * u[s])
        add(mem <= p.capacity, f"memory_{s}")
        add(bottleneck >= t, f"bottleneck_{s}")
        w0, w1 = _hidden(p, s)
        stage_sums.append(t - w0 - pulp.lpSum(x[s][i] * w1[kinds[i]] for i in range(L)))
    prob += (p.num_microbatches - 1) * bottleneck + pulp.lpSum(stage_sums)
    out = run_highs(prob, [v for row in x for v in row], options)
    placed = _read(p, [[float(v.value()) for v in row] for row in x]) if out.found else None
    return IlpResult(placed, out.proven, out.gap, time.perf_counter() - start)


def solve_cpsat_kinds(p: KindSplitProblem, options: SolveOptions | None = None,
                      hint: Split | None = None) -> IlpResult:
    from ortools.sat.python import cp_model

    options = options or SolveOptions()
    start = time.perf_counter()
    L, P, kinds = p.num_layers, p.num_stages, p.kinds
    model = cp_model.CpModel()
    x = [[model.new_bool_var(f"x_{s}_{layer}") for layer in range(L)] for s in range(P)]
    z = [[model.new_bool_var(f"z_{s}_{layer}") for layer in range(L)] for s in range(P)]
    u = [model.new_bool_var(f"u_{s}") for s in range(P)]
    t1 = [round(v * NS) for v in p.t1]
    tr = [round(v * NS) for v in p.tr]
    horizon = int(sum(round(t * NS) for t in p.t0) + L * (max(t1) + max(tr)) + 1)
    bottleneck = model.new_int_var(0, horizon, "B")

    def add(constraint: Any, name: str) -> None:
        model.add(constraint).with_name(name)

    _add_structure(p, add, x, z, u)
    if not p.partial_recompute:
        for s in range(P):
            for layer in range(L):
                model.add(z[s][layer] == 0)
    stage_sums = []
    for s in range(P):
        t = round(p.t0[s] * NS) + sum(x[s][i] * t1[kinds[i]] + z[s][i] * tr[kinds[i]] for i in range(L))
        m1 = [math.ceil(v) for v in p.m1[s]]
        mr = [math.floor(v) for v in p.mr[s]]
        mem = (math.ceil(p.m0[s]) + sum(x[s][i] * m1[kinds[i]] - z[s][i] * mr[kinds[i]] for i in range(L))
               + math.ceil(p.transient) * u[s])
        add(mem <= math.floor(p.capacity), f"memory_{s}")
        add(bottleneck >= t, f"bottleneck_{s}")
        w0, w1 = _hidden(p, s)
        stage_sums.append(t - round(w0 * NS) - sum(x[s][i] * round(w1[kinds[i]] * NS) for i in range(L)))
    model.minimize((p.num_microbatches - 1) * bottleneck + sum(stage_sums))
    if hint is not None:
        first = 0
        for s, n in enumerate(hint.layers):
            for layer in range(L):
                model.add_hint(x[s][layer], first <= layer < first + n)
            first += n
    solver, out = run_cpsat(model, options)
    placed = _read(p, [[float(solver.value(v)) for v in row] for row in x]) if out.found else None
    return IlpResult(placed, out.proven, out.gap, time.perf_counter() - start)


def solve_kinds_ilp(p: KindSplitProblem, solver: Solver, options: SolveOptions | None = None,
                    hint: Split | None = None) -> IlpResult:
    if solver is Solver.CPSAT:
        return solve_cpsat_kinds(p, options, hint)
    if solver is Solver.HIGHS:
        return solve_highs_kinds(p, options)
    raise ValueError(f"{solver.value} is not an integer-programming solver")


__all__ = ["solve_cpsat_kinds", "solve_highs_kinds", "solve_kinds_ilp"]
