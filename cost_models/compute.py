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

from planner.specs import Dtype, GpuSpec


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


def gemm_time(gemm: Gemm, gpu: GpuSpec, dtype: Dtype) -> float:
    """Roofline of one GEMM with the efficiency curve evaluated at the GEMM's own FLOPs.

    A batched GEMM is treated as one kernel of the summed work (cuBLAS strided-batched)."""
    flops = gemm.flops
    if flops == 0:
        return 0.0
    compute = flops / (gpu.peak(dtype) * gpu.matmul_efficiency.at(flops))
    return max(compute, memory_time(gemm.bytes(), gpu))


def gemm_fwd_bwd_time(gemm: Gemm, gpu: GpuSpec, dtype: Dtype) -> tuple[float, float]:
    """Forward is the GEMM itself; backward is two GEMMs of the same FLOPs (dX = dY·Wᵀ, dW = Xᵀ·dY)."""
    t = gemm_time(gemm, gpu, dtype)
    return t, 2.0 * t


def flash_attention_time(flops_fwd: float, gpu: GpuSpec, dtype: Dtype) -> tuple[float, float]:
    """Fused attention (FlashAttention-2/3, cuDNN): forward runs `flops_fwd` (causal blocks already
    skipped by the caller) at `attention_efficiency` x the GEMM efficiency for that size; backward
    recomputes the scores, 2.5 x the forward FLOPs (Dao 2023, section 3.1)."""
    if flops_fwd == 0:
        return 0.0, 0.0
    eff = gpu.matmul_efficiency.at(flops_fwd) * gpu.attention_efficiency
    t = flops_fwd / (gpu.peak(Dtype.BF16) * eff)  # attention runs in bf16 even in fp8 training
    return t, 2.5 * t
