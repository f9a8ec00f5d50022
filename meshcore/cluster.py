"""A heterogeneous cluster: node groups of different hardware, and the links between the groups.

Each group is a set of whole nodes of one hardware profile (a preset or a profile YAML), so it is an ordinary
`ClusterSpec` with num_gpus = nodes x gpus_per_node. Between two groups the GPUs talk over a link of
`bandwidth_gbs` GB/s per GPU and direction and `latency_us`; where the cluster file names none, the link is the
slower of the two groups' scale-out NICs (the traffic leaves one group through its NICs and enters the other
through its own, so the smaller of the two line rates and efficiencies and the larger latency bind).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from meshcore.checks import BANDWIDTH_GBS, EFFICIENCY, MAX_GPUS, MAX_PHYSICAL, identifier, integer, physical, real
from meshcore.enums import Recompute, ZeroStage
from meshcore.errors import SpecError
from meshcore.hardware import ClusterSpec, LinkSpec
from meshcore.job import JobSpec
from meshcore.layout import Layout
from meshcore.schedules import DEFAULT_SCHEDULE


@dataclass(frozen=True)
class NodeGroup:
    """`nodes` nodes of one hardware profile, named `name` in the cluster file; `hardware` is the preset or profile
    path it came from (written to plan files)."""

    name: str
    hardware: str
    nodes: int
    cluster: ClusterSpec  # num_gpus = nodes x gpus_per_node

    def __post_init__(self) -> None:
        identifier(self.name, "group name", SpecError)
        identifier(self.hardware, f"group {self.name}: hardware", SpecError)
        integer(self.nodes, f"group {self.name}: nodes", 1, MAX_GPUS, SpecError)
        if self.cluster.num_gpus != self.nodes * self.cluster.gpus_per_node:
            raise SpecError(f"group {self.name}: {self.cluster.num_gpus} GPUs != {self.nodes} nodes x "
                            f"{self.cluster.gpus_per_node} GPUs per node")

    @property
    def num_gpus(self) -> int:
        return self.cluster.num_gpus

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node


@dataclass(frozen=True)
class GroupLink:
    """The network between groups `a` and `b` as one GPU sees it (per direction)."""

    a: str
    b: str
    bandwidth_gbs: float
    latency_us: float
    efficiency: float = 0.9  # achieved share of the line rate for large messages (nccl-tests send/recv)

    def __post_init__(self) -> None:
        physical(self.bandwidth_gbs, f"link {self.a}-{self.b}: bandwidth_gbs", BANDWIDTH_GBS, SpecError)
        real(self.latency_us, f"link {self.a}-{self.b}: latency_us", 0.0, MAX_PHYSICAL, low_open=False,
             error=SpecError)
        physical(self.efficiency, f"link {self.a}-{self.b}: efficiency", EFFICIENCY, SpecError)


@dataclass(frozen=True)
class HeteroCluster:
    """Node groups (in the order of the cluster file) and the links named between them."""

    name: str
    groups: tuple[NodeGroup, ...]
    links: tuple[GroupLink, ...] = ()

    def __post_init__(self) -> None:
        identifier(self.name, "cluster name", SpecError)
        if not self.groups:
            raise SpecError("a cluster needs at least one node group")
        names = [g.name for g in self.groups]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(f"group names must be unique, {', '.join(dup)} appear more than once")
        seen: set[frozenset[str]] = set()
        for link in self.links:
            for end in (link.a, link.b):
                if end not in names:
                    raise SpecError(f"link {link.a}-{link.b}: no group named {end} (groups: {', '.join(names)})")
            pair = frozenset((link.a, link.b))
            if len(pair) != 2:
                raise SpecError(f"link {link.a}-{link.b}: a link joins two different groups")
            if pair in seen:
                raise SpecError(f"link {link.a}-{link.b} is given twice")
            seen.add(pair)

    @property
    def num_gpus(self) -> int:
        return sum(g.num_gpus for g in self.groups)

    def group(self, name: str) -> NodeGroup:
        return next(g for g in self.groups if g.name == name)

    def link(self, a: str, b: str) -> LinkSpec:
        """The link between groups `a` and `b`: the one the file names, else the slower scale-out NIC of the two
        (smaller bandwidth and efficiency, larger latency). Within one group: that group's scale-out."""
        if a == b:
            return self.group(a).cluster.scale_out
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return LinkSpec(link.bandwidth_gbs, link.latency_us, link.efficiency)
        x, y = self.group(a).cluster.scale_out, self.group(b).cluster.scale_out
        return LinkSpec(min(x.bandwidth_gbs, y.bandwidth_gbs), max(x.latency_us, y.latency_us),
                        min(x.efficiency, y.efficiency))

    def merged(self) -> HeteroCluster:
        """Groups of the same hardware that no link names are one pool (their default link is their own scale-out
        network, so nothing tells them apart): they merge into the first of them, nodes added."""
        linked = {end for link in self.links for end in (link.a, link.b)}
        out: list[NodeGroup] = []
        for g in self.groups:
            twin = next((o for o in out if g.name not in linked and o.name.split("+")[0] not in linked
                         and o.cluster == replace(g.cluster, num_gpus=o.cluster.num_gpus)), None)
            if twin is None:
                out.append(g)
                continue
            nodes = twin.nodes + g.nodes
            out[out.index(twin)] = NodeGroup(f"{twin.name}+{g.name}", twin.hardware, nodes,
                                             replace(twin.cluster, num_gpus=nodes * twin.gpus_per_node))
        return self if len(out) == len(self.groups) else HeteroCluster(self.name, tuple(out), self.links)


@dataclass(frozen=True)
class HeteroStage:
    """One pipeline stage of a heterogeneous layout: the group whose GPUs run it, its TP degree there, how many
    decoder layers it holds and how many of them (its first ones) are fully recomputed."""

    group: str
    tp: int
    layers: int
    full: int = 0


@dataclass(frozen=True)
class HeteroLayout:
    """A pipeline across node groups: stages in pipeline order, each group hosting a contiguous run of them with its
    own TP degree; every stage shares the data-parallel degree `dp` (each pipeline replica spans the groups the
    same way: dp·tp_s GPUs of the stage's group per stage), the micro-batch size, ZeRO stage and recomputation.
    The schedule is 1F1B, one model chunk per rank, no context or expert parallelism."""

    dp: int
    mbs: int
    zero: ZeroStage
    recompute: Recompute
    stages: tuple[HeteroStage, ...]

    @property
    def pp(self) -> int:
        return len(self.stages)

    @property
    def num_layers(self) -> int:
        return sum(s.layers for s in self.stages)

    @property
    def world(self) -> int:
        return sum(s.tp for s in self.stages) * self.dp

    @property
    def uniform_tp(self) -> bool:
        return len({s.tp for s in self.stages}) == 1

    def num_microbatches(self, job: JobSpec) -> int:
        return job.global_batch // (self.mbs * self.dp)

    def group_layout(self, tp: int) -> Layout:
        """The homogeneous layout whose per-stage costs a stage of TP degree `tp` has: same pp, dp, mbs, ZeRO and
        recomputation, SP with TP (the cost model prices one stage on one group's ClusterSpec with it)."""
        return Layout(tp=tp, pp=self.pp, dp=self.dp, mbs=self.mbs, sp=tp > 1, zero=self.zero,
                      recompute=self.recompute, schedule=DEFAULT_SCHEDULE)

    def runs(self) -> tuple[tuple[str, int, int], ...]:
        """(group, first stage, stage count) of each contiguous run of stages on one group, in pipeline order."""
        out: list[tuple[str, int, int]] = []
        for i, s in enumerate(self.stages):
            if out and out[-1][0] == s.group:
                out[-1] = (s.group, out[-1][1], out[-1][2] + 1)
            else:
                out.append((s.group, i, 1))
        return tuple(out)
