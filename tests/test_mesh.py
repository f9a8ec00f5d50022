"""The device mesh (meshcore/mesh.py): validation that names every factor, process groups equal to the rank
lists Megatron-core and torchtitan build, network tiers on a cluster, and HSDP's pricing (cost_models/sync.py)."""

from __future__ import annotations

import dataclasses
import json
import math
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cli import app
from cost_models.comm.collectives import Collective, collective_time, p2p_time
from cost_models.step import evaluate_layout
from cost_models.sync import grad_sync_times
from hardware_profiles import load_hardware
from meshcore import DEFAULT_RECOMPUTE_MODULES, Layout, Offload, Recompute, Runtime, Schedule, ZeroStage
from meshcore.errors import LayoutError
from meshcore.layout import MemoryPolicy, Pipeline
from meshcore.mesh import DENSE_ORDER, EXPERT_ORDER, Dim, Group, Mesh, Tier
from planner import load_plan, save_plan
from planner.api import evaluate, make_layout, resolve
from planner.outputs.emitters import Target, emit
from planner.outputs.plan import Plan
from planner.outputs.planfile import plan_to_dict
from planner.search.ranked import Ranked

runner = CliRunner()


# validation


def test_world_size_message_names_every_factor() -> None:
    with pytest.raises(LayoutError) as err:
        Mesh(tp=8, dp_shard=4, pp=2, world=96)
    assert str(err.value) == "world size 96 != tp 8 * cp 1 * dp_shard 4 * dp_replicate 1 * pp 2 = 64"
    with pytest.raises(LayoutError) as err:
        Mesh(tp=8, cp=2, dp_shard=2, dp_replicate=2, pp=2, world=96)
    assert str(err.value) == "world size 96 != tp 8 * cp 2 * dp_shard 2 * dp_replicate 2 * pp 2 = 128"
    assert Mesh(tp=8, dp_shard=4, pp=2, world=64).size == 64


def test_expert_folding_message_names_every_factor() -> None:
    with pytest.raises(LayoutError) as err:
        Mesh(tp=2, dp_shard=2, dp_replicate=2, ep=8)
    msg = str(err.value)
    assert msg.startswith("etp 1 * ep 8 = 8 must divide tp 2 * cp 1 * dp_shard 2 = 4")
    # without HSDP the experts fold into all of tp·cp·dp; with it into one replica's tp·cp·dp_shard
    assert Mesh(tp=2, dp_shard=4, ep=8).expert_dp == 1
    assert Mesh(tp=2, dp_shard=4, dp_replicate=2, ep=4, etp=2).expert_dp == 2


@pytest.mark.parametrize("field,value,message", [
    ("tp", 0, "tp must be an integer in [1, 10000000], got 0"),
    ("dp_shard", 2.0, "dp_shard must be an integer in [1, 10000000], got 2.0 (float)"),
    ("dp_replicate", True, "dp_replicate must be an integer"),
    ("world", 0, "world size must be an integer"),
])
def test_degrees_are_integers(field: str, value: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        Mesh(**{field: value})  # type: ignore[arg-type]


def test_a_group_spans_one_rank_order() -> None:
    with pytest.raises(LayoutError, match="mixes the dense"):
        Mesh(tp=2, dp_shard=2, ep=2).group(Dim.TP, Dim.EP)


ANY = Runtime(framework="any")  # HSDP at every ZeRO stage: the research space (tests/test_runtimes.py: per runtime)


def _llama(gpus: int = 64):  # type: ignore[no-untyped-def]
    return resolve("llama3-8b", "h100-sxm", gpus=gpus, seq_len=4096, global_batch=256, runtime=ANY)


def test_layout_validates_hsdp() -> None:
    problem = _llama()
    model, job = problem.model, problem.job
    with pytest.raises(LayoutError, match=r"dp_replicate 3 must divide dp 8 \(dp = dp_shard x dp_replicate\)"):
        Layout(tp=8, dp=8, zero=ZeroStage.OPTIMIZER, dp_replicate=3).validate(model, job, 64)
    with pytest.raises(LayoutError, match="dp_replicate 2 with zero 0: nothing is sharded"):
        Layout(tp=8, dp=8, dp_replicate=2).validate(model, job, 64)
    with pytest.raises(LayoutError, match=r"world size 64 != tp 8 \* cp 1 \* dp_shard 2 \* dp_replicate 2 \* pp 1"):
        Layout(tp=8, dp=4, zero=ZeroStage.OPTIMIZER, dp_replicate=2).validate(model, job, 64)
    with pytest.raises(LayoutError, match="dp_replicate must be an integer"):
        Layout(tp=8, dp=8, dp_replicate=0).validate(model, job, 64)
    Layout(tp=8, dp=8, dp_replicate=8).validate(model, job, 64)  # ZeRO-0: DDP spelled as replication only
    hsdp = Layout(tp=8, dp=8, zero=ZeroStage.WEIGHTS, dp_replicate=2)
    hsdp.validate(model, job, 64)
    assert (hsdp.mesh.dp_shard, hsdp.mesh.dp_replicate, hsdp.dp_shard) == (4, 2, 4)


def test_layout_mesh_is_its_degrees() -> None:
    lay = Layout(tp=4, pp=2, dp=8, cp=2, ep=4, etp=2)
    assert lay.mesh == Mesh(tp=4, cp=2, dp_shard=8, dp_replicate=1, pp=2, ep=4, etp=2)
    assert lay.mesh.size == lay.world and lay.expert_dp == 4 * 2 * 8 // (2 * 4)


def test_layout_is_mesh_pipeline_and_memory() -> None:
    """The constructor stays flat; the three parts are views with their own rules."""
    lay = Layout(tp=2, pp=4, dp=4, vpp=2, mbs=2, schedule=Schedule.ZB_V, zero=ZeroStage.WEIGHTS,
                 recompute=Recompute.SELECTIVE, offload=frozenset({Offload.PARAMS}), dp_replicate=2)
    assert lay.mesh == Mesh(tp=2, dp_shard=2, dp_replicate=2, pp=4)
    assert lay.pipeline == Pipeline(pp=4, vpp=2, schedule=Schedule.ZB_V, mbs=2)
    assert lay.memory == MemoryPolicy(ZeroStage.WEIGHTS, Recompute.SELECTIVE, DEFAULT_RECOMPUTE_MODULES, None,
                                      frozenset({Offload.PARAMS, Offload.OPTIMIZER, Offload.GRADIENTS}))
    assert [lay.chunk_rank(k) for k in range(8)] == [0, 1, 2, 3, 3, 2, 1, 0] and lay.head_beside_embedding
    with pytest.raises(LayoutError, match=r"zb-v needs at least 7 micro-batches \(2 \* pp - 1\), got 4"):
        lay.pipeline.validate(4, 32)
    with pytest.raises(LayoutError, match="offloading the weights streams each GPU's ZeRO-3 shard"):
        MemoryPolicy(zero=ZeroStage.OPTIMIZER, offload=frozenset({Offload.PARAMS})).validate(_llama().model)


# groups against the rank lists of Megatron-core and torchtitan


def _megatron_groups(world: int, sizes: list[int], mask: list[bool]) -> set[tuple[int, ...]]:
    """megatron.core.parallel_state.generate_masked_orthogonal_rank_groups (megatron-core 0.16), verbatim in
    substance: `sizes` innermost first (order "tp-cp-ep-dp-pp"), the groups of the masked dimensions."""
    def prefix_product(a: list[int]) -> list[int]:
        out, acc = [1], 1
        for v in a:
            acc *= v
            out.append(acc)
        return out

    def decompose(index: int, shape: list[int]) -> list[int]:
        return [(index // d) % s for s, d in zip(shape, prefix_product(shape), strict=False)]

    masked = [s for s, m in zip(sizes, mask, strict=True) if m]
    unmasked = [s for s, m in zip(sizes, mask, strict=True) if not m]
    stride = prefix_product(sizes)
    masked_stride = [d for d, m in zip(stride, mask, strict=False) if m]
    unmasked_stride = [d for d, m in zip(stride, mask, strict=False) if not m]
    size = math.prod(masked)
    groups = set()
    for g in range(world // size):
        gi = decompose(g, unmasked)
        base = sum(x * y for x, y in zip(gi, unmasked_stride, strict=True))
        groups.add(tuple(sorted(base + sum(x * y for x, y in zip(decompose(r, masked), masked_stride, strict=True))
                                for r in range(size))))
    return groups


def _mesh_groups(mesh: Mesh, *dims: Dim) -> set[tuple[int, ...]]:
    return {mesh.ranks_with(r, *dims) for r in range(mesh.size)}


def test_dense_groups_are_megatrons_tp2_cp2_dp2_pp2() -> None:
    """16 GPUs, Megatron-core's RankGenerator(tp 2, cp 2, ep 1, dp 2, pp 2, order tp-cp-ep-dp-pp)."""
    mesh = Mesh(tp=2, cp=2, dp_shard=2, pp=2, world=16)
    # by hand: TP pairs of neighbours, CP two apart, DP four apart, PP eight apart
    assert _mesh_groups(mesh, Dim.TP) == {(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11), (12, 13), (14, 15)}
    assert _mesh_groups(mesh, Dim.CP) == {(0, 2), (1, 3), (4, 6), (5, 7), (8, 10), (9, 11), (12, 14), (13, 15)}
    assert _mesh_groups(mesh, Dim.DP_SHARD) == {(0, 4), (1, 5), (2, 6), (3, 7), (8, 12), (9, 13), (10, 14), (11, 15)}
    assert _mesh_groups(mesh, Dim.PP) == {(r, r + 8) for r in range(8)}
    assert _mesh_groups(mesh, Dim.CP, Dim.DP_SHARD, Dim.DP_REPLICATE) == {
        (0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)}
    sizes = [2, 2, 1, 2, 2]  # tp, cp, ep, dp, pp
    names = {"tp": (Dim.TP,), "cp": (Dim.CP,), "dp": (Dim.DP_SHARD, Dim.DP_REPLICATE), "pp": (Dim.PP,)}
    for k in range(1, 5):  # every combination Megatron can ask for (tp-cp, dp-cp, tp-cp-dp, tp-pp, ...)
        for combo in combinations(("tp", "cp", "dp", "pp"), k):
            mask = [name in combo for name in ("tp", "cp", "ep", "dp", "pp")]
            dims = tuple(d for name in combo for d in names[name])
            assert _mesh_groups(mesh, *dims) == _megatron_groups(16, sizes, mask), combo
    # the strides the cost model prices with
    assert (mesh.tp_group.runs, mesh.cp_group.runs, mesh.grad_group.runs) == (((2, 1),), ((2, 2),), ((4, 2),))
    assert mesh.pipeline_neighbours.runs == ((2, 8),) and mesh.group(Dim.TP, Dim.PP).strides == (1, 8)


def test_expert_groups_are_megatrons_folding() -> None:
    """Megatron-core's expert RankGenerator(tp=etp, ep, dp=expert_dp, pp, cp 1) on 32 GPUs: tp 2, cp 2, dp 4, pp 2
    with ep 4, etp 2, so expert_dp = 2·2·4 / (2·4) = 2."""
    mesh = Mesh(tp=2, cp=2, dp_shard=4, pp=2, ep=4, etp=2, world=32)
    sizes = [2, 1, 4, 2, 2]  # etp, cp, ep, edp, pp
    for dims, mask in (((Dim.ETP,), [1, 0, 0, 0, 0]), ((Dim.EP,), [0, 0, 1, 0, 0]),
                       ((Dim.EDP_SHARD, Dim.DP_REPLICATE), [0, 0, 0, 1, 0]), ((Dim.ETP, Dim.EP), [1, 0, 1, 0, 0])):
        assert _mesh_groups(mesh, *dims) == _megatron_groups(32, sizes, [bool(m) for m in mask]), dims
    assert mesh.ep_group.runs == ((4, 2),) and mesh.expert_grad_group.runs == ((2, 8),)


def _titan_groups(mesh: Mesh, *dims: Dim) -> set[tuple[int, ...]]:
    """torchtitan's init_device_mesh: torch.arange(world).view(pp, dp_replicate, dp_shard, cp, tp); a group is
    the ranks along its mesh dimensions with the others fixed."""
    outer_first = tuple(reversed(DENSE_ORDER))
    grid = np.arange(mesh.size).reshape([mesh.degree(d) for d in outer_first])
    axes = [outer_first.index(d) for d in dims]
    rest = [i for i in range(len(outer_first)) if i not in axes]
    moved = np.transpose(grid, rest + axes).reshape(-1, math.prod(mesh.degree(d) for d in dims))
    return {tuple(sorted(int(r) for r in row)) for row in moved}


def test_hsdp_groups_are_torchtitans_and_megatrons_partial_optimizer() -> None:
    """HSDP on 32 GPUs: tp 2, cp 2, dp_shard 2, dp_replicate 2, pp 2. torchtitan shards over dp_shard x cp
    ("dp_shard_cp") and replicates over dp_replicate; Megatron-core's partial distributed optimizer (2 instances)
    shards over consecutive slices of each dp-cp group and all-reduces across them."""
    mesh = Mesh(tp=2, cp=2, dp_shard=2, dp_replicate=2, pp=2, world=32)
    for dims in ((Dim.CP, Dim.DP_SHARD), (Dim.DP_REPLICATE,), (Dim.TP,), (Dim.PP,),
                 (Dim.CP, Dim.DP_SHARD, Dim.DP_REPLICATE)):
        assert _mesh_groups(mesh, *dims) == _titan_groups(mesh, *dims), dims
    dp_cp = sorted(_megatron_groups(32, [2, 2, 1, 4, 2], [False, True, False, True, False]))
    instances, intra = 2, 4  # intra_partial_data_parallel_size = dp·cp / instances
    intra_groups = {tuple(g[i * intra:(i + 1) * intra]) for g in dp_cp for i in range(instances)}
    inter_groups = {tuple(g[i::intra]) for g in dp_cp for i in range(intra)}
    assert _mesh_groups(mesh, Dim.CP, Dim.DP_SHARD) == intra_groups
    assert _mesh_groups(mesh, Dim.DP_REPLICATE) == inter_groups
    assert mesh.shard_group.runs == ((4, 2),) and mesh.replicate_group.runs == ((2, 8),)


def test_group_members_and_strides_agree() -> None:
    for mesh in (Mesh(tp=2, cp=2, dp_shard=2, pp=2), Mesh(tp=4, dp_shard=2, dp_replicate=2, pp=3, ep=2, etp=2),
                 Mesh(tp=1, cp=4, dp_shard=3, dp_replicate=2, pp=2, ep=6)):
        for order in (DENSE_ORDER, EXPERT_ORDER):
            for k in range(1, len(order) + 1):
                for dims in combinations(order, k):
                    groups = _mesh_groups(mesh, *dims)
                    group = mesh.group(*dims)
                    assert all(len(g) == group.size for g in groups)
                    assert sorted(r for g in groups for r in g) == list(range(mesh.size))  # a partition
                    assert group.members(min(min(g) for g in groups)) in groups


# tiers


def test_tiers_on_eight_gpu_nodes() -> None:
    cluster = load_hardware("h100-sxm", 64)  # 8 GPUs per node, one NVLink domain each
    mesh = Mesh(tp=8, dp_shard=4, pp=2, world=64)
    assert mesh.tp_group.tier(cluster) is Tier.SCALE_UP and mesh.tp_group.per_domain(cluster) == 8
    assert mesh.grad_group.tier(cluster) is Tier.SCALE_OUT and mesh.grad_group.per_domain(cluster) == 1
    assert mesh.pipeline_neighbours.crosses_nodes(cluster) and mesh.cp_group.tier(cluster) is Tier.NONE
    small = Mesh(tp=2, cp=2, dp_shard=16)
    assert small.group(Dim.TP, Dim.CP).tier(cluster) is Tier.SCALE_UP  # tp·cp = 4 consecutive ranks
    assert small.shard_group.per_domain(cluster) == 4 and small.shard_group.tier(cluster) is Tier.SCALE_OUT
    hsdp = Mesh(tp=1, dp_shard=8, dp_replicate=8)
    assert hsdp.shard_group.tier(cluster) is Tier.SCALE_UP and not hsdp.shard_group.crosses_nodes(cluster)
    assert hsdp.replicate_group.tier(cluster) is Tier.SCALE_OUT and hsdp.replicate_group.per_node(cluster) == 1
    mixed = Mesh(tp=2, dp_shard=4, pp=2).group(Dim.TP, Dim.PP)  # ranks {0, 1, 8, 9}: two runs
    assert mixed.per_domain(cluster) == 2 and mixed.tier(cluster) is Tier.SCALE_OUT
    # a scale-up domain larger than a node (NVL-style): a 16-GPU TP x CP group crosses nodes but not the NICs
    nvl = dataclasses.replace(cluster, scale_up_size=16)
    wide = Mesh(tp=8, cp=2, dp_shard=4).group(Dim.TP, Dim.CP)
    assert wide.tier(nvl) is Tier.SCALE_UP and wide.crosses_nodes(nvl) and wide.tier(cluster) is Tier.SCALE_OUT


def test_members_per_block_count_the_members() -> None:
    """Group.per_block against counting: the members of the group holding rank 0 in the block [0, block)."""
    for mesh in (Mesh(tp=2, cp=2, dp_shard=4, dp_replicate=2, pp=2), Mesh(tp=4, dp_shard=8, pp=4, ep=8, etp=2)):
        for order in (DENSE_ORDER, EXPERT_ORDER):
            for k in range(1, len(order) + 1):
                for dims in combinations(order, k):
                    members = mesh.ranks_with(0, *dims)
                    for block in (1, 2, 4, 8, 16, 32):
                        assert mesh.group(*dims).per_block(block) == sum(r < block for r in members), (dims, block)


# the cost model asks the mesh: with dp_replicate 1 the groups are the strides it priced with before


@pytest.mark.parametrize("tp,cp,dp,pp,ep,etp", [(8, 1, 8, 2, 1, 1), (2, 2, 16, 1, 1, 1), (1, 1, 128, 1, 8, 1),
                                                (4, 2, 8, 2, 4, 2), (2, 1, 4, 8, 8, 1)])
def test_flat_groups_are_the_old_strides(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int) -> None:
    """The (size, stride) pairs cost_models computed by hand before the mesh: dense gradients over dp·cp at stride
    tp, experts over tp·cp·dp/(etp·ep) at stride etp·ep, pipeline hops at tp·cp·dp, the tied embedding's pair at
    tp·cp·dp·(pp − 1), EP at stride etp; every price equal on a 16-node cluster, ZeRO 0 to 3."""
    mesh = Layout(tp=tp, cp=cp, dp=dp, pp=pp, ep=ep, etp=etp).mesh
    cluster = load_hardware("h100-sxm", mesh.size)
    old = {"grad": (dp * cp, tp), "expert": (tp * cp * dp // (etp * ep), etp * ep), "ep": (ep, etp)}
    new = {"grad": mesh.grad_group, "expert": mesh.expert_grad_group, "ep": mesh.ep_group}
    for key, (size, stride) in old.items():
        assert new[key].size == size and (size == 1 or new[key].stride == stride)
        for kind in (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
            assert collective_time(kind, 1e8, size, stride, cluster, True) == collective_time(
                kind, 1e8, new[key].size, new[key].stride, cluster, True)
    if pp > 1:
        assert mesh.pipeline_neighbours == Group.line(2, tp * cp * dp, (Dim.PP,))
        assert mesh.pipeline_ends == Group.line(2, tp * cp * dp * (pp - 1), (Dim.PP,))
    for zero in ZeroStage:
        for groups, (size, stride) in ((mesh.dense_data, old["grad"]), (mesh.expert_data, old["expert"])):
            assert grad_sync_times(3e8, zero, groups, cluster, 4, True) == _old_sync(3e8, zero, size, stride, cluster)
    assert p2p_time(1e6, tp * cp * dp, cluster) == collective_time(Collective.SEND_RECV, 1e6, 2, tp * cp * dp, cluster)


def _old_sync(params: float, zero: ZeroStage, n: int, stride: int, cluster) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """grad_sync_times as it was before the mesh (commit 69eb782), over n ranks at `stride`."""
    if zero >= ZeroStage.WEIGHTS:
        return 0.0, 0.0
    reduce = 0.0
    if zero is not ZeroStage.GRADIENTS:
        kind = Collective.ALL_REDUCE if zero is ZeroStage.NONE else Collective.REDUCE_SCATTER
        reduce = collective_time(kind, params * 4, n, stride, cluster, True)
    gather = 0.0 if zero is ZeroStage.NONE else collective_time(Collective.ALL_GATHER, params * 2, n, stride,
                                                                 cluster, True)
    return reduce, gather


# HSDP priced


def test_hsdp_sync_is_shard_reduce_scatter_replica_all_reduce_shard_gather() -> None:
    """ZeRO-1 HSDP on 128 GPUs, shard 8 (one node) x replicate 16: reduce-scatter of 4·P over the node, all-reduce
    of the 4·P/8 shard over the 16 replicas (8 ranks apart), all-gather of 2·P over the node."""
    cluster, p = load_hardware("h100-sxm", 128), 1e9
    groups = Mesh(dp_shard=8, dp_replicate=16).dense_data
    reduce, gather = grad_sync_times(p, ZeroStage.OPTIMIZER, groups, cluster, 4, True)
    assert reduce == pytest.approx(collective_time(Collective.REDUCE_SCATTER, 4 * p, 8, 1, cluster, True)
                                   + collective_time(Collective.ALL_REDUCE, 4 * p / 8, 16, 8, cluster, True))
    assert gather == collective_time(Collective.ALL_GATHER, 2 * p, 8, 1, cluster, True)
    # ZeRO-2 and 3 reduce-scatter (and gather) per micro-batch: the step keeps the replicas' all-reduce
    for zero in (ZeroStage.GRADIENTS, ZeroStage.WEIGHTS):
        assert grad_sync_times(p, zero, groups, cluster, 4, True)[0] == collective_time(
            Collective.ALL_REDUCE, 4 * p / 8, 16, 8, cluster, True)


def test_hsdp_inside_a_node_beats_flat_fsdp_when_latency_dominates() -> None:
    """A small message (1e5 parameters) on 16 nodes: a flat ring over 128 ranks pays NCCL's latency over 127 hops
    (cost_models/comm/nccl.py), HSDP a ring of 8 on NVLink and a tree over 16 nodes (log2 16 network hops each way);
    HSDP
    is over twice as cheap, with or without multi-rail rings. For a large message
    with multi-rail rings the flat ring spreads its bytes over a node's 8 NICs and is the cheaper one: HSDP trades
    latency and per-rank NIC traffic, not bytes."""
    cluster = load_hardware("h100-sxm", 128)
    flat, hsdp = Mesh(dp_shard=128).dense_data, Mesh(dp_shard=8, dp_replicate=16).dense_data
    for rails in (False, True):
        for zero in (ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS):
            small = [sum(grad_sync_times(1e5, zero, g, cluster, 4, rails)) for g in (flat, hsdp)]
            assert small[1] * 2 < small[0]
    big = [sum(grad_sync_times(1e9, ZeroStage.OPTIMIZER, g, cluster, 4, True)) for g in (flat, hsdp)]
    assert big[0] < big[1]


def test_hsdp_zero3_step_and_memory() -> None:
    """Llama-3-8B on 128 H100s, ZeRO-3: gathering each module over one node instead of 128 ranks makes the step
    faster; weights, gradients and optimizer state divide by dp_shard 8 instead of 128, so memory grows."""
    problem = _llama(128)
    flat = evaluate(problem.model, problem.cluster, gpus=128, seq_len=4096, global_batch=256, zero=3, runtime=ANY)
    hsdp = evaluate(problem.model, problem.cluster, gpus=128, seq_len=4096, global_batch=256, zero=3,
                    dp_replicate=16, runtime=ANY)
    assert hsdp.step_time_s < flat.step_time_s
    assert hsdp.breakdown.sharded_dp_comm_s < flat.breakdown.sharded_dp_comm_s
    assert hsdp.peak_memory_gib > flat.peak_memory_gib


@pytest.mark.parametrize("zero", [ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS, ZeroStage.WEIGHTS])
def test_hsdp_memory_divides_by_dp_shard(zero: ZeroStage) -> None:
    problem = _llama()
    model, cluster, job = problem.model, problem.cluster, problem.job
    per_stage = []
    for r in (1, 4):
        lay = make_layout(problem, tp=2, cp=2, zero=int(zero), dp_replicate=r)
        per_stage.append(evaluate_layout(model, cluster, job, lay).stages[0])
    flat, hsdp = per_stage
    shards = (2 * 16, 2 * 4)  # cp·dp_shard: 32 flat, 8 with 4 replicas
    assert hsdp.optimizer_state_gib == pytest.approx(flat.optimizer_state_gib * shards[0] / shards[1])
    if zero >= ZeroStage.GRADIENTS:
        assert hsdp.gradients_gib == pytest.approx(flat.gradients_gib * shards[0] / shards[1])
    if zero is ZeroStage.WEIGHTS:
        assert hsdp.weights_gib == pytest.approx(flat.weights_gib * shards[0] / shards[1])


def test_replication_only_prices_as_flat_ddp() -> None:
    """ZeRO-0 with dp_replicate = dp (torchtitan's spelling of DDP) is the same all-reduce as dp_replicate 1."""
    problem = _llama()
    a, b = (evaluate_layout(problem.model, problem.cluster, problem.job, make_layout(problem, tp=8, dp_replicate=r))
            for r in (1, 8))
    assert a == b


# the command line, the API, the plan file and torchtitan


def test_evaluate_dp_replicate_option() -> None:
    args = ["evaluate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "4096",
            "--global-batch", "256", "--zero", "3", "--runtime", "torchtitan", "--json"]
    flat = json.loads(runner.invoke(app, args).output)
    res = runner.invoke(app, [*args, "--dp-replicate", "8"])
    assert res.exit_code == 0, res.output
    hsdp = json.loads(res.output)
    assert "dp_replicate" not in flat["layout"] and hsdp["layout"]["dp_replicate"] == 8
    assert hsdp["step_time_s"] != flat["step_time_s"]
    bad = runner.invoke(app, [*args[:-1], "--dp-replicate", "3"])
    assert bad.exit_code == 2 and "dp_replicate 3 must divide dp 64" in bad.output
    assert len(bad.output.strip().splitlines()) == 1


def _hsdp_plan() -> Plan:
    problem = _llama()
    layout = make_layout(problem, tp=2, zero=3, dp_replicate=4)
    pred = evaluate_layout(problem.model, problem.cluster, problem.job, layout)
    return Plan(problem.model, problem.cluster, problem.job, Ranked(layout, pred), (), None)


def test_plan_file_carries_dp_replicate(tmp_path: Path) -> None:
    plan = _hsdp_plan()
    data = plan_to_dict(plan)
    assert data["parallelism"]["dp"] == 32 and data["parallelism"]["dp_replicate"] == 4
    flat = dataclasses.replace(plan, best=Ranked(dataclasses.replace(plan.best.layout, dp_replicate=1),
                                                 plan.best.prediction))
    assert "dp_replicate" not in plan_to_dict(flat)["parallelism"]  # plans without HSDP keep their form
    path = tmp_path / "hsdp.yaml"
    save_plan(plan, path)
    loaded = load_plan(path).best.layout  # the file states the split: (32,) for the one chunk
    assert dataclasses.replace(loaded, stage_layers=None) == plan.best.layout and loaded.mesh.dp_shard == 8


def test_torchtitan_hybrid_shard_degrees() -> None:
    text = emit(_hsdp_plan(), Target.TORCHTITAN, strict=True).text
    assert "data_parallel_replicate_degree = 4" in text and "data_parallel_shard_degree = 8" in text
