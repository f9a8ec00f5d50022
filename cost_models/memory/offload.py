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
  activations  activation offloading (Megatron-core's fine-grained activation offloading; DeepSpeed's
               cpu_checkpointing for the checkpoints of fully recomputed layers): what a layer stores for its
               backward is copied to the host right after its forward and back during the backward of the layer
               above, so the GPU holds about two layers' worth. DeepSpeed copies them synchronously to pageable
               memory instead (`checkpoint_copy_time`, `HostCopies.checkpoints_sync`).
A copy hides behind the pass it runs beside (copy engines, not SMs); what the pass cannot cover is exposed:
    exposed = max(0, bytes / PCIe − pass seconds)
unless the host memory is pageable (`Runtime.pinned_offload` off: DeepSpeed's offload_optimizer.pin_memory, false by
default before 0.19.5): then the driver stages every copy through its own small
pinned buffer and the call returns only when the copy is done, so the host issues no more of the pass meanwhile and
the copy is exposed in full, at `pageable_bytes_per_s` (benchmarks/data/offload/pageable_copies.yaml); or unless the
copy queues on the compute stream (`HostCopies`).
PCIe: a GPU's link at PCIE_EFFICIENCY of its rate (pinned-memory copies reach about 26 of 32 GB/s on Gen4 x16,
CUDA's bandwidthTest), shared by the GPUs behind one switch uplink, which all copy at the same time in a data- or
pipeline-parallel step. CPU Adam (DeepSpeed's vectorised CPU-Adam, Ren et al. section 5.1) streams CPU_ADAM_BYTES per
parameter through host memory at the node's achievable bandwidth, the smaller of HOST_MEMORY_EFFICIENCY of its peak
and CORE_STREAM_GBS per core, shared by the node's GPUs, and updates at most `adam_mparams_per_core` parameters per
core and second: the host profile's measured rate, else DEEPSPEED_ADAM_MPARAMS_PER_CORE, the one DeepSpeed published
(its ZeRO-Offload tutorial's log), which on every host profiled binds before the bandwidth does. Before Adam the host
makes one more pass over the fp32 gradients (CPU_GRAD_PASS_BYTES: DeepSpeed's unscale_and_clip_grads).
Two more forms:
  gradients    ZeRO-Offload's gradient offload (DeepSpeed's offload_optimizer, stages 1-3): every backward sends each
               layer's gradients to the host as its reduce bucket fills (grad bytes per trained parameter of the
               shard, the other PCIe direction than the weights and activations coming in); the GPU keeps
               GRADIENT_BUCKETS buckets of GRADIENT_BUCKET_ELEMENTS. DeepSpeed accumulates them on the GPU: from a
               step's second micro-batch on, each layer's gradients so far come back from the host (the weights'
               direction), are added to the new ones and go out again (stage3.py `partition_grads`,
               stage_1_and_2.py `async_accumulate_grad_in_cpu_via_gpu`).
  nvme         ZeRO-Infinity's NVMe tier: the fp32 master weights and Adam moments (and, with parameter offload,
               the 16-bit weights) live on the node's NVMe array; host memory keeps the fp32 gradients and staging
               buffers. The step swaps each state in and out (NVME_ADAM_BYTES per parameter) beside CPU Adam, which
               DeepSpeed pipelines (its optimizer swapper), so the step takes the longer of the two; weights streamed
               from NVMe arrive at the lesser of the array's and the PCIe rate. The array runs at NVME_EFFICIENCY of
               its rate, shared by the node's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.compute.knobs import LayerTime
from meshcore import ClusterSpec, JobSpec, Layout, Offload

PCIE_EFFICIENCY = 0.8
HOST_MEMORY_EFFICIENCY = 0.6  # STREAM triad against the DDR peak of two-socket servers
CORE_STREAM_GBS = 10.0  # what one core draws streaming (single-thread STREAM on current x86 server cores)
# DeepSpeedCPUAdam's rate where a host profile measures none, millions of parameters per core and second: DeepSpeed's
# ZeRO-Offload tutorial (docs/_tutorials/zero-offload.md, its log docs/assets/images/zero_offload_dp1_10B_log.png)
# trains the 10B GPT-2 (50 x 4096, 10.3B parameters) on one V100 of a DGX-2 (2 x 24-core Xeon Platinum 8168) and
# logs optimizer_step 6,479 and 6,217 ms: 10.3e9 / 6.35 s / 48 cores = 33.8. A third of what the DGX-2's memory
# bandwidth allows (CPU_ADAM_BYTES at 0.6 x 256 GB/s: 5.5e9 parameters/s against the 1.6e9 measured)
DEEPSPEED_ADAM_MPARAMS_PER_CORE = 33.8
# the host's pass over the fp32 gradients before Adam (DeepSpeed's unscale_and_clip_grads: read and write them; the
# tutorial logs it as optimizer_gradients, 1,113 and 1,160 ms for the 10B model)
CPU_GRAD_PASS_BYTES = 8.0
# Adam on the host per parameter: read the bf16 gradient (2), read and write the fp32 master weight, first and second
# moments (3 x 8), write the bf16 weight the GPU copies back (2)
CPU_ADAM_BYTES = 28.0
# host memory per offloaded parameter: fp32 master weight, Adam's two moments, the fp32 gradient Adam reads
HOST_OPTIMIZER_BYTES = 16.0
HOST_WEIGHT_BYTES = 2.0  # the bf16 weights of parameter offload
HOST_MEMORY_USABLE = 0.9  # the rest is the operating system's, the data loader's and the pinned staging buffers'
HOST_GRADIENT_BYTES = 4.0  # with the state on NVMe, host memory keeps the fp32 gradient Adam reads
NVME_STATE_BYTES = 12.0  # on NVMe: fp32 master weight and Adam's two moments
NVME_ADAM_BYTES = 2 * NVME_STATE_BYTES  # each step reads them in and writes them back
NVME_EFFICIENCY = 0.8  # of the array's sequential rate with DeepSpeed's aio (large blocks, queue depth 8+)
GRADIENT_BUCKET_ELEMENTS = 200_000_000  # the reduce bucket written to DeepSpeed's config (reduce_bucket_size)
GRADIENT_BUCKETS = 2  # one filling, one on its way to the host


def pcie_bytes_per_s(cluster: ClusterSpec) -> float:
    """One GPU's achievable host-copy rate per direction while all GPUs of its switch copy."""
    host = cluster.host
    return host.pcie_gbs * 1e9 * PCIE_EFFICIENCY / min(host.gpus_per_pcie_link, cluster.num_gpus)


def pcie_time(nbytes: float, cluster: ClusterSpec) -> float:
    """Seconds to copy `nbytes` between one GPU and host memory (one direction)."""
    return nbytes / pcie_bytes_per_s(cluster)


def pageable_bytes_per_s(cluster: ClusterSpec) -> float:
    """One GPU's rate copying to or from pageable host memory: the CUDA driver moves each chunk between the pageable
    pages and its small pinned staging buffer with one host thread, and by DMA between that buffer and the GPU, in
    turn (CUDA Runtime API, "API synchronization behavior": a device-to-pageable copy returns once it has completed,
    a pageable-to-device copy once the data is staged; the staging buffer is a few MB, fixed by the driver). The
    thread's memcpy reads and writes each byte, CORE_STREAM_GBS / 2 of payload; with the PCIe share:
        rate = 1 / (1 / pcie_bytes_per_s + 2 / CORE_STREAM_GBS)
    DeepSpeed PR #8207 (pin_memory made the default, ZeRO-3's gradient offload made asynchronous) measured this
    path's cost: backward 1,810 -> 1,308 ms (Qwen2.5-1.5B) and 3,097 -> 2,540 ms (Qwen2.5-3B) on 4 x RTX 4080 SUPER
    (benchmarks/data/offload/pageable_copies.yaml). Checked against DeepSpeed PR #5301, which pinned ZeRO-Offload's
    weight copy: 6x faster on one GPU, 4-5x on an 8-GPU node; this rate gives 6.1x and 3.6x on an A100 node."""
    return 1.0 / (1.0 / pcie_bytes_per_s(cluster) + 2.0 / (CORE_STREAM_GBS * 1e9))


def exposed_copy(nbytes: float, pass_s: float, cluster: ClusterSpec) -> float:
    """What a copy of `nbytes` beside a pass of `pass_s` seconds adds: max(0, copy − pass)."""
    return max(0.0, pcie_time(nbytes, cluster) - pass_s)


def host_bandwidth_per_gpu(cluster: ClusterSpec) -> float:
    """Host memory bytes per second one GPU's CPU-Adam gets: the node's achievable bandwidth, min(peak x
    HOST_MEMORY_EFFICIENCY, cores x CORE_STREAM_GBS), over the node's GPUs (their updates run at once)."""
    host = cluster.host
    node = min(host.memory_gbs * HOST_MEMORY_EFFICIENCY, host.cores * CORE_STREAM_GBS) * 1e9
    return node / min(cluster.gpus_per_node, cluster.num_gpus)


def _node_gpus(cluster: ClusterSpec) -> int:
    return min(cluster.gpus_per_node, cluster.num_gpus)


def cpu_adam_params_per_s(cluster: ClusterSpec) -> float:
    """Parameters per second one GPU's CPU Adam updates: the node's rate, the lesser of its cores' compute
    (cores x adam_mparams_per_core, the profile's measurement or DEEPSPEED_ADAM_MPARAMS_PER_CORE) and its memory
    bandwidth over CPU_ADAM_BYTES, over the node's GPUs."""
    host = cluster.host
    rate = min(host.memory_gbs * HOST_MEMORY_EFFICIENCY, host.cores * CORE_STREAM_GBS) * 1e9 / CPU_ADAM_BYTES
    per_core = host.adam_mparams_per_core or DEEPSPEED_ADAM_MPARAMS_PER_CORE
    return min(rate, host.cores * per_core * 1e6) / _node_gpus(cluster)


def cpu_adam_time(local_params: float, cluster: ClusterSpec) -> float:
    """Adam over one GPU's `local_params` on the host (`cpu_adam_params_per_s`)."""
    return local_params / cpu_adam_params_per_s(cluster)


def cpu_gradient_pass_time(local_params: float, cluster: ClusterSpec) -> float:
    """The host's pass over one GPU's fp32 gradients before CPU Adam, CPU_GRAD_PASS_BYTES per parameter at the GPU's
    share of host bandwidth (DeepSpeed's unscale_and_clip_grads on the offloaded gradient partition: stage_1_and_2.py
    and stage3.py `step`, timed as optimizer_gradients)."""
    return local_params * CPU_GRAD_PASS_BYTES / host_bandwidth_per_gpu(cluster)


def nvme_bytes_per_s(cluster: ClusterSpec) -> float:
    """One GPU's share of the node's NVMe array (NVME_EFFICIENCY of its rate); 0 without one."""
    return cluster.host.nvme_gbs * 1e9 * NVME_EFFICIENCY / _node_gpus(cluster)


def nvme_time(nbytes: float, cluster: ClusterSpec) -> float:
    """Seconds to move `nbytes` of one GPU's state between NVMe and host memory."""
    rate = nvme_bytes_per_s(cluster)
    return nbytes / rate if rate else float("inf")


def offloaded_optimizer_step(local_params: float, weights_on_host: bool, cluster: ClusterSpec,
                             on_nvme: bool = False) -> float:
    """The step of an offloaded optimizer: the host's pass over the gradients (`cpu_gradient_pass_time`), CPU Adam
    (beside the swap of its state through NVMe when it lives there: max(Adam, NVME_ADAM_BYTES per parameter at the
    array's rate)), then the updated bf16 weights back to the GPU (2 bytes per parameter; with parameter offload they
    stay off the GPU, the next forward fetches them, and on NVMe they are written there)."""
    adam = cpu_adam_time(local_params, cluster)
    if on_nvme:
        adam = max(adam, nvme_time(local_params * (NVME_ADAM_BYTES + (2.0 if weights_on_host else 0.0)), cluster))
    back = 0.0 if weights_on_host else pcie_time(local_params * 2.0, cluster)
    return cpu_gradient_pass_time(local_params, cluster) + adam + back


def optimizer_beside_backward(optimizer_s: float, backward_s: float, groups: int) -> float:
    """Exposed seconds of an offloaded optimizer step of `optimizer_s` that runs group by group beside the backward
    of `backward_s` completing the gradients (Fuyou/LoHan's active gradient offloading, github.com/RC4ML/LoHan
    feb88fe ratel_optimizer.py: when the backward reaches a new parameter group, `single_step` swaps the finished
    group's fp32 weights and moments in from the SSDs, hands them to CPU Adam in a second process (main.py
    `test_async`) and writes the group before it back, while the backward goes on). With `groups` = n equal groups
    the backward completes group j at T_b·j/n; the optimizer takes T_o/n a group, one at a time, each started once
    its gradients are done, so it finishes at max(T_b/n + T_o, T_b + T_o/n) and exposes, after the backward,
        max(T_o − T_b·(1 − 1/n), T_o/n)
    (n = 1: all of it, the optimizer after the backward)."""
    n = max(1, groups)
    return max(optimizer_s - backward_s * (1.0 - 1.0 / n), optimizer_s / n)


def weight_fetch_bytes_per_s(cluster: ClusterSpec, from_nvme: bool) -> float:
    """The rate offloaded weights reach one GPU: PCIe from host memory, the lesser of PCIe and the GPU's NVMe share
    from NVMe."""
    pcie = pcie_bytes_per_s(cluster)
    return min(pcie, nvme_bytes_per_s(cluster)) if from_nvme else pcie


def gradient_bucket_bytes(grad_bytes: float) -> float:
    """What a GPU keeps of its gradients when they go to the host: GRADIENT_BUCKETS reduce buckets."""
    return GRADIENT_BUCKETS * GRADIENT_BUCKET_ELEMENTS * grad_bytes


def offload_working_bytes(layout: Layout, job: JobSpec) -> float:
    """GPU bytes offloading holds whatever the stage: the gradient buckets with gradient offload (a fixed
    allocation, DeepSpeed's reduce_bucket_size with contiguous_gradients)."""
    if Offload.GRADIENTS not in layout.offload:
        return 0.0
    return gradient_bucket_bytes(job.runtime.grad_reduce_bytes)


def host_capacity_bytes(cluster: ClusterSpec) -> float:
    """Host memory of one node offloading may use."""
    return cluster.host.memory_gib * 2**30 * HOST_MEMORY_USABLE


def checkpoint_copy_time(nbytes: float, cluster: ClusterSpec) -> float:
    """One synchronous copy of `nbytes` of activation checkpoint between the GPU and pageable host memory, exposed
    whole: nbytes / pageable_bytes_per_s. DeepSpeed's cpu_checkpointing with partition_activations
    (runtime/activation_checkpointing/checkpointing.py, CheckpointFunction, the same in v0.3.0 and 0.19.8): before a
    checkpointed layer's forward runs, `partition_activations` copies its input (the TP rank's 1/tp partition,
    `get_partition_size`) into a host tensor made by `new_empty(device='cpu')` (contiguous_memory_optimization) or by
    `.cpu()`, pageable memory either way, with a blocking copy_ on the compute stream; its backward brings it back with
    `.to(device)` / copy_ (`gather_partitioned_activations`, v0.3.0 `get_full_inputs`), blocking as well. PyTorch's
    blocking device copies synchronise the stream (`at::cuda::memcpy_and_sync`), so the GPU computes nothing while a
    checkpoint moves: each fully recomputed layer adds 2 x this per micro-batch, one in its forward, one in its
    backward. Under TP the backward then all-gathers the partitions over the TP group, which is not priced here.
    (DeepSpeed 0.19.8 without partition_activations offloads through pinned buffers on a side stream,
    offload_activations.py `_ActivationOffloadEngine`: the overlapped form of `layer_offload_parts`.)"""
    return nbytes / pageable_bytes_per_s(cluster)


@dataclass(frozen=True)
class HostCopies:
    """Which of a layer's host copies cannot run beside its passes, and why:
    gradients_pageable   the offloaded optimizer's host buffers are pageable (`Runtime.pinned_offload` off): the
                         gradient copies are synchronous, at `pageable_bytes_per_s` (DeepSpeed PR #8207);
    gradients_in_stream  the gradient copies queue on the compute stream (`Runtime.overlap_grad_reduce` off:
                         DeepSpeed without overlap_comm, whose stage 2 issues the reduction and the copies to the
                         host on torch.cuda.current_stream(), stage2.py reduce_ipg_grads in 0.3.0,
                         stage_1_and_2.py since), exposed at the PCIe rate;
    checkpoints_sync     the stored activations are checkpoints copied synchronously to and from pageable memory
                         (`Execution.sync_checkpoint_copies`: DeepSpeed's cpu_checkpointing, `checkpoint_copy_time`);
    weights_pageable     the offloaded weights are in pageable host memory (`Runtime.pinned_param_offload` off:
                         DeepSpeed's offload_param.pin_memory, false by default before 0.19.5): each fetch moves at
                         `pageable_bytes_per_s`, staged by the host thread in the hook before the module's own
                         kernels are launched, so it runs beside the pass already queued and no faster;
    weights_reused       the weights a fully recomputed layer fetches for its recomputed forward stay for its
                         backward, which follows within the layer's own parameters (DeepSpeed's
                         stage3_max_reuse_distance, `Execution.param_reuse_params`): one fetch beside the
                         recomputation and the backward together instead of one beside each.
    The defaults (asynchronous copies to pinned memory, weights fetched for every pass) expose the least copy time per
    pass."""

    gradients_pageable: bool = False
    gradients_in_stream: bool = False
    checkpoints_sync: bool = False
    weights_pageable: bool = False
    weights_reused: bool = False


def layer_offload_parts(time: LayerTime, weight_bytes: float, stored_bytes: float, cluster: ClusterSpec,
                        grad_bytes: float = 0.0, weights_from_nvme: bool = False,
                        grad_in_bytes: float = 0.0, copies: HostCopies = HostCopies()) -> tuple[float, float]:
    """(forward, backward) exposed copy seconds of one layer and micro-batch: its `weight_bytes` shard in before
    the forward, the backward and a recomputation (from NVMe at `weight_fetch_bytes_per_s`); its `stored_bytes` of
    activations out beside the forward and in beside the backward; its `grad_bytes` of gradients out beside the
    backward, and `grad_in_bytes` of gradients accumulated so far back in to be added to them. Copies in opposite
    directions run at once; in the same direction they queue:
        forward:  max(w / fetch, s / pcie) − t_fwd
        backward: max(w / fetch + (s + g_in) / pcie, g / pcie) − t_bwd
    Copies that `copies` makes synchronous or puts on the compute stream are exposed whole and leave the terms
    above: gradients (g + g_in) / pageable_bytes_per_s or / pcie_bytes_per_s in the backward; checkpoints
    `checkpoint_copy_time(s)` in the forward and again in the backward. A recomputation belongs to the backward: its
    own fetch exposes max(0, w / fetch − t_rec), or, with `copies.weights_reused`, none, the backward's fetch then
    running beside t_bwd + t_rec. Pageable weights (`copies.weights_pageable`) fetch at pageable_bytes_per_s: DeepSpeed
    0.18.6 and 0.19.8 partition_parameters.py copy each partition with `ds_tensor.to(device)` (one GPU: non_blocking,
    NoGatherCoalescedHandle; several: a blocking copy before the all-gather), which from pageable memory returns only
    once the host thread has staged it; the coordinator issues it from the pre-forward hook of the module before
    (partitioned_param_coordinator.py fetch_sub_module, prefetch), while that module's kernels run."""
    forward = backward = 0.0
    if (copies.gradients_pageable or copies.gradients_in_stream) and (grad_bytes or grad_in_bytes):
        rate = pageable_bytes_per_s(cluster) if copies.gradients_pageable else pcie_bytes_per_s(cluster)
        backward += (grad_bytes + grad_in_bytes) / rate
        grad_bytes = grad_in_bytes = 0.0
    if copies.checkpoints_sync and stored_bytes:
        forward += checkpoint_copy_time(stored_bytes, cluster)
        backward += checkpoint_copy_time(stored_bytes, cluster)
        stored_bytes = 0.0
    if not weight_bytes and not stored_bytes and not grad_bytes and not grad_in_bytes:
        return forward, backward
    rate = (pageable_bytes_per_s(cluster) if copies.weights_pageable and not weights_from_nvme
            else weight_fetch_bytes_per_s(cluster, weights_from_nvme))
    fetch = (weight_bytes / rate if rate else float("inf")) if weight_bytes else 0.0
    fwd = max(fetch, pcie_time(stored_bytes, cluster))
    bwd = max(fetch + pcie_time(stored_bytes + grad_in_bytes, cluster), pcie_time(grad_bytes, cluster))
    reused = copies.weights_reused and time.recompute > 0
    forward += max(0.0, fwd - time.forward)
    backward += max(0.0, bwd - time.backward - (time.recompute if reused else 0.0))
    if weight_bytes and time.recompute > 0 and not reused:
        backward += max(0.0, fetch - time.recompute)
    return forward, backward


def layer_offload_exposed(time: LayerTime, weight_bytes: float, stored_bytes: float, cluster: ClusterSpec,
                          grad_bytes: float = 0.0, weights_from_nvme: bool = False,
                          grad_in_bytes: float = 0.0, copies: HostCopies = HostCopies()) -> float:
    """Exposed copy seconds of one layer and micro-batch, forward and backward together (`layer_offload_parts`)."""
    return sum(layer_offload_parts(time, weight_bytes, stored_bytes, cluster, grad_bytes, weights_from_nvme,
                                   grad_in_bytes, copies))


def node_host_bytes(per_gpu: list[float], ranks_per_stage: int, gpus_per_node: int) -> float:
    """Host memory the busiest node needs, from each pipeline rank's per-GPU need: the GPUs are placed with the
    pipeline outermost, so a node holds gpus_per_node GPUs of one stage, or whole stages side by side."""
    if ranks_per_stage >= gpus_per_node:
        return gpus_per_node * max(per_gpu, default=0.0)
    per_node = gpus_per_node // ranks_per_stage
    return max((ranks_per_stage * sum(per_gpu[i:i + per_node]) for i in range(0, len(per_gpu), per_node)),
               default=0.0)


def nvme_fits(total_params: float, layout: Layout, job: JobSpec, cluster: ClusterSpec) -> bool:
    """Whether the NVMe tier of each node holds what its GPUs put there: the whole model's fp32 master weights and
    moments of its trained share (NVME_STATE_BYTES) and, with parameter offload, its 16-bit weights, spread evenly
    over the nodes of the layout (every rank keeps its own piece: TP, PP and the ZeRO shards over DP tile the model
    once), against the profile's nvme_gib. True without the NVMe tier."""
    if Offload.NVME not in layout.offload:
        return True
    per_param = NVME_STATE_BYTES * job.trainable_fraction + (HOST_WEIGHT_BYTES if Offload.PARAMS in layout.offload
                                                               else 0.0)
    node = total_params * per_param * min(cluster.gpus_per_node, layout.world) / layout.world
    return node <= cluster.host.nvme_gib * 2**30

