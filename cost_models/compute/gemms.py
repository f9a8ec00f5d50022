"""The GEMMs of a decoder layer on one tensor-parallel rank (attention projections, MLP) and their forward and
backward times."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from cost_models.compute.flops import kv_heads_per_rank
from cost_models.compute.fp8 import sequence_parallel_casts
from cost_models.compute.kernels import Gemm, gemm_fwd_bwd_time
from cost_models.compute.knobs import LayerKnobs
from meshcore import ClusterSpec, Dtype, JobSpec, ModelSpec


def head_dims(model: ModelSpec) -> tuple[int, int]:
    """(query/key, value) width of one attention head: d and d, or MLA's d_nope + d_rope and d_v."""
    if model.mla is None:
        return model.head_dim, model.head_dim
    return model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim, model.mla.v_head_dim


def attention_gemms(model: ModelSpec, tokens: float, tp: int) -> tuple[Gemm, ...]:
    """Projection GEMMs of the attention block on one TP rank: QKV and output projection; with MLA the
    replicated down projections h -> r_q and h -> r_kv + d_rope, the split up projections r_q -> a·qk/t and
    r_kv -> a·(d_nope + d_v)/t, and the output projection a·d_v/t -> h (DeepSeek-V3 section 2.1.1)."""
    h, mla = model.hidden_size, model.mla
    if mla is None:
        q_local = model.q_dim / tp
        kv_local = kv_heads_per_rank(model, tp) * model.head_dim
        return Gemm(tokens, q_local + 2 * kv_local, h), Gemm(tokens, h, q_local)
    heads = model.num_attention_heads / tp
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    q = ((Gemm(tokens, mla.q_lora_rank, h), Gemm(tokens, heads * qk, mla.q_lora_rank)) if mla.q_lora_rank
         else (Gemm(tokens, heads * qk, h),))
    return (*q, Gemm(tokens, mla.kv_lora_rank + mla.qk_rope_head_dim, h),
            Gemm(tokens, heads * (mla.qk_nope_head_dim + mla.v_head_dim), mla.kv_lora_rank),
            Gemm(tokens, h, heads * mla.v_head_dim))


def mlp_gemms(model: ModelSpec, tokens: float, width: float) -> tuple[Gemm, Gemm]:
    """FC1 (gate and up when gated) and FC2 of an MLP of local width `width` on `tokens` rows."""
    h = model.hidden_size
    return Gemm(tokens, (2 if model.gated_mlp else 1) * width, h), Gemm(tokens, h, width)


def counted_gemms_time(gemms: Iterable[tuple[Gemm, float]], cluster: ClusterSpec, job: JobSpec,
                        dtype: Dtype | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of GEMMs each run `count` times as separate kernels, in `dtype` (default:
    the job's), with the FP8 casts of the job's recipe as its runtime runs it."""
    casts = job.runtime.priced_execution.casts(job.runtime.fp8_recipe)
    fwd = bwd = 0.0
    for g, count in gemms:
        gf, gb = gemm_fwd_bwd_time(g, cluster.gpu, dtype or job.dtype, job.trainable_fraction, casts)
        fwd, bwd = fwd + count * gf, bwd + count * gb
    return fwd, bwd


def split_gemms(model: ModelSpec, tokens: float, tp: int) -> tuple[tuple[Gemm, ...], ...]:
    """A dense layer's projections as separate GEMMs, grouped by the input they read (torchtitan's Llama,
    models/llama/model.py: `wq`, `wk`, `wv` on the normed input, `wo`; `w1` and `w3` on the normed input, `w2`):
    ((q, k, v), (o,), (gate, up), (down,)) on one TP rank, the gate and up only for a gated MLP (else (fc1,))."""
    h = model.hidden_size
    q, kv, f = model.q_dim / tp, kv_heads_per_rank(model, tp) * model.head_dim, model.ffn_hidden_size / tp
    up = (Gemm(tokens, f, h), Gemm(tokens, f, h)) if model.gated_mlp else (Gemm(tokens, f, h),)
    return (Gemm(tokens, q, h), Gemm(tokens, kv, h), Gemm(tokens, kv, h)), (Gemm(tokens, h, q),), up, (
        Gemm(tokens, h, f),)


def split_gemms_time(groups: Iterable[tuple[Gemm, ...]], cluster: ClusterSpec, job: JobSpec) -> tuple[float, float]:
    """(forward, backward) seconds of `split_gemms`: each GEMM a kernel of its own size (narrow key and value
    projections reach less of the peak, under TP down to HBM speed), and each input's FP8 cast and its re-cast for the
    weight gradient once per group: TP's PrepareFloat8ModuleInput casts the shared input once before its all-gather,
    and a compiled block computes the identical casts once."""
    casts = job.runtime.priced_execution.casts(job.runtime.fp8_recipe)
    shared = replace(casts, input_bytes=0.0, wgrad_bytes=0.0)
    fwd = bwd = 0.0
    for group in groups:
        for i, g in enumerate(group):
            gf, gb = gemm_fwd_bwd_time(g, cluster.gpu, job.dtype, job.trainable_fraction, shared if i else casts)
            fwd, bwd = fwd + gf, bwd + gb
    return fwd, bwd


def gemms_time(gemms: Iterable[Gemm], cluster: ClusterSpec, job: JobSpec) -> tuple[float, float]:
    return counted_gemms_time(((g, 1.0) for g in gemms), cluster, job)


def layer_gemms_time(gemms: Iterable[Gemm], cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs,
                     hidden: int) -> tuple[float, float]:
    """(forward, backward) seconds of a decoder layer's TP-split GEMMs (`gemms_time`); under sequence parallelism
    with t > 1 in fp8, the GEMMs that read or produce the gathered hidden state cast it on the local shard
    (`fp8.sequence_parallel_casts`)."""
    if not (knobs.sp and knobs.tp > 1 and cluster.gpu.has_fp8(job.dtype)):
        return gemms_time(gemms, cluster, job)
    casts = job.runtime.priced_execution.casts(job.runtime.fp8_recipe)
    fwd = bwd = 0.0
    for g in gemms:
        gf, gb = gemm_fwd_bwd_time(g, cluster.gpu, job.dtype, job.trainable_fraction,
                                   sequence_parallel_casts(g, hidden, casts, knobs.tp))
        fwd, bwd = fwd + gf, bwd + gb
    return fwd, bwd
