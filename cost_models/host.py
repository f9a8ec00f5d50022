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
calls; each count is the order of magnitude, the per-operator time is what the calibration fits):
    attention block   ~15: fused norm + QKV linear, QK norms, rotary embedding, fused attention, output
                      projection, bias-dropout-add, with their casts and reshapes
    dense MLP block   ~10: fused norm + FC1, activation, FC2, bias-dropout-add
    MoE MLP block     ~40 instead: pre-MLP norm, router linear, score function, top-k, load-balancing loss,
                      token counts and their copy to the host, permutation, two all-to-alls, chunk sorting,
                      activation, un-permutation, shared experts
    per local expert   ~6: its input split, quantisation and FC1 GEMM, its FC2 quantisation and GEMM, its
                      output chunk
The backward issues about twice the forward's operators (two gradient GEMMs per linear layer, autograd
nodes); a recomputation issues the forward's operators in the share of the forward it repeats.
"""

from __future__ import annotations

from planner.core import ClusterSpec, ModelSpec

ATTENTION_BLOCK_OPS = 15.0
DENSE_MLP_OPS = 10.0
MOE_MLP_OPS = 40.0
EXPERT_OPS = 6.0
BACKWARD_OPS_RATIO = 2.0


def forward_ops(model: ModelSpec, ep: int, moe: bool) -> float:
    """Operators the host issues for one forward pass of one decoder layer (see the module docstring)."""
    if moe and model.moe is not None:
        return ATTENTION_BLOCK_OPS + MOE_MLP_OPS + EXPERT_OPS * model.moe.num_experts / ep
    return ATTENTION_BLOCK_OPS + DENSE_MLP_OPS


def host_wait(ops: float, gpu_pass_s: float, cluster: ClusterSpec) -> float:
    """Seconds the GPU waits for the host in a pass of `ops` operators that keeps it busy `gpu_pass_s`:
        max(0, ops · host_op_us − gpu_pass_s)."""
    return max(0.0, ops * cluster.host_op_us * 1e-6 - gpu_pass_s)


def layer_host_wait(model: ModelSpec, cluster: ClusterSpec, ep: int, moe: bool, passes: tuple[float, float, float],
                    recompute_share: float) -> float:
    """The host wait of one layer and micro-batch: forward, backward and recomputation passes, each with its GPU
    seconds in `passes` (compute and the communication on the critical path); the recomputation issues
    `recompute_share` of the forward's operators."""
    ops = forward_ops(model, ep, moe)
    fwd, bwd, rec = passes
    wait = host_wait(ops, fwd, cluster) + host_wait(BACKWARD_OPS_RATIO * ops, bwd, cluster)
    if recompute_share > 0:
        wait += host_wait(recompute_share * ops, rec, cluster)
    return wait
