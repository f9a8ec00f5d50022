"""Recommendation models (DLRM-style): embedding tables, dense MLPs, the training job and the sharding of each
table, validated on construction. The sharding vocabulary is TorchRec's (torchrec.distributed.types.ShardingType,
torchrec.distributed.embedding_types.EmbeddingComputeKernel): a table is replicated (data parallel), placed whole
on one GPU (table-wise), split by rows over every GPU (row-wise) or split by columns into shards each placed on one
GPU (column-wise); a table-wise table may live in host memory with a cache of its hottest rows in HBM (TorchRec's
fused_uvm_caching kernel)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from meshcore.checks import BANDWIDTH_GBS, MAX_GPUS, MAX_NAME_LEN, MAX_WIDTH, identifier, integer, real
from meshcore.errors import SpecError

MAX_ROWS = 10**11  # rows of one table: above the largest published production tables (~10^10)
MAX_TABLES = 1024


class ShardingKind(str, Enum):
    """TorchRec's ShardingType values this planner chooses between."""

    DATA_PARALLEL = "data_parallel"
    TABLE_WISE = "table_wise"
    ROW_WISE = "row_wise"
    COLUMN_WISE = "column_wise"


class Storage(str, Enum):
    """Where a shard's rows live: HBM (TorchRec kernel `fused`, `dense` when data parallel) or host memory with
    an HBM cache of the hottest rows (`fused_uvm_caching`)."""

    HBM = "hbm"
    HOST = "host"


class TableDtype(str, Enum):
    FP32 = "fp32"
    FP16 = "fp16"

    @property
    def bytes(self) -> int:
        return 4 if self is TableDtype.FP32 else 2


class EmbeddingOptimizer(str, Enum):
    """The fused optimizer of the embedding tables; its state per row sets their memory beside the weights."""

    SGD = "sgd"
    ROWWISE_ADAGRAD = "rowwise_adagrad"
    ADAM = "adam"


class RecRuntime(str, Enum):
    """The training code that runs the step (planner/workloads/recsys/runtime.py says what each one runs):
    TorchRec with FBGEMM's table-batched kernels, or NVIDIA DeepLearningExamples' PyTorch DLRM (`dle`), the code of
    NVIDIA's published DLRM throughputs."""

    TORCHREC = "torchrec"
    DLE = "dle"


class Interaction(str, Enum):
    """How the pooled embeddings meet the bottom MLP's output: DLRM's pairwise dot products, or DCN-v2's low-rank
    cross layers (MLPerf DLRM-DCNv2)."""

    DOT = "dot"
    DCN = "dcn"


@dataclass(frozen=True)
class EmbeddingTable:
    """One table: `rows` x `dim`, `pooling` ids looked up per sample on average (1: one-hot), `skew` the Zipf
    exponent of row popularity (0: uniform; Criteo's features are around 1)."""

    name: str
    rows: int
    dim: int
    pooling: float = 1.0
    skew: float = 0.0
    dtype: TableDtype = TableDtype.FP32

    def __post_init__(self) -> None:
        if (not isinstance(self.name, str) or not self.name.isascii() or not self.name.isidentifier()
                or len(self.name) > MAX_NAME_LEN):
            raise SpecError(f"table name must be a Python identifier of ASCII letters, digits and _ (at most "
                            f"{MAX_NAME_LEN} characters), got {self.name!r}"[:300])
        integer(self.rows, f"table {self.name}: rows", 1, MAX_ROWS, SpecError)
        integer(self.dim, f"table {self.name}: dim", 1, MAX_WIDTH, SpecError)
        real(self.pooling, f"table {self.name}: pooling", 0.0, 1e5, error=SpecError)
        real(self.skew, f"table {self.name}: skew", 0.0, 4.0, low_open=False, error=SpecError)
        if not isinstance(self.dtype, TableDtype):
            raise SpecError(f"table {self.name}: dtype must be one of {[d.value for d in TableDtype]}")

    @property
    def weight_bytes(self) -> float:
        return float(self.rows) * self.dim * self.dtype.bytes


@dataclass(frozen=True)
class RecModel:
    """A DLRM: `dense_features` inputs through the bottom MLP (its last width must equal the tables' common
    dim), the interaction, then the top MLP (its last width is the output, 1 for a click probability)."""

    name: str
    tables: tuple[EmbeddingTable, ...]
    dense_features: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    interaction: Interaction = Interaction.DOT
    cross_layers: int = 0  # DCN only
    cross_rank: int = 512  # DCN only: the low rank of each cross layer's weight
    optimizer: EmbeddingOptimizer = EmbeddingOptimizer.SGD

    def __post_init__(self) -> None:
        identifier(self.name, "recommendation model name", SpecError)
        if not 1 <= len(self.tables) <= MAX_TABLES:
            raise SpecError(f"model {self.name!r}: needs 1 to {MAX_TABLES} tables, got {len(self.tables)}")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            repeated = sorted(n for n in set(names) if names.count(n) > 1)
            raise SpecError(f"model {self.name!r}: table names repeat: {repeated}")
        integer(self.dense_features, f"model {self.name!r}: dense_features", 0, MAX_WIDTH, SpecError)
        for key in ("bottom_mlp", "top_mlp"):
            widths = getattr(self, key)
            if not widths:
                raise SpecError(f"model {self.name!r}: {key} needs at least one layer width")
            for w in widths:
                integer(w, f"model {self.name!r}: {key} width", 1, MAX_WIDTH, SpecError)
        dims = {t.dim for t in self.tables}
        if len(dims) != 1 or self.bottom_mlp[-1] not in dims:
            raise SpecError(f"model {self.name!r}: the interaction needs one embedding dim equal to the bottom MLP's "
                            f"last width; tables have dims {sorted(dims)}, bottom MLP ends at {self.bottom_mlp[-1]}")
        integer(self.cross_layers, f"model {self.name!r}: cross_layers", 0, 64, SpecError)
        integer(self.cross_rank, f"model {self.name!r}: cross_rank", 1, MAX_WIDTH, SpecError)

    @property
    def dim(self) -> int:
        return self.tables[0].dim


@dataclass(frozen=True)
class RecJob:
    """One training step of `batch` samples over `gpus` GPUs. `host_gib`: host memory per GPU that tables may
    use (0: none, no host option), `host_gbs` the host-to-GPU bandwidth per GPU for cache misses, `cache_ratio`
    the share of a host-resident table's rows cached in HBM (TorchRec's CacheParams.load_factor). `runtime`: the
    training code whose step is priced (planner/workloads/recsys/runtime.py)."""

    batch: int
    gpus: int
    host_gib: float = 0.0
    host_gbs: float = 25.0
    cache_ratio: float = 0.2
    comm_bytes: int = 2  # bytes per element of the pooled embeddings in the all-to-alls (fp16/bf16 with AMP)
    runtime: RecRuntime = RecRuntime.TORCHREC

    def __post_init__(self) -> None:
        integer(self.gpus, "--gpus", 1, MAX_GPUS, SpecError)
        integer(self.batch, "--batch", 1, 10**9, SpecError)
        if self.batch % self.gpus:
            raise SpecError(f"--batch {self.batch} must divide evenly over --gpus {self.gpus} "
                            f"(samples per GPU); try {self.batch - self.batch % self.gpus or self.gpus}")
        real(self.host_gib, "--host-gib", 0.0, 1e6, low_open=False, error=SpecError)
        real(self.host_gbs, "--host-gbs", BANDWIDTH_GBS[0], 1e4, low_open=False, error=SpecError)
        real(self.cache_ratio, "--cache-ratio", 0.0, 1.0, error=SpecError)
        if self.comm_bytes not in (2, 4):
            raise SpecError(f"comm_bytes must be 2 or 4, got {self.comm_bytes!r}")
        if not isinstance(self.runtime, RecRuntime):
            raise SpecError(f"--runtime must be one of {[r.value for r in RecRuntime]}, got {self.runtime!r}"[:300])
        if self.runtime is RecRuntime.DLE and self.host_gib > 0:
            raise SpecError("--runtime dle keeps every table in GPU memory (no host-memory caching); "
                            "drop --host-gib or use --runtime torchrec")

    @property
    def local_batch(self) -> int:
        return self.batch // self.gpus


@dataclass(frozen=True)
class Shard:
    """One piece of a table on one rank: rows [row_offset, row_offset + rows), columns [col_offset, ...)."""

    rank: int
    row_offset: int
    rows: int
    col_offset: int
    cols: int


@dataclass(frozen=True)
class TableSharding:
    """How one table is sharded: the kind, where its rows live, the column-shard count (column-wise) and the
    rank of each piece (table-wise: one; column-wise: one per column shard; row-wise and data parallel: every
    rank)."""

    table: str
    kind: ShardingKind
    storage: Storage
    ranks: tuple[int, ...]
    column_shards: int = 1

    def shards(self, table: EmbeddingTable) -> tuple[Shard, ...]:
        """The pieces in TorchRec's order: row blocks of ceil(rows / n) for row-wise (the last one shorter), equal
        column blocks for column-wise, the whole table otherwise."""
        if self.kind is ShardingKind.ROW_WISE:
            n = len(self.ranks)
            block = -(-table.rows // n)
            return tuple(Shard(r, min(i * block, table.rows), max(0, min(block, table.rows - i * block)), 0, table.dim)
                         for i, r in enumerate(self.ranks))
        if self.kind is ShardingKind.COLUMN_WISE:
            width = table.dim // self.column_shards
            return tuple(Shard(r, 0, table.rows, i * width, width) for i, r in enumerate(self.ranks))
        return tuple(Shard(r, 0, table.rows, 0, table.dim) for r in self.ranks)
