"""FP8 training under tensor and sequence parallelism: where the casts of a layer's hidden-state-wide tensors run and
the scaling factors the TP ranks must agree on.

Under sequence parallelism a rank holds T/t of the layer's T tokens between the TP regions; the column-parallel
layers (QKV, FC1) all-gather their normed input and the row-parallel layers (projection, FC2) all-gather their output
gradient in the backward. Transformer Engine casts these tensors to FP8 on the local shard and gathers the FP8 copy
(transformer_engine/pytorch/module/layernorm_linear.py: the norm writes `ln_out` in FP8, then
`gather_along_first_dim`; base.py `grad_output_preprocess`: the gradient cast, then gathered), and makes the transposed
copy the weight-gradient GEMM reads from the gathered FP8 tensor. So the cast's read-and-write runs on T/t rows and
only the transpose on all T. torchao's recipes (torchtitan) keep their whole-tensor casts here: where their
tensor-parallel wrappers cast around the gathers was not established from their code, and their casts' bytes are
laid out otherwise (the transposed copies are `wgrad_bytes`). `compute.gemm_fwd_bwd_time` prices a GEMM's casts on
its whole input: this module gives the casts of the GEMMs whose input or output gradient is such a gathered [T, h]
tensor."""

from __future__ import annotations

from dataclasses import replace

from cost_models.comm.collectives import Collective, collective
from cost_models.compute.kernels import Gemm
from cost_models.compute.knobs import LayerKnobs
from meshcore import ClusterSpec, JobSpec
from meshcore.execution import Fp8Casts, Fp8Recipe

TE_RECIPES = (Fp8Recipe.DELAYED, Fp8Recipe.CURRENT)  # Transformer Engine's per-tensor recipes
# Bytes per element of the transposed FP8 copy made after the gather: read the gathered FP8 tensor (1), write its
# transpose (1).
GATHERED_TRANSPOSE_BYTES = 2.0
# Of a recipe's cast bytes, the transposed copy's write (1 byte per element) moves after the gather.
TRANSPOSE_WRITE_BYTES = 1.0


def sharded_cast_bytes(whole: float, tp: int) -> float:
    """Bytes per element of the gathered tensor when a cast of `whole` bytes per element (read, amax, FP8 copy and
    transposed copy) runs on the local T/t shard before the FP8 all-gather and the transpose after it:
        b_sp = (whole − 1) / t + 2
    Transformer Engine's delayed scaling (4 bytes: read 2, FP8 copy 1, transpose 1): 3/t + 2, 2.375 at t = 8;
    current scaling (6: an amax pass reads 2 more): 5/t + 2, 2.625 at t = 8. At t = 1 (no gather) it is `whole`
    plus the 1-byte read of the separate transpose; this is used only where t > 1."""
    if whole <= 0:
        return 0.0
    return (whole - TRANSPOSE_WRITE_BYTES) / tp + GATHERED_TRANSPOSE_BYTES


def sequence_parallel_casts(gemm: Gemm, hidden: int, casts: Fp8Casts, tp: int) -> Fp8Casts:
    """The casts of one layer GEMM under sequence parallelism (t > 1) with a Transformer Engine recipe: a GEMM
    reading the gathered hidden state (input width k = h: QKV, FC1, MLA's down projections) casts its input on the
    shard; a GEMM producing it (output width n = h: projection, FC2) casts its output gradient on the shard
    (`sharded_cast_bytes`). Others, and the weight-gradient re-cast and per-pass weight casts of recipes that have
    them, are unchanged."""
    if tp <= 1 or casts.recipe not in TE_RECIPES:
        return casts
    out = casts
    if gemm.k == hidden:
        out = replace(out, input_bytes=sharded_cast_bytes(casts.input_bytes, tp))
    if gemm.n == hidden:
        out = replace(out, grad_bytes=sharded_cast_bytes(casts.grad_bytes, tp))
    return out


def amax_reductions_time(job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, blocks: int) -> tuple[float, float]:
    """(forward, backward) seconds of the amax all-reduces current scaling adds per layer under sequence parallelism:
    one scale for the whole gathered tensor needs the maximum over the TP ranks' shards, a 4-byte all-reduce over the
    TP group (Transformer Engine's Float8CurrentScalingQuantizer with amax reduction over the TP group for
    sequence-parallel inputs, transformer_engine/pytorch/module/layernorm_linear.py and base.py; Megatron-core sets
    it through TE). Per column → row block: the column layer's input forward, the row layer's output gradient
    backward. Latency-bound: the collective's α terms. Delayed scaling reduces its amax history once per step (TE's
    global amax reduction at the end of the forward), which is not charged per layer."""
    if knobs.tp <= 1 or not knobs.sp or not cluster.gpu.has_fp8(job.dtype):
        return 0.0, 0.0
    recipe = job.runtime.priced_execution.casts(job.runtime.fp8_recipe).recipe
    if recipe is not Fp8Recipe.CURRENT:
        return 0.0, 0.0
    one = collective(Collective.ALL_REDUCE, 4.0, knobs.mesh.tp_group, cluster, job.runtime.multi_rail)
    return blocks * one, blocks * one


__all__ = ["amax_reductions_time", "sequence_parallel_casts", "sharded_cast_bytes"]
