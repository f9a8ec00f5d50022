"""The sequence-parallel attention of xDiT (USP: Ulysses x ring) as it runs, and its collectives on NVLink and on
PCIe-only machines.

What one attention layer runs on one rank (xfuser/model_executor/layers/usp.py, the path of xDiT's Flux and
SD3 pipelines without PipeFusion; yunchang's LongContextAttention with PipeFusion):
- Ulysses (degree u): four all-to-alls (Q, K, V in; the output back), each of the rank's (S/sp)·h·2 bytes,
  each between two layout copies (`permute(...).contiguous()` before, `reshape/permute` after): four HBM passes
  of the message beside the NCCL all-to-all.
- Ring (degree r): r fused-attention kernels, one per key block of S/r keys (their efficiency at that key length:
  cost_models.compute.kernels.attention_efficiency), and between them the merge of each block's output into an fp32
  accumulator (PyTorch's `_SDPAMerger` in torch.distributed.tensor.experimental._attention, which xDiT's USP calls
  through `_templated_ring_attention`: `out - sigmoid(block_lse - lse) * (out - block_out)`). Under torch.compile
  (xfuser's `--use_torch_compile`) the merge's element-wise ops fuse into one kernel per step that reads the fp32
  accumulator (4 bytes) and the block's bf16 output (2) and writes the accumulator (4): RING_MERGE_BYTES = 10 per
  output element and step (eager PyTorch runs them as four kernels, 38 bytes), plus RING_EDGE_BYTES = 6 to cast the
  result back to bf16. Every step but the last concatenates K and V into one send buffer (`torch.cat`: read and
  write 2 bytes each, 8 per element of the rank's K/V head share).
  The keys and values arrive by one all-gather of every rank's K and V (the default `_AllGatherRotater`), which
  runs beside the first block's attention and must be complete before the second: its excess over that block is
  exposed. With PipeFusion xDiT uses yunchang's ring instead: one send/recv of the K, V block per step, each
  beside that step's attention; before its USP path (2024-11) that was its only ring (DiffusionJob.send_recv_ring).
  Each ring step also runs RING_STEP_KERNELS dependent kernels in a row (the concatenation, the attention kernel
  and its log-sum-exp, the merge), each paying at least the GPU's launch-to-completion floor of an empty kernel
  (KERNEL_FLOOR_US, about 4 µs on current NVIDIA GPUs and drivers) before the next may start.
- The attention kernel itself is PyTorch's SDPA flash backend (FlashAttention-2): the default of
  F.scaled_dot_product_attention since PyTorch 2.5.1 made the cuDNN backend opt-in (pytorch/pytorch#138522), and
  what the ring calls explicitly (aten._scaled_dot_product_flash_attention). FlashAttention-2 does not use Hopper's
  asynchronous tensor-core instructions: on H100 it runs 329 TFLOP/s at Flux's shape (batch 1, 24 heads, 4608
  tokens, head dim 128, non-causal forward; tritonbench in pytorch/pytorch#142132, against 631 for cuDNN and
  FlashAttention-3), `sdpa_flash_rate` of the fused-attention rate the GPU profile describes; on Ampere and Ada
  the profiles already describe FlashAttention-2.

Collectives on PCIe-only nodes (L40, L40S, L4; `host.gpus_per_socket` in the profile): GPUs under one CPU socket
exchange data peer-to-peer through PCIe (the node's scale-up link in the profile); between sockets NCCL does not
use P2P across the CPU interconnect (its default P2P level stops at the PCIe host bridge) and copies through host
memory at `host.cross_socket_gbs`, which every group crossing the sockets at once shares.
"""

from __future__ import annotations

from cost_models.comm.collectives import Collective, all_to_all_time, collective_time, p2p_time
from cost_models.compute.kernels import attention_efficiency, memory_time
from meshcore import ClusterSpec, Dtype, GpuSpec

BYTES = 2.0
LAYOUT_COPY_PASSES = 4.0  # read + write of the message before and after each Ulysses all-to-all
RING_MERGE_BYTES = 10.0  # per output element and merged block, fused by torch.compile (module docstring)
RING_EDGE_BYTES = 6.0  # the fp32 result back to bf16: read 4, write 2
RING_CAT_BYTES = 8.0  # K and V into one send buffer: read 2 + write 2 bytes each, per element of one of them
RING_STEP_KERNELS = 4  # cat, attention, its log-sum-exp, the fused merge
KERNEL_FLOOR_US = 4.0  # launch-to-completion of an empty dependent kernel, µs
FA2_HOPPER_TFLOPS = 329.0  # SDPA flash backend on H100 at (1, 24, 4608, 128), non-causal forward (#142132)
FA2_REFERENCE_TOKENS = 4608


def sdpa_flash_rate(gpu: GpuSpec) -> float:
    """FlashAttention-2's rate over the profile's fused-attention rate: on Hopper the measured 329 TFLOP/s over what
    the profile gives at the same shape (capped at 1); elsewhere 1 (module docstring)."""
    if gpu.architecture != "hopper":
        return 1.0
    profile = gpu.peak(Dtype.BF16) * attention_efficiency(gpu, FA2_REFERENCE_TOKENS, 128)
    return min(1.0, FA2_HOPPER_TFLOPS * 1e12 / profile)


def sockets_spanned(cluster: ClusterSpec, size: int, stride: int) -> int:
    """CPU sockets a group of `size` ranks `stride` apart covers inside one node (1 where the profile has no socket
    split or the group stays under one socket)."""
    per = cluster.host.gpus_per_socket
    if not per or size <= 1:
        return 1
    first, last = 0, (size - 1) * stride
    if last >= cluster.gpus_per_node:
        return 1  # crosses nodes: the network tier decides
    return last // per - first // per + 1


def _cross_socket_time(nbytes_per_rank: float, size: int, stride: int, cluster: ClusterSpec) -> float:
    """Seconds for the share of an all-to-all or all-gather that crosses sockets: each rank sends the members on
    the other sockets their part of `nbytes_per_rank` (its whole buffer for an all-gather); the `stride`
    interleaved groups of that kind and the group's members on one socket share the host-memory path."""
    spans = sockets_spanned(cluster, size, stride)
    if spans <= 1:
        return 0.0
    remote = size - size // spans
    senders = min(cluster.host.gpus_per_socket, size * stride // spans)
    bw = cluster.host.cross_socket_gbs * 1e9
    return cluster.scale_up.latency_us * 1e-6 * remote + senders * nbytes_per_rank * remote / size / bw


def all_to_all(nbytes: float, size: int, stride: int, cluster: ClusterSpec) -> float:
    """One all-to-all of `nbytes` per rank: NCCL's (cost_models.comm.collectives) or, across sockets, the slower of
    that and
    the cross-socket share."""
    if size <= 1:
        return 0.0
    return max(all_to_all_time(nbytes, size, stride, cluster), _cross_socket_time(nbytes, size, stride, cluster))


def all_gather(nbytes: float, size: int, stride: int, cluster: ClusterSpec) -> float:
    """One all-gather of `nbytes` per rank (every rank receives the other size − 1 buffers)."""
    if size <= 1:
        return 0.0
    inside = collective_time(Collective.ALL_GATHER, nbytes * size, size, stride, cluster)
    return max(inside, _cross_socket_time(nbytes * size, size, stride, cluster))


def send_recv(nbytes: float, stride: int, cluster: ClusterSpec, ring: int = 2) -> float:
    """One step of a ring of `ring` ranks `stride` apart in which every rank sends `nbytes` to the next (PipeFusion's
    patches, yunchang's ring steps): the step waits for its slowest hop. A ring over both sockets of a PCIe node has
    one hop each way between them (the last rank's back to the first included), and the `stride` interleaved rings
    of that kind share the host-memory path: stride·nbytes per direction at `host.cross_socket_gbs`."""
    inside = p2p_time(nbytes, stride, cluster)
    if sockets_spanned(cluster, ring, stride) <= 1:
        return inside
    cross = cluster.scale_up.latency_us * 1e-6 + stride * nbytes / (cluster.host.cross_socket_gbs * 1e9)
    return max(inside, cross)


def ulysses_time(tokens: float, hidden: int, ulysses: int, cluster: ClusterSpec) -> float:
    """The four all-to-alls of one layer and their layout copies, for `tokens` tokens on the rank."""
    if ulysses <= 1:
        return 0.0
    message = tokens * hidden * BYTES
    copies = memory_time(LAYOUT_COPY_PASSES * message, cluster.gpu)
    return 4.0 * (copies + all_to_all(message, ulysses, 1, cluster))


def ring_overhead(tokens: float, hidden: int, layout_ulysses: int, ring: int, first_block_s: float,
                  step_s: float, p2p_ring: bool, cluster: ClusterSpec) -> float:
    """What the ring adds to one layer's attention beyond its r attention kernels: merges, K/V concatenations,
    the kernel floor of each step, and the exposed communication (module docstring). `tokens` on the rank, each
    with hidden/u channels of its heads after Ulysses; `first_block_s` the first block's attention (which hides
    the all-gather), `step_s` one block's (which hides a yunchang send)."""
    if ring <= 1:
        return 0.0
    gpu = cluster.gpu
    elems = tokens * hidden / layout_ulysses
    work = memory_time(elems * (RING_EDGE_BYTES + (ring - 1) * (RING_MERGE_BYTES + RING_CAT_BYTES)), gpu)
    floor = (ring - 1) * RING_STEP_KERNELS * KERNEL_FLOOR_US * 1e-6
    kv = 2.0 * elems * BYTES
    if p2p_ring:
        comm = (ring - 1) * gpu.exposed(send_recv(kv, layout_ulysses, cluster, ring), step_s)
    else:
        comm = gpu.exposed(all_gather(kv, ring, layout_ulysses, cluster), first_block_s)
    return work + floor + comm
