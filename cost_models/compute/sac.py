"""torchtitan's per-op selective activation checkpointing (activation_checkpoint.mode "selective" with
selective_ac_option "op"), in time and memory, for a dense decoder layer.

torchtitan wraps each transformer block in a checkpoint whose policy (parallelisms/parallelize_llama.py at 9dec370,
distributed/activation_checkpoint.py later) saves the outputs of the ops in its save list and recomputes everything
else in the backward:
    aten.mm                         saved, except every second call in the block's forward ("Saves output of all
                                    compute ops, except every second mm")
    SDPA flash / efficient          saved (the attention output and its log-sum-exp: attention is never recomputed)
    _c10d_functional.reduce_scatter saved (TP's row-parallel outputs under sequence parallelism)
    abs, max                        saved (FP8 amax scalars)
Everything else (norms, rotary, KV-head repetition, SwiGLU, residual adds, TP's all-gathers) runs again.

Llama's linears run in the order wq, wk, wv, wo, w1, w3, w2 (model.py: `w2(F.silu(w1(x)) * w3(x))`), so the
outputs of wq, wv, w1 and w2 are kept and wk, wo and w3 recomputed; a plain MLP (fc1, fc2) keeps q, v and fc1.
Per token, with r = 1/t under sequence parallelism (t = tp), a layer keeps
    input 2h·r, Q 2q/t, V 2kv/t, gate 2f/t (fc1 without gating), w2's output 2h (the full hidden width before TP's
    reduce-scatter), the attention output 2q/t and its fp32 log-sum-exp 4·a/t, and with TP > 1 both reduce-scatter
    outputs 2·2h·r,
and its backward first re-runs the recomputed linears' forward GEMMs, every element-wise kernel's forward, and TP's
input all-gathers. While it does, the layer holds its unrecomputed activations (`transient_bytes`)."""

from __future__ import annotations

from cost_models.compute.flops import kv_heads_per_rank
from cost_models.compute.gemms import counted_gemms_time
from cost_models.compute.kernels import Gemm
from cost_models.compute.knobs import LayerKnobs
from meshcore import ClusterSpec, JobSpec, ModelSpec, Recompute
from meshcore.execution import SelectiveForm


def per_op_sac(recompute: Recompute, job: JobSpec) -> bool:
    """Selective recomputation in a runtime whose `selective` is op-sac (torchtitan's per-op SAC): every layer is
    recomputed op by op in its backward, so every stage holds the recomputed layer's working set, as a fully
    recomputed layer does (cost_models.step.stage_held)."""
    return recompute is Recompute.SELECTIVE and job.runtime.priced_execution.selective is SelectiveForm.OP_SAC


def op_sac(job: JobSpec, knobs: LayerKnobs, moe: bool) -> bool:
    """Whether a layer under `knobs` is checkpointed by the per-op policy (`per_op_sac`), on a dense layer (an MoE
    layer is priced with Megatron's modules: not modelled)."""
    return per_op_sac(knobs.recompute, job) and not moe


def _widths(model: ModelSpec, tp: int) -> tuple[float, float, float]:
    """(q, kv, f) per TP rank."""
    return model.q_dim / tp, kv_heads_per_rank(model, tp) * model.head_dim, model.ffn_hidden_size / tp


def linears(model: ModelSpec, tokens: float, tp: int) -> list[Gemm]:
    """A dense layer's linears on one TP rank, in the order the model calls them (Llama: wq, wk, wv, wo, w1, w3,
    w2; a plain MLP fc1, fc2): [tokens, n] = [tokens, k] x [k, n]."""
    h = model.hidden_size
    q, kv, f = _widths(model, tp)
    attention = [Gemm(tokens, q, h), Gemm(tokens, kv, h), Gemm(tokens, kv, h), Gemm(tokens, h, q)]
    mlp = [Gemm(tokens, f, h), Gemm(tokens, f, h), Gemm(tokens, h, f)] if model.gated_mlp else [
        Gemm(tokens, f, h), Gemm(tokens, h, f)]
    return attention + mlp


def recomputed_gemm_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, tokens: float, tp: int) -> float:
    """Forward seconds of the linears the policy recomputes: every second one in call order (the 2nd, 4th, ...)."""
    again = [g for i, g in enumerate(linears(model, tokens, tp)) if i % 2 == 1]
    return counted_gemms_time(((g, 1.0) for g in again), cluster, job)[0]


def recomputed_flops_per_token(model: ModelSpec) -> float:
    """Matmul FLOPs per token of the linears the policy recomputes in a dense layer (hardware FLOPs, for HFU):
    2·n·k of every second one in call order."""
    return sum(2.0 * g.n * g.k for i, g in enumerate(linears(model, 1.0, 1)) if i % 2 == 1)


def sac_recompute_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, elementwise_f: float,
                       tp_forward: float) -> tuple[float, float, float]:
    """(compute, TP, EP) seconds the policy adds to a layer's backward: the recomputed linears' forward GEMMs,
    every element-wise kernel's forward (`elementwise_f`, the runtime's own), and under sequence parallelism TP's
    input all-gathers, the all-gather share of the forward's exposed TP time `tp_forward` (an all-gather of g = ½
    all-reduce, ¼ of FP8 casts, beside a reduce-scatter of ½: g / (g + ½); the reduce-scatters are kept)."""
    tokens = knobs.mbs * job.seq_len / knobs.cp
    compute = recomputed_gemm_time(model, job, cluster, tokens, knobs.tp) + elementwise_f
    tp = 0.0
    if knobs.sp and knobs.tp > 1:
        gather = 0.25 if cluster.gpu.has_fp8(job.dtype) else 0.5
        tp = tp_forward * gather / (gather + 0.5)
    return compute, tp, 0.0


def kept_token_bytes(model: ModelSpec, tp: int, sp: bool) -> float:
    """Bytes per token a dense layer keeps for its backward under the policy (module docstring)."""
    h = model.hidden_size
    r = 1.0 / tp if sp else 1.0
    q, kv, f = _widths(model, tp)
    heads = model.num_attention_heads / tp
    mms = 2 * q + 2 * kv + 2 * f + (2 * h if model.gated_mlp else 0.0)  # wq, wv, w1 (fc1), w2
    scatters = 4 * h * r if tp > 1 and sp else 0.0
    return 2 * h * r + mms + 2 * q + 4 * heads + scatters


def sac_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool) -> float:
    """Bytes one dense layer keeps per micro-batch: `kept_token_bytes` for its mbs·s/cp tokens."""
    return mbs * seq_len / cp * kept_token_bytes(model, tp, sp)


__all__ = ["kept_token_bytes", "linears", "op_sac", "recomputed_flops_per_token", "recomputed_gemm_time",
           "sac_activation_bytes", "sac_recompute_time"]
