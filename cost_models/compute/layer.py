"""Per-layer time of one micro-batch on one GPU, for a given (tp, cp, sp, mbs, recompute).

A layer's time depends only on those knobs and the hardware, never on pp, dp or the stage split,
so the search computes each `LayerTime` once and reuses it (DESIGN.md, performance notes).

Decoder layer, T = mbs·s/cp tokens per rank (Megatron-LM's TP layout, Shoeybi et al. 2019):
  GEMMs  QKV [T, h]x[h, (a·d + 2·g·d)/t], proj [T, a·d/t]x[a·d/t, h], FC1 [T, h]x[h, f/t] (x2 gated),
         FC2 [T, f/t]x[f/t, h]; backward 2 x forward.
  core   fused: 4·T·s·d·a/t FLOPs halved for the causal mask; unfused: batched QKᵀ and PV GEMMs
         plus softmax and dropout over the T·s·a/t scores (Korthikanti et al. 2022 Fig. 3).
  memory-bound  per token: two norms 2·4h, two residual adds 2·6h, dropout masks 2h (scaled by
         1/t under SP), rotary 4(a·d/t + g·d/t); backward 1.5 x; the activation as its kernels run it
         (`activation_bytes`: per element of f/t 6 and 10 bytes gated, 4 and 6 GELU, 8 and 20 unfused squared ReLU).
  TP     without SP forward 2 all-reduces of T·h·2 bytes, backward the same; with SP 2 all-gathers (fp8
         casts in fp8 training) + 2 reduce-scatters forward, and in the backward only the row layers' gradient
         all-gathers on the critical path, the column layers' re-gathers and reduce-scatters beside their GEMMs
         (`sequence_parallel_tp_time`); `Runtime.tp_comm_overlap` pipelines all of them with the layer's GEMMs
         (then only what the GEMMs cannot cover, plus their contention, is exposed).
  CP     ring attention passes K and V blocks (2·T·g·d·2 bytes) cp − 1 times forward, K, V and
         their gradients backward; hidden behind the attention kernel when it is longer. Causal steps after
         the diagonal attend to half blocks, and each step's output and gradients are merged at HBM speed
         (`ring_attention_merge_time`).
  MoE    an MoE layer replaces the MLP by router, routed and shared experts and two all-to-alls each
         way (`moe_mlp_time`), exposed unless `Runtime.moe_comm_overlap` pairs them with another
         micro-batch's compute; MLA replaces the QKV GEMMs by its low-rank projections (`attention_gemms`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from cost_models.comm.collectives import (
    Collective,
    collective,
    send_recv,
)
from cost_models.compute.elementwise import elementwise_time
from cost_models.compute.flops import attended_fraction, kv_heads_per_rank
from cost_models.compute.fp8 import amax_reductions_time
from cost_models.compute.gemms import (
    attention_gemms,
    gemms_time,
    head_dims,
    layer_gemms_time,
    mlp_gemms,
    split_gemms,
    split_gemms_time,
)
from cost_models.compute.host import layer_host_wait, tp_collective_calls
from cost_models.compute.kernels import (
    Gemm,
    flash_attention_time,
    gemm_efficiency,
    gemm_fwd_bwd_time,
    memory_time,
)
from cost_models.compute.knobs import LayerKnobs, LayerTime
from cost_models.compute.moe import moe_mlp_time
from cost_models.compute.packing import packed_attended_fraction, packed_key_len
from cost_models.compute.recompute import RecomputeTime, module_recompute_time
from cost_models.compute.sac import op_sac, sac_recompute_time
from meshcore import (
    AttentionKernel,
    ClusterSpec,
    Dtype,
    GpuSpec,
    JobSpec,
    ModelSpec,
    Recompute,
)
from meshcore.errors import LayoutError
from meshcore.execution import Elementwise
from meshcore.memo import Same
from meshcore.mesh import Dim


def _tp_comm(cluster: ClusterSpec, knobs: LayerKnobs, nbytes: float, count: int, multi_rail: bool) -> float:
    """`count` all-reduce-equivalents over the mesh's TP group."""
    return count * collective(Collective.ALL_REDUCE, nbytes, knobs.mesh.tp_group, cluster, multi_rail)


def sequence_parallel_tp_time(cluster: ClusterSpec, job: JobSpec, knobs: LayerKnobs, tokens: float, hidden: int,
                              blocks: int, gemm_f: float, gemm_b: float) -> tuple[float, float]:
    """(forward, backward) exposed seconds of the TP collectives of `blocks` column → row parallel pairs (attention:
    QKV → projection; MLP: FC1 → FC2) under sequence parallelism, as Transformer Engine's linear layers run them
    (transformer_engine/pytorch/module/{layernorm_linear,linear}.py, 1.x and later; Megatron-core's own
    tensor_parallel/layers.py does the same since sequence parallelism, Korthikanti et al. 2022):
      forward   the column layer all-gathers its normed input, the row layer reduce-scatters its output: both on
                the critical path;
      backward  the row layer all-gathers its output gradient before its GEMMs (exposed); the column layer
                re-gathers its input asynchronously beside its dgrad GEMM ("Overlap input AG with dgrad") and
                reduce-scatters dgrad beside its wgrad GEMM ("Overlap dgrad-RS/AR with wgrad"): hidden but for
                the SMs and bandwidth NCCL takes (`GpuSpec.exposed`).
    In fp8 the gathered tensors are the fp8 casts (1 byte per element: TE gathers `ln_out` after the fused norm +
    cast, and the row layer's gradient after its cast); reduce-scatters carry bf16 (2 bytes). With an all-reduce
    of T·h·2 bytes as the unit (an all-gather plus a reduce-scatter of bf16), an all-gather counts g = ½ (bf16) or
    ¼ (fp8) and a reduce-scatter ½:
        forward = blocks · (g + ½) · AR,   backward = blocks · g · AR + exposed(blocks · (g + ½) · AR, backward GEMMs)
    (the layer's backward GEMMs bound the window; the column layers' own dgrad and wgrad are most of it).
    With `Runtime.tp_comm_overlap` (userbuffers) every collective is chunked and pipelined with the GEMMs beside it."""
    unit = _tp_comm(cluster, knobs, tokens * hidden * 2, 1, job.runtime.multi_rail)
    gather = 0.25 if cluster.gpu.has_fp8(job.dtype) else 0.5
    pairs = blocks * (gather + 0.5) * unit  # an all-gather and a reduce-scatter per block, each way
    row_gathers = blocks * gather * unit  # the backward's exposed all-gathers of the row layers' output gradients
    gpu = cluster.gpu
    if job.runtime.tp_comm_overlap:
        return gpu.exposed(pairs, gemm_f), gpu.exposed(row_gathers + pairs, gemm_b)
    return pairs, row_gathers + gpu.exposed(pairs, gemm_b)


def _attention_core(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs,
                    ) -> tuple[float, float]:
    """(forward, backward) seconds of QKᵀ → softmax → ·V for the local heads (fused: the runtime's kernel)."""
    gpu, s = cluster.gpu, job.seq_len
    rate = job.runtime.priced_execution.attention_share(gpu.architecture)
    back = job.runtime.priced_execution.attention_backward_share(gpu.architecture)
    d_qk, d_v = head_dims(model)
    heads = model.num_attention_heads / knobs.tp
    q_len = s / knobs.cp
    if job.runtime.attention is AttentionKernel.FLASH:
        # packed documents attend within themselves: their causal blocks, at their own key length (packing.py)
        packed = bool(job.packed_doc_lens)
        pairs = (packed_attended_fraction(model, s, job.packed_doc_lens) if packed
                 else attended_fraction(model, s, causal=True))
        doc = packed_key_len(s, job.packed_doc_lens) if packed else float(s)
        flops = 2.0 * knobs.mbs * heads * q_len * s * (d_qk + d_v) * pairs
        if knobs.cp == 1 or not model.causal:
            # ring attention without a causal mask runs one kernel per block of s/cp keys
            return flash_attention_time(flops, min(s / knobs.cp, doc), d_qk, gpu, rate, back)
        # causal ring attention, load-balanced (TE's AttnFuncWithCPAndKVP2P: each rank holds chunks i and 2cp-1-i
        # of 2cp): the diagonal step, 1/cp of the work, attends to the rank's own s/cp keys; every later step
        # attends to half a block (s/2cp keys, or half the queries against s/cp keys): shorter kernels
        f1, b1 = flash_attention_time(flops / knobs.cp, min(s / knobs.cp, doc), d_qk, gpu, rate, back)
        f2, b2 = flash_attention_time(flops * (1 - 1 / knobs.cp), min(s / (2 * knobs.cp), doc), d_qk, gpu, rate,
                                      back)
        return f1 + f2, b1 + b2
    batch = knobs.mbs * heads
    scores = Gemm(q_len, s, d_qk, batch)
    values = Gemm(q_len, d_v, s, batch)
    f1, b1 = gemm_fwd_bwd_time(scores, gpu, job.dtype)
    f2, b2 = gemm_fwd_bwd_time(values, gpu, job.dtype)
    elements = batch * q_len * s
    # fused scale-mask-softmax reads and writes 2 B per score, dropout 2 + 2 + a 1 B mask; backward
    # reads output and gradient and writes a gradient (6 B), dropout backward 5 B
    fwd_bytes = elements * (4 + (5 if model.dropout else 0))
    bwd_bytes = elements * (6 + (5 if model.dropout else 0))
    return f1 + f2 + memory_time(fwd_bytes, gpu), b1 + b2 + memory_time(bwd_bytes, gpu)


def _measured_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, kind: str,
                   tp_collectives: int) -> LayerTime:
    """Forward and backward from the job's cost table; TP collectives stay analytical."""
    assert job.runtime.measured is not None
    if knobs.cp > 1:
        raise LayoutError("a cost table is measured on whole sequences: context parallelism (cp > 1) cannot use it")
    row = job.runtime.measured.get(kind, knobs.tp, knobs.mbs)
    tp = _tp_comm(cluster, knobs, knobs.mbs * job.seq_len * model.hidden_size * 2, tp_collectives,
                  job.runtime.multi_rail)
    if kind == "decoder" and knobs.recompute is Recompute.FULL:
        return LayerTime(row.forward_s, row.backward_s, row.forward_s, 3 * tp)  # the recompute repeats the forward TP
    return LayerTime(row.forward_s, row.backward_s, tp_comm=(2 * tp if kind == "decoder" else tp))


def ring_attention_merge_time(model: ModelSpec, knobs: LayerKnobs, tokens: float, gpu: GpuSpec,
                              merge: Elementwise | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of the element-wise work ring attention adds per ring step beside its kernels
    (Transformer Engine's AttnFuncWithCPAndKVP2P, transformer_engine/pytorch/attention.py), per local token, each of
    the cp steps, at HBM speed (bf16, widths per TP rank: q = a·d_qk/t, o = a·d_v/t, kv of the step's K and V):
      forward   the half K,V block a causal step uses made contiguous (read and write half of kv: 2·kv bytes) and
                the step's output merged into the running output by `flash_attn_fwd_out_correction` (read the
                step's output, read and write the running one: 6·o);
      backward  the step's dQ added into dQ (6·q), its dK,dV added into the buffer that travels the ring
                (6·kv) and the half-block copy again (2·kv).
    Softmax-statistics corrections (one value per head and token) are left out. A runtime whose ring attention merges
    otherwise gives its bytes per step as `merge` (Execution.ring_merge: coefficients of the q and kv widths above;
    torch's context parallelism merges each step's output in fp32 in eager kernels)."""
    if knobs.cp == 1:
        return 0.0, 0.0
    d_qk, d_v = head_dims(model)
    heads = model.num_attention_heads / knobs.tp
    kv = (heads * (d_qk + d_v) if model.mla is not None
          else 2 * kv_heads_per_rank(model, knobs.tp) * model.head_dim)
    if merge is not None:
        return (knobs.cp * memory_time(tokens * merge.forward.per_token(0.0, heads * d_v, kv, 0.0), gpu),
                knobs.cp * memory_time(tokens * merge.backward.per_token(0.0, heads * d_qk, kv, 0.0), gpu))
    forward = knobs.cp * memory_time(tokens * (6 * heads * d_v + 2 * kv), gpu)
    backward = knobs.cp * memory_time(tokens * (6 * heads * d_qk + 8 * kv), gpu)
    return forward, backward


def decoder_layer_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs,
                       moe: bool = False) -> LayerTime:
    """One decoder layer (with an MoE MLP when `moe`), one micro-batch, on one GPU: its passes (`layer_passes`,
    the same for every recomputation) and what its recomputation adds."""
    if job.runtime.measured is not None:
        if moe:
            raise LayoutError("cost tables hold dense decoder layers; an MoE model needs the analytical model")
        return _measured_time(model, job, cluster, knobs, "decoder", 2)
    p = _passes(Same(model), Same(job), Same(cluster), knobs.tp, knobs.cp, knobs.sp, knobs.mbs, knobs.ep, knobs.etp,
                moe)
    gpu, fwd, bwd, ep_fwd = cluster.gpu, p.forward, p.backward, p.ep_forward
    if knobs.recompute is Recompute.FULL:
        recompute, tp_re, ep_re = fwd, p.tp_forward, ep_fwd
    elif op_sac(job, knobs, moe):
        recompute, tp_re, ep_re = sac_recompute_time(model, job, cluster, knobs, p.elementwise_forward, p.tp_forward)
    else:
        redo = RecomputeTime(core_f=p.core_forward, tp_collective=_tp_comm(cluster, knobs, p.tokens *
                                                                           model.hidden_size * 2, 1,
                                                                           job.runtime.multi_rail),
                             moe_forward=p.moe_forward, ep_forward=ep_fwd)
        recompute, tp_re, ep_re = module_recompute_time(model, job, cluster, knobs, moe, redo)
    ep = 2 * ep_fwd + ep_re
    if job.runtime.moe_comm_overlap:  # hidden behind another micro-batch's attention and MLP, as far as it goes
        ep = gpu.exposed(ep, fwd + bwd + recompute)
    ep_pass = ep / (2 + (ep_re > 0))  # the exposed all-to-all time of one pass
    passes = (fwd + p.tp_forward + p.cp_forward + ep_pass, bwd + p.tp_backward + p.cp_backward + ep_pass,
              recompute + tp_re + (ep_pass if ep_re > 0 else 0.0))
    legacy = job.runtime.attention is AttentionKernel.UNFUSED  # Megatron-LM's own layer code, no TE
    # dropless routing syncs the host before the expert all-to-all; padding to a capacity does not (compute.host)
    synced = moe and model.moe is not None and job.runtime.moe_capacity_factor is None
    host = layer_host_wait(model, cluster, knobs.ep, moe, passes, recompute / fwd if fwd > 0 else 0.0, legacy,
                           tp_collective_calls(knobs.tp, knobs.sp), p.moe_forward + ep_pass if synced else None)
    host += job.runtime.priced_execution.host_layer_s * (2 + (recompute > 0))  # the runtime's fixed cost per pass
    return LayerTime(fwd, bwd, recompute, p.tp_forward + p.tp_backward + tp_re, p.cp_forward + p.cp_backward, ep,
                     host)


def decoder_layer_floor(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs,
                        moe: bool = False) -> LayerTime | None:
    """Field by field at most `decoder_layer_time` of the same arguments (so its total too: the same sums of larger
    or equal non-negative floats), from the passes alone, which every recomputation of these degrees shares: the
    forward, backward, TP and CP fields of the passes as they are; full recomputation's forward, TP and expert
    traffic again (it recomputes the same forward); the expert all-to-alls 2·e (+ e again when fully recomputed),
    or κ·(1 − 1e-9) of them under `Runtime.moe_comm_overlap` (`GpuSpec.exposed`(x, w) >= κ·x for κ <= 1, less
    1e-9 for its rounding); the runtime's fixed host cost of the two passes (three when fully recomputed). Selective
    recomputation and the host waits, >= 0, are left out. None with a cost table (no passes)."""
    if job.runtime.measured is not None:
        return None
    p = _passes(Same(model), Same(job), Same(cluster), knobs.tp, knobs.cp, knobs.sp, knobs.mbs, knobs.ep, knobs.etp,
                moe)
    full = knobs.recompute is Recompute.FULL
    ep = 2 * p.ep_forward + (p.ep_forward if full else 0.0)
    if job.runtime.moe_comm_overlap:
        ep = (1.0 - cluster.gpu.overlap_efficiency) * ep * (1 - 1e-9)
    host = job.runtime.priced_execution.host_layer_s * (2 + (full and p.forward > 0))
    return LayerTime(p.forward, p.backward, p.forward if full else 0.0,
                     p.tp_forward + p.tp_backward + (p.tp_forward if full else 0.0), p.cp_forward + p.cp_backward, ep,
                     host)


@dataclass(frozen=True)
class LayerPasses:
    """One decoder layer's forward and backward before recomputation: compute (GEMMs, attention core, elementwise),
    the attention core's, elementwise and MoE MLP's forward compute, the forward expert-parallel traffic, the exposed
    TP and CP traffic, and its tokens per rank."""

    forward: float
    backward: float
    core_forward: float
    elementwise_forward: float
    moe_forward: float
    ep_forward: float
    tp_forward: float
    tp_backward: float
    cp_forward: float
    cp_backward: float
    tokens: float


def attention_passes(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs
                     ) -> tuple[float, float, float, float, float, float]:
    """(forward, backward) of a decoder layer's attention GEMMs, of its attention core with the ring merge, and of
    its exposed CP ring traffic: what `layer_passes` adds before the MLP, the same for a dense and an MoE layer."""
    tokens = knobs.mbs * job.seq_len / knobs.cp
    if job.runtime.priced_execution.split_projections and model.mla is None:
        fwd, bwd = split_gemms_time(split_gemms(model, tokens, knobs.tp)[:2], cluster, job)
    else:
        fwd, bwd = layer_gemms_time(attention_gemms(model, tokens, knobs.tp), cluster, job, knobs, model.hidden_size)
    core_f, core_b = _attention_core(model, job, cluster, knobs)
    merge_f, merge_b = ring_attention_merge_time(model, knobs, tokens, cluster.gpu,
                                                 job.runtime.priced_execution.ring_merge)
    core_f, core_b = core_f + merge_f, core_b + merge_b
    return (fwd, bwd, core_f, core_b, *_cp_ring_time(model, cluster, knobs, tokens, core_f, core_b))


def layer_passes(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, moe: bool = False,
                 attention: tuple[float, float, float, float, float, float] | None = None) -> LayerPasses:
    """What `decoder_layer_time` prices before recomputation (it reads no recomputation knob); `attention`: its
    `attention_passes` when the caller has them."""
    gpu, t = cluster.gpu, knobs.tp
    h, f = model.hidden_size, model.ffn_hidden_size
    tokens = knobs.mbs * job.seq_len / knobs.cp
    split = job.runtime.priced_execution.split_projections and model.mla is None
    groups = split_gemms(model, tokens, t) if split else ()
    fwd, bwd, core_f, core_b, cp_f, cp_b = attention or attention_passes(model, job, cluster, knobs)
    ep_fwd, mlp_collectives, moe_f = 0.0, 1, 0.0
    if moe and model.moe is not None:
        part = moe_mlp_time(model, job, cluster, knobs, tokens)
        fwd, bwd, ep_fwd, moe_f = fwd + part.forward, bwd + part.backward, part.comm_forward, part.forward
        mlp_collectives = 1 if model.moe.shared_ffn_hidden_size else 0
    else:
        mf, mb = split_gemms_time(groups[2:], cluster, job) if split else layer_gemms_time(
            mlp_gemms(model, tokens, f / t), cluster, job, knobs, h)
        fwd, bwd = fwd + mf, bwd + mb
    gemm_f, gemm_b = fwd, bwd
    ew_f, ew_b = elementwise_time(model, job, knobs, tokens, gpu, moe)
    tp_f, tp_b = _layer_tp_time(model, job, cluster, knobs, tokens, 1 + mlp_collectives, gemm_f, gemm_b)
    return LayerPasses(fwd + core_f + ew_f, bwd + core_b + ew_b, core_f, ew_f, moe_f, ep_fwd, tp_f, tp_b, cp_f, cp_b,
                       tokens)


@lru_cache(maxsize=4096)
def _passes(model: Same, job: Same, cluster: Same, tp: int, cp: int, sp: bool, mbs: int, ep: int, etp: int,
            moe: bool) -> LayerPasses:
    """`layer_passes`, remembered by the specs' identity (meshcore.memo): a search prices each layer at every
    recomputation (none, selective module sets, full), which share them."""
    m, j, c = model.value, job.value, cluster.value
    assert isinstance(m, ModelSpec) and isinstance(j, JobSpec) and isinstance(c, ClusterSpec)
    return layer_passes(m, j, c, LayerKnobs(tp, cp, sp, mbs, Recompute.NONE, ep, etp), moe,
                        _attention(model, job, cluster, tp, cp, sp, mbs, ep, etp))


@lru_cache(maxsize=4096)
def _attention(model: Same, job: Same, cluster: Same, tp: int, cp: int, sp: bool, mbs: int, ep: int, etp: int
               ) -> tuple[float, float, float, float, float, float]:
    """`attention_passes`, remembered as `_passes` is: a dense and an MoE layer of the same degrees share them."""
    m, j, c = model.value, job.value, cluster.value
    assert isinstance(m, ModelSpec) and isinstance(j, JobSpec) and isinstance(c, ClusterSpec)
    return attention_passes(m, j, c, LayerKnobs(tp, cp, sp, mbs, Recompute.NONE, ep, etp))


def _layer_tp_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs, tokens: float,
                   collectives: int, gemm_f: float, gemm_b: float) -> tuple[float, float]:
    """Exposed TP communication of one layer's forward and backward: `collectives` all-reduces of its activations
    (tokens x hidden, 2 bytes), or under sequence parallelism their reduce-scatter and all-gather pairs with the
    amax reductions of fp8; with TP communication overlap, hidden behind the GEMMs beside them."""
    gpu, h = cluster.gpu, model.hidden_size
    if knobs.sp and knobs.tp > 1:
        tp_fwd, tp_bwd = sequence_parallel_tp_time(cluster, job, knobs, tokens, h, collectives, gemm_f, gemm_b)
        amax_f, amax_b = amax_reductions_time(job, cluster, knobs, collectives)
        return tp_fwd + amax_f, tp_bwd + amax_b
    tp_fwd = tp_bwd = _tp_comm(cluster, knobs, tokens * h * 2, collectives, job.runtime.multi_rail)
    if job.runtime.tp_comm_overlap and knobs.tp > 1:  # chunked and pipelined with the GEMMs beside them
        tp_fwd, tp_bwd = gpu.exposed(tp_fwd, gemm_f), gpu.exposed(tp_bwd, gemm_b)
    return tp_fwd, tp_bwd


def _cp_ring_time(model: ModelSpec, cluster: ClusterSpec, knobs: LayerKnobs, tokens: float, core_f: float,
                  core_b: float) -> tuple[float, float]:
    """Exposed ring-attention traffic of one layer's forward and backward under CP: cp − 1 sends of the local
    K and V blocks to the ring neighbour (twice in backward: the blocks and their gradients), hidden behind the
    attention core of the same pass."""
    if knobs.cp == 1:
        return 0.0, 0.0
    d_qk, d_v = head_dims(model)
    kv_width = (model.num_attention_heads / knobs.tp * (d_qk + d_v) if model.mla is not None
                else 2 * kv_heads_per_rank(model, knobs.tp) * model.head_dim)
    block = tokens * kv_width * 2
    ring = (knobs.cp - 1) * send_recv(block, knobs.mesh.neighbours(Dim.CP), cluster)
    return cluster.gpu.exposed(ring, core_f), cluster.gpu.exposed(2 * ring, core_b)


def embedding_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs) -> LayerTime:
    """Vocabulary-parallel lookup (+ learned positions): memory-bound, one TP reduction forward."""
    if job.runtime.measured is not None:
        return _measured_time(model, job, cluster, knobs, "embedding", 1)
    tokens = knobs.mbs * job.seq_len / knobs.cp
    h = model.hidden_size
    nbytes = tokens * h * (2 + (4 if model.learned_positions else 0) + (1 if model.dropout else 0))
    t = memory_time(nbytes, cluster.gpu)
    tp = _tp_comm(cluster, knobs, tokens * h * 2, 1, job.runtime.multi_rail)
    # a frozen embedding (LoRA) scatters no gradient into its table
    return LayerTime(forward=t, backward=2 * t if job.trainable_fraction >= 1 else 0.0, tp_comm=tp)


def vision_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs) -> LayerTime:
    """The vision encoder and projector for one micro-batch (first stage): the patch embedding as a GEMM
    [images·patches, 3·p²]x[3·p², h_v], the encoder's layers priced as bidirectional transformer layers on
    images·tokens rows (TP like the language model, no context parallelism: images are not split), and the
    projector MLP on the patch tokens (the class token is dropped)."""
    vision = model.vision
    if vision is None:
        return LayerTime()
    encoder = vision.as_model()
    images = knobs.mbs * vision.images
    vjob = JobSpec(seq_len=vision.tokens, global_batch=1, dtype=job.dtype, runtime=job.runtime)
    vknobs = LayerKnobs(knobs.tp, 1, knobs.sp, images, knobs.recompute)
    rows = images * vision.patches
    width = vision.projector_hidden or model.hidden_size
    gemms = [Gemm(rows, vision.hidden_size, 3 * vision.patch_size**2), Gemm(rows, width / knobs.tp, vision.hidden_size)]
    if vision.projector_hidden:
        gemms.append(Gemm(rows, model.hidden_size, width / knobs.tp))
    fwd, bwd = gemms_time(tuple(gemms), cluster, job)
    return LayerTime(fwd, bwd) + decoder_layer_time(encoder, vjob, cluster, vknobs).scaled(vision.num_layers)


# Bytes per logit of Megatron-core's vocabulary-parallel cross-entropy (megatron/core/tensor_parallel/
# cross_entropy.py, kernels as fused by megatron/core/fusions/fused_cross_entropy.py), forward: the fp32 copy of
# the bf16 logits with their maximum (read 2, write 4), shift, exp and sum (read 4, write the exp 4), the softmax
# normalised in place (read 4, write 4); backward: the saved softmax times the loss gradient in place (read 4,
# write 4) and its cast back to bf16 for the head's GEMMs (read 4, write 2). Unfused (one kernel per op) the
# forward is 38.
LOSS_FORWARD_BYTES = 22.0
LOSS_BACKWARD_BYTES = 14.0


def _head_gemm_times(head: Gemm, job: JobSpec, gpu: GpuSpec) -> tuple[float, float]:
    """The LM head GEMM's forward and backward (with LoRA the head is frozen and has no adapter: its input gradient
    only). Where the runtime's output layer multiplies through torch.matmul with fp16 accumulation
    (Execution.head_fp16_accumulation) and the GPU has a faster peak for it (peak_fp16acc_tflops: GeForce cards, twice
    the fp32-accumulate peak, NVIDIA's Ada whitepaper), the forward and the input gradient run at that peak, same
    share of it; the weight gradient accumulates in fp32 into main_grad (Megatron's gradient_accumulation_fusion)."""
    gf, gb = gemm_fwd_bwd_time(head, gpu, Dtype.BF16, 1.0 if job.trainable_fraction >= 1 else 0.0)
    if not (job.runtime.priced_execution.head_fp16_accumulation and gpu.peak_fp16acc_tflops):
        return gf, gb
    fast = max(head.flops / (gpu.peak_fp16acc_tflops * 1e12 * gemm_efficiency(head.flops, gpu, Dtype.BF16)),
               memory_time(head.bytes(), gpu))
    return fast, fast + (gb - gf)


def head_time(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, knobs: LayerKnobs) -> LayerTime:
    """Final norm, LM head GEMM [T, h]x[h, V/t] (bf16 even in fp8 runs) and vocabulary-parallel cross-entropy over
    the V/t logits per token, in fp32 (LOSS_FORWARD_BYTES, LOSS_BACKWARD_BYTES per logit at HBM speed)."""
    if job.runtime.measured is not None:
        return _measured_time(model, job, cluster, knobs, "lm_head", 1)
    tokens = knobs.mbs * job.seq_len / knobs.cp
    h, v = model.hidden_size, model.vocab_size / knobs.tp
    head = Gemm(tokens, v, h)
    # the output layer is Megatron's own column-parallel linear, outside Transformer Engine's fp8 autocast: it
    # runs in bf16 in fp8 training (so does DeepSeek-V3's output head, report section 3.3.1)
    gf, gb = _head_gemm_times(head, job, cluster.gpu)
    r = 1.0 / knobs.tp if knobs.sp else 1.0
    norm = memory_time(tokens * 4 * h * r, cluster.gpu)
    loss_f = memory_time(tokens * LOSS_FORWARD_BYTES * v, cluster.gpu)
    loss_b = memory_time(tokens * LOSS_BACKWARD_BYTES * v, cluster.gpu)
    return LayerTime(forward=gf + norm + loss_f, backward=gb + 2 * norm + loss_b,
                     tp_comm=_tp_comm(cluster, knobs, tokens * h * 2, 1, job.runtime.multi_rail))
