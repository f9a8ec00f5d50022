"""Costs of a DLRM training step under a table sharding: pure functions of the specs.

A step is the dense part (bottom MLP, interaction, top MLP: data parallel on every GPU, gradients all-reduced) plus
the embedding part, which waits for the slowest rank. The embedding work of one rank is
    lookups (HBM bytes moved / achievable HBM bandwidth) + host-cache misses (bytes / host link)
    + 2 x all-to-all (forward pooled embeddings out, backward their gradients in; ids in)
    + collectives every rank joins (row-wise reduce-scatter / all-gather, data-parallel gradient all-reduce).
This is the form of TorchRec's planner estimator (torchrec/distributed/planner/shard_estimators.py: per-shard
forward and backward compute as bytes over a kernel bandwidth, backward about twice the forward, plus input and
output communication), written down from its description and stated per rank so that an ILP can sum it; the
constants are meshplan's own (the GPU's HBM bandwidth and achievable share, cost_models/comm/collectives.py's links).

A piece of a table held by one rank (a table-wise table, one column shard) costs its holder the lookups of the
whole global batch and sends its pooled outputs to the others; every other rank receives its share. A row-wise
table or a data-parallel one costs every rank the same. `PieceCost` holds one rank's share of one piece.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.comm.collectives import Collective, all_to_all_time, collective_time
from meshcore import ClusterSpec
from meshcore.enums import GIB
from planner.workloads.recsys.runtime import (
    INDEX_KERNEL_HBM_SHARE,
    bottom_host_seconds,
    execution,
    host_step_seconds,
    scatter_bytes_per_element,
    update_bytes_per_element,
)
from planner.workloads.recsys.spec import (
    EmbeddingOptimizer,
    EmbeddingTable,
    Interaction,
    RecJob,
    RecModel,
    ShardingKind,
    Storage,
    TableSharding,
)

INDEX_BYTES = 8  # int64 ids in the input all-to-all (TorchRec's KeyedJaggedTensor)
BUFFER_GIB = 2.0  # CUDA context, NCCL and allocator slack per GPU (the transformer model's allowance)
DENSE_STATE_BYTES = 16  # per dense parameter: fp32 weights, gradients and two Adam moments


@dataclass(frozen=True)
class PieceCost:
    """One rank's share of one piece: seconds of lookups, bytes it sends and receives in the all-to-alls,
    seconds of collectives every rank joins, and the bytes it stores in HBM and in host memory."""

    compute_s: float = 0.0
    send_bytes: float = 0.0
    recv_bytes: float = 0.0
    collective_s: float = 0.0
    hbm_bytes: float = 0.0
    host_bytes: float = 0.0

    def __add__(self, other: PieceCost) -> PieceCost:
        return PieceCost(self.compute_s + other.compute_s, self.send_bytes + other.send_bytes,
                         self.recv_bytes + other.recv_bytes, self.collective_s + other.collective_s,
                         self.hbm_bytes + other.hbm_bytes, self.host_bytes + other.host_bytes)


def zipf_share(fraction: float, rows: int, skew: float) -> float:
    """Share of lookups that hit the hottest `fraction` of `rows` when row popularity follows Zipf(skew):
        share = ∫_1^{fR} x^-s dx / ∫_1^{R} x^-s dx = ((fR)^(1-s) - 1) / (R^(1-s) - 1)   (s != 1; log ratio at 1),
    the continuous form of the harmonic sums; 0 skew gives `fraction` (uniform access). An LRU/LFU cache of the
    hottest rows (FBGEMM's UVM cache) hits this share in steady state (Che's approximation is close for Zipf)."""
    if rows <= 1 or fraction >= 1.0:
        return 1.0
    top = max(1.0, fraction * rows)
    if skew == 0.0:
        return (top - 1.0) / (rows - 1.0) if top > 1.0 else fraction
    if abs(skew - 1.0) < 1e-9:
        return math.log(top) / math.log(rows)
    return float((top ** (1.0 - skew) - 1.0) / (rows ** (1.0 - skew) - 1.0))


def state_bytes_per_row(optimizer: EmbeddingOptimizer, cols: int) -> float:
    """Optimizer state of one row of `cols` columns: none for SGD, one fp32 per row for row-wise Adagrad (FBGEMM's
    EXACT_ROWWISE_ADAGRAD), two fp32 moments per element for Adam."""
    if optimizer is EmbeddingOptimizer.ROWWISE_ADAGRAD:
        return 4.0
    if optimizer is EmbeddingOptimizer.ADAM:
        return 8.0 * cols
    return 0.0


def _hbm_rate(cluster: ClusterSpec) -> float:
    return cluster.gpu.hbm_gbs * 1e9 * cluster.gpu.memory_efficiency


def lookup_seconds(lookups: float, cols: int, outputs: float, table: EmbeddingTable, job: RecJob,
                   optimizer: EmbeddingOptimizer, cluster: ClusterSpec) -> float:
    """Forward and backward of `lookups` row reads of `cols` columns pooled into `outputs` vectors, with the
    optimizer fused into the backward (FBGEMM's table-batched embedding kernels):
        forward  = lookups·cols·e (read rows) + outputs·cols·a (write pooled)
        backward = outputs·cols·a (read gradients) + 2·lookups·cols·e (read, write rows) + 2·lookups·state
    over the achievable HBM bandwidth (e: table bytes per element, a: activation bytes). TorchRec's estimator
    takes the backward as twice the forward (BWD_COMPUTE_MULTIPLIER = 2); this counts the bytes instead. A runtime
    that writes the gradient out and applies it in passes of its own, or casts the pooled rows separately, moves
    the bytes of runtime.update_bytes_per_element on top; where PyTorch's index_add_ applies it, that kernel's
    bytes (runtime.scatter_bytes_per_element: the gradient row read, the table row read and written) move at the
    index kernels' share of peak bandwidth (runtime.INDEX_KERNEL_HBM_SHARE) instead of the streaming rate."""
    e, a = table.dtype.bytes, job.comm_bytes
    state = state_bytes_per_row(optimizer, cols)
    ex = execution(job)
    per_lookup, per_output = update_bytes_per_element(ex, e, a)
    moved = (lookups * cols * (e * 3 + per_lookup) + outputs * cols * (a * 2 + per_output)
             + 2 * lookups * state)
    scatter = lookups * cols * scatter_bytes_per_element(ex, e)
    return (moved - scatter) / _hbm_rate(cluster) + scatter / (cluster.gpu.hbm_gbs * 1e9 * INDEX_KERNEL_HBM_SHARE)


def one_rank_piece(table: EmbeddingTable, cols: int, storage: Storage, model: RecModel, job: RecJob,
                   cluster: ClusterSpec) -> tuple[PieceCost, PieceCost]:
    """(holder's share, every other rank's share) of a table-wise table or one column shard of `cols` columns.
    The holder looks up the whole batch (B·P rows), receives the ids of the others' samples and sends them their
    pooled vectors: (N-1)/N·B·cols·a bytes; each other rank sends b·P ids and receives b·cols·a. In host memory
    (UVM caching) the HBM holds `cache_ratio` of the rows; misses, (1 - zipf_share)·B·P rows, cross the host
    link twice (read forward, written back after the update)."""
    n, b, big_b = job.gpus, job.local_batch, job.batch
    lookups = big_b * table.pooling
    rows_bytes = table.rows * (cols * table.dtype.bytes + state_bytes_per_row(model.optimizer, cols))
    compute = lookup_seconds(lookups, cols, big_b, table, job, model.optimizer, cluster)
    hbm, host = rows_bytes, 0.0
    if storage is Storage.HOST:
        misses = lookups * (1.0 - zipf_share(job.cache_ratio, table.rows, table.skew))
        compute += 2 * misses * cols * table.dtype.bytes / (job.host_gbs * 1e9)
        hbm, host = job.cache_ratio * rows_bytes, rows_bytes
    share = (n - 1) / n
    holder = PieceCost(compute_s=compute, send_bytes=share * big_b * cols * job.comm_bytes,
                       recv_bytes=share * big_b * table.pooling * INDEX_BYTES, hbm_bytes=hbm, host_bytes=host)
    other = PieceCost(send_bytes=b * table.pooling * INDEX_BYTES, recv_bytes=b * cols * job.comm_bytes)
    return holder, other


def every_rank_piece(table: EmbeddingTable, kind: ShardingKind, model: RecModel, job: RecJob,
                     cluster: ClusterSpec) -> PieceCost:
    """Each rank's share of a row-wise or data-parallel table.
    Row-wise over N ranks (TorchRec: blocks of ceil(R/N) rows; ids assumed spread evenly over the blocks, as
    hashed ids are): a rank looks up B·P/N rows, writes partial sums for the whole batch and reduce-scatters them
    (forward), all-gathers their gradients (backward); ids go by all-to-all.
    Data parallel (TorchRec's dense kernel): every rank holds the table, its gradient and optimizer state, looks
    up its own b·P rows, and the dense gradient of the whole table is all-reduced; the optimizer then reads and
    writes the whole table (3 passes plus state)."""
    n, b, big_b, d = job.gpus, job.local_batch, job.batch, table.dim
    state = state_bytes_per_row(model.optimizer, d)
    if kind is ShardingKind.ROW_WISE:
        rows = -(-table.rows // n)
        out_bytes = big_b * d * job.comm_bytes
        coll = (collective_time(Collective.REDUCE_SCATTER, out_bytes, n, 1, cluster)
                + collective_time(Collective.ALL_GATHER, out_bytes, n, 1, cluster))
        ids = (n - 1) / n * b * table.pooling * INDEX_BYTES
        compute = lookup_seconds(big_b * table.pooling / n, d, big_b, table, job, model.optimizer, cluster)
        return PieceCost(compute_s=compute, send_bytes=ids, recv_bytes=ids, collective_s=coll,
                         hbm_bytes=rows * (d * table.dtype.bytes + state))
    if kind is ShardingKind.DATA_PARALLEL:
        weights = table.weight_bytes
        update = (3 * weights + 2 * table.rows * state) / _hbm_rate(cluster)
        coll = collective_time(Collective.ALL_REDUCE, weights, n, 1, cluster)
        return PieceCost(compute_s=lookup_seconds(b * table.pooling, d, b, table, job, model.optimizer, cluster)
                         + update, collective_s=coll, hbm_bytes=2 * weights + table.rows * state)
    raise ValueError(f"{kind} is held by one rank per piece, not by every rank")


def a2a_terms(job: RecJob, cluster: ClusterSpec) -> tuple[float, float]:
    """(seconds per byte, fixed seconds) of one rank's all-to-all traffic to or from the other `gpus` - 1 ranks,
    from cost_models/comm/collectives.py's all-to-all (whose bytes include the rank's own share; NVLink inside a node,
    the NIC
    across nodes; one latency per peer)."""
    n = job.gpus
    if n <= 1:
        return 0.0, 0.0
    fixed = all_to_all_time(1e-9, n, 1, cluster)
    return (all_to_all_time(1e9, n, 1, cluster) - fixed) / 1e9 * n / (n - 1), fixed


def rank_seconds(cost: PieceCost, job: RecJob, cluster: ClusterSpec) -> float:
    """One rank's embedding time: its lookups, the all-to-alls (a rank's traffic is the larger of what it sends
    and receives; forward and backward move the same bytes in opposite directions) and shared collectives."""
    per_byte, fixed = a2a_terms(job, cluster)
    traffic = max(cost.send_bytes, cost.recv_bytes)
    return cost.compute_s + 2 * (traffic * per_byte + fixed) + cost.collective_s


@dataclass(frozen=True)
class DenseCost:
    """The data-parallel dense part per step: compute seconds, exposed gradient all-reduce, bytes per GPU."""

    compute_s: float
    allreduce_s: float
    memory_bytes: float
    params: int


def _bottom_shapes(model: RecModel) -> list[tuple[int, int]]:
    """(in, out) of the bottom MLP's GEMMs."""
    shapes: list[tuple[int, int]] = []
    width = model.dense_features
    for w in model.bottom_mlp:
        shapes.append((max(width, 1), w))
        width = w
    return shapes


def _top_shapes(model: RecModel) -> list[tuple[int, int]]:
    """(in, out) of DCN's two low-rank factors per cross layer and of the top MLP's GEMMs."""
    shapes: list[tuple[int, int]] = []
    features = len(model.tables) + 1
    if model.interaction is Interaction.DCN:
        d0 = features * model.dim
        shapes += [(d0, model.cross_rank), (model.cross_rank, d0)] * model.cross_layers
        width = d0
    else:
        width = model.dim + features * (features - 1) // 2
    for w in model.top_mlp:
        shapes.append((width, w))
        width = w
    return shapes


def _mlp_shapes(model: RecModel) -> list[tuple[int, int]]:
    """(in, out) of every dense GEMM: bottom MLP, DCN's two low-rank factors per cross layer, top MLP."""
    return _bottom_shapes(model) + _top_shapes(model)


def mlp_seconds(shapes: list[tuple[int, int]], batch: float, job: RecJob, cluster: ClusterSpec) -> float:
    """Forward and backward of GEMMs `shapes` on `batch` samples: 6·b·in·out FLOPs each at the GPU's efficiency
    for its size, and their activations moved through HBM four times (write, read forward; same backward) at the
    element-wise rate. Mixed precision (bf16/fp16 peak)."""
    gpu = cluster.gpu
    peak = gpu.peak_bf16_tflops * 1e12
    seconds = 0.0
    for k, m in shapes:
        flops = 2.0 * batch * k * m
        seconds += 3 * flops / (peak * gpu.matmul_efficiency.at(flops))
    return seconds + 4 * batch * sum(m for _, m in shapes) * job.comm_bytes / _hbm_rate(cluster)


def apex_mlp_seconds(shapes: list[tuple[int, int]], batch: float, input_grad: bool, job: RecJob,
                     cluster: ClusterSpec) -> float:
    """Forward and backward of ReLU layers `shapes` on `batch` samples as apex.mlp.MLP runs them (csrc/mlp_cuda.cu,
    mlp_fp and mlp_bp; runtime.RecExecution.apex_mlp), kernel by kernel, each GEMM at the slower of its FLOPs and
    its activation bytes (k: in, m: out, a: activation bytes, f = 2·b·k·m):
        GEMMs   forward, dgrad, wgrad: max(f / (peak · eff(f)), b·(k + m)·a / HBM) each; no dgrad for the first
                layer unless `input_grad` (mlp.cpp passes the input's requires_grad to mlp_bp)
        kernels biasAddRelu_fprop (read, write the output: 2·b·m·a) and biasAddRelu_bprop (read the output and its
                gradient, write the GEMM's gradient: 3·b·m·a), at the element-wise rate."""
    gpu = cluster.gpu
    peak, hbm = gpu.peak_bf16_tflops * 1e12, _hbm_rate(cluster)
    a = job.comm_bytes
    seconds = 0.0
    for layer, (k, m) in enumerate(shapes):
        flops = 2.0 * batch * k * m
        gemm = max(flops / (peak * gpu.matmul_efficiency.at(flops)), batch * (k + m) * a / hbm)
        seconds += gemm * (3 if layer > 0 or input_grad else 2) + 5 * batch * m * a / hbm
    return seconds


def _mlp_time(shapes: list[tuple[int, int]], batch: float, input_grad: bool, job: RecJob,
              cluster: ClusterSpec) -> float:
    """The runtime's MLP: apex's kernels (apex_mlp_seconds) where it runs them, else mlp_seconds."""
    if execution(job).apex_mlp:
        return apex_mlp_seconds(shapes, batch, input_grad, job, cluster)
    return mlp_seconds(shapes, batch, job, cluster)


def dense_cost(model: RecModel, job: RecJob, cluster: ClusterSpec) -> DenseCost:
    """The data-parallel MLPs (the runtime's MLP time at the local batch, _mlp_time; without the bottom MLP where the
    runtime runs it on one rank, bottom_piece) plus the dot interaction (b·F²·D multiply-adds, batched GEMM, forward
    and backward) and the pooled features moved four times (twice more, read and written, where the runtime copies
    them around the all-to-alls: RecExecution.a2a_copies); the gradient all-reduce over every GPU overlaps the
    backward (GpuSpec.exposed), or only the interaction's backward where the runtime launches it after the whole MLP
    backward and the backward all-to-all waits for it (RecExecution.allreduce_before_a2a)."""
    b, gpu, ex = job.local_batch, cluster.gpu, execution(job)
    peak = gpu.peak_bf16_tflops * 1e12
    shapes = _top_shapes(model) if ex.bottom_rank is not None else _mlp_shapes(model)
    seconds = _mlp_time(_top_shapes(model), b, True, job, cluster)
    if ex.bottom_rank is None:
        seconds += _mlp_time(_bottom_shapes(model), b, False, job, cluster)
    features = len(model.tables) + 1
    interaction_bwd = 0.0
    if model.interaction is Interaction.DOT:
        flops = 2.0 * b * features * features * model.dim
        interaction_bwd = 2 * flops / (peak * gpu.matmul_efficiency.at(flops / b))
        seconds += 1.5 * interaction_bwd
    act = b * (sum(m for _, m in shapes) + features * model.dim) * job.comm_bytes
    seconds += (8 if ex.a2a_copies else 4) * b * features * model.dim * job.comm_bytes / _hbm_rate(cluster)
    params = sum(k * m + m for k, m in shapes)
    allreduce = collective_time(Collective.ALL_REDUCE, params * 4.0, job.gpus, 1, cluster)
    exposed = gpu.exposed(allreduce, interaction_bwd if ex.allreduce_before_a2a else seconds * 2 / 3)
    memory = params * DENSE_STATE_BYTES + 2 * act + BUFFER_GIB * GIB
    return DenseCost(seconds, exposed, memory, params)


def bottom_pieces(model: RecModel, job: RecJob, cluster: ClusterSpec) -> list[PieceCost]:
    """Each rank's share of a bottom MLP that one rank runs on the global batch (runtime.RecExecution.bottom_rank;
    none where it is data parallel): its holder computes it (_mlp_time at the global batch), keeps its weights
    and optimizer state, and sends every other rank its samples' outputs in the all-to-all, (n-1)/n·B·D·a bytes; its
    GPU also waits for the host's data path where it holds no table (runtime.bottom_host_seconds);
    every other rank receives b·D·a."""
    rank = execution(job).bottom_rank
    if rank is None:
        return [PieceCost() for _ in range(job.gpus)]
    n, b, big_b, a, d = job.gpus, job.local_batch, job.batch, job.comm_bytes, model.dim
    shapes = _bottom_shapes(model)
    params = sum(k * m + m for k, m in shapes)
    busy = _mlp_time(shapes, big_b, False, job, cluster) + bottom_host_seconds(execution(job), model, job, cluster)
    holder = PieceCost(compute_s=busy, send_bytes=(n - 1) / n * big_b * d * a,
                       hbm_bytes=params * DENSE_STATE_BYTES + 2 * big_b * sum(m for _, m in shapes) * a)
    other = PieceCost(recv_bytes=b * d * a)
    return [holder if g == rank else other for g in range(n)]


@dataclass(frozen=True)
class RecEvaluation:
    """A sharding plan's step: seconds, samples per second, and per rank the embedding seconds, HBM and host
    bytes; `fits` when every rank is within its GPU and host memory."""

    step_s: float
    samples_per_s: float
    dense: DenseCost
    rank_s: tuple[float, ...]
    hbm_bytes: tuple[float, ...]
    host_bytes: tuple[float, ...]
    hbm_capacity: float
    host_capacity: float

    @property
    def fits(self) -> bool:
        return (max(self.hbm_bytes) <= self.hbm_capacity * (1 + 1e-9)
                and max(self.host_bytes) <= self.host_capacity * (1 + 1e-9))


def rank_costs(model: RecModel, job: RecJob, cluster: ClusterSpec,
               shardings: tuple[TableSharding, ...]) -> list[PieceCost]:
    """Sum every piece's share onto each rank."""
    by_name = {t.name: t for t in model.tables}
    ranks = bottom_pieces(model, job, cluster)
    for s in shardings:
        table = by_name[s.table]
        if s.kind in (ShardingKind.ROW_WISE, ShardingKind.DATA_PARALLEL):
            each = every_rank_piece(table, s.kind, model, job, cluster)
            ranks = [r + each for r in ranks]
            continue
        holder, other = one_rank_piece(table, table.dim // s.column_shards, s.storage, model, job, cluster)
        for owner in s.ranks:
            ranks = [r + (holder if g == owner else other) for g, r in enumerate(ranks)]
    return ranks


def evaluate_sharding(model: RecModel, job: RecJob, cluster: ClusterSpec,
                      shardings: tuple[TableSharding, ...]) -> RecEvaluation:
    """Step time = dense compute + exposed dense all-reduce + the slowest rank's embedding time (with a bottom MLP
    on one rank, that rank's) + the host time the runtime exposes per step (runtime.host_step_seconds)."""
    dense = dense_cost(model, job, cluster)
    ranks = rank_costs(model, job, cluster, shardings)
    rank_s = tuple(rank_seconds(r, job, cluster) for r in ranks)
    step = dense.compute_s + dense.allreduce_s + max(rank_s) + host_step_seconds(execution(job), cluster)
    hbm_cap = cluster.gpu.memory_gib * GIB - dense.memory_bytes
    return RecEvaluation(step, job.batch / step, dense, rank_s, tuple(r.hbm_bytes for r in ranks),
                         tuple(r.host_bytes for r in ranks), hbm_cap, job.host_gib * GIB)
