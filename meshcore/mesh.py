"""The device mesh of a training layout: its parallel degrees, their rank order, the process group every
collective spans, and which network tier each group crosses (in the spirit of torchtitan's ParallelDims and
Megatron-core's parallel_state). The cost model asks the mesh for a group; it never computes a stride.

Rank order (`DENSE_ORDER`, innermost first): TP, CP, DP shard, DP replicate, PP. A GPU's global rank is the
mixed-radix number of its coordinates,
    rank = tp_i + tp·(cp_i + cp·(shard_i + dp_shard·(replicate_i + dp_replicate·pp_i))),
so dimension d's neighbours sit stride(d) = product of the degrees inside d apart. For tp-cp-dp-pp this is
Megatron-core's default order (parallel_state.RankGenerator, order "tp-cp-ep-dp-pp" with ep 1 for dense layers):
the TP group of consecutive ranks fits one scale-up domain, the pipeline, outermost, crosses nodes.
Data parallelism is dp = dp_shard x dp_replicate (HSDP) with the shard factor inside: the group ZeRO/FSDP
shards over is the contiguous CP x DP-shard block (torchtitan's "dp_shard_cp" mesh dimension; Megatron-core's
intra_partial_data_parallel_group_with_cp of the partial distributed optimizer,
--num-distributed-optimizer-instances = dp_replicate), so a small shard group stays inside a node and only the
replicate all-reduce crosses the network. torchtitan lists its mesh outermost first as
["pp", "dp_replicate", "dp_shard", "cp", "tp"]: the same order. Plain FSDP/ZeRO is dp_replicate 1.

Mixture-of-experts layers fold their own mesh over the same GPUs (Megatron-core's MoE parallel folding,
expert RankGenerator over etp, ep, expert-dp, pp): `EXPERT_ORDER`, innermost first, ETP, EP, expert DP shard,
DP replicate, PP. The etp·ep·edp_shard ranks of one data-parallel replica of one pipeline stage are its
tp·cp·dp_shard ranks read again; the replicate and pipeline coordinates are shared with the dense mesh.

A group's members are the ranks that differ only in its dimensions: (degree, stride) runs, merged where they
are adjacent in the order (TP x CP is one run of tp·cp at stride 1). On a cluster (meshcore.hardware) a group
with runs (d_i, s_i) has Π min(d_i, max(1, D // s_i)) members in each aligned block of D consecutive ranks: one
scale-up domain (D = scale_up_size) or one node (D = gpus_per_node). It crosses the scale-out network (NICs)
when a scale-up domain does not hold all of it; a group of one crosses nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from functools import cached_property, lru_cache

from meshcore.checks import MAX_GPUS, integer
from meshcore.errors import LayoutError
from meshcore.hardware import ClusterSpec


class Dim(str, Enum):
    """One parallel dimension of the mesh."""

    TP = "tp"  # tensor parallelism (Megatron-LM)
    CP = "cp"  # context parallelism (ring attention over sequence chunks)
    DP_SHARD = "dp_shard"  # data parallelism whose ranks shard weights, gradients, optimizer state (ZeRO/FSDP)
    DP_REPLICATE = "dp_replicate"  # data parallelism whose ranks hold replicas of one shard (HSDP's outer factor)
    PP = "pp"  # pipeline stages
    ETP = "etp"  # expert tensor parallelism (the folded expert mesh)
    EP = "ep"  # expert parallelism: experts spread over ranks
    EDP_SHARD = "edp_shard"  # expert data parallelism inside one replica: tp·cp·dp_shard / (etp·ep)


DENSE_ORDER = (Dim.TP, Dim.CP, Dim.DP_SHARD, Dim.DP_REPLICATE, Dim.PP)  # innermost first
EXPERT_ORDER = (Dim.ETP, Dim.EP, Dim.EDP_SHARD, Dim.DP_REPLICATE, Dim.PP)  # the MoE layers' folding


class Tier(str, Enum):
    """The slowest network tier a group's traffic uses."""

    NONE = "none"  # a group of one: no traffic
    SCALE_UP = "scale_up"  # inside one scale-up domain (NVLink/NVSwitch, xGMI), possibly across nodes (NVL72)
    SCALE_OUT = "scale_out"  # across scale-up domains: each member's NIC


@dataclass(frozen=True)
class Group:
    """The ranks that differ only in `dims`: `runs` of (degree, stride), innermost first, degree > 1 each,
    adjacent runs merged (a single run: `size` ranks `stride` apart). A group of one has no runs."""

    dims: tuple[Dim, ...]
    runs: tuple[tuple[int, int], ...]

    @staticmethod
    def line(size: int, stride: int, dims: tuple[Dim, ...] = ()) -> Group:
        """`size` ranks `stride` apart (the form of the collectives' (size, stride) pricing)."""
        return Group(dims, ((size, max(stride, 1)),) if size > 1 else ())

    @property
    def size(self) -> int:
        return math.prod(d for d, _ in self.runs)

    @property
    def stride(self) -> int:
        """Distance between neighbouring members of the innermost run (1 for a group of one)."""
        return self.runs[0][1] if self.runs else 1

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(s for _, s in self.runs)

    def members(self, first: int = 0) -> tuple[int, ...]:
        """The global ranks of the group whose lowest rank is `first`, ascending."""
        ranks = [first]
        for degree, stride in self.runs:
            ranks = [r + k * stride for k in range(degree) for r in ranks]
        return tuple(sorted(ranks))

    def per_block(self, block: int) -> int:
        """Members in one aligned block of `block` consecutive ranks: Π min(d_i, max(1, block // s_i))."""
        return math.prod(min(d, max(1, block // s)) for d, s in self.runs)

    def per_domain(self, cluster: ClusterSpec) -> int:
        """Members that share one scale-up domain (the NVLink island)."""
        return self.per_block(cluster.scale_up_size)

    def per_node(self, cluster: ClusterSpec) -> int:
        """Members that share one node."""
        return self.per_block(min(cluster.gpus_per_node, cluster.num_gpus))

    def tier(self, cluster: ClusterSpec) -> Tier:
        if self.size <= 1:
            return Tier.NONE
        return Tier.SCALE_UP if self.per_domain(cluster) >= self.size else Tier.SCALE_OUT

    def crosses_nodes(self, cluster: ClusterSpec) -> bool:
        return self.per_node(cluster) < self.size


@dataclass(frozen=True)
class DataGroups:
    """The data-parallel groups of one kind of weight (dense, or the experts' folded mesh): `full` holds every
    replica of an unsharded gradient (ZeRO-0's all-reduce), `shard` splits weights, gradients and optimizer state
    under ZeRO/FSDP, `replicate` holds the replicas of one shard (HSDP's all-reduce; one rank without HSDP)."""

    full: Group
    shard: Group
    replicate: Group


@dataclass(frozen=True)
class Mesh:
    """The parallel degrees of a training layout, validated at construction (every message names every factor).

    `world`, when given, must equal tp·cp·dp_shard·dp_replicate·pp (torchtitan's world_size check). Expert
    layers need etp·ep to divide tp·cp·dp_shard: they fold the ranks of one data-parallel replica of one stage."""

    tp: int = 1
    cp: int = 1
    dp_shard: int = 1
    dp_replicate: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 1
    world: int | None = None

    def __post_init__(self) -> None:
        for dim in (*DENSE_ORDER, Dim.EP, Dim.ETP):
            integer(getattr(self, dim.value), dim.value, 1, MAX_GPUS, LayoutError)
        if self.world is not None:
            integer(self.world, "world size", 1, MAX_GPUS, LayoutError)
            if self.world != self.size:
                raise LayoutError(f"world size {self.world} != {self._factors(DENSE_ORDER)} = {self.size}")
        if self.replica % (self.etp * self.ep):
            raise LayoutError(f"etp {self.etp} * ep {self.ep} = {self.etp * self.ep} must divide "
                              f"{self._factors(DENSE_ORDER[:3])} = {self.replica} (the ranks of one data-parallel "
                              f"replica of one pipeline stage, which expert layers fold into etp x ep x expert-dp)")

    def _factors(self, dims: tuple[Dim, ...]) -> str:
        return " * ".join(f"{d.value} {self.degree(d)}" for d in dims)

    @staticmethod
    def of(tp: int = 1, cp: int = 1, dp_shard: int = 1, dp_replicate: int = 1, pp: int = 1, ep: int = 1,
           etp: int = 1) -> Mesh:
        """`Mesh(...)`, one shared instance per degrees (a search prices thousands of layouts on a few meshes: they
        share the groups each mesh computes once)."""
        try:
            return _shared(tp, cp, dp_shard, dp_replicate, pp, ep, etp)
        except TypeError:  # an unhashable degree: the constructor names it
            return Mesh(tp=tp, cp=cp, dp_shard=dp_shard, dp_replicate=dp_replicate, pp=pp, ep=ep, etp=etp)

    @staticmethod
    def for_layer(tp: int, cp: int = 1, ep: int = 1, etp: int = 1) -> Mesh:
        """The smallest mesh holding a layer's TP, CP, EP and ETP groups (one stage, one replica, dp_shard the least
        that folds etp·ep). Their members and strides depend on tp, cp, ep and etp only, never on dp or pp, so
        per-layer pricing, which knows no dp, asks this mesh."""
        inner = tp * cp
        return Mesh.of(tp=tp, cp=cp, dp_shard=math.lcm(inner, ep * etp) // inner, ep=ep, etp=etp)

    # degrees

    @property
    def size(self) -> int:
        return self.tp * self.cp * self.dp_shard * self.dp_replicate * self.pp

    @property
    def dp(self) -> int:
        """Data-parallel degree: dp_shard x dp_replicate."""
        return self.dp_shard * self.dp_replicate

    @property
    def replica(self) -> int:
        """Ranks of one data-parallel replica of one pipeline stage: tp·cp·dp_shard."""
        return self.tp * self.cp * self.dp_shard

    @property
    def edp_shard(self) -> int:
        """Expert data parallelism inside one replica: tp·cp·dp_shard / (etp·ep)."""
        return self.replica // (self.etp * self.ep)

    @property
    def expert_dp(self) -> int:
        """Ranks holding the same expert shard: tp·cp·dp / (etp·ep)."""
        return self.edp_shard * self.dp_replicate

    def degree(self, dim: Dim) -> int:
        return self.edp_shard if dim is Dim.EDP_SHARD else int(getattr(self, dim.value))

    def stride(self, dim: Dim) -> int:
        """Ranks between neighbours along `dim`: the product of the degrees inside it in its order."""
        order = _order_of((dim,))
        return math.prod(self.degree(d) for d in order[:order.index(dim)])

    # groups

    def group(self, *dims: Dim) -> Group:
        """The group of ranks that differ only in `dims` (all from one order: dense, or expert with DP_REPLICATE
        and PP)."""
        order = _order_of(dims)
        if not all(d in order for d in dims):
            raise LayoutError(f"a group spans one rank order: {', '.join(d.value for d in dims)} mixes the dense "
                              f"({', '.join(d.value for d in DENSE_ORDER)}) and expert "
                              f"({', '.join(d.value for d in EXPERT_ORDER)}) meshes")
        chosen = [d for d in order if d in dims]
        runs: list[tuple[int, int]] = []
        for d in chosen:
            degree, stride = self.degree(d), self.stride(d)
            if degree == 1:
                continue
            if runs and runs[-1][0] * runs[-1][1] == stride:  # adjacent: one run
                runs[-1] = (runs[-1][0] * degree, runs[-1][1])
            else:
                runs.append((degree, stride))
        return Group(tuple(chosen), tuple(runs))

    def neighbours(self, dim: Dim) -> Group:
        """Two consecutive ranks along `dim` (a send/recv pair: pipeline stages, the CP ring); one rank when the
        degree is 1."""
        return Group.line(2 if self.degree(dim) > 1 else 1, self.stride(dim), (dim,))

    @cached_property
    def tp_group(self) -> Group:
        return self.group(Dim.TP)

    @cached_property
    def cp_group(self) -> Group:
        return self.group(Dim.CP)

    @cached_property
    def grad_group(self) -> Group:
        """Ranks that reduce one dense gradient: CP x DP (Megatron's data_parallel_group_with_cp)."""
        return self.group(Dim.CP, Dim.DP_SHARD, Dim.DP_REPLICATE)

    @cached_property
    def shard_group(self) -> Group:
        """Ranks that shard dense weights, gradients and optimizer state under ZeRO/FSDP: CP x DP shard."""
        return self.group(Dim.CP, Dim.DP_SHARD)

    @cached_property
    def replicate_group(self) -> Group:
        """Ranks holding replicas of one shard (HSDP's all-reduce; the same for dense and expert weights)."""
        return self.group(Dim.DP_REPLICATE)

    @cached_property
    def stage_group(self) -> Group:
        """The ranks of one pipeline stage: TP x CP x DP."""
        return self.group(Dim.TP, Dim.CP, Dim.DP_SHARD, Dim.DP_REPLICATE)

    @cached_property
    def pp_group(self) -> Group:
        return self.group(Dim.PP)

    @cached_property
    def pipeline_neighbours(self) -> Group:
        """A stage and the next: one pipeline send/recv."""
        return self.neighbours(Dim.PP)

    @cached_property
    def pipeline_ends(self) -> Group:
        """The first and last stage (Megatron's embedding group: the tied embedding's gradient all-reduce)."""
        return Group.line(2 if self.pp > 1 else 1, self.stride(Dim.PP) * (self.pp - 1), (Dim.PP,))

    @cached_property
    def ep_group(self) -> Group:
        """Ranks that exchange tokens in an MoE layer's dispatch and combine."""
        return self.group(Dim.EP)

    @cached_property
    def etp_group(self) -> Group:
        return self.group(Dim.ETP)

    @cached_property
    def expert_grad_group(self) -> Group:
        """Ranks that reduce one expert gradient: expert DP shard x DP replicate."""
        return self.group(Dim.EDP_SHARD, Dim.DP_REPLICATE)

    @cached_property
    def expert_shard_group(self) -> Group:
        """Ranks that shard expert weights, gradients and optimizer state under ZeRO/FSDP."""
        return self.group(Dim.EDP_SHARD)

    @cached_property
    def dense_data(self) -> DataGroups:
        return DataGroups(self.grad_group, self.shard_group, self.replicate_group)

    @cached_property
    def expert_data(self) -> DataGroups:
        return DataGroups(self.expert_grad_group, self.expert_shard_group, self.replicate_group)

    # ranks

    def coordinates(self, rank: int, order: tuple[Dim, ...] = DENSE_ORDER) -> dict[Dim, int]:
        """Rank `rank`'s coordinate along each dimension of `order`."""
        out, rest = {}, rank
        for d in order:
            rest, out[d] = divmod(rest, self.degree(d))
        return out

    def ranks_with(self, rank: int, *dims: Dim) -> tuple[int, ...]:
        """The members of `group(*dims)` that hold `rank`, ascending."""
        group = self.group(*dims)
        coords = self.coordinates(rank, _order_of(dims))
        return group.members(rank - sum(coords[d] * self.stride(d) for d in group.dims))


@lru_cache(maxsize=4096, typed=True)  # typed: True is not the degree 1
def _shared(tp: int, cp: int, dp_shard: int, dp_replicate: int, pp: int, ep: int, etp: int) -> Mesh:
    return Mesh(tp=tp, cp=cp, dp_shard=dp_shard, dp_replicate=dp_replicate, pp=pp, ep=ep, etp=etp)


def _order_of(dims: tuple[Dim, ...]) -> tuple[Dim, ...]:
    """The dense order when it holds every one of `dims`, else the expert order."""
    return DENSE_ORDER if all(d in DENSE_ORDER for d in dims) else EXPERT_ORDER
