"""The memory-bound kernels of a decoder layer (norms, residual adds, dropout, rotary embedding, the MLP activation),
as the job's runtime runs them: Transformer Engine's and Megatron-core's fused kernels, or PyTorch eager (each
element-wise op its own kernel) or torch.compile'd (one fused kernel per chain) as the runtime's execution profile
counts their bytes (meshcore.execution.Elementwise, hardware_profiles/runtimes/NAME.yaml)."""

from __future__ import annotations

from cost_models.compute.flops import kv_heads_per_rank
from cost_models.compute.kernels import ELEMENTWISE_BACKWARD, activation_bytes, memory_time
from cost_models.compute.knobs import LayerKnobs
from meshcore import GpuSpec, JobSpec, ModelSpec


def fused_elementwise_bytes(model: ModelSpec, knobs: LayerKnobs, moe: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of the fused kernels Megatron-core with Transformer Engine runs:
    two norms 2·4h, two residual adds 2·6h, dropout masks 2h (all ·r = 1/t under SP), rotary 4(q + kv)/t, backward
    1.5 x those (ELEMENTWISE_BACKWARD); the MLP activation as its kernels run it (`activation_bytes`; an MoE layer's
    experts price their own)."""
    t = knobs.tp
    r = 1.0 / t if knobs.sp else 1.0
    h = model.hidden_size
    hidden = (8 + 12 + (2 if model.dropout else 0)) * h * r
    rope = 0.0 if model.learned_positions else 4 * (model.q_dim / t + kv_heads_per_rank(model, t) * model.head_dim)
    act_f = act_b = 0.0
    if not (moe and model.moe is not None):
        act_f, act_b = (x * model.ffn_hidden_size / t for x in activation_bytes(model.mlp_activation))
    return hidden + rope + act_f, ELEMENTWISE_BACKWARD * (hidden + rope) + act_b


def elementwise_bytes(model: ModelSpec, job: JobSpec, knobs: LayerKnobs, moe: bool) -> tuple[float, float]:
    """(forward, backward) HBM bytes per token of a decoder layer's element-wise kernels as the job's runtime runs
    them: its profile's eager or compiled counts (Runtime.compiled) as coefficients of h·r, q/t, kv/t and f/t (f 0
    for an MoE layer, whose experts price their activation), and with per-head query and key norms (Qwen3) one more
    norm's `norm` bytes on each q and kv element; else the fused kernels (`fused_elementwise_bytes`)."""
    counts = job.runtime.priced_execution.elementwise(job.runtime.compile)
    if counts is None:
        return fused_elementwise_bytes(model, knobs, moe)
    t = knobs.tp
    widths = (model.hidden_size / (t if knobs.sp else 1), model.q_dim / t,
              kv_heads_per_rank(model, t) * model.head_dim, 0.0 if moe and model.moe is not None
              else model.ffn_hidden_size / t)
    qk = widths[1] + widths[2] if model.qk_norm else 0.0
    return (counts.forward.per_token(*widths) + counts.forward.norm * qk,
            counts.backward.per_token(*widths) + counts.backward.norm * qk)


def elementwise_time(model: ModelSpec, job: JobSpec, knobs: LayerKnobs, tokens: float, gpu: GpuSpec,
                     moe: bool) -> tuple[float, float]:
    """(forward, backward) seconds of `elementwise_bytes` for `tokens` tokens at HBM speed."""
    fwd, bwd = elementwise_bytes(model, job, knobs, moe)
    return memory_time(tokens * fwd, gpu), memory_time(tokens * bwd, gpu)


__all__ = ["elementwise_bytes", "elementwise_time", "fused_elementwise_bytes"]
