"""What each recommendation training runtime runs in a step, as the cost model prices it, and NVIDIA's own table
placement. Pure functions of the specs.

TorchRec (`torchrec`): FBGEMM's table-batched embedding kernels with the optimizer fused into the backward (the
gradient of a looked-up row never reaches HBM: the backward reads the pooled gradient and updates the row in
place), the bottom and top MLPs data parallel, and no host synchronisation the cost model prices.

NVIDIA DeepLearningExamples' PyTorch DLRM (`dle`; github.com/NVIDIA/DeepLearningExamples, PyTorch/Recommendation/
DLRM at 729963dd, the code of NVIDIA's published throughputs, run with --amp --cuda_graphs):
  - the embedding gradient is a sparse COO tensor: dlrm/cuda_ext/sparse_embedding.py (several GPUs) and
    fused_gather_embedding.py (one GPU) return a torch sparse gradient of one fp32 row per lookup;
    GradScaler.unscale_ rewrites its values (AMP), and torch.optim.SGD adds it to the table with the dense += sparse
    path of ATen (add_out_dense_sparse_cuda: an uncoalesced gradient goes through index_add_), outside the CUDA
    graph (scripts/main.py, weight_update). PyTorch's index kernels (index_select, index_add_, index_reduce) launched
    min(ceil(n / 128), 8 x SMs) blocks of 128 threads, 1024 threads per SM, half of what an A100 or V100 SM holds,
    and "on an A100 GPU, torch.index_select achieves only about 30% of the theoretical memory bandwidth for large
    inputs" (pytorch/pytorch#145999, January 2025, which raised the grid for all three; DLE's containers predate
    it): index_add_'s bytes move at INDEX_KERNEL_HBM_SHARE of peak (measured for index_select on A100; index_add_
    shares the launch and adds atomics; carried to V100, whose SMs the same launch fills to the same half);
  - with several GPUs the gather writes fp32 rows (gather_gpu_fwd) and DlrmBottom.forward casts them to fp16
    (`x.half()`) before the all-to-all, a cast kernel of its own; its backward casts the gradient back to fp32;
  - after the forward all-to-all the received pieces are concatenated into the interaction's input (torch.cat in
    model/distributed.py, BottomToTop.forward) and before the backward one the gradient is split into contiguous
    per-rank blocks (`.contiguous()` in BottomToTop.backward): two copies of the interaction input through HBM;
  - the bottom MLP runs on GPU 0 alone, on the global batch, and above 4 GPUs GPU 0 holds no table
    (dlrm/utils/distributed.py, get_device_mapping); the top MLP and the interaction are data parallel (DDP);
  - both MLPs are apex.mlp.MLP (--optimized_mlp, on by default: dlrm/nn/mlps.py, CppMlp and AmpMlp) whose
    csrc/mlp_cuda.cu runs each ReLU layer as a cuBLAS GEMM and kernels of its own (its cuBLASLt bias/ReLU epilogue
    is taken only for activation < 1, i.e. not for ReLU): biasAddRelu_fprop rereads and rewrites the GEMM's output,
    biasAddRelu_bprop reads the output and its gradient and writes the GEMM's gradient, then the dgrad GEMM (skipped
    for the first layer where the input needs no gradient: the bottom MLP's dense features) and the wgrad GEMM
    (cost.apex_mlp_seconds);
  - the forward and backward are one CUDA graph (no per-operator host time), but every step the host waits for the
    GPU twice (GradScaler.step reads found_inf with .item(); the StepTimer synchronises) and then issues the
    optimizer eagerly: STEP_OPS operators the GPU waits for (counted below);
  - the top MLP's gradients are all-reduced by DDP on the default process group, whose NCCL stream also runs the
    all-to-alls: apex's MlpFunction.backward returns every weight gradient at once when the whole MLP backward ends,
    so DDP's buckets are launched only then, and the backward all-to-all queues behind them; only the interaction's
    backward runs beside the all-reduce (RecExecution.allreduce_before_a2a);
  - the data loader is torch's DataLoader with num_workers=0 and pin_memory=False (data/factories.py): between the
    two host syncs the main thread copies the next batch from pageable host memory (data/utils.py,
    collate_split_tensors: `.to(device, non_blocking=True)` of the batch's dense features, ids and labels, a cast of
    the dense features to fp32, record_stream for each). Every rank reads the global batch's labels (B fp32 after
    ParametricDataset._get_label) and its own tables' ids; the bottom MLP's rank reads the B x 13 fp16 dense features.
    A rank with tables hides that host time behind its index_add_; above 4 GPUs the bottom MLP's rank holds no table
    and its GPU waits for it (bottom_host_seconds). The lines these two items were read from:
    benchmarks/data/recsys/dle_step.yaml.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.compute.host import DRAIN_OPS
from cost_models.memory.offload import pageable_bytes_per_s
from meshcore import ClusterSpec
from planner.workloads.recsys.spec import RecJob, RecModel, RecRuntime, ShardingKind, Storage, TableSharding

# Operators DLE's host issues per step after its two syncs before the GPU has a long kernel again (scripts/main.py):
# after GradScaler's .item(): apex FusedSGD (one multi-tensor launch per parameter group, 2), the embedding
# gradient's unscale (found_inf fill, the unscale kernel: 2), torch.optim.SGD's dense += sparse (flatten_indices'
# multiply and sum, index_add_: 3); after the StepTimer's synchronize: the prefetcher's wait_stream, the three
# copies into the CUDA graph's static inputs, the graph's replay (5). scaler.update and the loss accumulation run
# while index_add_ does.
DLE_STEP_OPS = 12.0
DLE_STEP_SYNCS = 2  # GradScaler.step's found_inf.item() and the StepTimer's torch.cuda.synchronize (with --amp)
DLE_BOTTOM_ALONE_ABOVE = 4  # get_device_mapping leaves GPU 0 without tables when there are more GPUs than this
INDEX_KERNEL_HBM_SHARE = 0.30  # PyTorch's index_add_/index_select before #145999: share of peak HBM bandwidth
# Operators of DLE's data path per step (data/utils.py, collate_split_tensors, and the DataLoader's fetch): three
# host-to-device copies, three record_stream calls, the dense features' cast to fp32.
DLE_DATA_OPS = 7.0
DENSE_FEATURE_DISK_BYTES = 2  # ParametricDataset reads the dense features as fp16 (np.float16)
LABEL_BYTES = 4  # ParametricDataset._get_label returns the labels as fp32 before the copy


@dataclass(frozen=True)
class RecExecution:
    """How a runtime runs one step: `sparse_gradient` (the embedding gradient is written to HBM as one row per
    lookup and applied by a separate optimizer pass), `unscale_gradient` (AMP's GradScaler rewrites those rows),
    `cast_pooled` (the gather writes table-dtype rows and a kernel of its own casts them to the activation dtype),
    `a2a_copies` (the interaction input is copied after the forward all-to-all and its gradient before the
    backward one), `bottom_rank` (the rank that runs the bottom MLP on the global batch; None: data parallel),
    `step_syncs` and `step_ops` (host syncs per step and the operators the GPU then waits for), `apex_mlp` (the MLPs
    run apex's MLP kernels, priced per kernel: cost.apex_mlp_seconds), `allreduce_before_a2a` (the dense gradients'
    all-reduce starts after the whole MLP backward and the backward all-to-all waits for it), `data_ops` (host
    operators of the pageable data path between the syncs; 0: none priced)."""

    sparse_gradient: bool = False
    unscale_gradient: bool = False
    cast_pooled: bool = False
    a2a_copies: bool = False
    bottom_rank: int | None = None
    step_syncs: int = 0
    step_ops: float = 0.0
    apex_mlp: bool = False
    allreduce_before_a2a: bool = False
    data_ops: float = 0.0


def execution(job: RecJob) -> RecExecution:
    """The runtime's execution of `job` (module docstring)."""
    if job.runtime is RecRuntime.TORCHREC:
        return RecExecution()
    amp = job.comm_bytes == 2
    return RecExecution(sparse_gradient=True, unscale_gradient=amp, cast_pooled=amp and job.gpus > 1,
                        a2a_copies=job.gpus > 1,
                        bottom_rank=0 if job.gpus > 1 else None, step_syncs=DLE_STEP_SYNCS if amp else 1,
                        step_ops=DLE_STEP_OPS if amp else DLE_STEP_OPS - 2, apex_mlp=True,
                        allreduce_before_a2a=job.gpus > 1, data_ops=DLE_DATA_OPS)


def runtime_kinds(job: RecJob) -> frozenset[ShardingKind]:
    """The sharding kinds the runtime runs: TorchRec every kind; DLE whole tables on one GPU each (its
    hybrid-parallel model has no row-wise, column-wise or replicated table, and keeps every table in HBM)."""
    if job.runtime is RecRuntime.DLE:
        return frozenset({ShardingKind.TABLE_WISE})
    return frozenset(ShardingKind)


def update_bytes_per_element(ex: RecExecution, table_bytes: int, act_bytes: int) -> tuple[float, float]:
    """(bytes per looked-up element, bytes per pooled output element) that `ex` moves beyond the fused kernel
    (which reads the pooled gradient and reads and writes the row: cost.lookup_seconds).
    A sparse gradient writes one value per looked-up element (e bytes, the table dtype), the optimizer reads it back
    (e): 2e; AMP's unscale reads and rewrites it: 2e more. A separate cast of the pooled output: the gather writes
    e instead of a, the cast reads e and writes a: 2e per output element (its backward cast is the write of the
    sparse gradient, counted above)."""
    e = float(table_bytes)
    per_lookup = (2 * e + (2 * e if ex.unscale_gradient else 0.0)) if ex.sparse_gradient else 0.0
    per_output = 2 * e if ex.cast_pooled and act_bytes != table_bytes else 0.0
    return per_lookup, per_output


def scatter_bytes_per_element(ex: RecExecution, table_bytes: int) -> float:
    """Bytes per looked-up element that PyTorch's index_add_ moves where it applies a sparse gradient: the
    gradient value read, the table row read and written (3e); 0 for a fused kernel."""
    return 3.0 * table_bytes if ex.sparse_gradient else 0.0


def host_step_seconds(ex: RecExecution, cluster: ClusterSpec) -> float:
    """Seconds per step the GPU waits for the host: each sync drains the GPU's queue (DRAIN_OPS operators' time,
    cost_models/compute/host.py) and the host then issues `step_ops` operators before the GPU has work again:
        t = (syncs · DRAIN_OPS + step_ops) · host_op_us."""
    return (ex.step_syncs * DRAIN_OPS + ex.step_ops) * cluster.host_op_us * 1e-6


def bottom_host_seconds(ex: RecExecution, model: RecModel, job: RecJob, cluster: ClusterSpec) -> float:
    """Seconds the bottom MLP's rank waits each step for the host's data path where that rank holds no table (above
    DLE_BOTTOM_ALONE_ABOVE GPUs; module docstring): `data_ops` operators plus the pageable copy of the global batch's
    dense features (fp16) and labels (fp32),
        t = data_ops · host_op_us + B·(dense_features·2 + 4) / pageable rate,
    the pageable rate cost_models/memory/offload.py's pageable_bytes_per_s (the driver stages each chunk through its
    pinned buffer with one host thread's memcpy, then DMAs it over the GPU's share of its PCIe uplink, in turn:
    benchmarks/data/offload/pageable_copies.yaml, checked there against DeepSpeed PR #5301's measured pinned
    speed-up). 0 where the rank also holds tables."""
    if ex.bottom_rank is None or ex.data_ops <= 0 or job.gpus <= DLE_BOTTOM_ALONE_ABOVE:
        return 0.0
    nbytes = job.batch * (model.dense_features * DENSE_FEATURE_DISK_BYTES + LABEL_BYTES)
    return ex.data_ops * cluster.host_op_us * 1e-6 + nbytes / pageable_bytes_per_s(cluster)


def dle_placement(model: RecModel, job: RecJob) -> tuple[TableSharding, ...]:
    """NVIDIA DLE's placement (dlrm/utils/distributed.py, get_device_mapping and distribute_to_buckets): every table
    whole on one GPU; above 4 GPUs GPU 0 (the bottom MLP's) holds none; at most ceil(tables / GPUs used) per GPU;
    tables largest first, each to the open GPU holding the fewest rows (ties: the lowest rank)."""
    first = 1 if job.gpus > DLE_BOTTOM_ALONE_ABOVE else 0
    ranks = list(range(first, job.gpus))
    cap = math.ceil(len(model.tables) / len(ranks))
    held = {r: 0 for r in ranks}
    count = {r: 0 for r in ranks}
    placed: dict[str, int] = {}
    for table in sorted(model.tables, key=lambda t: -t.rows):
        rank = min((r for r in ranks if count[r] < cap), key=lambda r: (held[r], r))
        placed[table.name] = rank
        held[rank] += table.rows
        count[rank] += 1
    return tuple(TableSharding(t.name, ShardingKind.TABLE_WISE, Storage.HBM, (placed[t.name],)) for t in model.tables)
