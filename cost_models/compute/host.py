"""Host issue time: a layer pass cannot finish before the CPU has issued its kernels.

The training framework's layer code runs on the host: Python, the PyTorch dispatcher, autograd bookkeeping and
the kernel launch itself take `ClusterSpec.host_op_us` per operator. While the GPU's kernels are longer than
that, the host runs ahead and its time is hidden; when they are shorter (small hidden sizes, micro-batches of
one sequence, experts split thinly over many ranks) the GPU waits for the host. For one pass (the forward, the
backward or the recomputation) of one layer:

    wait = max(0, ops · host_op_us − gpu_pass_s)

Mixture-of-experts layers make this worse in two ways. Megatron-core's all-to-all token dispatcher copies the
per-expert token counts to the host and synchronises the stream before the expert-parallel all-to-all of every
MoE layer's forward (its split sizes must be host integers; `cuda_sync_point = "before_ep_alltoall"` in
megatron/core/transformer/moe/token_dispatcher.py), so the host cannot run ahead across layers. And the grouped
expert GEMMs issue work per local expert (Transformer Engine's GroupedLinear splits its input, quantises it
and launches one GEMM per expert), so the host cost grows with the E/ep experts a rank holds. NVIDIA's report on
Megatron-core MoE (arXiv 2603.07685, section on the compute wall) names this host-boundedness as one of the
three limits of fine-grained MoE training; CUDA graphs exist to remove it.

Operator counts per forward pass (Megatron-core with Transformer Engine, counted from the modules a layer
calls; each count is the order of magnitude, the per-operator time is what the calibration fits, on H100 from a
prior of 30 µs: four Transformer Engine linear modules at 115 µs of CPU per forward, NVIDIA/TransformerEngine#1191,
and the other 21 operators of a dense layer at a plain PyTorch call's 13.5 µs on a DGX H100's Xeon 8480C,
NVIDIA/TransformerEngine#2053: (4·115 + 21·13.5) / 25; benchmarks/data/calibration/prior_hopper.yaml):
    attention block   ~15: fused norm + QKV linear, QK norms, rotary embedding, fused attention, output
                      projection, bias-dropout-add, with their casts and reshapes
    dense MLP block   ~10: fused norm + FC1, activation, FC2, bias-dropout-add
    MoE MLP block     ~40 instead: pre-MLP norm, router linear, score function, top-k, load-balancing loss,
                      token counts and their copy to the host, permutation, two all-to-alls, chunk sorting,
                      activation, un-permutation, shared experts
    per local expert   ~6: its input split, quantisation and FC1 GEMM, its FC2 quantisation and GEMM, its
                      output chunk
The MoE block's host sync splits its forward in two. Dropless routing needs the all-to-all's split sizes on the
host: the dispatcher copies the token counts to the host and waits for them before the expert-parallel all-to-all
(`_maybe_update_cuda_sync_point("before_ep_alltoall")`; DeepEP's flex dispatch likewise waits for its received
counts). Up to the sync (attention, pre-MLP norm, router, top-k, counts: ATTENTION_BLOCK_OPS + MOE_PRE_SYNC_OPS)
the host runs beside the GPU; at the sync it waits until the GPU has finished that work, and the rest of the layer
(MOE_MLP_OPS - MOE_PRE_SYNC_OPS operators, the per-expert ones, and the next layer's work up to its own sync) starts
on an empty queue. A host surplus after the sync can then no longer hide behind the attention's GPU time before it:
    wait_fwd = max(0, ops_pre · t − gpu_pre) + max(0, ops_post · t − gpu_post) + DRAIN_OPS · t   (t = host_op_us)
instead of max(0, ops · host_op_us − gpu) over the whole forward. Padding every expert to a capacity (Megatron
--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity, Megatron-Bridge's "tokendrop") makes the split
sizes static: `preprocess` returns before any device-to-host copy and `cuda_sync_point` stays "no_sync"
(megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher), so the forward is one segment. The
backward reuses the forward's host split sizes: no sync.
The backward issues about twice the forward's operators (two gradient GEMMs per linear layer, autograd
nodes); a recomputation issues the forward's operators in the share of the forward it repeats.

Fixed costs beyond the layer's operators (issue 30 item 1), priced from the same per-operator time:
    legacy layer code  Megatron-LM's own transformer layer without Transformer Engine (the code Megatron-LM ran until
                       2022 and Megatron-DeepSpeed still runs, `attention: unfused`): its attention core issues the
                       query/key views, a baddbmm into a fresh buffer, the fused scale-mask-softmax, dropout inside
                       the RNG tracker's fork (get and set the CUDA RNG state), a bmm, the permute and its contiguous
                       copy; the linear layers' biases are separate ops where TE fuses them: LEGACY_LAYER_OPS more
                       per forward (counted from megatron/model/transformer.py, ParallelAttention and ParallelMLP);
    TP collectives     each tensor-parallel collective is a torch.distributed call: the Python call, ProcessGroupNCCL's
                       two CUDA events and stream wait, NCCL's enqueue of its kernel, the work object: about
                       COLLECTIVE_HOST_OPS operators of host time each (`tp_collective_calls` per pass); none at TP 1
                       (Megatron skips the collective of a group of one);
    host syncs         where the host waits for the GPU (Megatron-core's batch_p2p_sync, default true, calls
                       torch.cuda.synchronize after each batched pipeline send/receive; the optimizer's gradient norm
                       and found-inf checks call .item()), the GPU's queue drains, and it idles until the host has
                       issued the next operators again: DRAIN_OPS operators' time per sync (NVIDIA's CUDA Graphs
                       blog, Gray 2019: 2.9 µs kernels take 9.6 µs each with a synchronisation after every launch,
                       3.8 µs without: the sync exposes the launch path, several µs on top of the framework's per-op
                       time; after it the first operators of a layer, a norm before its first GEMM, are short kernels
                       the host cannot get ahead of).
                       Per micro-batch and stage: 2 syncs with blocking batched pipeline sends (1F1B's
                       send_forward_recv_backward and send_backward_recv_forward), 0 when the interleaved schedule
                       overlaps its sends (no batching, no sync) or without a pipeline; per step: 2 (grad-norm,
                       found-inf/loss).
"""

from __future__ import annotations

from meshcore import ClusterSpec, ModelSpec

ATTENTION_BLOCK_OPS = 15.0
DENSE_MLP_OPS = 10.0
MOE_MLP_OPS = 40.0
MOE_PRE_SYNC_OPS = 15.0
EXPERT_OPS = 6.0
BACKWARD_OPS_RATIO = 2.0
LEGACY_LAYER_OPS = 12.0
COLLECTIVE_HOST_OPS = 2.0
DRAIN_OPS = 3.0
P2P_SYNCS_PER_MICROBATCH = 2
STEP_SYNCS = 2


def forward_ops(model: ModelSpec, ep: int, moe: bool, legacy: bool = False) -> float:
    """Operators the host issues for one forward pass of one decoder layer (see the module docstring); `legacy`:
    Megatron-LM's own layer code without Transformer Engine."""
    extra = LEGACY_LAYER_OPS if legacy else 0.0
    if moe and model.moe is not None:
        return ATTENTION_BLOCK_OPS + MOE_MLP_OPS + EXPERT_OPS * model.moe.num_experts / ep + extra
    return ATTENTION_BLOCK_OPS + DENSE_MLP_OPS + extra


def tp_collective_calls(tp: int, sp: bool) -> tuple[float, float]:
    """(forward, backward) tensor-parallel collective calls of one decoder layer: without sequence parallelism an
    all-reduce after each row-parallel layer, each way (2, 2); with it an all-gather before each column layer and a
    reduce-scatter after each row layer forward (4), and in the backward the row layers' gradient all-gathers, the
    column layers' input re-gathers and their reduce-scatters (6: cost_models.compute.layer.sequence_parallel_tp_time).
    None at TP 1."""
    if tp == 1:
        return 0.0, 0.0
    return (4.0, 6.0) if sp else (2.0, 2.0)


def host_wait(ops: float, gpu_pass_s: float, cluster: ClusterSpec) -> float:
    """Seconds the GPU waits for the host in a pass of `ops` operators that keeps it busy `gpu_pass_s`:
        max(0, ops · host_op_us − gpu_pass_s)."""
    return max(0.0, ops * cluster.host_op_us * 1e-6 - gpu_pass_s)


def layer_host_wait(model: ModelSpec, cluster: ClusterSpec, ep: int, moe: bool, passes: tuple[float, float, float],
                    recompute_share: float, legacy: bool = False, calls: tuple[float, float] = (0.0, 0.0),
                    moe_sync_split: float | None = None) -> float:
    """The host wait of one layer and micro-batch: forward, backward and recomputation passes, each with its GPU
    seconds in `passes` (compute and the communication on the critical path); the recomputation issues
    `recompute_share` of the forward's operators. `calls`: the TP collectives of the forward and the backward
    (`tp_collective_calls`), COLLECTIVE_HOST_OPS operators each. `moe_sync_split`: for a MoE layer whose dispatcher
    syncs with the host (dropless routing), the GPU seconds of its forward after the sync (the all-to-alls, experts
    and permutations); the forward is then priced in two segments with a drain (module docstring)."""
    ops = forward_ops(model, ep, moe, legacy)
    fwd, bwd, rec = passes
    f_ops = ops + COLLECTIVE_HOST_OPS * calls[0]
    wait = host_wait(BACKWARD_OPS_RATIO * ops + COLLECTIVE_HOST_OPS * calls[1], bwd, cluster)
    if moe_sync_split is not None and moe and model.moe is not None:
        post_ops = ops - ATTENTION_BLOCK_OPS - MOE_PRE_SYNC_OPS
        post_gpu = min(moe_sync_split, fwd)
        wait += (host_wait(f_ops - post_ops, fwd - post_gpu, cluster) + host_wait(post_ops, post_gpu, cluster)
                 + DRAIN_OPS * cluster.host_op_us * 1e-6)
    else:
        wait += host_wait(f_ops, fwd, cluster)
    if recompute_share > 0:
        wait += host_wait(recompute_share * f_ops, rec, cluster)
    return wait


def microbatch_sync_s(cluster: ClusterSpec, pp: int, vpp: int, overlap_p2p: bool) -> float:
    """Seconds per micro-batch and stage the GPU idles after host synchronisations (module docstring): the blocking
    batched pipeline sends' syncs (P2P_SYNCS_PER_MICROBATCH with a pipeline, unless the interleaved schedule overlaps
    its sends), each DRAIN_OPS operators and the send's own call (COLLECTIVE_HOST_OPS)."""
    if pp == 1 or (vpp > 1 and overlap_p2p):
        return 0.0
    return P2P_SYNCS_PER_MICROBATCH * (DRAIN_OPS + COLLECTIVE_HOST_OPS) * cluster.host_op_us * 1e-6


def step_sync_s(cluster: ClusterSpec) -> float:
    """Seconds per optimizer step the GPU idles after the step's host synchronisations (STEP_SYNCS of DRAIN_OPS)."""
    return STEP_SYNCS * DRAIN_OPS * cluster.host_op_us * 1e-6
