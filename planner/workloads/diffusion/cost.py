"""Diffusion transformers under xDiT's parallel methods: time per image (text encoders, denoising steps, VAE decode)
and memory per GPU.

Per layer and pass over a sequence of S = image + text tokens (DiT, Peebles & Xie 2023; MMDiT, Esser et al. 2024;
Flux): GEMMs 2·S·(4·h² + 2·h·f) FLOPs, full (non-causal) attention 4·S²·h FLOPs. Parallel methods (Fang et al.
2024, xDiT; Fang & Zhao 2024, USP; Wang et al. 2024, PipeFusion), priced as xDiT runs them
(planner/workloads/diffusion/comm.py):
- Ulysses (degree u, Jacobs et al. 2023): four all-to-alls per layer (Q, K, V in, O out) of the rank's S/sp tokens,
  each between two layout copies; every rank then holds h/u of the heads over its ring block of keys.
- Ring (degree r, Liu et al. 2023): r attention kernels over key blocks of S/r (each at that key length's
  efficiency), fp32 merges of their outputs, K/V concatenations, a kernel floor per step and the K/V all-gather's
  excess over the first block. sp = u·r ranks share the sequence.
- PipeFusion (p stages, M patches): layers cut into p stages; after `warmup_steps` synchronous steps a stage
  runs one patch of the image's I/M tokens against the full, one-step-stale keys and values, and patches flow on
  across steps (a patch's next step needs only its own output), so the bubble is paid once:
      T = warmup · Σ_stages t(S) + ((steps − warmup)·M + p − 1) · turn
  Each patch carries the whole prompt: xfuser's patch-mode attention processors project, attend with and run the
  MLP of all T text tokens in every patch's forward (xfuser/model_executor/layers/attention_processor.py,
  xFuserJointAttnProcessor2_0, at xDiT 3858f12), so a patch is I/M + T queries against I + T keys. The patches
  circulate in a ring (the last stage sends each back to the first for its next step, pipeline_stable_diffusion_3
  _async_pipeline): with M patches in flight over p stages a patch returns to a stage after p·(t + hop), in which the
  stage has M patches to run, so turn = max(t + exposed hop, p·(t + hop)/M), and with xDiT's default M = p the
  hop is on the critical path. The patch sends are (S/(M·sp))·h·2 bytes.
- CFG parallel (2 groups): the conditional and unconditional passes run apart and the noise predictions are
  all-gathered once per step; without it a CFG model runs both passes (a batch of 2).
Once per image, on every rank (parts.py): the text encoders over the prompt (and the negative
prompt with CFG) and the VAE decoder at the image resolution, on one GPU or patch-parallel over the replica.
Collectives cross PCIe and, on PCIe-only machines, the CPU sockets (comm.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.comm.collectives import Collective, collective_time
from cost_models.compute.kernels import flash_attention_time, memory_time
from cost_models.inference import stage_layers
from cost_models.memory.footprint import BUFFER_ALLOWANCE_GIB
from meshcore import GIB, ClusterSpec, Dtype
from planner.workloads.diffusion.comm import ring_overhead, sdpa_flash_rate, send_recv, ulysses_time
from planner.workloads.diffusion.parts import TEXT_ENCODERS, encoder_time, vae_decode_time
from planner.workloads.diffusion.spec import (
    DiffusionJob,
    DiffusionLayout,
    DiffusionModel,
    image_tokens,
    t5_tokens,
    text_tokens,
)

BYTES = 2.0  # bf16 weights and activations
# Kernels the host issues for one stream of one block under torch.compile (diffusers' Flux/SD3 blocks as inductor
# fuses them): norm + modulation, Q, K, V and output projections, Q/K norm + rotary, attention, gate + residual,
# norm + modulation, two MLP GEMMs, activation, gate + residual
COMPILED_STREAM_OPS = 14.0


def stream_params(model: DiffusionModel) -> float:
    """Attention (Q, K, V, O: 4·h²) and MLP (2·h·f) weights of one stream of one block."""
    h = model.hidden_size
    return 4.0 * h * h + 2.0 * h * model.ffn_hidden_size


def block_params(model: DiffusionModel, double: bool) -> float:
    """One block: two streams with their adaLN modulations (MMDiT), or one (single-stream)."""
    h2 = model.hidden_size**2
    if double:
        return 2.0 * (stream_params(model) + model.double_modulation * h2)
    return stream_params(model) + model.single_modulation * h2


def transformer_params(model: DiffusionModel) -> float:
    """The backbone's blocks (embedders and the final layer, under 1 %, left out): Flux.1 11.8e9 of its 12e9."""
    return model.double_layers * block_params(model, True) + model.single_layers * block_params(model, False)


def sequence_len(model: DiffusionModel, job: DiffusionJob) -> int:
    """Image tokens + the text tokens the job's prompt length gives."""
    return image_tokens(model, job.resolution) + text_tokens(model, job)


def _passes(model: DiffusionModel, layout: DiffusionLayout, batch: int) -> int:
    """Sequences one rank runs per step: the batch, doubled for a CFG model without CFG parallelism."""
    return batch * (2 if model.cfg and layout.cfg == 1 else 1)


def layer_time(model: DiffusionModel, cluster: ClusterSpec, layout: DiffusionLayout, seq: int, queries: float,
               rows: int, double: bool, send_recv_ring: bool = False) -> float:
    """One block on one rank for `rows` sequences, each `queries` of its `seq` tokens as queries (all of them,
    or one PipeFusion patch) spread over the sp ranks: GEMMs at the curve's efficiency (roofline with the
    block's weights), element-wise traffic, one fused-attention kernel per ring block of seq/ring keys, the Ulysses
    all-to-alls and what the ring adds (comm.py); at least the host's time to issue the block's operators
    (COMPILED_STREAM_OPS per stream at the profile's host_op_us, as cost_models/compute/host.py prices a layer), which
    binds
    when a rank's share (a PipeFusion patch, a short sequence over many ranks) is small. `send_recv_ring`: the ring
    passes K/V by send/recv beside each step's attention (comm.ring_overhead) rather than by one all-gather."""
    gpu, h = cluster.gpu, model.hidden_size
    tokens = rows * queries / layout.sp
    flops = 2.0 * tokens * stream_params(model)
    eff = gpu.matmul_efficiency.at(flops / 6)
    gemm = max(flops / (gpu.peak(Dtype.BF16) * eff), memory_time(block_params(model, double) * BYTES, gpu))
    elementwise = memory_time(2.0 * tokens * (8.0 * h + 2.0 * model.ffn_hidden_size) * BYTES, gpu)
    block_keys = seq / layout.ring  # PyTorch SDPA's FlashAttention-2 (comm.sdpa_flash_rate)
    block = flash_attention_time(4.0 * rows * queries * block_keys * h / layout.sp, block_keys, model.head_dim,
                                 gpu)[0] / sdpa_flash_rate(gpu)
    attn = layout.ring * block
    a2a = ulysses_time(tokens, h, layout.ulysses, cluster)
    ring = ring_overhead(tokens, h, layout.ulysses, layout.ring, block, block, send_recv_ring, cluster)
    ops = (2.0 if double else 1.0) * COMPILED_STREAM_OPS
    return max(gemm + elementwise + attn + a2a + ring, ops * cluster.host_op_us * 1e-6)


def stage_times(model: DiffusionModel, cluster: ClusterSpec, layout: DiffusionLayout, seq: int, queries: float,
                rows: int, send_recv_ring: bool = False) -> tuple[float, ...]:
    """Seconds of each PipeFusion stage (double-stream blocks first) for one pass of `queries` per sequence."""
    args = (model, cluster, layout, seq, queries, rows)
    double_t = layer_time(*args, True, send_recv_ring) if model.double_layers else 0.0
    single_t = layer_time(*args, False, send_recv_ring) if model.single_layers else 0.0
    out, start = [], 0
    for n in stage_layers(model.num_layers, layout.pipefusion):
        doubles = max(0, min(start + n, model.double_layers) - start)
        out.append(doubles * double_t + (n - doubles) * single_t)
        start += n
    return tuple(out)


@dataclass(frozen=True)
class DiffusionPrediction:
    """Per image: `latency_s` = `encode_s` (text encoders) + `denoise_s` (all steps of the transformer) + `decode_s`
    (VAE); `step_s` = denoise_s / steps; `images_per_s` of all dp replicas; `memory_gib` per GPU (weights of the
    stage, encoders and VAE, stale K/V buffers, activations, allowance)."""

    latency_s: float
    step_s: float
    images_per_s: float
    memory_gib: float
    capacity_gib: float
    compute_s: float  # latency at perfect scaling of the one-GPU compute: how much the parallel methods lose
    encode_s: float = 0.0
    denoise_s: float = 0.0
    decode_s: float = 0.0

    @property
    def fits(self) -> bool:
        return self.memory_gib <= self.capacity_gib


def memory_gib(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, layout: DiffusionLayout) -> float:
    """Per GPU: the stage's block weights + encoders + (PipeFusion) the stale K, V of the stage's layers for the
    rank's share of the full sequence, 2·S·h·2/sp bytes per layer and pass, + activations of a pass, ~(6·h + f)
    per token, + the fixed allowance."""
    seq = sequence_len(model, job)
    layers = max(stage_layers(model.num_layers, layout.pipefusion))
    rows = _passes(model, layout, job.batch)
    weights = transformer_params(model) * layers / model.num_layers + model.encoder_params
    stale = 2.0 * seq * model.hidden_size * layers * rows / layout.sp if layout.pipefusion > 1 else 0.0
    act = rows * seq / layout.sp * (6.0 * model.hidden_size + model.ffn_hidden_size)
    return (weights + stale + act) * BYTES / GIB + BUFFER_ALLOWANCE_GIB


def encode_time(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob) -> float:
    """The text encoders once per request, over the prompts (and the negative prompts of a CFG model), on every
    rank (xDiT does not split them)."""
    prompts = job.batch * (2 if model.cfg else 1)
    return sum(encoder_time(TEXT_ENCODERS[e], t5_tokens(model, job), prompts, cluster) for e in model.text_encoders)


def decode_time(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, layout: DiffusionLayout) -> float:
    """The VAE decoder over the request's images: on one GPU of the replica, or patch-parallel over all of it."""
    side = job.resolution // model.vae_downsample
    ranks = layout.replica_gpus if job.parallel_vae else 1
    return vae_decode_time(side, model.latent_channels, job.batch, cluster, ranks)


def patch_turn(patch_s: float, hop_s: float, stages: int, patches: int, exposed_hop_s: float) -> float:
    """Seconds per patch on a stage of PipeFusion's ring (module docstring): the stage's own work and the part of
    the hop it cannot hide, or, when too few patches circulate to cover a round trip, p·(t + hop)/M; with M = p the
    whole hop."""
    return max(patch_s + exposed_hop_s, stages * (patch_s + hop_s) / patches)


def denoise_time(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, layout: DiffusionLayout) -> float:
    """All denoising steps of the transformer for one request (module docstring)."""
    seq = sequence_len(model, job)
    rows = _passes(model, layout, job.batch)
    # yunchang's send/recv ring: xDiT's PipeFusion path, and its only ring before the USP path of 2024-11 (comm.py)
    send_recv_ring = layout.pipefusion > 1 or job.send_recv_ring
    full = stage_times(model, cluster, layout, seq, seq, rows, send_recv_ring)
    gather = 0.0
    if layout.cfg > 1:
        latent = image_tokens(model, job.resolution) * model.latent_channels * model.patch_size**2 * BYTES
        gather = collective_time(Collective.ALL_GATHER, 2.0 * latent * job.batch, 2, layout.sp * layout.pipefusion,
                                 cluster)
    p = layout.pipefusion
    if p == 1:
        return job.steps * (full[0] + gather)
    hop_full = send_recv(seq / layout.sp * model.hidden_size * BYTES * rows, layout.sp, cluster)
    warm = min(job.warmup_steps, job.steps)
    queries = image_tokens(model, job.resolution) / layout.patches + text_tokens(model, job)
    patch = max(stage_times(model, cluster, layout, seq, queries, rows, send_recv_ring))
    hop = send_recv(seq / layout.patches / layout.sp * model.hidden_size * BYTES * rows, layout.sp, cluster)
    turn = patch_turn(patch, hop, p, layout.patches, cluster.gpu.exposed(hop, patch))
    steady = ((job.steps - warm) * layout.patches + p - 1) * turn if job.steps > warm else 0.0
    return warm * (sum(full) + (p - 1) * hop_full + gather) + steady + (job.steps - warm) * gather


def evaluate_diffusion(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob,
                       layout: DiffusionLayout) -> DiffusionPrediction:
    """Latency per image and images per second of one layout (module docstring for the formulas)."""
    encode = encode_time(model, cluster, job)
    denoise = denoise_time(model, cluster, job, layout)
    decode = decode_time(model, cluster, job, layout)
    latency = encode + denoise + decode
    one_gpu = DiffusionLayout()
    ideal = denoise_time(model, cluster, job, one_gpu) / layout.replica_gpus + encode + decode_time(
        model, cluster, job, one_gpu) / (layout.replica_gpus if job.parallel_vae else 1)
    return DiffusionPrediction(latency, denoise / job.steps, layout.dp * job.batch / latency,
                               memory_gib(model, cluster, job, layout), cluster.gpu.memory_gib, ideal,
                               encode, denoise, decode)
