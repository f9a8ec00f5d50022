"""Host offloading: what moves over PCIe, what the CPU computes, and what host memory holds.

Three choices (`Layout.offload`), each a published mechanism:
  optimizer    ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training"; Megatron-core
               --optimizer-cpu-offload): each GPU's shard of the fp32 master weights and Adam moments lives in host
               memory. After the last micro-batch's backward the GPU copies its gradient shard to the host (beside
               that backward, like the gradient reduction), the CPU runs Adam on it, and the updated bf16 weights come
               back before the next forward.
  params       ZeRO-Infinity's parameter offload (Rajbhandari et al. 2021): with ZeRO-3 each GPU's weight shard also
               lives on the host and is copied in layer by layer, prefetched during the previous layer's pass, for
               the forward, the backward and any recomputation; the layer's gradient shard goes back in its backward.
  activations  activation offloading (as in DeepSpeed's cpu_checkpointing and Megatron-core's fine-grained
               activation offloading): what a layer stores for its backward is copied to the host right after its
               forward and back during the backward of the layer above, so the GPU holds about two layers' worth.
A copy hides behind the pass it runs beside (copy engines, not SMs); what the pass cannot cover is exposed:
    exposed = max(0, bytes / PCIe − pass seconds)
PCIe: a GPU's link at PCIE_EFFICIENCY of its rate (pinned-memory copies reach about 26 of 32 GB/s on Gen4 x16,
CUDA's bandwidthTest), shared by the GPUs behind one switch uplink, which all copy at the same time in a data- or
pipeline-parallel step. CPU Adam is bandwidth-bound (DeepSpeed's vectorised CPU-Adam, Ren et al. section 5.1): it
streams CPU_ADAM_BYTES per parameter through host memory at the node's achievable bandwidth, the smaller of
HOST_MEMORY_EFFICIENCY of its peak and CORE_STREAM_GBS per core, shared by the node's GPUs.
"""

from __future__ import annotations

from cost_models.knobs import LayerTime
from planner.core import ClusterSpec

PCIE_EFFICIENCY = 0.8
HOST_MEMORY_EFFICIENCY = 0.6  # STREAM triad against the DDR peak of two-socket servers
CORE_STREAM_GBS = 10.0  # what one core draws streaming (single-thread STREAM on current x86 server cores)
# Adam on the host per parameter: read the bf16 gradient (2), read and write the fp32 master weight, first and second
# moments (3 x 8), write the bf16 weight the GPU copies back (2)
CPU_ADAM_BYTES = 28.0
# host memory per offloaded parameter: fp32 master weight, Adam's two moments, the fp32 gradient Adam reads
HOST_OPTIMIZER_BYTES = 16.0
HOST_WEIGHT_BYTES = 2.0  # the bf16 weights of parameter offload
HOST_MEMORY_USABLE = 0.9  # the rest is the operating system's, the data loader's and the pinned staging buffers'


def pcie_bytes_per_s(cluster: ClusterSpec) -> float:
    """One GPU's achievable host-copy rate per direction while all GPUs of its switch copy."""
    host = cluster.host
    return host.pcie_gbs * 1e9 * PCIE_EFFICIENCY / host.gpus_per_pcie_link


def pcie_time(nbytes: float, cluster: ClusterSpec) -> float:
    """Seconds to copy `nbytes` between one GPU and host memory (one direction)."""
    return nbytes / pcie_bytes_per_s(cluster)


def exposed_copy(nbytes: float, pass_s: float, cluster: ClusterSpec) -> float:
    """What a copy of `nbytes` beside a pass of `pass_s` seconds adds: max(0, copy − pass)."""
    return max(0.0, pcie_time(nbytes, cluster) - pass_s)


def host_bandwidth_per_gpu(cluster: ClusterSpec) -> float:
    """Host memory bytes per second one GPU's CPU-Adam gets: the node's achievable bandwidth, min(peak x
    HOST_MEMORY_EFFICIENCY, cores x CORE_STREAM_GBS), over the node's GPUs (their updates run at once)."""
    host = cluster.host
    node = min(host.memory_gbs * HOST_MEMORY_EFFICIENCY, host.cores * CORE_STREAM_GBS) * 1e9
    return node / min(cluster.gpus_per_node, cluster.num_gpus)


def cpu_adam_time(local_params: float, cluster: ClusterSpec) -> float:
    """Adam over one GPU's `local_params` on the host: CPU_ADAM_BYTES per parameter at its share of the bandwidth."""
    return local_params * CPU_ADAM_BYTES / host_bandwidth_per_gpu(cluster)


def offloaded_optimizer_step(local_params: float, weights_on_host: bool, cluster: ClusterSpec) -> float:
    """The step of an offloaded optimizer: CPU Adam, then the updated bf16 weights back to the GPU (2 bytes per
    parameter; with parameter offload they stay on the host, the next forward fetches them)."""
    back = 0.0 if weights_on_host else pcie_time(local_params * 2.0, cluster)
    return cpu_adam_time(local_params, cluster) + back


def host_capacity_bytes(cluster: ClusterSpec) -> float:
    """Host memory of one node offloading may use."""
    return cluster.host.memory_gib * 2**30 * HOST_MEMORY_USABLE


def layer_offload_exposed(time: LayerTime, weight_bytes: float, stored_bytes: float, cluster: ClusterSpec) -> float:
    """Exposed copy seconds of one layer and micro-batch: its `weight_bytes` shard in before the forward, the
    backward and a recomputation (the backward also sends its gradient shard out, the other direction); its
    `stored_bytes` of activations out beside the forward and in beside the backward. Copies in opposite
    directions run at once; in the same direction they queue."""
    if not weight_bytes and not stored_bytes:
        return 0.0
    fwd = max(pcie_time(weight_bytes, cluster), pcie_time(stored_bytes, cluster))
    exposed = max(0.0, fwd - time.forward) + exposed_copy(weight_bytes + stored_bytes, time.backward, cluster)
    if weight_bytes and time.recompute > 0:
        exposed += exposed_copy(weight_bytes, time.recompute, cluster)
    return exposed


def node_host_bytes(per_gpu: list[float], ranks_per_stage: int, gpus_per_node: int) -> float:
    """Host memory the busiest node needs, from each pipeline rank's per-GPU need: the GPUs are placed with the
    pipeline outermost, so a node holds gpus_per_node GPUs of one stage, or whole stages side by side."""
    if ranks_per_stage >= gpus_per_node:
        return gpus_per_node * max(per_gpu, default=0.0)
    per_node = gpus_per_node // ranks_per_stage
    return max((ranks_per_stage * sum(per_gpu[i:i + per_node]) for i in range(0, len(per_gpu), per_node)),
               default=0.0)
