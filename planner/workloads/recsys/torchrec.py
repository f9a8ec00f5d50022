"""A table sharding as TorchRec's sharding plan: one `ParameterSharding` per table (torchrec.distributed.types),
keyed by table name inside the embedding-bag collection's module path, as `ShardingPlan` / `EmbeddingModuleShardingPlan`
hold them. Two forms: a plain mapping (for the plan file) and a Python module that builds the plan with TorchRec's
own classes, to pass as `DistributedModelParallel(model, plan=plan)`.

Field names and values follow TorchRec 1.9's source (torchrec/distributed/types.py: ParameterSharding(sharding_type,
compute_kernel, ranks, sharding_spec, cache_params, ...); ShardingType and EmbeddingComputeKernel values;
torchrec/distributed/sharding_plan.py: data parallel has `ranks` = every rank and no sharding_spec, the others an
EnumerableShardingSpec of ShardMetadata(shard_sizes=[rows, cols], shard_offsets=[row, col],
placement="rank:{r}/cuda:{r % local_size}")).

Checked by TorchRec's own classes in CI: torchrec 1.8.0 with fbgemm-gpu-cpu 1.8.0 imports with torch 2.13 (the
[recsys] extra; fbgemm-gpu 1.9.0's libraries, CUDA and CPU wheels alike, do not load against this torch: an undefined
torch symbol), and tests/test_recsys_cli.py builds the emitted module's ShardingPlan with it.
"""

from __future__ import annotations

from typing import Any

from planner.workloads.recsys.spec import RecModel, ShardingKind, Storage, TableSharding

DEFAULT_MODULE_PATH = "model.sparse_arch.embedding_bag_collection"  # torchrec's DLRMTrain(DLRM(...)) layout
PARAMETER_SHARDING_FIELDS = ("sharding_type", "compute_kernel", "ranks", "sharding_spec", "cache_params")
SHARD_METADATA_FIELDS = ("shard_offsets", "shard_sizes", "placement")


def compute_kernel(sharding: TableSharding) -> str:
    """TorchRec's EmbeddingComputeKernel value: `dense` for data parallel, `fused` in HBM, `fused_uvm_caching`
    for host memory with an HBM cache."""
    if sharding.kind is ShardingKind.DATA_PARALLEL:
        return "dense"
    return "fused_uvm_caching" if sharding.storage is Storage.HOST else "fused"


def parameter_sharding(model: RecModel, sharding: TableSharding, local_size: int,
                       cache_ratio: float) -> dict[str, Any]:
    """One table's ParameterSharding as a mapping of its constructor's keywords."""
    table = next(t for t in model.tables if t.name == sharding.table)
    spec = None
    if sharding.kind is not ShardingKind.DATA_PARALLEL:
        spec = [{"shard_offsets": [s.row_offset, s.col_offset], "shard_sizes": [s.rows, s.cols],
                 "placement": f"rank:{s.rank}/cuda:{s.rank % local_size}"} for s in sharding.shards(table)]
    out: dict[str, Any] = {"sharding_type": sharding.kind.value, "compute_kernel": compute_kernel(sharding),
                           "ranks": list(sharding.ranks), "sharding_spec": spec}
    out["cache_params"] = {"load_factor": cache_ratio} if sharding.storage is Storage.HOST else None
    return out


def torchrec_plan(model: RecModel, shardings: tuple[TableSharding, ...], local_size: int, cache_ratio: float,
                  module_path: str = DEFAULT_MODULE_PATH) -> dict[str, dict[str, dict[str, Any]]]:
    """{module_path: {table: ParameterSharding keywords}}: ShardingPlan.plan's shape."""
    return {module_path: {s.table: parameter_sharding(model, s, local_size, cache_ratio) for s in shardings}}


def torchrec_python(plan: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A Python module that builds `plan` (a ShardingPlan) from TorchRec's classes."""
    lines = ['"""TorchRec sharding plan written by meshplan (meshplan recsys plan --emit torchrec)."""',
             "from torch.distributed._shard.metadata import ShardMetadata",
             "from torchrec.distributed.types import (CacheParams, EmbeddingModuleShardingPlan, "
             "EnumerableShardingSpec,", "                                       ParameterSharding, ShardingPlan)",
             "", "plan = ShardingPlan({"]
    for path, tables in plan.items():
        lines.append(f"    {path!r}: EmbeddingModuleShardingPlan({{")
        for name, ps in tables.items():
            spec = "None"
            if ps["sharding_spec"] is not None:
                shards = ", ".join(f"ShardMetadata(shard_offsets={m['shard_offsets']}, shard_sizes={m['shard_sizes']}, "
                                   f"placement={m['placement']!r})" for m in ps["sharding_spec"])
                spec = f"EnumerableShardingSpec([{shards}])"
            cache = "None"
            if ps["cache_params"] is not None:
                cache = f"CacheParams(load_factor={ps['cache_params']['load_factor']})"
            lines.append(f"        {name!r}: ParameterSharding(sharding_type={ps['sharding_type']!r}, "
                         f"compute_kernel={ps['compute_kernel']!r}, ranks={ps['ranks']}, sharding_spec={spec}, "
                         f"cache_params={cache}),")
        lines.append("    }),")
    lines.append("})")
    return "\n".join(lines) + "\n"
