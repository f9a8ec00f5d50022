"""Plan any chain of profiled layers (a CNN, a GNN potential, a recommendation tower, ...) with PP and DP,
and TP where the cost table gives rows per TP degree.

The chain is the cost table's kinds in the order they first appear, each repeated `count` times. Per
layer l and (tp, mbs): time t_l = forward + backward (rows measured per TP degree include that TP
shard's own work; TP communication inside a layer is whatever the measurement included), activations
a_l, parameters w_l, output bytes o_l. A pipeline stage holding layers [i, j) costs per micro-batch
    T(i, j) = Σ t_l + sends of its boundary activations (o_{j−1} forward, o_{i−1} backward)
and holds Σ w_l x state bytes + in_flight(stage) x Σ a_l + a buffer allowance. The split minimises the
1F1B step (m − 1)·max_s T_s + Σ_s T_s exactly, with the bounded DP over (stage, boundary) of
planner.search.partition (`best_boundaries`). Data parallelism reduces each stage's gradients (ZeRO-1 when dp > 1, which
moves fewer bytes than an all-reduce) and the optimizer step is bandwidth-bound, as in cost_models.step.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from cost_models.comm.collectives import send_recv
from cost_models.memory import footprint as M
from cost_models.pipeline.schedules import in_flight
from cost_models.pipeline.stages import pipeline_time
from cost_models.profile.tables import SHAPE_COLUMNS, checked_rows, read_frame, same_value
from cost_models.sync import adam_step_time, grad_sync_times
from meshcore import DEFAULT_SCHEDULE, GIB, ClusterSpec, ZeroStage
from meshcore.errors import InfeasibleError, InputError
from meshcore.mesh import Mesh
from planner.search.partition import best_boundaries

LLM_KINDS = {"embedding", "decoder", "lm_head"}
CHAIN_COLUMNS = ("kind", "count", "tp", "mbs", "seq_len", "forward_ms", "backward_ms", "activation_bytes", "params",
                 "output_bytes")
NO_LAUNCHER = ("no launcher runs per-layer strategies (Megatron-LM, torchtitan and DeepSpeed take one TP degree and "
               "one recompute setting for every layer); the plan file carries them")
MAX_CHAIN_LAYERS = 1024  # the split DP holds a (layers + 1)^2 table per pipeline stage


@dataclass(frozen=True)
class ChainTable:
    kinds: tuple[str, ...]  # one entry per layer, in chain order
    rows: pd.DataFrame  # indexed by (kind, tp, mbs)
    seq_len: int

    @property
    def num_layers(self) -> int:
        return len(self.kinds)

    @cached_property
    def costs(self) -> dict[tuple[str, int, int], tuple[float, float, float, float, float]]:
        """(kind, tp, mbs) -> (forward ms, backward ms, activation bytes, params, output bytes), read from `rows`
        once (a DataFrame lookup per layer and degree was most of planning a candidate's options)."""
        cols = ["forward_ms", "backward_ms", "activation_bytes", "params", "output_bytes"]
        return {(str(k[0]), int(k[1]), int(k[2])): tuple(float(x) for x in v)  # type: ignore[misc]
                for k, v in zip(self.rows.index, self.rows[cols].itertuples(index=False), strict=True)}

    def arrays(self, tp: int, mbs: int) -> tuple[np.ndarray, ...] | None:
        """(time s, activation bytes, params, output bytes) per layer, or None when a kind lacks the row."""
        try:
            rows = [self.rows.loc[(k, tp, mbs)] for k in self.kinds]
        except KeyError:
            return None
        t = np.array([(r["forward_ms"] + r["backward_ms"]) / 1e3 for r in rows])
        act = np.array([r["activation_bytes"] for r in rows], dtype=float)
        params = np.array([r["params"] for r in rows], dtype=float)
        return t, act, params, np.array([r["output_bytes"] for r in rows], dtype=float)


def read_chain(path: str) -> ChainTable:
    """A chain table, every cell checked (cost_models.profile.tables.checked_rows): counts, tp, mbs and seq_len whole
    numbers, times and bytes finite and non-negative, one count per kind, one seq_len, at most MAX_CHAIN_LAYERS
    layers; an InputError names the row, the column, the value and what is allowed."""
    frame = read_frame(path)
    missing = [c for c in CHAIN_COLUMNS if c not in frame.columns]
    unknown = [c for c in frame.columns if c not in (*CHAIN_COLUMNS, "device")]
    if missing or unknown:
        problem = f"missing columns {missing}" if missing else f"unknown columns {unknown}"
        raise InputError(f"cost table {path}: {problem}; a chain table has the columns {', '.join(CHAIN_COLUMNS)} "
                         f"(and an optional device)")
    rows = checked_rows(frame, path, CHAIN_COLUMNS[1:])
    seq_len = same_value(rows, "seq_len", path, "the table")
    order = list(dict.fromkeys(r["kind"] for r in rows))
    counts = {k: same_value([r for r in rows if r["kind"] == k], "count", path, f"the {k} rows") for k in order}
    if sum(counts.values()) > MAX_CHAIN_LAYERS:
        raise InputError(f"cost table {path}: the chain's counts ({', '.join(f'{k} {n}' for k, n in counts.items())}) "
                         f"add up to {sum(counts.values())} layers; at most {MAX_CHAIN_LAYERS} are planned")
    kinds = tuple(k for k in order for _ in range(counts[k]))
    clean = pd.DataFrame([{c: r[c] for c in CHAIN_COLUMNS} for r in rows])
    return ChainTable(kinds, clean.set_index(["kind", "tp", "mbs"]).sort_index(), seq_len)


@dataclass(frozen=True)
class LayerChoice:
    """One layer's strategy in a per-layer plan (planner.search.layerwise): `tp`-way tensor parallelism, `dp`-way
    data parallelism over the rest of the stage's GPUs (dp x tp = the plan's dp x tp), and whether the layer
    recomputes its forward in the backward (keeping only its input) instead of keeping its activations."""

    tp: int
    dp: int
    recompute: bool


@dataclass(frozen=True)
class ChainPlan:
    tp: int
    pp: int
    dp: int
    mbs: int
    zero: ZeroStage
    stage_layers: tuple[int, ...]
    stage_times: tuple[float, ...]
    stage_memory_gib: tuple[float, ...]
    step_time_s: float
    samples_per_s: float
    layers: tuple[LayerChoice, ...] = ()  # per-layer strategies (`--per-layer`); empty: every layer at tp, dp


def _segments(t: np.ndarray, out: np.ndarray, cluster: ClusterSpec, mesh: Mesh) -> np.ndarray:
    """cost[s, i, j]: per-micro-batch time of stage s holding layers [i, j) (inf when j <= i); a stage's output
    crosses to the next over the mesh's pipeline neighbours."""
    n, stages = len(t), mesh.pp
    pre = np.concatenate([[0.0], np.cumsum(t)])
    send = np.array([send_recv(b, mesh.pipeline_neighbours, cluster) if stages > 1 else 0.0 for b in out])
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    base = np.where(j > i, pre[j] - pre[i], np.inf)
    cost = np.repeat(base[None], stages, axis=0)
    last_out = send[np.clip(j - 1, 0, n - 1)]
    first_in = send[np.clip(i - 1, 0, n - 1)]
    for s in range(stages):
        if s < stages - 1:
            cost[s] += last_out
        if s > 0:
            cost[s] += first_in
    return cost


def best_split(cost: np.ndarray, fits: np.ndarray, m: int) -> tuple[list[int], float] | None:
    """Boundaries [0, ..., L] minimising (m − 1)·max_s T_s + Σ_s T_s over splits that fit."""
    return best_boundaries(cost, cost, fits, m)


def plan_chain(table: ChainTable, cluster: ClusterSpec, global_batch: int, grad_bytes: int = 4,
               top_k: int = 5) -> list[ChainPlan]:
    """The fastest (tp, pp, dp, mbs) and split of the chain that fit, best first."""
    gpus, cap = cluster.num_gpus, cluster.gpu.memory_gib * GIB
    results: list[ChainPlan] = []
    tps = sorted({int(k[1]) for k in table.rows.index})
    mbss = sorted({int(k[2]) for k in table.rows.index})
    for tp in (t for t in tps if gpus % t == 0 and t <= cluster.scale_up_size):
        for pp in (p for p in range(1, table.num_layers + 1) if (gpus // tp) % p == 0):
            dp = gpus // (tp * pp)
            if global_batch % dp:
                continue
            zero = ZeroStage.OPTIMIZER if dp > 1 else ZeroStage.NONE
            for mbs in (b for b in mbss if (global_batch // dp) % b == 0):
                found = _price(table, cluster, tp, pp, dp, mbs, zero, global_batch, grad_bytes, cap)
                if found is not None:
                    results.append(found)
    if not results:
        raise InfeasibleError(f"no layout of the {table.num_layers}-layer chain fits in {cluster.gpu.memory_gib:g} "
                              f"GiB per GPU on {gpus} GPUs; use more GPUs or GPUs with more memory")
    return sorted(results, key=lambda r: (r.step_time_s, r.tp, r.pp, r.mbs))[:top_k]


def _price(table: ChainTable, cluster: ClusterSpec, tp: int, pp: int, dp: int, mbs: int, zero: ZeroStage,
           global_batch: int, grad_bytes: int, cap: float) -> ChainPlan | None:
    arrays = table.arrays(tp, mbs)
    if arrays is None:
        return None
    t, act, params, out = arrays
    m, mesh = global_batch // (dp * mbs), Mesh(tp=tp, dp_shard=dp, pp=pp)  # TP inside DP inside PP
    cost = _segments(t, out, cluster, mesh)
    n = table.num_layers
    pre_a, pre_w = np.concatenate([[0.0], np.cumsum(act)]), np.concatenate([[0.0], np.cumsum(params)])
    i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    shard = mesh.shard_group.size
    state = M.state_bytes(1.0, zero, shard, grad_bytes).total

    def stage_bytes(s: int, a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | float:
        """Bytes on stage s holding layers a..b-1: states, activations in flight, buffers."""
        alive = in_flight(DEFAULT_SCHEDULE, s, pp, m, 1)
        held: np.ndarray | float = ((pre_w[b] - pre_w[a]) * state + alive * (pre_a[b] - pre_a[a])
                                    + M.BUFFER_ALLOWANCE_GIB * GIB)
        return held

    fits = np.stack([stage_bytes(s, i, j) <= cap for s in range(pp)])
    split = best_split(cost, fits, m)
    if split is None:
        return None
    bounds = split[0]
    pairs = list(zip(bounds, bounds[1:], strict=False))
    times = [float(cost[s, a, b]) for s, (a, b) in enumerate(pairs)]
    mem = [float(stage_bytes(s, a, b)) / GIB for s, (a, b) in enumerate(pairs)]
    tail = 0.0
    for a, b in pairs:
        p = float(pre_w[b] - pre_w[a])
        comm = sum(grad_sync_times(p, zero, mesh.dense_data, cluster, grad_bytes, True))
        tail = max(tail, comm + adam_step_time(p / (shard if zero >= ZeroStage.OPTIMIZER else 1), cluster))
    step = pipeline_time(times, m, 1, DEFAULT_SCHEDULE) + tail
    layers = tuple(b - a for a, b in pairs)
    return ChainPlan(tp, pp, dp, mbs, zero, layers, tuple(times), tuple(mem), step, global_batch / step)


def is_chain_table(path: str) -> bool:
    """True when the table is not a transformer's: a transformer's table has the model's shape columns (hidden_size,
    ...) or only embedding, decoder and lm_head rows (one that lacks a kind is then refused as incomplete, not
    planned as a chain of the kinds it has)."""
    frame = read_frame(path)
    return not set(SHAPE_COLUMNS) & set(frame.columns) and not set(frame["kind"]) <= LLM_KINDS


def chain_plan_dict(table: ChainTable, plans: list[ChainPlan], costs: str, hardware: str, gpus: int,
                    global_batch: int) -> dict[str, object]:
    """The record `meshplan plan --costs CHAIN --out` writes (YAML) or `--json` prints. Per-layer plans add, per
    plan, `per_layer` (each layer's kind, tp, dp and recompute) and a top-level `launchers` note; files without them
    read as before."""
    rows = [{"tp": p.tp, "pp": p.pp, "dp": p.dp, "mbs": p.mbs, "zero_stage": int(p.zero),
             "stage_layers": list(p.stage_layers), "step_time_s": p.step_time_s, "samples_per_s": p.samples_per_s,
             "stage_memory_gib": list(p.stage_memory_gib),
             **({"per_layer": [{"layer": n, "kind": k, "tp": c.tp, "dp": c.dp, "recompute": c.recompute}
                               for n, (k, c) in enumerate(zip(table.kinds, p.layers, strict=True))]}
                if p.layers else {})} for p in plans]
    doc: dict[str, object] = {"kind": "chain-plan", "costs": costs, "hardware": hardware, "gpus": gpus,
                              "global_batch": global_batch, "layers": list(table.kinds), "plans": rows}
    if any(p.layers for p in plans):
        doc["launchers"] = NO_LAUNCHER
    return doc
