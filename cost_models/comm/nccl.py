"""NCCL's choice of algorithm and protocol for one collective, and the time it takes.

NCCL prices every (algorithm, protocol) pair of a collective with a latency and a bandwidth and runs the cheapest
(src/graph/tuning.cc, ncclTopoTuneModel and ncclTopoGetAlgoTime, NCCL 2.23-2.27):

    t(a, p) = L(a, p) + S / algbw(a, p)           S: the whole buffer (all-gather, reduce-scatter: n x one rank's)

This module keeps that structure and NCCL's own latency constants (µs, per algorithm and protocol, per hop on
NVLink, PCIe or the network) and takes the bandwidths from the hardware profile: B_up, the scale-up tier's
achieved bus bandwidth, and, for a group that spans scale-up domains, B_x = min(B_up, r · B_nic) with r the NICs
the group's members in one domain drive together (all of them with NCCL's PXN / multi-rail rings, else their own
one: cost_models.comm.collectives.link_of). Algorithms (`Algorithm`):
- RING: busbw B (Simple), 0.92 B (LL128), min(LL cap, B/2) (LL); algbw = busbw / f, f = 2(n-1)/n for all-reduce,
  (n-1)/n for all-gather and reduce-scatter. Latency base + Σ per-hop latency over its 2(n-1) or n-1 steps, the
  hops between domains at the network's latency.
- TREE (all-reduce): double binary trees; algbw 0.46 B_x over more than two domains (each node sends 2S: the same
  as a ring), 0.92 min(B_x, B_up/2) over two (each node sends S once), 0.46 B_up inside one; latency
  base + 2((k-1) intra + log2(D) inter), D domains, k ranks in each: it grows as log D, the ring as n.
- NVLS (all-reduce inside one NVSwitch domain with SHARP): algbw nvls_efficiency x line rate, latency 25 µs;
  NVLS_TREE across domains: min(NVLS, tree between domains), latency 25 µs + 2 log2(D) x 20.9 µs.
- PAT (all-gather, reduce-scatter, one rank per domain; NCCL 2.23): algbw 0.75 B_x on the full buffer, latency
  8 µs + log2(D) x 14/3.5 µs + 2.8 µs x n (NCCL's model keeps a linear term).
A protocol is left out where the system lacks it (`CollectiveSpec`: LL128 needs NVLink; NVLS, PAT and trees where
the profile says). NCCL's per-channel caps and thread counts are folded into B (fitted per GPU generation by
benchmarks/calibration.py from the measured step times); benchmarks/collectives.py checks the result against
published nccl-tests figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from meshcore import ClusterSpec, Fabric


class Kind(str, Enum):
    """The collectives NCCL prices by algorithm (send/recv and all-to-all are peer-to-peer:
    cost_models.comm.collectives)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"


class Algorithm(str, Enum):
    RING = "ring"
    TREE = "tree"
    NVLS = "nvls"
    NVLS_TREE = "nvls_tree"
    PAT = "pat"


class Protocol(str, Enum):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


_P = (Protocol.LL, Protocol.LL128, Protocol.SIMPLE)
# NCCL tuning.cc ncclTunerConstantsDefaults, µs, (LL, LL128, Simple): baseLatencies and hwLatencies per hop
BASE_US = {Algorithm.TREE: (6.8, 14.0, 8.4), Algorithm.RING: (6.6, 14.0, 8.4), Algorithm.NVLS: (0.0, 0.0, 0.0),
           Algorithm.NVLS_TREE: (0.0, 0.0, 0.0), Algorithm.PAT: (8.0, 8.0, 8.0)}
HOP_US = {
    "nvlink": {Algorithm.TREE: (0.6, 1.25, 4.0), Algorithm.RING: (0.6, 1.9, 3.4), Algorithm.NVLS: (0.0, 0.0, 25.0),
               Algorithm.NVLS_TREE: (0.0, 0.0, 25.0), Algorithm.PAT: (0.0, 0.0, 4.0)},
    "pcie": {Algorithm.TREE: (1.0, 1.9, 4.0), Algorithm.RING: (1.0, 2.5, 5.7), Algorithm.NVLS: (0.0, 0.0, 0.0),
             Algorithm.NVLS_TREE: (0.0, 0.0, 0.0), Algorithm.PAT: (0.0, 0.0, 4.0)},
    "net": {Algorithm.TREE: (5.0, 8.5, 14.0), Algorithm.RING: (2.7, 4.0, 14.0), Algorithm.NVLS: (0.0, 0.0, 18.0),
            Algorithm.NVLS_TREE: (0.0, 0.0, 20.9), Algorithm.PAT: (0.0, 0.0, 14.0)},
}
RING_PLATEAU = 1.4  # tuning.cc: Simple ring all-reduce latency across nodes, x1.4 from Ampere on (x1.9 before)
# tuning.cc treeCorrectionFactor: tree all-reduce bandwidth by log2(bytes / 64), 64 B .. 256 MB
TREE_CORRECTION = {
    Protocol.LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    Protocol.LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    Protocol.SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
}


@dataclass(frozen=True)
class Placement:
    """A group as NCCL sees it: `ranks` members, `per_domain` of them in each scale-up domain it touches
    (`domains` = ranks / per_domain), and the achieved bus bandwidths (bytes/s) inside a domain (`intra`) and per
    member between domains (`inter`, the NICs its members drive; 0 inside one domain); `pxn`: its members in a
    domain reach the NICs of other rails over NVLink (multi-rail rings, PXN)."""

    ranks: int
    per_domain: int
    intra: float
    inter: float
    pxn: bool = False

    @property
    def domains(self) -> int:
        return max(1, math.ceil(self.ranks / max(self.per_domain, 1)))

    @property
    def crosses(self) -> bool:
        return self.domains > 1


@dataclass(frozen=True)
class Choice:
    """NCCL's pick for one collective: algorithm, protocol, its latency (s), algorithm bandwidth (bytes of
    buffer per second) and time (s)."""

    algorithm: Algorithm
    protocol: Protocol
    latency_s: float
    algbw: float
    seconds: float


def bus_factor(kind: Kind, n: int) -> float:
    """nccl-tests doc/PERFORMANCE.md: busbw = algbw x 2(n-1)/n (all-reduce), x (n-1)/n (all-gather,
    reduce-scatter)."""
    return (2.0 if kind is Kind.ALL_REDUCE else 1.0) * (n - 1) / n


def _hop(fabric: Fabric, algo: Algorithm, p: Protocol) -> float:
    return HOP_US["nvlink" if fabric is Fabric.NVLINK else "pcie"][algo][_P.index(p)]


def _net(algo: Algorithm, p: Protocol) -> float:
    return HOP_US["net"][algo][_P.index(p)]


def latency_us(kind: Kind, algo: Algorithm, p: Protocol, g: Placement, fabric: Fabric,
               net_overhead: float = 1.0) -> float:
    """NCCL's latency of (algorithm, protocol) on the group (tuning.cc, the `latencies` table): a base plus
    per-hop terms; with one rank per domain the network hop is the tree's (latencies are fully exposed); a ring
    step inside a domain of a ring that leaves it costs at least the host's `net_overhead` (µs, x3 with Simple)."""
    n, d, k = g.ranks, g.domains, g.per_domain
    base = BASE_US[algo][_P.index(p)]
    intra = _hop(fabric, algo, p)
    inter = _net(Algorithm.TREE if k == 1 else algo, p)
    log_d = math.floor(math.log2(d)) if d > 1 else 0
    if algo is Algorithm.RING:
        steps = (2 if kind is Kind.ALL_REDUCE else 1) * (n - 1)
        hops_out = (2 if kind is Kind.ALL_REDUCE else 1) * (d - 1)
        if d > 1:
            intra = max(intra, net_overhead * (3 if p is Protocol.SIMPLE else 1))
        return base + (steps - hops_out) * intra + hops_out * inter
    if algo is Algorithm.TREE:
        return base + 2 * ((k - 1) * intra + log_d * inter)
    if algo is Algorithm.NVLS:
        return intra + (inter if d > 1 else 0.0)
    if algo is Algorithm.NVLS_TREE:
        return base + intra + 2 * log_d * _net(algo, p)
    return base + log_d * inter / 3.5 + n * 2.8  # PAT


def _ll_cap(cluster: ClusterSpec, g: Placement) -> float:
    spec = cluster.collectives
    return (spec.ll_max_net_gbs if g.crosses else spec.ll_max_gbs) * 1e9


def algbw(kind: Kind, algo: Algorithm, p: Protocol, nbytes: float, g: Placement, cluster: ClusterSpec) -> float:
    """Algorithm bandwidth (bytes of buffer per second) of (algorithm, protocol), NCCL's refinements of tuning.cc
    applied to the profile's bus bandwidths (module docstring); 0 where NCCL does not run it."""
    n, d = g.ranks, g.domains
    bus = min(g.intra, g.inter) if g.crosses else g.intra
    if algo is Algorithm.RING:
        if p is Protocol.LL:
            bus = min(_ll_cap(cluster, g), 0.5 * bus)
        elif p is Protocol.LL128:
            bus *= 0.92
        return bus / bus_factor(kind, n)
    if algo is Algorithm.TREE:
        if d == 2:
            bw = 0.92 * min(bus, 0.5 * g.intra)
        else:
            bw = 0.46 * bus
        if p is Protocol.LL:
            bw = min(bw / 3.8, _ll_cap(cluster, g))
        elif p is Protocol.LL128:
            bw *= 7 / 9 if d == 1 else 120 / 128
        log_size = int(math.log2(max(nbytes, 64) / 64))
        if log_size < len(TREE_CORRECTION[p]):
            bw *= TREE_CORRECTION[p][log_size]
        return bw
    nvls = cluster.collectives.nvls_efficiency * cluster.scale_up.bandwidth_gbs * 1e9
    if algo is Algorithm.NVLS:
        return nvls
    if algo is Algorithm.NVLS_TREE:
        return min(nvls, 0.92 * bus * (1.0 if d == 2 else 0.5))
    return 0.75 * bus  # PAT, on the whole buffer


def candidates(kind: Kind, g: Placement, cluster: ClusterSpec) -> tuple[tuple[Algorithm, Protocol], ...]:
    """The (algorithm, protocol) pairs NCCL considers for `kind` on this group and system (tuning.cc: trees and
    NVLS for all-reduce only, NVLS_TREE only across domains and NVLS only inside one, PAT for all-gather and
    reduce-scatter with one rank per domain, NVLS and PAT with Simple only; LL128 where the profile has it, and
    between domains over PXN paths only where the profile allows it: "Don't enable LL128 over PxN" before Hopper)."""
    spec = cluster.collectives
    ll128 = spec.ll128 and spec.fabric is Fabric.NVLINK and (spec.ll128_pxn or not (g.crosses and g.pxn))
    protos = tuple(p for p in _P if p is not Protocol.LL128 or ll128)
    out = [(Algorithm.RING, p) for p in protos]
    if kind is Kind.ALL_REDUCE:
        if spec.tree:
            out += [(Algorithm.TREE, p) for p in protos]
        if spec.nvls and g.per_domain > 1:
            out.append((Algorithm.NVLS_TREE if g.crosses else Algorithm.NVLS, Protocol.SIMPLE))
    elif spec.pat and g.crosses and g.per_domain == 1:
        out.append((Algorithm.PAT, Protocol.SIMPLE))
    return tuple(out)


def choose(kind: Kind, nbytes: float, g: Placement, cluster: ClusterSpec) -> Choice:
    """The pair NCCL runs: least latency + nbytes / algbw over `candidates` (ncclTopoGetAlgoTime, one
    operation)."""
    best: Choice | None = None
    for algo, p in candidates(kind, g, cluster):
        bw = algbw(kind, algo, p, nbytes, g, cluster)
        if bw <= 0:
            continue
        spec = cluster.collectives
        lat = latency_us(kind, algo, p, g, spec.fabric, spec.net_overhead_us) * 1e-6
        if algo is Algorithm.RING and p is Protocol.SIMPLE and kind is Kind.ALL_REDUCE and g.crosses:
            lat *= RING_PLATEAU  # ncclTopoGetAlgoTime: "plateau effect of ring" across nodes
        t = lat + nbytes / bw
        if best is None or t < best.seconds:
            best = Choice(algo, p, lat, bw, t)
    assert best is not None  # the ring with Simple is always a candidate
    return best


def seconds(kind: Kind, nbytes: float, g: Placement, cluster: ClusterSpec) -> float:
    """Seconds of one `kind` over `nbytes` (the whole buffer) on the group: NCCL's pick (`choose`)."""
    if nbytes <= 0 or g.ranks <= 1:
        return 0.0
    return choose(kind, nbytes, g, cluster).seconds


P2P_LL_MAX_BYTES = 16384  # NCCL_P2P_LL_THRESHOLD's default: point-to-point messages up to 16 KiB go with LL


def p2p_seconds(inside: float, outside: float, g: Placement, cluster: ClusterSpec, hop_up_us: float,
                hop_out_us: float) -> float:
    """Grouped point-to-point operations as NCCL runs send/recv and all-to-all (ncclGroupStart, one ncclSend and
    ncclRecv per peer, ncclGroupEnd): `inside` bytes to the g.per_domain − 1 peers in the rank's scale-up domain
    and `outside` bytes to the g.ranks − g.per_domain others, all at once:

        t = base(p) + (k − 1) · hop_up + (n − k) · hop_out + max(inside / B_in(p), outside / B_out(p))

    base(p): NCCL's base latency of the protocol (tuning.cc, ring row: the kernel and its proxy), p LL where one
    peer's message is at most P2P_LL_MAX_BYTES and Simple above; hop_up / hop_out: the tiers' per-message latency
    (the profile's scale_up_latency_us / latency_us: what `meshplan profile network` measures), one per peer;
    B_in = g.intra, B_out = g.inter, the achieved bus bandwidths (LL: half of them, at most its cap, as for rings).
    A send/recv is the group of its two ranks with the whole message inside or outside. nccl-tests' sendrecv_perf
    reports busbw = algbw for it, alltoall_perf busbw = algbw · (n − 1)/n."""
    k, n = g.per_domain, g.ranks
    peers_in, peers_out = max(k - 1, 0), max(n - k, 0)
    biggest = max(inside / peers_in if peers_in else 0.0, outside / peers_out if peers_out else 0.0)
    if biggest <= 0:
        return 0.0
    p = Protocol.LL if biggest <= P2P_LL_MAX_BYTES else Protocol.SIMPLE
    spec = cluster.collectives

    def rate(bus: float, cap_gbs: float) -> float:
        return min(cap_gbs * 1e9, 0.5 * bus) if p is Protocol.LL else bus

    latency = BASE_US[Algorithm.RING][_P.index(p)] + peers_in * hop_up_us + peers_out * hop_out_us
    t_in = inside / rate(g.intra, spec.ll_max_gbs) if inside > 0 else 0.0
    t_out = outside / rate(g.inter, spec.ll_max_net_gbs) if outside > 0 else 0.0
    return latency * 1e-6 + max(t_in, t_out)
