"""Collectives as meshplan prices them against published nccl-tests figures (benchmarks/data/nccl/).

    python benchmarks/collectives.py

For every measured row: the collective, ranks, message size, the measured time and bus bandwidth, meshplan's
(cost_models.comm.collectives.collective: NCCL's algorithm and protocol choice of cost_models/comm/nccl.py, on the
profile the data
file names with its NIC rate and NVLS setting) and, beside it, the ring-only α-β price meshplan used before (every
step at the tier's latency, busbw = the bottleneck link). nccl-tests runs one communicator over all ranks, so rings
use every NIC of a node (multi-rail). Then the mean |error| in time per data file and size regime (under 1 MiB,
1-64 MiB, over 64 MiB). Nothing here is fitted: the profiles' bandwidth shares come from benchmarks/calibration.py.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cost_models.comm.collectives import NCCL_KINDS, Collective, bandwidth_factor, collective, link_of, nccl_choice  # noqa: E402
from hardware_profiles import HardwareOverrides, load_hardware  # noqa: E402
from meshcore import ClusterSpec  # noqa: E402
from meshcore.mesh import Group  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "nccl"
REGIMES = ((0, 2**20, "< 1 MiB"), (2**20, 2**26, "1-64 MiB"), (2**26, float("inf"), "> 64 MiB"))


@dataclass(frozen=True)
class Row:
    """One measured figure: a collective of `nbytes` over `ranks` ranks, `gpus_per_node` to a node."""

    file: str
    kind: Collective
    ranks: int
    nbytes: float
    time_us: float


def cluster_of(spec: dict[str, Any]) -> ClusterSpec:
    """The profile the data names, with its NIC rate and NVLS setting where the data gives them."""
    nic = spec.get("nic_gbps_per_gpu")
    cluster = load_hardware(spec["profile"], int(spec["ranks"]),
                            HardwareOverrides(gpus_per_node=int(spec["gpus_per_node"]),
                                              inter_node_gbps=float(nic) if nic else None))
    for key in ("nvls", "net_overhead_us"):
        if key in spec:
            cluster = replace(cluster, collectives=replace(cluster.collectives, **{key: spec[key]}))
    return cluster


def time_us(kind: Collective, nbytes: float, busbw_gbs: float, ranks: int) -> float:
    """nccl-tests' time from its bus bandwidth: t = S · factor / busbw."""
    return nbytes * bandwidth_factor(kind, ranks) / (busbw_gbs * 1e9) * 1e6


def predicted_us(row: Row, cluster: ClusterSpec) -> float:
    """NCCL's choice (cost_models/comm/nccl.py) for all-reduce, all-gather and reduce-scatter; send/recv as
    cost_models.comm.collectives prices it."""
    group = Group.line(row.ranks, 1)
    if row.kind in NCCL_KINDS:
        return nccl_choice(row.kind, row.nbytes, group, cluster, multi_rail=True).seconds * 1e6
    return collective(row.kind, row.nbytes, group, cluster, multi_rail=True) * 1e6


def ring_alpha_beta_us(row: Row, cluster: ClusterSpec) -> float:
    """The price before NCCL's choice was modelled: α per ring step (2(n−1) for all-reduce) at the latency of the
    slowest tier, bandwidth factor x S over the bottleneck link."""
    group = Group.line(row.ranks, 1)
    link, crosses = link_of(cluster, group, row.kind is not Collective.SEND_RECV)
    alpha = (cluster.scale_out if crosses else cluster.scale_up).latency_us
    steps = 1 if row.kind is Collective.SEND_RECV else (row.ranks - 1) * (2 if row.kind is Collective.ALL_REDUCE else 1)
    return alpha * steps + bandwidth_factor(row.kind, row.ranks) * row.nbytes / link.bus_bytes_per_s * 1e6


def load() -> list[tuple[Row, ClusterSpec]]:
    out: list[tuple[Row, ClusterSpec]] = []
    for path in sorted(DATA.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        specs = doc.get("points", [doc])
        for spec in specs:
            cluster = cluster_of(spec)
            kind, ranks = Collective(spec["collective"]), int(spec["ranks"])
            name = spec.get("name", path.stem)
            if "rows" in spec:
                out += [(Row(name, kind, ranks, float(b), float(t)), cluster) for b, t, _ in spec["rows"]]
            else:
                b = float(spec["bytes"])
                t = float(spec["time_us"]) if "time_us" in spec else time_us(kind, b, float(spec["busbw_gbs"]), ranks)
                out.append((Row(name, kind, ranks, b, t), cluster))
    return out


def choice(row: Row, cluster: ClusterSpec) -> str:
    if row.kind not in NCCL_KINDS:
        return "p2p"
    c = nccl_choice(row.kind, row.nbytes, Group.line(row.ranks, 1), cluster, multi_rail=True)
    return f"{c.algorithm.value}/{c.protocol.value}"


def main() -> int:
    rows = load()
    print(f"{'data':34} {'collective':14} {'n':>4} {'bytes':>12} {'meas us':>10} {'busbw':>7} "
          f"{'meshplan us':>11} {'busbw':>7} {'err':>7} {'algo':>14} {'ring a-b us':>11} {'err':>7}")
    errors: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row, cluster in rows:
        new, old = predicted_us(row, cluster), ring_alpha_beta_us(row, cluster)
        f = bandwidth_factor(row.kind, row.ranks)

        def bw(t: float, row: Row = row, f: float = f) -> float:
            return row.nbytes * f / (t * 1e-6) / 1e9

        e_new, e_old = new / row.time_us - 1, old / row.time_us - 1
        print(f"{row.file[:34]:34} {row.kind.value:14} {row.ranks:4d} {row.nbytes:12.0f} {row.time_us:10.1f} "
              f"{bw(row.time_us):7.1f} {new:11.1f} {bw(new):7.1f} {e_new:+7.1%} {choice(row, cluster):>14} "
              f"{old:11.1f} {e_old:+7.1%}")
        regime = next(name for lo, hi, name in REGIMES if lo <= row.nbytes < hi)
        errors.setdefault((row.file, regime), []).append((abs(e_new), abs(e_old)))
    print("\nmean |error| in time (meshplan's NCCL model / the ring-only alpha-beta form)")
    for (file, regime), errs in errors.items():
        new = statistics.fmean(e for e, _ in errs)
        old = statistics.fmean(e for _, e in errs)
        print(f"  {file[:34]:34} {regime:9} {len(errs):3d} rows  {new:7.1%} / {old:7.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
