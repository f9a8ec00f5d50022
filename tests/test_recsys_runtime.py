"""What NVIDIA DeepLearningExamples' DLRM runs, as planner/workloads/recsys/runtime.py prices it, against the code
it was read from and NVIDIA's published throughput (DeepLearningExamples PyTorch/Recommendation/DLRM/README.md at
729963dd, "Training performance: NVIDIA DGX A100 (8x A100 80GB)": 16,500,000 records/s, large model, 8k per GPU,
mixed precision; DGX-1 8x V100 32GB: 6,920,000; DGX-2 16x V100 32GB: 10,800,000 on 16 GPUs, 7,930,000 on 8)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from cost_models.comm.collectives import Collective, collective_time
from hardware_profiles import load_hardware
from meshcore.errors import SpecError
from planner.workloads.recsys.cost import apex_mlp_seconds, bottom_pieces, dense_cost, evaluate_sharding, mlp_seconds
from planner.workloads.recsys.inputs import load_recsys_model
from planner.workloads.recsys.runtime import (
    bottom_host_seconds,
    dle_placement,
    execution,
    host_step_seconds,
    runtime_kinds,
    update_bytes_per_element,
)
from planner.workloads.recsys.search import plan_sharding
from planner.workloads.recsys.spec import RecJob, RecRuntime, ShardingKind

DLE_STEP = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "recsys" / "dle_step.yaml"


def test_dle_placement_follows_get_device_mapping() -> None:
    """Above 4 GPUs GPU 0 keeps the bottom MLP and no table; at most ceil(26 / 7) = 4 tables per GPU."""
    model = load_recsys_model("dlrm-criteo-1tb")
    placed = dle_placement(model, RecJob(65536, 8, runtime=RecRuntime.DLE))
    counts = Counter(s.ranks[0] for s in placed)
    assert {s.kind for s in placed} == {ShardingKind.TABLE_WISE} and len(placed) == 26
    assert 0 not in counts and max(counts.values()) == 4 and set(counts) == set(range(1, 8))
    four = Counter(s.ranks[0] for s in dle_placement(model, RecJob(65536, 4, runtime=RecRuntime.DLE)))
    assert set(four) == set(range(4)) and max(four.values()) == 7  # 4 GPUs: GPU 0 holds tables too


def test_sparse_gradient_bytes() -> None:
    """fp32 rows, fp16 activations (AMP): the gradient row is written and read back (8 B) and unscaled (8 B): 16 B
    per looked-up element; the separate fp16 cast of the gathered fp32 rows: 8 B per pooled element. TorchRec's
    fused kernel: none. Without AMP (no GradScaler, no cast): 8 B and 0."""
    amp = execution(RecJob(65536, 8, runtime=RecRuntime.DLE))
    assert update_bytes_per_element(amp, 4, 2) == (16.0, 8.0)
    fp32 = execution(RecJob(65536, 8, comm_bytes=4, runtime=RecRuntime.DLE))
    assert update_bytes_per_element(fp32, 4, 4) == (8.0, 0.0)
    assert update_bytes_per_element(execution(RecJob(65536, 8)), 4, 2) == (0.0, 0.0)
    single = execution(RecJob(65536, 1, runtime=RecRuntime.DLE))
    assert not single.cast_pooled and single.bottom_rank is None  # one GPU: joint_fused writes fp16 itself


def test_host_step_time() -> None:
    """Two syncs of DRAIN_OPS (3) and 12 eager operators at the preset's 20 µs: 18 x 20 µs = 0.36 ms."""
    cluster = load_hardware("a100-80gb", 8)
    assert host_step_seconds(execution(RecJob(65536, 8, runtime=RecRuntime.DLE)), cluster) == pytest.approx(3.6e-4)
    assert host_step_seconds(execution(RecJob(65536, 8)), cluster) == 0.0


def test_bottom_mlp_on_rank_zero() -> None:
    """DLE's GPU 0 runs the bottom MLP on the whole batch and sends 7/8 of its 65536 x 128 fp16 outputs."""
    model = load_recsys_model("dlrm-criteo-1tb")
    pieces = bottom_pieces(model, RecJob(65536, 8, runtime=RecRuntime.DLE), load_hardware("a100-80gb", 8))
    assert pieces[0].compute_s > 0 and pieces[0].send_bytes == pytest.approx(7 / 8 * 65536 * 128 * 2)
    assert all(p.compute_s == 0 and p.recv_bytes == 8192 * 128 * 2 for p in pieces[1:])


def test_apex_mlp_kernels() -> None:
    """DLE's MLPs are apex.mlp.MLP (csrc/mlp_cuda.cu): the bottom MLP's first layer (13 -> 512 on GPU 0's 65536
    samples, V100) is a GEMM bound by its 65536 x (13 + 512) fp16 activations, forward and wgrad (no dgrad: the dense
    features need no gradient), plus biasAddRelu_fprop's read and write and biasAddRelu_bprop's two reads and a
    write of the 65536 x 512 output, at 90 % of the 900 GB/s HBM; an input that needs its gradient adds the dgrad
    GEMM. DLE prices its MLPs so, TorchRec with mlp_seconds."""
    cluster = load_hardware("dgx2-v100", 16)
    job = RecJob(65536, 16, runtime=RecRuntime.DLE)
    gemm = 65536 * (13 + 512) * 2 / (900e9 * 0.9)
    relu = 5 * 65536 * 512 * 2 / (900e9 * 0.9)
    assert apex_mlp_seconds([(13, 512)], 65536, False, job, cluster) == pytest.approx(2 * gemm + relu)
    assert apex_mlp_seconds([(13, 512)], 65536, True, job, cluster) == pytest.approx(3 * gemm + relu)
    model = load_recsys_model("dlrm-criteo-1tb")
    shapes = [(13, 512), (512, 256), (256, 128)]
    assert bottom_pieces(model, job, cluster)[0].compute_s == pytest.approx(
        apex_mlp_seconds(shapes, 65536, False, job, cluster) + bottom_host_seconds(execution(job), model, job, cluster))
    torchrec = dataclasses.replace(job, runtime=RecRuntime.TORCHREC)
    assert execution(torchrec).apex_mlp is False and execution(job).apex_mlp is True
    assert mlp_seconds(shapes, 65536, torchrec, cluster) < apex_mlp_seconds(shapes, 65536, False, job, cluster)


def test_bottom_rank_waits_for_the_pageable_data_path() -> None:
    """DLE's DataLoader copies from pageable memory (pin_memory=False, data/factories.py) between the host syncs;
    above 4 GPUs GPU 0 holds no table to hide it behind: 7 operators at 20 µs plus the global batch's 65536 x 13 fp16
    dense features and 65536 fp32 labels at the staged pageable rate: one host thread's memcpy (10 GB/s per core,
    reading and writing each byte) in turn with the DMA over the DGX-2's PCIe Gen3 x16 (16 GB/s, datasheet) at 80 %
    (CUDA's bandwidthTest, pinned), shared by the two GPUs behind one switch uplink. None at 4 GPUs (GPU 0 holds
    tables) or for TorchRec."""
    model = load_recsys_model("dlrm-criteo-1tb")
    cluster = load_hardware("dgx2-v100", 16)
    job = RecJob(65536, 16, runtime=RecRuntime.DLE)
    want = 7 * 20e-6 + 65536 * (13 * 2 + 4) * (1 / (16e9 * 0.8 / 2) + 2 / 10e9)
    assert bottom_host_seconds(execution(job), model, job, cluster) == pytest.approx(want)
    four = RecJob(65536, 4, runtime=RecRuntime.DLE)
    assert bottom_host_seconds(execution(four), model, four, load_hardware("dgx2-v100", 4)) == 0.0
    torchrec = dataclasses.replace(job, runtime=RecRuntime.TORCHREC)
    assert bottom_host_seconds(execution(torchrec), model, torchrec, cluster) == 0.0
    code = yaml.safe_load(DLE_STEP.read_text())["data_path"]  # the counts as read from DLE's code
    assert (code["host_ops"], code["dense_feature_bytes"], code["label_bytes"]) == (7, 2, 4)
    assert execution(job).data_ops == code["host_ops"]


def test_dle_allreduce_waits_for_the_whole_mlp_backward() -> None:
    """apex's MlpFunction.backward returns every weight gradient at its end, so DDP's buckets start after the top
    MLP's backward and the backward all-to-all (same NCCL stream) waits for them: only the interaction's backward
    runs beside the fp32 all-reduce of the top MLP's 2,197,505 parameters (479-1024-1024-512-256-1, 479 = 128 +
    27·26/2), so over three quarters of it is exposed at 16 GPUs (the overlap with the MLP backward left under 60 %)."""
    model = load_recsys_model("dlrm-criteo-1tb")
    cluster = load_hardware("dgx2-v100", 16)
    job = RecJob(65536, 16, runtime=RecRuntime.DLE)
    assert execution(job).allreduce_before_a2a and not execution(RecJob(65536, 16)).allreduce_before_a2a
    raw = collective_time(Collective.ALL_REDUCE, 2197505 * 4.0, 16, 1, cluster)
    dle = dense_cost(model, job, cluster)
    assert 0.75 * raw < dle.allreduce_s <= raw
    assert cluster.gpu.exposed(raw, dle.compute_s * 2 / 3) < 0.6 * raw


@pytest.mark.parametrize("hardware,gpus,published,bound", [
    ("a100-80gb", 8, 16.5e6, 0.25), ("v100-32gb", 8, 6.92e6, 0.25), ("dgx2-v100", 8, 7.93e6, 0.25),
    ("a100-80gb", 1, 4.02e6, 0.25), ("v100-32gb", 1, 2.09e6, 0.25), ("dgx2-v100", 1, 2.25e6, 0.25),
    ("dgx2-v100", 16, 10.8e6, 0.25)])
def test_dle_throughput_against_published(hardware: str, gpus: int, published: float, bound: float) -> None:
    """NVIDIA's placement under NVIDIA's code against the published records/s (DGX A100, DGX-1 and DGX-2 rows of
    the README's table, 65536 samples per step; the one-GPU rows are the "small" model, priced with the preset's
    tables since only the row counts differ): within the issue's 25 % on every row (DGX-2's 16 GPUs +21 %, where
    GPU 0's bottom MLP, apex's kernels on the whole batch, and its host's pageable data path set the step), and
    slower than TorchRec's fused kernels on the same placement by at least the sparse-gradient passes."""
    model = load_recsys_model("dlrm-criteo-1tb")
    job = RecJob(65536, gpus, runtime=RecRuntime.DLE)
    cluster = load_hardware(hardware, gpus)
    placement = dle_placement(model, job)
    dle = evaluate_sharding(model, job, cluster, placement)
    torchrec = evaluate_sharding(model, dataclasses.replace(job, runtime=RecRuntime.TORCHREC), cluster, placement)
    assert abs(dle.samples_per_s / published - 1) < bound
    assert dle.step_s > torchrec.step_s * 1.2


def test_index_add_at_its_measured_share() -> None:
    """PyTorch's index_add_ (DLE's sparse update) moves its 3 x 4 bytes per looked-up fp32 element at 30 % of peak
    HBM bandwidth (index_select measured on A100, pytorch/pytorch#145999), the rest at the streaming rate; a fused
    kernel moves none of them that way. On one A100 with DLE's 26 x 65536 lookups of 128 fp32 columns that pass is
    2.6 GB: 4.3 ms at 612 GB/s instead of 1.4 ms at the profile's 1929 GB/s."""
    from planner.workloads.recsys.cost import lookup_seconds
    from planner.workloads.recsys.runtime import INDEX_KERNEL_HBM_SHARE, scatter_bytes_per_element
    from planner.workloads.recsys.spec import EmbeddingOptimizer, EmbeddingTable

    assert INDEX_KERNEL_HBM_SHARE == 0.30
    assert scatter_bytes_per_element(execution(RecJob(65536, 1, runtime=RecRuntime.DLE)), 4) == 12.0
    assert scatter_bytes_per_element(execution(RecJob(65536, 1)), 4) == 0.0
    cluster = load_hardware("a100-80gb", 1)
    table, lookups = EmbeddingTable("t", 10**6, 128), 26 * 65536
    dle = RecJob(65536, 1, runtime=RecRuntime.DLE)
    scatter = lookups * 128 * 12.0
    streaming = lookup_seconds(lookups, 128, lookups, table, dle, EmbeddingOptimizer.SGD, cluster)
    rate = cluster.gpu.hbm_gbs * 1e9
    assert scatter / (rate * 0.30) == pytest.approx(4.28e-3, rel=0.01)
    expected_extra = scatter / (rate * 0.30) - scatter / (rate * cluster.gpu.memory_efficiency)
    plain = lookup_seconds(lookups, 128, lookups, table, RecJob(65536, 1), EmbeddingOptimizer.SGD, cluster)
    per_lookup, _ = update_bytes_per_element(execution(dle), 4, 2)
    dle_streaming = plain + lookups * 128 * per_lookup / (rate * cluster.gpu.memory_efficiency)
    assert streaming == pytest.approx(dle_streaming + expected_extra, rel=1e-9)


def test_dle_runs_whole_tables_in_hbm_only() -> None:
    """DLE's hybrid-parallel model places whole tables (no row-wise, column-wise or replicated table) in GPU memory:
    the ILP under --runtime dle picks table-wise only, host memory is refused, and so is a TorchRec plan for it."""
    model = load_recsys_model("dlrm-criteo-1tb")
    job = RecJob(65536, 8, runtime=RecRuntime.DLE)
    assert runtime_kinds(job) == {ShardingKind.TABLE_WISE}
    plan = plan_sharding(model, job, load_hardware("a100-80gb", 8))
    assert {s.kind for s in plan.shardings} == {ShardingKind.TABLE_WISE}
    with pytest.raises(SpecError, match="--host-gib"):
        RecJob(65536, 8, host_gib=8.0, runtime=RecRuntime.DLE)
    base = ["recsys", "plan", "--model", "dlrm-small", "--hardware", "h100-sxm", "--gpus", "4", "--batch", "8192"]
    res = CliRunner().invoke(app, [*base, "--runtime", "dle", "--emit", "torchrec"])
    assert res.exit_code == 2 and "--runtime dle does not read one" in res.output
    res = CliRunner().invoke(app, [*base, "--runtime", "dle"])
    assert res.exit_code == 0 and "runtime dle" in res.output
    res = CliRunner().invoke(app, [*base, "--runtime", "hugectr"])
    assert res.exit_code == 2 and "--runtime must be one of torchrec, dle" in res.output
