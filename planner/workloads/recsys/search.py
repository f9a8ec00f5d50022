"""The sharding of a DLRM's tables: an ILP over tables x sharding options x ranks (PuLP + HiGHS) that minimises
the step time (dense part + the slowest rank's embedding time) under every rank's HBM and host memory, and the
brute force it is tested against. Building, solving and reading the solution are kept apart; the solution is
re-priced with planner.workloads.recsys.cost.evaluate_sharding, the same function the brute force uses.

Options per table: data parallel, row-wise over every GPU, table-wise on one GPU (in HBM, or in host memory with
an HBM cache when the job gives host memory), column-wise in k equal shards (k | dim, each at least
`min_column_dim` wide: TorchRec's MIN_CW_DIM is 128), each shard on a rank of its own choosing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from meshcore import ClusterSpec
from meshcore.enums import GIB
from meshcore.errors import InfeasibleError
from planner.workloads.recsys.cost import (
    PieceCost,
    RecEvaluation,
    a2a_terms,
    bottom_pieces,
    dense_cost,
    evaluate_sharding,
    every_rank_piece,
    one_rank_piece,
)
from planner.workloads.recsys.runtime import runtime_kinds
from planner.workloads.recsys.spec import (
    EmbeddingTable,
    RecJob,
    RecModel,
    ShardingKind,
    Storage,
    TableSharding,
)

if TYPE_CHECKING:
    import pulp

US, MB = 1e6, 1e-6  # the ILP counts microseconds and megabytes (HiGHS tolerances suit numbers near 1)


@dataclass(frozen=True)
class Option:
    """One way to shard a table before its pieces get ranks: `pieces` one-rank pieces (table-wise 1, column-wise
    k), or 0 for an option every rank holds (row-wise, data parallel)."""

    kind: ShardingKind
    storage: Storage = Storage.HBM
    column_shards: int = 1

    @property
    def pieces(self) -> int:
        if self.kind in (ShardingKind.ROW_WISE, ShardingKind.DATA_PARALLEL):
            return 0
        return self.column_shards


@dataclass(frozen=True)
class RecPlan:
    """The chosen sharding, its evaluation, and how it was found (solver, optimal or the gap left)."""

    model: RecModel
    job: RecJob
    shardings: tuple[TableSharding, ...]
    evaluation: RecEvaluation
    solver: str
    optimal: bool
    gap: float
    solve_s: float


def table_options(table: EmbeddingTable, job: RecJob, kinds: frozenset[ShardingKind],
                  min_column_dim: int = 128) -> list[Option]:
    kinds = kinds & runtime_kinds(job)
    options: list[Option] = []
    if ShardingKind.DATA_PARALLEL in kinds:
        options.append(Option(ShardingKind.DATA_PARALLEL))
    if ShardingKind.TABLE_WISE in kinds:
        options.append(Option(ShardingKind.TABLE_WISE))
        if job.host_gib > 0:
            options.append(Option(ShardingKind.TABLE_WISE, Storage.HOST))
    if ShardingKind.ROW_WISE in kinds and job.gpus > 1:
        options.append(Option(ShardingKind.ROW_WISE))
    if ShardingKind.COLUMN_WISE in kinds:
        options += [Option(ShardingKind.COLUMN_WISE, Storage.HBM, k) for k in range(2, job.gpus + 1)
                    if table.dim % k == 0 and table.dim // k >= min_column_dim]
    return options


def sharding_of(table: EmbeddingTable, option: Option, ranks: tuple[int, ...], gpus: int) -> TableSharding:
    every = tuple(range(gpus))
    return TableSharding(table.name, option.kind, option.storage, ranks if option.pieces else every,
                         option.column_shards)


def _costs(model: RecModel, job: RecJob, cluster: ClusterSpec, table: EmbeddingTable,
           option: Option) -> tuple[PieceCost, PieceCost]:
    if option.pieces == 0:
        return every_rank_piece(table, option.kind, model, job, cluster), PieceCost()
    return one_rank_piece(table, table.dim // option.column_shards, option.storage, model, job, cluster)


def build_model(model: RecModel, job: RecJob, cluster: ClusterSpec, kinds: frozenset[ShardingKind],
                min_column_dim: int) -> tuple[pulp.LpProblem, dict[tuple[int, int], pulp.LpVariable],
                                              dict[tuple[int, int, int, int], pulp.LpVariable], list[list[Option]]]:
    """z[t, o]: table t takes option o; x[t, o, s, g]: piece s of that option sits on rank g. Per rank, every
    PieceCost field is a linear sum; traffic >= sent, >= received; T >= the rank's embedding time."""
    import pulp

    n = job.gpus
    per_byte, fixed = a2a_terms(job, cluster)
    dense = dense_cost(model, job, cluster)
    bottom = bottom_pieces(model, job, cluster)
    hbm_cap = (cluster.gpu.memory_gib * GIB - dense.memory_bytes) / GIB
    prob = pulp.LpProblem("recsys_sharding", pulp.LpMinimize)
    z: dict[tuple[int, int], pulp.LpVariable] = {}
    x: dict[tuple[int, int, int, int], pulp.LpVariable] = {}
    options = [table_options(t, job, kinds, min_column_dim) for t in model.tables]
    terms: list[dict[str, list[tuple[float, pulp.LpVariable]]]] = [
        {f: [] for f in ("compute", "send", "recv", "coll", "hbm", "host")} for _ in range(n)]

    def add(g: int, cost: PieceCost, var: pulp.LpVariable, sign: float = 1.0) -> None:
        for field, value in (("compute", cost.compute_s * US), ("send", cost.send_bytes * MB),
                             ("recv", cost.recv_bytes * MB), ("coll", cost.collective_s * US),
                             ("hbm", cost.hbm_bytes / GIB), ("host", cost.host_bytes / GIB)):
            if value:
                terms[g][field].append((sign * value, var))

    for t, (table, opts) in enumerate(zip(model.tables, options, strict=True)):
        for o, option in enumerate(opts):
            z[t, o] = prob.add_variable(f"z_{t}_{o}", 0, 1, cat="Binary")
            holder, other = _costs(model, job, cluster, table, option)
            if option.pieces == 0:
                for g in range(n):
                    add(g, holder, z[t, o])
                continue
            for s in range(option.pieces):
                for g in range(n):
                    x[t, o, s, g] = prob.add_variable(f"x_{t}_{o}_{s}_{g}", 0, 1, cat="Binary")
                prob += pulp.lpSum(x[t, o, s, g] for g in range(n)) == z[t, o], f"piece_{t}_{o}_{s}_placed_once"
                for g in range(n):  # other-share on every rank but the holder: z - x
                    add(g, other, z[t, o])
                    add(g, other, x[t, o, s, g], -1.0)
                    add(g, holder, x[t, o, s, g])
        prob += pulp.lpSum(z[t, o] for o in range(len(opts))) == 1, f"table_{t}_one_option"
    step = prob.add_variable("embedding_us", 0)
    prob += step
    for g in range(n):
        def total(field: str, g: int = g) -> pulp.LpAffineExpression:
            return pulp.lpSum(c * v for c, v in terms[g][field])
        traffic = prob.add_variable(f"traffic_mb_{g}", 0)
        own = bottom[g]
        prob += traffic >= total("send") + own.send_bytes * MB, f"rank_{g}_traffic_sent"
        prob += traffic >= total("recv") + own.recv_bytes * MB, f"rank_{g}_traffic_received"
        prob += step >= total("compute") + own.compute_s * US + total("coll") + 2 * (
            per_byte / MB * US * traffic + fixed * US), f"rank_{g}_time"
        prob += total("hbm") + own.hbm_bytes / GIB <= hbm_cap, f"rank_{g}_hbm_gib"
        prob += total("host") <= job.host_gib, f"rank_{g}_host_gib"
    return prob, z, x, options


def extract(model: RecModel, job: RecJob, z: dict[tuple[int, int], pulp.LpVariable],
            x: dict[tuple[int, int, int, int], pulp.LpVariable],
            options: list[list[Option]]) -> tuple[TableSharding, ...]:
    out: list[TableSharding] = []
    for t, (table, opts) in enumerate(zip(model.tables, options, strict=True)):
        o = max(range(len(opts)), key=lambda o: z[t, o].value() or 0.0)
        ranks = tuple(max(range(job.gpus), key=lambda g: x[t, o, s, g].value() or 0.0)
                      for s in range(opts[o].pieces))
        out.append(sharding_of(table, opts[o], ranks, job.gpus))
    return tuple(out)


ALL_KINDS = frozenset(ShardingKind)


def plan_sharding(model: RecModel, job: RecJob, cluster: ClusterSpec, kinds: frozenset[ShardingKind] = ALL_KINDS,
                  min_column_dim: int = 128, time_limit_s: float = 30.0, threads: int = 1) -> RecPlan:
    """Solve the ILP with HiGHS and re-price its answer; InfeasibleError names the memory that binds."""
    import pulp

    _check_capacity(model, job, cluster, kinds, min_column_dim)
    start = time.perf_counter()
    prob, z, x, options = build_model(model, job, cluster, kinds, min_column_dim)
    with _quiet_stdout():  # highspy prints its banner on file descriptor 1 whatever msg says
        status = pulp.LpStatus[prob.solve(pulp.HiGHS(msg=False, gapRel=1e-7, timeLimit=time_limit_s,
                                                     threads=threads))]
    if status != "Optimal" and any(v.value() is None for v in z.values()):
        raise InfeasibleError(_infeasible_message(model, job, cluster))
    shardings = extract(model, job, z, x, options)
    evaluation = evaluate_sharding(model, job, cluster, shardings)
    if not evaluation.fits:
        raise InfeasibleError(_infeasible_message(model, job, cluster))
    bound = _bound(prob)
    emb = max(evaluation.rank_s)
    gap = 0.0 if status == "Optimal" else max(0.0, (emb * US - bound) / max(emb * US, 1e-12))
    return RecPlan(model, job, shardings, evaluation, "highs", status == "Optimal" and gap < 1e-6, gap,
                   time.perf_counter() - start)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _bound(prob: pulp.LpProblem) -> float:
    value = prob.objective.value() if prob.objective is not None else None
    return float(value) if value is not None else 0.0


def _check_capacity(model: RecModel, job: RecJob, cluster: ClusterSpec, kinds: frozenset[ShardingKind],
                    min_column_dim: int) -> None:
    for table in model.tables:
        if not table_options(table, job, kinds, min_column_dim):
            raise InfeasibleError(f"table {table.name}: no sharding is allowed for it; allow one of "
                                  f"{', '.join(sorted(k.value for k in runtime_kinds(job)))} "
                                  f"(what --runtime {job.runtime.value} runs)")


def _infeasible_message(model: RecModel, job: RecJob, cluster: ClusterSpec) -> str:
    dense = dense_cost(model, job, cluster)
    free = max(0.0, cluster.gpu.memory_gib * GIB - dense.memory_bytes) * job.gpus / GIB
    need = sum(t.weight_bytes for t in model.tables) / GIB
    return (f"the tables do not fit: {need:.1f} GiB of embedding weights (before optimizer state) against "
            f"{free:.1f} GiB of HBM left on {job.gpus} GPUs after the dense part and buffers"
            f"{'' if job.host_gib else ' and no host memory'}; use more GPUs, GPUs with more memory, "
            "--host-gib for host-memory tables, or a smaller batch")


def brute_force(model: RecModel, job: RecJob, cluster: ClusterSpec, kinds: frozenset[ShardingKind] = ALL_KINDS,
                min_column_dim: int = 128) -> tuple[TableSharding, ...] | None:
    """Every option of every table with every rank for every piece; the fastest that fits (tiny cases only)."""
    per_table: list[list[TableSharding]] = []
    for table in model.tables:
        choices = []
        for option in table_options(table, job, kinds, min_column_dim):
            for ranks in itertools.product(range(job.gpus), repeat=option.pieces):
                choices.append(sharding_of(table, option, tuple(ranks), job.gpus))
        per_table.append(choices)
    best: tuple[float, tuple[TableSharding, ...]] | None = None
    for combo in itertools.product(*per_table):
        ev = evaluate_sharding(model, job, cluster, combo)
        if ev.fits and (best is None or ev.step_s < best[0]):
            best = (ev.step_s, combo)
    return None if best is None else best[1]
