"""What a diffusion pipeline runs once per image beside the denoising steps: its text encoders and its VAE decoder.

Both run eagerly in xDiT's pipelines (only the transformer is handed to torch.compile: xfuser's
`--use_torch_compile`), on every rank of the replica, and are timed in xDiT's published latencies (its examples time
the whole `pipe(...)` call with the default `output_type="pil"`).

Text encoders (published architectures; one pass over the prompt, twice with classifier-free guidance for the
negative prompt):
    T5-XXL encoder  24 layers, d 4096, gated-GELU FFN 10240 (three matrices), 64 heads (google/t5-v1_1-xxl config)
    CLIP ViT-L/14 text    12 layers, d 768, FFN 3072, 77 tokens (openai/clip-vit-large-patch14)
    OpenCLIP ViT-bigG/14 text  32 layers, d 1280, FFN 5120, 77 tokens (laion/CLIP-ViT-bigG-14-laion2B-39B-b160k)
Per layer and sequence of T tokens: GEMMs 2·T·(4·d² + m·d·f) FLOPs (m = 3 gated, 2 plain) against weights read once
(roofline), attention 4·T²·d; and the host issues about 30 operators per layer (norms, projections, attention,
activation, residuals), so a short prompt is host-bound: time = max(GPU, operators · host_op_us).

VAE decoder (diffusers AutoencoderKL, the decoder shared by SD 1.x/2.x/XL/3 and Flux: block_out_channels
(128, 256, 512, 512), layers_per_block 2, GroupNorm 32 + SiLU; `latent_channels` in):
    conv_in (c_lat -> 512) and a mid block (2 ResNet blocks + one single-head attention over every latent pixel)
    at the latent resolution, then four up blocks of 3 ResNet blocks each at 512, 512, 256, 128 channels, the first
    three ending in a nearest x2 upsampling and a 3x3 conv, then GroupNorm, SiLU and conv_out (128 -> 3).
A 3x3 conv of c_in -> c_out over P pixels is an implicit GEMM of 2·9·c_in·c_out·P FLOPs (timed on the GPU's GEMM
curve); its element-wise work is counted in HBM passes of the tensors it touches, unfused (the VAE runs eagerly):
GroupNorm reads its input twice (statistics, then normalise) and writes once, SiLU reads and writes, a conv reads its
input and writes its output, plus a layout transpose of each (PyTorch's default NCHW tensors into cuDNN's NHWC
kernels, what xfuser's `--use_vae_channels_last_format` avoids), a residual add reads two and writes one.
Flux's decoder at 1024 px: 9.9 TFLOPs of convolution (128x128 latent), about 43 GB of traffic.
That roofline is not what the eager decoder achieves: diffusers' Decoder run operator by operator in bf16 on one H200
decodes FLUX.1's 1024 px latent in 89.9 ms (sgl-project/sglang#33818, warm, synchronised around the call), where the
roofline above gives 28.6 ms. The profile behind it (sgl-project/sglang#33451) names why: aten GroupNorm -> SiLU
chains (~46 % of the decode), and cuDNN's NCHW <-> NHWC transposes around every conv. The on-GPU time is therefore
divided by EAGER_DECODER_SHARE = 28.6 / 89.9 = 0.32, taken from that one measurement and carried to every GPU (not
measured elsewhere); the same pull requests' FLUX.2 decoder (32 latent channels, the same blocks) at 2048 px, 437.2
ms, is then predicted within 14 % (benchmarks/data/inference/vae_decode.yaml; tests/test_diffusion_xdit.py).

Patch-parallel VAE (xfuser `--use_parallel_vae`, DistVAE): every rank decodes 1/n of the rows, exchanging one halo
row per conv and all-reducing each GroupNorm's statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.comm.collectives import Collective, collective_time, p2p_time
from cost_models.compute.kernels import flash_attention_time, memory_time
from meshcore import ClusterSpec, Dtype

BYTES = 2.0  # bf16


@dataclass(frozen=True)
class TextEncoder:
    """A transformer text encoder: `layers` of width `hidden`, FFN `ffn` (`gated`: three matrices), `heads` heads,
    `tokens` fixed (CLIP's 77) or 0 (takes the job's T5 length)."""

    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    gated: bool
    tokens: int = 0


TEXT_ENCODERS = {e.name: e for e in (
    TextEncoder("t5-xxl", 24, 4096, 10240, 64, gated=True),
    TextEncoder("clip-l", 12, 768, 3072, 12, gated=False, tokens=77),
    TextEncoder("clip-g", 32, 1280, 5120, 20, gated=False, tokens=77),
)}
ENCODER_LAYER_OPS = 30.0  # host operators per eager encoder layer (norms, 4 projections, attention, FFN, residuals)

VAE_CHANNELS = (128, 256, 512, 512)  # AutoencoderKL block_out_channels (SD, SDXL, SD3, Flux)
VAE_RESNETS_PER_UP_BLOCK = 3  # layers_per_block 2 + 1 in the decoder
VAE_OPS_PER_RESNET = 8.0  # norm, SiLU, conv, norm, SiLU, conv, (shortcut), add
EAGER_DECODER_SHARE = 0.32  # roofline / measured eager decode, FLUX.1 1024 px on H200 (module docstring)


def encoder_time(encoder: TextEncoder, tokens: int, sequences: int, cluster: ClusterSpec) -> float:
    """Seconds for one pass of `sequences` prompts of `tokens` tokens (CLIP: its own 77) through `encoder`
    (module docstring: GEMM roofline per layer + attention, floored by the host's operator issue)."""
    gpu, d = cluster.gpu, encoder.hidden
    t = float(encoder.tokens or tokens) * sequences
    weights = 4.0 * d * d + (3.0 if encoder.gated else 2.0) * d * encoder.ffn
    flops = 2.0 * t * weights
    gemm = max(flops / (gpu.peak(Dtype.BF16) * gpu.matmul_efficiency.at(flops / 6)), memory_time(weights * BYTES, gpu))
    attn = flash_attention_time(4.0 * t * (t / sequences) * d, t / sequences, d / encoder.heads, gpu)[0]
    norms = memory_time(t * (8.0 * d + 2.0 * encoder.ffn) * BYTES, gpu)
    layer = max(gemm + attn + norms, ENCODER_LAYER_OPS * cluster.host_op_us * 1e-6)
    return encoder.layers * layer


@dataclass(frozen=True)
class VaeWork:
    """One decode: convolution FLOPs (each conv's own FLOPs, for its point of the GEMM curve), mid-block attention
    FLOPs over `attn_tokens` latent pixels, element-wise HBM bytes, operators issued, GroupNorms (one all-reduce
    each when patch-parallel) and convs (one halo exchange each), the halo bytes of one row of all convs."""

    convs: tuple[float, ...]
    attn_flops: float
    attn_tokens: int
    bytes: float
    ops: float
    norms: int
    halo_bytes: float


def _conv(c_in: int, c_out: int, pixels: float, k: int = 3) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of a k x k conv: implicit GEMM; reads its input, writes its output, each once more for the
    NCHW <-> NHWC transposes."""
    return 2.0 * k * k * c_in * c_out * pixels, 2.0 * (c_in + c_out) * pixels * BYTES


def _norm_act(c: int, pixels: float) -> float:
    """GroupNorm (two reads, one write) + SiLU (read, write): five passes."""
    return 5.0 * c * pixels * BYTES


def vae_decoder_work(latent_side: int, latent_channels: int) -> VaeWork:
    """The work of decoding a `latent_side`² latent of `latent_channels` channels (module docstring)."""
    convs: list[float] = []
    traffic = 0.0
    ops = 0.0
    norms = 0
    halo = 0.0

    def conv(c_in: int, c_out: int, pixels: float, side: float, k: int = 3) -> None:
        nonlocal traffic, ops, halo
        f, b = _conv(c_in, c_out, pixels, k)
        convs.append(f)
        traffic += b
        ops += 1
        halo += c_in * side * BYTES if k > 1 else 0.0

    def resnet(c_in: int, c_out: int, side: float) -> None:
        nonlocal traffic, ops, norms
        px = side * side
        traffic += _norm_act(c_in, px) + _norm_act(c_out, px) + 3.0 * c_out * px * BYTES  # + residual add
        conv(c_in, c_out, px, side)
        conv(c_out, c_out, px, side)
        if c_in != c_out:
            conv(c_in, c_out, px, side, k=1)
        ops += VAE_OPS_PER_RESNET - 2
        norms += 2

    side = float(latent_side)
    top = VAE_CHANNELS[-1]
    conv(latent_channels, top, side * side, side)
    resnet(top, top, side)
    tokens = latent_side * latent_side
    traffic += _norm_act(top, side * side) + 8.0 * top * side * side * BYTES  # attention's norm, q/k/v/o in and out
    convs += [2.0 * tokens * top * top] * 4
    norms += 1
    ops += 10
    resnet(top, top, side)
    c_prev = top
    for i, c in enumerate(reversed(VAE_CHANNELS)):
        for j in range(VAE_RESNETS_PER_UP_BLOCK):
            resnet(c_prev if j == 0 else c, c, side)
        c_prev = c
        if i < len(VAE_CHANNELS) - 1:
            traffic += 5.0 * c * side * side * BYTES  # nearest x2: read P, write 4P
            side *= 2
            conv(c, c, side * side, side)
            ops += 1
    traffic += _norm_act(c_prev, side * side)
    conv(c_prev, 3, side * side, side)
    norms += 1
    return VaeWork(tuple(convs), 4.0 * tokens * tokens * top, tokens, traffic, ops, norms, halo)


def vae_decode_time(latent_side: int, latent_channels: int, images: int, cluster: ClusterSpec,
                    ranks: int = 1) -> float:
    """Seconds to decode `images` latents on one GPU (`ranks` 1), or patch-parallel over `ranks` GPUs (each does
    1/ranks of the rows, plus a halo row exchange per conv and an all-reduce of its statistics per GroupNorm): the
    roofline of the decoder's work at the eager decoder's measured share of it (module docstring)."""
    gpu = cluster.gpu
    w = vae_decoder_work(latent_side, latent_channels)
    share = images / ranks
    conv = sum(f * share / (gpu.peak(Dtype.BF16) * gpu.matmul_efficiency.at(f * share)) for f in w.convs)
    attn = flash_attention_time(w.attn_flops * share, w.attn_tokens, VAE_CHANNELS[-1], gpu)[0]
    t = (conv + attn + memory_time(w.bytes * share, gpu)) / EAGER_DECODER_SHARE
    t = max(t, w.ops * cluster.host_op_us * 1e-6)
    if ranks > 1:
        t += 2.0 * len(w.convs) * p2p_time(w.halo_bytes / len(w.convs) * images, 1, cluster)
        t += w.norms * collective_time(Collective.ALL_REDUCE, 2.0 * 32 * 4.0, ranks, 1, cluster)
    return t
