"""Kernel times on one GPU: GEMMs with a size-dependent achievable efficiency, fused attention,
and memory-bound element-wise kernels.

Model (roofline with an empirical efficiency curve, as in Calculon, Isaev et al. SC'23):
    t_gemm = max( F / (peak · η(F)),  bytes / (HBM · η_mem) )
where η(F) is the GPU's achievable share of dense peak for a GEMM of F FLOPs (cuBLAS reaches ~85 %
of peak on large A100 GEMMs and far less on small ones: launch latency, tile and wave quantisation).
Element-wise kernels (norms, residual adds, dropout, activations, softmax) are bandwidth-bound:
    t = bytes / (HBM · η_mem).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from meshcore import Dtype, GpuSpec
from meshcore.enums import Activation
from meshcore.execution import TE_DELAYED, Fp8Casts
from meshcore.memo import Same


@dataclass(frozen=True)
class Gemm:
    """C[m, n] = A[m, k] @ B[k, n], repeated `batch` times (batched GEMMs for unfused attention)."""

    m: float
    n: float
    k: float
    batch: float = 1.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def bytes(self, element_bytes: float = 2.0) -> float:
        return element_bytes * self.batch * (self.m * self.k + self.k * self.n + self.m * self.n)


def memory_time(num_bytes: float, gpu: GpuSpec) -> float:
    """Bandwidth-bound kernel: bytes / (HBM bandwidth x achievable share)."""
    return num_bytes / (gpu.hbm_gbs * 1e9 * gpu.memory_efficiency)


# Bytes per element to quantise a bf16 tensor for an fp8 GEMM: read 2, write the fp8 copy 1 and its transpose 1
# (Transformer Engine's fused cast-transpose: the transposed copy feeds the weight-gradient GEMM).
FP8_CAST_BYTES = TE_DELAYED.input_bytes


def gemm_time(gemm: Gemm, gpu: GpuSpec, dtype: Dtype) -> float:
    """Roofline of one GEMM with the efficiency curve evaluated at the GEMM's own FLOPs.

    fp8 GEMMs run at the fp8 peak times the curve times `fp8_matmul_ratio` (fp8 kernels reach a smaller
    share of their doubled peak: the epilogue, scaling and the bf16 output are not faster) and read 1-byte
    operands. The curve is one of bf16 FLOPs: what keeps small GEMMs from peak (launch latency, pipeline
    prologue and epilogue, the last partial wave) costs time, not FLOPs, and an fp8 GEMM of F FLOPs is as short
    as a bf16 GEMM of F·peak_bf16/peak_fp8 (the ridge moves up with the doubled peak), so it takes that GEMM's
    point of the curve:
        η_fp8(F) = fp8_matmul_ratio · η(F · peak_bf16 / peak_fp8)
    A batched GEMM is treated as one kernel of the summed work (cuBLAS strided-batched). Remembered per (GEMM, GPU
    by identity, dtype): a search prices the same attention GEMMs for every expert-parallel choice."""
    return _gemm_time(gemm, Same(gpu), dtype)


@lru_cache(maxsize=16384)
def _gemm_time(gemm: Gemm, same: Same, dtype: Dtype) -> float:
    gpu = same.value
    assert isinstance(gpu, GpuSpec)
    flops = gemm.flops
    if flops == 0:
        return 0.0
    compute = flops / (gpu.peak(dtype) * gemm_efficiency(flops, gpu, dtype))
    return max(compute, memory_time(gemm.bytes(1.0 if gpu.has_fp8(dtype) else 2.0), gpu))


def gemm_efficiency(flops: float, gpu: GpuSpec, dtype: Dtype) -> float:
    """Share of `dtype`'s peak a GEMM of `flops` FLOPs reaches (`gemm_time` derives it): η(F) in bf16, and
    fp8_matmul_ratio · η(F · peak_bf16 / peak_fp8) where the GPU runs fp8."""
    if gpu.has_fp8(dtype):
        return gpu.matmul_efficiency.at(flops * gpu.peak(Dtype.BF16) / gpu.peak(dtype)) * gpu.fp8_matmul_ratio
    return gpu.matmul_efficiency.at(flops)


def gemm_fwd_bwd_time(gemm: Gemm, gpu: GpuSpec, dtype: Dtype, trained: float = 1.0,
                      casts: Fp8Casts = TE_DELAYED) -> tuple[float, float]:
    """Forward is the GEMM itself; backward is two GEMMs of the same FLOPs (dX = dY·Wᵀ, dW = Xᵀ·dY).

    With `trained` < 1 the weight is frozen and LoRA adapters of that relative size train beside it (Hu et al.
    2021: W + B·A with A [r, k], B [n, r], so r·(k + n) = trained·k·n parameters): the frozen weight's dW is not
    computed; the adapters add `trained` of the GEMM's work to the forward and twice that to the backward (their
    dX and dW). `trained` 0: a frozen weight without adapters (dX only).

    In fp8 each GEMM's operands are quantised by the runtime's recipe (`casts`, meshcore.execution), at HBM
    speed: the input X [m, k] before the forward (input_bytes per element), the output gradient dY [m, n] before
    the backward (grad_bytes), X again for the weight gradient where the recipe re-casts it (wgrad_bytes), and the
    weight [k, n] per micro-batch where the recipe does not cache its cast (weight_bytes, in the backward).
    Transformer Engine (the default, delayed scaling) writes the FP8 copy and its transpose in one fused pass, 4
    bytes per element, and casts weights once per step. This is why fp8 gains less on narrow layers: the casts
    cost O(m·k) against the GEMM's O(m·k·n)."""
    t = gemm_time(gemm, gpu, dtype)
    fwd, bwd = (t, 2.0 * t) if trained >= 1.0 else (t * (1.0 + trained), t * (1.0 + 2.0 * trained))
    if not gpu.has_fp8(dtype):
        return fwd, bwd
    b = gemm.batch
    cast_in = memory_time(casts.input_bytes * b * gemm.m * gemm.k, gpu)
    cast_back = memory_time(casts.grad_bytes * b * gemm.m * gemm.n + casts.wgrad_bytes * b * gemm.m * gemm.k
                            + casts.weight_bytes * b * gemm.k * gemm.n, gpu)
    return fwd + cast_in, bwd + cast_back


def attention_efficiency(gpu: GpuSpec, key_len: float, head_dim: float) -> float:
    """Forward share of bf16 peak a fused attention kernel reaches on keys of length `key_len`:
        η(s, d) = η_∞ · s / (s + s_½) · min(1, [d / (d + 64)] / [128 / (128 + 64)])
    η_∞ (`attention_efficiency`) is the long-sequence causal rate at head dim 128 and s_½
    (`attention_half_seq`) the length at which half of it is reached: short sequences leave SMs idle (few
    tiles per head) and pay the per-tile softmax rescaling. Narrow heads do less math per byte loaded: the
    head-dim factor gives head dim 64 0.75x the rate of 128, as the published causal forward figures show
    (cuDNN on H100: 388 vs 539 TFLOP/s at 16k; FlashAttention-2 on A100 fwd+bwd: 171 vs 189), and wider heads
    no more than 128's (cuDNN causal head dim 256: 509). Figures: FlashAttention-2/-3 benchmark plots in the
    flash-attention repository (Dao 2023; Shah et al. 2024, Fig. 5-7), causal FLOPs counted as half."""
    saturation = key_len / (key_len + gpu.attention_half_seq)
    width = min(1.0, (head_dim / (head_dim + 64.0)) / (128.0 / 192.0))
    return min(1.0, gpu.attention_efficiency * saturation * width)


def flash_attention_time(flops_fwd: float, key_len: float, head_dim: float, gpu: GpuSpec,
                         rate: float = 1.0, backward_ratio: float | None = None) -> tuple[float, float]:
    """Fused attention (FlashAttention-2/3, cuDNN), bf16 even in fp8 training: forward runs `flops_fwd`
    (causal blocks already skipped by the caller) at `attention_efficiency(...)` of the bf16 peak, times `rate`,
    the runtime's kernel over the one the GPU profile's figures describe (Execution.attention_share: FlashAttention-2
    runs at 0.62 of cuDNN's rate on H100); backward recomputes the scores, 2.5 x the forward FLOPs (Dao 2023,
    section 3.1), at `attention_backward_ratio` x the forward rate (its extra reductions and atomics for dQ), or at
    the runtime kernel's own `backward_ratio` (Execution.attention_backward_share)."""
    if flops_fwd == 0:
        return 0.0, 0.0
    eff = attention_efficiency(gpu, key_len, head_dim) * rate
    t = flops_fwd / (gpu.peak(Dtype.BF16) * eff)
    return t, 2.5 * t / (gpu.attention_backward_ratio if backward_ratio is None else backward_ratio)


# Backward of a norm or activation reads input and incoming gradient and writes a gradient: about
# 1.5 x the forward traffic; residual adds have no backward kernel.
ELEMENTWISE_BACKWARD = 1.5


def activation_bytes(activation: Activation) -> tuple[float, float]:
    """(forward, backward) HBM bytes of the MLP activation per element of its output (bf16, 2 B per element), from
    what its kernels read and write:
      swiglu, geglu  one fused kernel each way (Megatron-core bias_swiglu / bias_geglu, megatron/core/fusions):
                     forward reads gate and up (4) and writes the product (2): 6; backward reads the gradient (2),
                     gate and up (4) and writes both gradients (4): 10.
      gelu           fused bias + GELU (bias_gelu): forward 2 + 2 = 4; backward reads gradient and input, writes the
                     input gradient: 6.
      squared_relu   NeMo's unfused torch.pow(F.relu(x), 2) (nemo/collections/nlp/modules/common/megatron/utils.py,
                     NeMo 2.0; Nemotron's recipes set bias_activation_fusion False, which Megatron-core's MLP needs
                     for any activation but GELU and SwiGLU): forward relu then pow, 2 + 2 each: 8; backward autograd's
                     pow_backward, grad · (2 · x.pow(1)), three kernels (4 + 4 + 6) and relu's threshold_backward
                     (4 + 2): 20. The stored tensors are as many as GELU's (relu keeps its output, pow its input:
                     the same tensor), so memory is unchanged."""
    if activation.gated:
        return 6.0, 10.0
    if activation is Activation.SQUARED_RELU:
        return 8.0, 20.0
    return 4.0, 6.0

