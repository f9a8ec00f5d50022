"""NCCL's rings over a scale-up domain wired GPU to GPU (no switch): the bus bandwidth one group gets there.

Behind an NVSwitch every GPU reaches every other at its full NVLink rate, so any group inside the domain runs at
scale_up_gbs. A domain wired point to point is different: on the DGX-1 with V100 (the "hybrid cube mesh": six
NVLink 2 links per GPU, one or two to each of four peers, nvidia-smi topo -m printed in Oneflow-Inc/DLPerf's
Megatron-LM README) or a 4-GPU SXM2 board (two links to each of three peers, NVIDIA/nccl-tests#68) a group
has only the links between its own members. NCCL builds each channel as a ring that leaves and enters every
member once over NVLink (src/graph/search.cc; it does not forward through GPUs outside the group over NVLink)
and runs each ring at one link's rate, so

    busbw = R · link_gbs · scale_up_efficiency      (capped at scale_up_gbs · scale_up_efficiency)

with R the most rings the members' links carry at once: for two GPUs the links between them (a ring 0→1→0 uses
each link both ways); for three or more, twice the most link-disjoint Hamiltonian cycles (each cycle is run in
both directions), found here by exhaustive search (a domain holds at most a few GPUs: (n-1)!/2 cycles). On the
DGX-1 that gives a Megatron TP pair (GPUs 0, 1: one link) 25 GB/s, a quad (0-3) 100 GB/s and all eight
150 GB/s, where a flat model gives every group 150. Members with no NVLink ring between them fall back to
PCIe through the host (`host.pcie_gbs` shared by `gpus_per_pcie_link`). A group has one instance per block of
the domain; every collective waits for all of them, so the slowest instance sets the pace.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

from meshcore import ClusterSpec
from meshcore.mesh import Group

Links = tuple[tuple[int, ...], ...]


def _cycles(members: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """Every undirected Hamiltonian cycle through `members` (n >= 3) as its sorted edges, each cycle once."""
    first, rest = members[0], members[1:]
    out = []
    for order in itertools.permutations(rest):
        if order[0] > order[-1]:  # the same cycle walked backwards
            continue
        ring = (first, *order)
        pairs = ((ring[i], ring[(i + 1) % len(ring)]) for i in range(len(ring)))
        out.append(tuple(sorted((min(a, b), max(a, b)) for a, b in pairs)))
    return out


@lru_cache(maxsize=1024)
def ring_count(links: Links, members: tuple[int, ...]) -> int:
    """R of the module docstring: the rings NCCL can run at once over the NVLinks among `members` (GPU indices
    into `links`, the domain's link-count matrix)."""
    if len(members) < 2:
        return 0
    if len(members) == 2:
        return links[members[0]][members[1]]
    cycles = [c for c in _cycles(members) if all(links[a][b] for a, b in c)]
    bound = min(sum(links[m][o] for o in members if o != m) for m in members) // 2

    def pack(residual: dict[tuple[int, int], int], start: int, depth: int) -> int:
        if depth == bound:
            return depth
        best = depth
        for i in range(start, len(cycles)):
            if all(residual[e] for e in cycles[i]):
                for e in cycles[i]:
                    residual[e] -= 1
                best = max(best, pack(residual, i, depth + 1))
                for e in cycles[i]:
                    residual[e] += 1
                if best == bound:
                    break
        return best

    capacity = {(a, b): links[a][b] for a in members for b in members if a < b}
    return 2 * pack(capacity, 0, 0)


def _instances(group: Group, domain: int) -> list[tuple[int, ...]]:
    """The members, as GPU indices inside their domain, of every instance of `group` that starts in the first
    domain (a rank starts an instance when its coordinate along every run of the group is 0)."""
    out = []
    for first in range(domain):
        if all((first // stride) % degree == 0 for degree, stride in group.runs):
            local = tuple(m for m in group.members(first) if m < domain)
            if len(local) > 1:
                out.append(local)
    return out


def intra_bus(cluster: ClusterSpec, group: Group) -> float:
    """Achieved bus bandwidth (bytes/s) of `group`'s traffic inside one scale-up domain: the scale-up link's on a
    switched domain, the slowest instance's rings (module docstring) on a wired one."""
    link = cluster.scale_up
    spec = cluster.collectives
    if not spec.links or group.size <= 1:
        return link.bus_bytes_per_s
    instances = _instances(group, cluster.scale_up_size)
    if not instances:
        return link.bus_bytes_per_s
    rings = min(ring_count(spec.links, members) for members in instances)
    if rings == 0:
        host = cluster.host
        return host.pcie_gbs * 1e9 * link.efficiency / max(host.gpus_per_pcie_link, 1)
    return min(rings * spec.link_gbs, link.bandwidth_gbs) * 1e9 * link.efficiency


def peer_bus(cluster: ClusterSpec, group: Group) -> float:
    """Achieved bandwidth (bytes/s) of an all-to-all's traffic inside one scale-up domain, as the bus of its inside
    share S · (k − 1)/n: every member sends S/n to each of its k − 1 domain peers at once, each over the links
    between the two (no rings: NCCL's point-to-point goes straight to the peer), so the pair with the fewest links
    sets the pace, B = (k − 1) · min over pairs of links · link_gbs (PCIe through the host where a pair has none),
    at most the GPU's own scale_up_gbs; a switched domain's scale-up bus."""
    link = cluster.scale_up
    spec = cluster.collectives
    instances = _instances(group, cluster.scale_up_size) if spec.links else []
    if not instances:
        return link.bus_bytes_per_s
    host = cluster.host
    pcie = host.pcie_gbs / max(host.gpus_per_pcie_link, 1)
    slowest = min(spec.links[a][b] * spec.link_gbs or pcie for members in instances
                  for i, a in enumerate(members) for b in members[i + 1:])
    peers = max(len(members) for members in instances) - 1
    return min(peers * slowest, link.bandwidth_gbs) * 1e9 * link.efficiency
