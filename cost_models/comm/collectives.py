"""Collective communication as NCCL runs it, aware of which network tier a group uses.

A collective runs over a process group of the layout's mesh (meshcore.mesh: TP innermost, then CP, DP shard,
DP replicate, PP outermost, Megatron-core's order); the group says how many of its members share one scale-up
domain (NVLink/NVSwitch island): k = min(size, scale_up_size // stride) for `size` ranks `stride` apart
(`Group.per_domain`). The functions here take the mesh's `Group`; their (size, stride) twins serve the workloads
whose layouts have no mesh yet (serving, diffusion, recommendation, MLIP, heterogeneous clusters).

All-reduce, all-gather and reduce-scatter are priced as NCCL runs them (`nccl_choice`, cost_models/comm/nccl.py): the
algorithm (ring, tree, NVLS, NVLS-tree, PAT) and protocol (LL, LL128, Simple) with the least latency + S / algbw for
the message size, group size and placement, so small messages pay NCCL's fixed per-call latency and large groups
a tree's log of the domains where NCCL would run one. All-to-all and send/recv are NCCL's grouped point-to-point
operations (`nccl.p2p_seconds`): NCCL's base latency of the protocol (LL up to 16 KiB per peer) plus one tier
latency per peer, and each share of the message at its tier's bus bandwidth.
A group inside one switched domain runs at the scale-up bus bandwidth; in a wired one (DGX-1V) at its links'
(cost_models/comm/rings.py: rings for the collectives, the pairs' own links for point-to-point). A group that
spans domains runs its inter-domain hops through the sending rank's own NIC (rail-aligned: ranks of a group never
borrow their node-mates' NICs, because those are busy with the node-mates' own groups), so busbw = min(scale-up,
NIC per GPU) x achieved share; with the runtime's multi-rail rings (PXN) the k members of a domain drive k NICs.
This reproduces the ZeRO-3 scaling of Narayanan et al. 2021 Table 2 where an ideal node-aggregated model is
several times too fast.
"""

from __future__ import annotations

import math
from enum import Enum
from functools import lru_cache

from cost_models.comm import nccl
from cost_models.comm.rings import intra_bus, peer_bus
from meshcore import ClusterSpec, LinkSpec
from meshcore.memo import Same
from meshcore.mesh import Group, Tier


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


NCCL_KINDS = {Collective.ALL_REDUCE: nccl.Kind.ALL_REDUCE, Collective.ALL_GATHER: nccl.Kind.ALL_GATHER,
              Collective.REDUCE_SCATTER: nccl.Kind.REDUCE_SCATTER}


def ranks_per_domain(cluster: ClusterSpec, size: int, stride: int) -> int:
    """Members of a (size, stride) group that share one scale-up domain."""
    return max(1, Group.line(size, stride).per_domain(cluster))


def group_link(cluster: ClusterSpec, size: int, stride: int, multi_rail: bool = False) -> tuple[LinkSpec, bool]:
    """`link_of` a (size, stride) group."""
    return link_of(cluster, Group.line(size, stride), multi_rail)


def link_of(cluster: ClusterSpec, group: Group, multi_rail: bool = False) -> tuple[LinkSpec, bool]:
    """The bottleneck link of the group and whether it crosses scale-up domains. With `multi_rail` a group
    with k members in each domain spreads its inter-domain traffic over their k NICs (NCCL's rings over
    all rails, PXN), so its scale-out share is k NICs' worth, capped by the scale-up link."""
    if group.tier(cluster) is not Tier.SCALE_OUT:
        return cluster.scale_up, False
    local = group.per_domain(cluster)
    out = cluster.scale_out
    if multi_rail and local > 1:
        out = LinkSpec(out.bandwidth_gbs * local, out.latency_us, out.efficiency)
    slow = min((cluster.scale_up, out), key=lambda link: link.bus_bytes_per_s)
    return slow, True


def bandwidth_factor(kind: Collective, size: int) -> float:
    """Bytes each rank moves per byte of buffer (nccl-tests bus-bandwidth factors)."""
    if kind is Collective.SEND_RECV:
        return 1.0
    if kind is Collective.ALL_REDUCE:
        return 2.0 * (size - 1) / size
    return (size - 1) / size


def collective_time(kind: Collective, nbytes: float, size: int, stride: int, cluster: ClusterSpec,
                    multi_rail: bool = False) -> float:
    """`collective` over `size` ranks `stride` apart (a send/recv: the pair of ranks `stride` apart)."""
    pair = kind is Collective.SEND_RECV
    return collective(kind, nbytes, Group.line(max(size, 2) if pair else size, stride), cluster, multi_rail)


def collective(kind: Collective, nbytes: float, group: Group, cluster: ClusterSpec, multi_rail: bool = False) -> float:
    """Seconds for one collective over `nbytes` (the full buffer; the per-rank message for a send/recv, whose group
    is the pair); a group of one moves nothing. All-reduce, all-gather and reduce-scatter are priced as NCCL picks
    their algorithm and protocol (`nccl_choice`, cost_models/comm/nccl.py) on the group's placement and bottleneck link;
    all-to-all and send/recv by the α-β form of the module docstring. The one entry point of every layout's
    collectives (TP, CP, DP/ZeRO/FSDP, HSDP's replicas, EP, PP)."""
    size = group.size
    if nbytes <= 0 or size <= 1:
        return 0.0
    if kind in NCCL_KINDS:
        return nccl_choice(kind, nbytes, group, cluster, multi_rail).seconds
    if kind is Collective.ALL_TO_ALL:
        return all_to_all(nbytes, group, cluster)
    g = placement(group, cluster)  # a send/recv: the pair, the whole message over its one path
    return nccl.p2p_seconds(0.0 if g.crosses else nbytes, nbytes if g.crosses else 0.0, g, cluster,
                            cluster.scale_up.latency_us, cluster.scale_out.latency_us)


def placement(group: Group, cluster: ClusterSpec, multi_rail: bool = False) -> nccl.Placement:
    """The group as NCCL's tuning sees it: its ranks, members per scale-up domain, and the bus bandwidths inside a
    domain and (across domains) of the bottleneck link `link_of` gives."""
    link, crosses = link_of(cluster, group, multi_rail)
    local = max(1, group.per_domain(cluster))
    intra = intra_bus(cluster, group)  # a wired (switchless) domain: the rings among the members' links
    return nccl.Placement(group.size, local, intra, min(intra, link.bus_bytes_per_s) if crosses else 0.0,
                          multi_rail and local > 1)


def nccl_choice(kind: Collective, nbytes: float, group: Group, cluster: ClusterSpec,
                multi_rail: bool = False) -> nccl.Choice:
    """NCCL's algorithm, protocol and time for an all-reduce, all-gather or reduce-scatter on the group
    (cost_models/comm/nccl.py)."""
    return _nccl_choice(kind, nbytes, group, Same(cluster), multi_rail)


@lru_cache(maxsize=16384)
def _nccl_choice(kind: Collective, nbytes: float, group: Group, cluster: Same, multi_rail: bool) -> nccl.Choice:
    """`nccl_choice`, remembered (the cluster by identity, meshcore.memo): a pure function asked the same few hundred
    questions tens of thousands of times by one search (DeepSeek-V3 on 2,048 GPUs: 508 distinct of 21,989 calls)."""
    spec = cluster.value
    assert isinstance(spec, ClusterSpec)
    return nccl.choose(NCCL_KINDS[kind], nbytes, placement(group, spec, multi_rail), spec)


def p2p_time(nbytes: float, stride: int, cluster: ClusterSpec) -> float:
    """One pipeline send/recv between neighbouring stages `stride` GPUs apart."""
    return collective(Collective.SEND_RECV, nbytes, Group.line(2, stride), cluster)


def send_recv(nbytes: float, pair: Group, cluster: ClusterSpec) -> float:
    """One send/recv of `nbytes` between the two ranks of `pair` (`Mesh.neighbours`, `Mesh.pipeline_ends`)."""
    return collective(Collective.SEND_RECV, nbytes, pair, cluster)


def all_to_all_time(nbytes: float, size: int, stride: int, cluster: ClusterSpec) -> float:
    """`all_to_all` over `size` ranks `stride` apart."""
    return all_to_all(nbytes, Group.line(size, stride), cluster)


def all_to_all(nbytes: float, group: Group, cluster: ClusterSpec) -> float:
    """One all-to-all in which every rank sends `nbytes` in all, an equal share to each of the group's `size` ranks
    (expert-parallel token dispatch), as NCCL runs it: grouped send/recv to every peer at once
    (`nccl.p2p_seconds`): the (k − 1)/size share to the group's members in the same scale-up domain over NVLink
    (on a wired domain over the links of each pair, `rings.peer_bus`), the (size − k)/size share to the others
    through the rank's own NIC (rail-optimised fabrics), both at once; NCCL's base latency plus one latency of
    its tier per peer."""
    size = group.size
    if nbytes <= 0 or size <= 1:
        return 0.0
    k = max(1, group.per_domain(cluster))
    g = nccl.Placement(size, k, peer_bus(cluster, group), cluster.scale_out.bus_bytes_per_s if k < size else 0.0)
    return nccl.p2p_seconds(nbytes * (k - 1) / size, nbytes * (size - k) / size, g, cluster,
                            cluster.scale_up.latency_us, cluster.scale_out.latency_us)


def dedup_dispatch_time(token_bytes: float, copies: int, size: int, stride: int, cluster: ClusterSpec,
                        domain_limit: int = 0) -> float:
    """`dedup_dispatch` over `size` ranks `stride` apart."""
    return dedup_dispatch(token_bytes, copies, Group.line(size, stride), cluster, domain_limit)


def dedup_dispatch(token_bytes: float, copies: int, group: Group, cluster: ClusterSpec, domain_limit: int = 0) -> float:
    """One deduplicated dispatch (or combine) of `token_bytes` worth of tokens per rank, each routed to
    `copies` experts spread over the group's `size` ranks (DeepEP, DeepSeek-V3 section 3.2.2): a token crosses to
    every remote scale-up domain holding one of its experts once, through the rank's NIC, and is then delivered to
    the experts' GPUs over NVLink. With D domains in the group and uniform routing a token touches
    D·(1 − (1 − 1/D)^k) of them, at most `domain_limit` (node-limited routing; 0: none), (D − 1)/D of them
    remote; every copy not on the source GPU crosses NVLink once, (size − 1)/size of k."""
    size = group.size
    if token_bytes <= 0 or size <= 1:
        return 0.0
    local = group.per_domain(cluster)
    inside = token_bytes * copies * (size - 1) / size / cluster.scale_up.bus_bytes_per_s
    if local >= size:
        return cluster.scale_up.latency_us * 1e-6 * (size - 1) + inside
    domains = math.ceil(size / local)
    touched = domains * (1 - (1 - 1 / domains) ** copies)
    if domain_limit:
        touched = min(touched, domain_limit)
    outside = token_bytes * touched * (domains - 1) / domains / cluster.scale_out.bus_bytes_per_s
    return cluster.scale_out.latency_us * 1e-6 * (domains - 1 + local - 1) + max(inside, outside)
