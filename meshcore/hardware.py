"""Where it is trained: one GPU's peaks and achievable shares, the links between GPUs, and the cluster."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from enum import Enum

from meshcore.checks import MAX_GPUS, finite, identifier, integer, real
from meshcore.enums import Dtype
from meshcore.errors import SpecError


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achievable fraction of peak as a function of work size (FLOPs per kernel).

    Points are (size, efficiency) with sizes strictly increasing and efficiencies non-decreasing in
    (0, 1]; between points the curve is linear in log(size), outside it is clamped.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise SpecError("efficiency curve needs at least one (size, efficiency) point")
        sizes = [p[0] for p in self.points]
        effs = [p[1] for p in self.points]
        if not all(finite(s) and finite(e) for s, e in self.points):
            raise SpecError(f"efficiency curve points must be finite numbers, got {list(self.points)}")
        if any(s <= 0 for s in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise SpecError(f"efficiency curve sizes must be positive and increasing, got {sizes}")
        if any(not 0 < e <= 1 for e in effs) or any(b < a for a, b in zip(effs, effs[1:], strict=False)):
            raise SpecError(f"efficiency curve values must be in (0, 1] and non-decreasing, got {effs}")

    def at(self, size: float) -> float:
        pts = self.points
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_right([p[0] for p in pts], size)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return y0 + w * (y1 - y0)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's peaks and the achievable shares of them (physical quantities, fitted per GPU generation by
    benchmarks/calibration.py; hardware_profiles/SCHEMA.md says what each one means)."""

    name: str
    memory_gib: float
    hbm_gbs: float  # HBM bandwidth, GB/s
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None  # None where the GPU has no fp8 tensor cores
    matmul_efficiency: EfficiencyCurve
    attention_efficiency: float  # fused attention forward, long causal sequences, head dim 128: share of bf16 peak
    memory_efficiency: float  # achievable fraction of HBM bandwidth for element-wise kernels
    overlap_efficiency: float  # 1 − the slowdown a collective causes the compute it overlaps
    architecture: str = "unknown"  # GPU generation (ampere, hopper, ...): selects the calibrated error band
    attention_half_seq: float = 1024.0  # key length at which fused attention reaches half its long-sequence rate
    attention_backward_ratio: float = 0.75  # fused attention backward rate / forward rate (FLOPs per second)
    fp8_matmul_ratio: float = 0.8  # fp8 GEMM share of fp8 peak / bf16 GEMM share of bf16 peak, same size
    # fp16 tensor peak with fp16 accumulation where it differs from peak_bf16_tflops (GeForce cards: twice it); what
    # multiplies so is the runtime's to say (Execution.head_fp16_accumulation)
    peak_fp16acc_tflops: float | None = None

    def __post_init__(self) -> None:
        identifier(self.name, "gpu.name", SpecError)

    def exposed(self, comm_s: float, compute_s: float) -> float:
        """Seconds a collective adds to the critical path when it runs beside `compute_s` of compute:
            exposed = max(comm − compute, 0) + κ · min(comm, compute),   κ = 1 − overlap_efficiency.
        What the compute cannot cover is exposed; while both run, the NCCL kernels take SMs and HBM bandwidth
        from the compute kernels and slow them by κ of the overlapped time (Rashidi et al. 2021, "Enabling
        compute-communication overlap in distributed deep learning training platforms"; Jangda et al. 2022).
        κ is fitted per GPU generation (benchmarks/calibration.py)."""
        kappa = 1.0 - self.overlap_efficiency
        return max(comm_s - compute_s, 0.0) + kappa * min(comm_s, compute_s)

    def peak(self, dtype: Dtype) -> float:
        """Dense peak in FLOP/s for `dtype`; fp8 falls back to bf16 where the GPU has no fp8 units."""
        if dtype is Dtype.FP8 and self.peak_fp8_tflops:
            return self.peak_fp8_tflops * 1e12
        return self.peak_bf16_tflops * 1e12

    def has_fp8(self, dtype: Dtype) -> bool:
        return dtype is Dtype.FP8 and bool(self.peak_fp8_tflops)


@dataclass(frozen=True)
class LinkSpec:
    """One network tier as seen by one GPU: per-direction bandwidth, latency, achievable fraction."""

    bandwidth_gbs: float  # GB/s per direction per GPU
    latency_us: float
    efficiency: float  # achieved bus bandwidth / line rate for large messages (nccl-tests)

    @property
    def bus_bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 * self.efficiency


class Fabric(str, Enum):
    """What carries a scale-up domain's GPU-to-GPU traffic; it selects NCCL's per-hop latencies (tuning.cc,
    hwLatencies NVLINK or PCI)."""

    NVLINK = "nvlink"  # NVLink / NVSwitch, xGMI
    PCIE = "pcie"  # peer-to-peer over PCIe (or through host memory)


@dataclass(frozen=True)
class CollectiveSpec:
    """Which of NCCL's collective algorithms and protocols a system has, and the bandwidths that are not the links'
    (cost_models/comm/nccl.py; hardware_profiles/SCHEMA.md, section `collectives`). NCCL's own rules,
    src/graph/tuning.cc
    (v2.23+): NVLS needs NVSwitch with SHARP (Hopper and later, NVSwitch 3); LL128 needs NVLink between the GPUs
    and, between nodes before Hopper, a NIC no further than a PCIe switch (not over PXN); PAT runs all-gather and
    reduce-scatter with one GPU per node; LL's bandwidth is capped per GPU generation (llMaxBws: Volta 39, Ampere
    87.7, Hopper 141, Blackwell 282 GB/s on one node; 20.4 across four nodes or more on Intel hosts); a ring step
    inside a node of a ring that leaves it costs at least the host's network-post overhead, 3x with Simple
    (getNetOverhead: 1 µs on Intel hosts, 2 on AMD)."""

    fabric: Fabric = Fabric.NVLINK
    nvls: bool = False  # NVLink SHARP all-reduce (multimem reductions in the switch)
    nvls_efficiency: float = 0.61  # NVLS all-reduce algorithm bandwidth / scale-up line rate per direction
    ll128: bool = True
    ll128_pxn: bool = False  # LL128 between nodes over PXN paths (multi-rail rings): Hopper and later only
    pat: bool = True
    tree: bool = True  # double binary trees for all-reduce
    ll_max_gbs: float = 87.7  # LL protocol's bus-bandwidth cap inside one node, GB/s
    ll_max_net_gbs: float = 20.4  # the same across nodes (llMaxBws: 20.4 on Intel hosts, 19.0 on AMD)
    net_overhead_us: float = 1.0  # host cost of posting one network send (getNetOverhead: Intel 1, AMD 2 µs)
    # a scale-up domain wired GPU to GPU rather than through a switch (DGX-1's hybrid cube mesh, 4-GPU SXM2 boards,
    # NVLink-bridged PCIe pairs): links[i][j] NVLinks between GPUs i and j of one domain (nvidia-smi topo -m's NV#),
    # each `link_gbs` per direction; empty: a switch gives every group the full scale_up_gbs (cost_models/comm/rings.py)
    links: tuple[tuple[int, ...], ...] = ()
    link_gbs: float = 0.0

    def __post_init__(self) -> None:
        real(self.nvls_efficiency, "collectives nvls_efficiency", 0.0, 2.0, error=SpecError)
        if self.links:
            n = len(self.links)
            if any(len(row) != n for row in self.links):
                lengths = [len(r) for r in self.links]
                raise SpecError(f"collectives links must be a square matrix, got rows of {lengths}")
            for i, row in enumerate(self.links):
                for j, count in enumerate(row):
                    integer(count, f"collectives links[{i}][{j}]", 0, 64, SpecError)
                    if count != self.links[j][i] or (i == j and count):
                        raise SpecError(f"collectives links must be symmetric with a zero diagonal; "
                                        f"links[{i}][{j}] = {count}, links[{j}][{i}] = {self.links[j][i]}")
            real(self.link_gbs, "collectives link_gbs", 0.0, 1e4, error=SpecError)
        real(self.ll_max_gbs, "collectives ll_max_gbs", 0.0, 1e5, error=SpecError)
        real(self.ll_max_net_gbs, "collectives ll_max_net_gbs", 0.0, 1e5, error=SpecError)
        real(self.net_overhead_us, "collectives net_overhead_us", 0.0, 1e3, low_open=False, error=SpecError)


@dataclass(frozen=True)
class HostSpec:
    """The host side of one node, as offloading sees it (ZeRO-Offload, ZeRO-Infinity, activation offloading):
    CPU memory and its bandwidth, the cores that drive it, and the PCIe links to the GPUs. The defaults describe a
    two-socket server (64 cores, 1 TiB of DDR4-3200 on 16 channels, each GPU on its own PCIe Gen4 x16)."""

    memory_gib: float = 1024.0  # host memory of the node, GiB
    memory_gbs: float = 400.0  # peak host memory bandwidth of the node, GB/s
    cores: int = 64  # CPU cores of the node
    pcie_gbs: float = 32.0  # one GPU's host link, GB/s per direction (PCIe Gen4 x16: 32, Gen5: 64)
    gpus_per_pcie_link: int = 1  # GPUs behind one PCIe switch that share one host uplink of pcie_gbs
    # PCIe-only nodes (no NVLink): GPUs under one CPU socket's root complex, and the GB/s per direction that GPU-to-GPU
    # traffic between two sockets gets (NCCL does not use P2P across the CPU interconnect and copies through host
    # memory); 0: the GPUs' traffic never crosses sockets (NVLink/NVSwitch nodes)
    gpus_per_socket: int = 0
    cross_socket_gbs: float = 0.0
    # CPU Adam (DeepSpeed's vectorised DeepSpeedCPUAdam): millions of parameters one core updates per second where a
    # measurement says so (cost_models/memory/offload.py); 0: bandwidth-bound only (CPU_ADAM_BYTES per parameter)
    adam_mparams_per_core: float = 0.0
    # NVMe (ZeRO-Infinity's third tier): the node's array read or write rate, GB/s (0: no NVMe for offloading), and
    # the capacity offloading may use, GiB
    nvme_gbs: float = 0.0
    nvme_gib: float = 0.0

    def __post_init__(self) -> None:
        for name in ("memory_gib", "memory_gbs", "pcie_gbs"):
            real(getattr(self, name), f"host {name}", 0.0, 1e7, error=SpecError)
        for name in ("nvme_gbs", "nvme_gib", "adam_mparams_per_core"):
            real(getattr(self, name), f"host {name}", 0.0, 1e9, low_open=False, error=SpecError)
        if bool(self.nvme_gbs) != bool(self.nvme_gib):
            raise SpecError("host nvme_gbs and nvme_gib come together (an NVMe tier has a rate and a capacity)")
        for name in ("cores", "gpus_per_pcie_link"):
            integer(getattr(self, name), f"host {name}", 1, MAX_GPUS, SpecError)
        integer(self.gpus_per_socket, "host gpus_per_socket", 0, MAX_GPUS, SpecError)
        real(self.cross_socket_gbs, "host cross_socket_gbs", 0.0, 1e7, low_open=False, error=SpecError)
        if self.gpus_per_socket and not self.cross_socket_gbs:
            raise SpecError("host gpus_per_socket needs cross_socket_gbs (GB/s between the sockets' GPUs)")


DEFAULT_HOST_OP_US = 20.0  # µs per operator where a profile does not say (the calibration prior)


@dataclass(frozen=True)
class ClusterSpec:
    """`num_gpus` GPUs in nodes of `gpus_per_node`; scale-up domains of `scale_up_size` GPUs
    (NVLink/NVSwitch, xGMI; 1 where GPUs only share PCIe) and a scale-out network (NICs)."""

    name: str
    gpu: GpuSpec
    num_gpus: int
    gpus_per_node: int
    scale_up_size: int
    scale_up: LinkSpec
    scale_out: LinkSpec
    # host seconds (µs) to issue one operator of the training framework's layer code (Python, dispatcher, launch):
    # a layer pass cannot run faster than the host issues its kernels (cost_models/compute/host.py)
    host_op_us: float = DEFAULT_HOST_OP_US
    host: HostSpec = HostSpec()
    collectives: CollectiveSpec = CollectiveSpec()  # NCCL's algorithms and protocols on this system
    # where fitted values came from: one line per calibrated fragment merged in (`meshplan calibrate`)
    provenance: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        identifier(self.name, "hardware profile name", SpecError)
        for name in ("num_gpus", "gpus_per_node", "scale_up_size"):
            integer(getattr(self, name), name, 1, MAX_GPUS, SpecError)
        real(self.host_op_us, "host_op_us", 0.0, 1e4, low_open=False, error=SpecError)
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise SpecError(
                f"{self.num_gpus} GPUs is not a whole number of {self.gpus_per_node}-GPU nodes"
            )
        links = len(self.collectives.links)
        if links and links != self.scale_up_size:
            raise SpecError(f"collectives links describe {links} GPUs, the scale-up domain has {self.scale_up_size}")
