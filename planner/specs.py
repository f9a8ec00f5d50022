"""Frozen descriptions of what is planned: the model, the cluster, the job and a parallel layout.

Everything downstream (cost model, search, emitters) reads these objects and nothing else; raw
dicts from files live only in `planner.loaders` and `hardware_profiles`. Each class validates itself
on construction and raises `SpecError` / `LayoutError` with a message that names the rule and the
numbers that broke it.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import TYPE_CHECKING

from planner.checks import MAX_GLOBAL_BATCH, MAX_GPUS, MAX_LAYERS, MAX_SEQ_LEN, MAX_WIDTH, finite, integer, is_integer
from planner.errors import LayoutError, SpecError

if TYPE_CHECKING:
    from cost_models.profile import MeasuredCosts

GIB = 1024**3


class Dtype(str, Enum):
    """Precision of the matrix multiplications (weights stay bf16, master weights fp32)."""

    BF16 = "bf16"
    FP8 = "fp8"


class Recompute(str, Enum):
    """Activation recomputation (Korthikanti et al. 2022, section 4-5)."""

    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention core (QK^T, softmax, dropout, PV)
    FULL = "full"  # keep only each layer's input, recompute the whole layer in backward


class RecomputeModule(str, Enum):
    """Parts of a decoder layer that selective recomputation may recompute: megatron-core 0.16.1's
    `--recompute-modules` choices (TransformerConfig.recompute_modules; cost_models.memory says what each frees).
    layernorm, mla_up_proj and moe_act discard their outputs after use and recompute them in backward; core_attn,
    mlp, moe and shared_experts checkpoint their block, keeping its input."""

    CORE_ATTN = "core_attn"
    MOE_ACT = "moe_act"
    LAYERNORM = "layernorm"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE = "moe"
    SHARED_EXPERTS = "shared_experts"

    @classmethod
    def parse(cls, text: str) -> frozenset[RecomputeModule]:
        """Comma-separated module names, e.g. "layernorm,mla_up_proj,moe_act"."""
        names = [n.strip() for n in text.split(",") if n.strip()]
        allowed = [m.value for m in cls]
        unknown = [n for n in names if n not in allowed]
        if unknown or not names:
            raise LayoutError(f"unknown recompute module(s) {', '.join(unknown) or repr(text)}; allowed: "
                              f"{', '.join(allowed)}")
        return frozenset(cls(n) for n in names)


# Megatron's default for --recompute-granularity selective
DEFAULT_RECOMPUTE_MODULES = frozenset({RecomputeModule.CORE_ATTN})


def module_names(modules: frozenset[RecomputeModule]) -> list[str]:
    """Module names in Megatron's order (the enum's)."""
    return [m.value for m in RecomputeModule if m in modules]


def non_default_modules(layout: Layout) -> bool:
    """The layout recomputes modules other than selective recomputation's default (reports name them then)."""
    return bool(layout.recompute_modules) and layout.recompute_modules != DEFAULT_RECOMPUTE_MODULES


class Schedule(str, Enum):
    """Pipeline schedules (cost_models.schedules has their closed forms and op orders)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved-1f1b"
    ZB_H1 = "zb-h1"  # zero-bubble, backward split into input and weight gradients (Qi et al. 2023)
    ZB_V = "zb-v"  # zero-bubble on two chunks per rank placed as a V (Qi et al. 2024; torch's ZBVZeroBubble)
    WAVE = "wave"  # chunks placed as waves down and back up the ranks (Hanayo, Liu et al. SC'23), unsplit backward


WAVE_PLACED = frozenset({Schedule.ZB_V, Schedule.WAVE})  # chunk k on rank k going down, then back up, ...


def wave_rank(chunk: int, pp: int) -> int:
    """Rank of model chunk `chunk` when chunks sweep down the ranks and back up in turn: sweep j = chunk // pp
    runs ranks 0..pp−1 when j is even and pp−1..0 when odd (ZB-V's V is two sweeps, a wave of W waves 2W)."""
    sweep, offset = divmod(chunk, pp)
    return offset if sweep % 2 == 0 else pp - 1 - offset


def wave_chunks(rank: int, pp: int, vpp: int) -> tuple[int, ...]:
    """The chunks `wave_rank` puts on `rank`, one per sweep, in model order."""
    return tuple(j * pp + (rank if j % 2 == 0 else pp - 1 - rank) for j in range(vpp))


class ZeroStage(IntEnum):
    """What the data-parallel group shards: 1 optimizer state, 2 + gradients, 3 + weights."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    WEIGHTS = 3


class Norm(str, Enum):
    LAYERNORM = "layernorm"  # weight and bias
    RMSNORM = "rmsnorm"  # weight only


class AttentionKernel(str, Enum):
    """Which attention implementation runs: it changes both time and stored activations."""

    FLASH = "flash"  # fused, causal blocks skipped, no s^2 tensor kept (FlashAttention-2/3, cuDNN)
    UNFUSED = "unfused"  # batched GEMMs + softmax + dropout kept in memory (Megatron 2021-2022)


class LayerKind(str, Enum):
    EMBEDDING = "embedding"
    DECODER = "decoder"
    FINAL_NORM = "final_norm"
    LM_HEAD = "lm_head"
    LOSS = "loss"


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts MLPs: `num_experts` routed experts of width `ffn_hidden_size`, `top_k` per token,
    plus shared experts of total width `shared_ffn_hidden_size`; the first `first_dense_layers` layers
    stay dense, after them every `every`-th layer is MoE (1: all)."""

    num_experts: int
    top_k: int
    ffn_hidden_size: int
    shared_ffn_hidden_size: int = 0
    first_dense_layers: int = 0
    every: int = 1
    router_bias: bool = False  # a per-expert bias on the router scores (DeepSeek-V3)
    groups: int = 1  # experts form this many routing groups ...
    group_top_k: int = 0  # ... of which a token may use this many (0: no limit; DeepSeek-V3: 4 of 8)

    def __post_init__(self) -> None:
        for key, name, low in (("moe_num_experts", "num_experts", 1), ("moe_top_k", "top_k", 1),
                               ("moe_ffn_hidden_size", "ffn_hidden_size", 1),
                               ("moe_shared_ffn_hidden_size", "shared_ffn_hidden_size", 0),
                               ("moe_first_dense_layers", "first_dense_layers", 0), ("moe_every", "every", 1),
                               ("moe_groups", "groups", 1), ("moe_group_top_k", "group_top_k", 0)):
            integer(getattr(self, name), key, low, MAX_LAYERS if name in ("first_dense_layers", "every") else MAX_WIDTH,
                    SpecError)
        if self.top_k > self.num_experts:
            raise SpecError(f"moe_top_k {self.top_k} must be at most moe_num_experts {self.num_experts}")
        if self.num_experts % self.groups or self.group_top_k > self.groups:
            raise SpecError(f"moe_groups must divide moe_num_experts and 0 <= moe_group_top_k <= moe_groups, got "
                            f"{self.groups} and {self.group_top_k} for {self.num_experts} experts")

    def is_moe_layer(self, index: int) -> bool:
        return index >= self.first_dense_layers and (index - self.first_dense_layers) % self.every == self.every - 1

    def count_moe_layers(self, num_layers: int) -> int:
        """MoE layers among the first `num_layers`: every `every`-th after the dense ones."""
        return max(0, num_layers - self.first_dense_layers) // self.every

    def layer_kinds(self, num_layers: int) -> tuple[bool, ...]:
        """Per decoder layer: True where its MLP is a mixture of experts."""
        return tuple(self.is_moe_layer(i) for i in range(num_layers))


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2/V3): low-rank query and key-value projections."""

    q_lora_rank: int  # 0: full-rank query projection
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name, low in (("q_lora_rank", 0), ("kv_lora_rank", 1), ("qk_nope_head_dim", 0), ("qk_rope_head_dim", 0),
                          ("v_head_dim", 1)):
            integer(getattr(self, name), f"mla_{name}", low, MAX_WIDTH, SpecError)


@dataclass(frozen=True)
class VisionSpec:
    """A vision encoder in front of the language model (LLaVA-style): a ViT of `num_layers` pre-norm layers
    (LayerNorm, biased linears, GELU MLP, bidirectional attention) over `tokens` patch tokens per image
    (a class token included when `class_token`), `images` images per sample, then a projector MLP to the
    language model's width (hidden width `projector_hidden`, 0 for a single linear map)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    image_size: int
    patch_size: int
    projector_hidden: int
    class_token: bool = True
    images: int = 1  # per sample (sequence)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "image_size",
                     "patch_size", "images"):
            high = MAX_LAYERS if name == "num_layers" else MAX_WIDTH
            integer(getattr(self, name), f"vision encoder: {name}", 1, high, SpecError)
        integer(self.projector_hidden, "vision encoder: projector_hidden", 0, MAX_WIDTH, SpecError)
        if self.image_size % self.patch_size or self.hidden_size % self.num_attention_heads:
            raise SpecError("vision encoder: image_size must be a multiple of patch_size and hidden_size of the heads")

    @property
    def patches(self) -> int:
        return (self.image_size // self.patch_size) ** 2

    @property
    def tokens(self) -> int:
        """Tokens the encoder runs on per image."""
        return self.patches + int(self.class_token)

    def as_model(self) -> ModelSpec:
        """The encoder's layers as a (bidirectional) transformer stack the layer cost model can price."""
        return ModelSpec(name="vision-encoder", num_layers=self.num_layers, hidden_size=self.hidden_size,
                         ffn_hidden_size=self.ffn_hidden_size, num_attention_heads=self.num_attention_heads,
                         num_kv_heads=self.num_attention_heads, head_dim=self.hidden_size // self.num_attention_heads,
                         vocab_size=1, gated_mlp=False, tied_embeddings=True, norm=Norm.LAYERNORM, qkv_bias=True,
                         linear_bias=True, learned_positions=self.tokens, causal=False)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer: dense, or with mixture-of-experts MLPs (`moe`), multi-head latent
    attention (`mla`), multi-token-prediction modules and a vision encoder in front (`vision`).

    `head_dim` defaults to hidden/heads and `num_kv_heads` to heads (MHA) in the loaders; here both
    are explicit. `learned_positions` is the size of a learned position table (GPT-2/3 style), 0 for
    rotary embeddings.
    """

    name: str
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    gated_mlp: bool
    tied_embeddings: bool
    norm: Norm = Norm.RMSNORM
    qkv_bias: bool = False
    linear_bias: bool = False
    learned_positions: int = 0
    dropout: bool = False
    qk_norm: bool = False  # RMSNorm on each query and key head (Qwen3)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    mtp_layers: int = 0  # multi-token-prediction modules after the last layer (DeepSeek-V3)
    vision: VisionSpec | None = None  # a vision encoder and projector on the first pipeline stage (VLMs)
    causal: bool = True  # causal self-attention (False for encoders: every query sees every key)

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                     "num_kv_heads", "head_dim", "vocab_size"):
            integer(getattr(self, name), f"model {self.name!r}: {name}", 1,
                    MAX_LAYERS if name == "num_layers" else MAX_WIDTH, SpecError)
        integer(self.learned_positions, f"model {self.name!r}: learned_positions", 0, MAX_SEQ_LEN, SpecError)
        integer(self.mtp_layers, f"model {self.name!r}: mtp_layers", 0, MAX_LAYERS, SpecError)
        if self.moe is not None and self.moe.count_moe_layers(self.num_layers) < 1:
            raise SpecError(f"model {self.name!r}: moe_first_dense_layers {self.moe.first_dense_layers} and moe_every "
                            f"{self.moe.every} leave no MoE layer among num_layers {self.num_layers} (need "
                            "moe_first_dense_layers + moe_every <= num_layers)")
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                f"model {self.name!r}: num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_kv_heads {self.num_kv_heads}"
            )

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def moe_layers(self) -> tuple[bool, ...]:
        """Per decoder layer: True where its MLP is a mixture of experts (all False for dense models)."""
        return self.moe.layer_kinds(self.num_layers) if self.moe else (False,) * self.num_layers

    @property
    def heterogeneous(self) -> bool:
        """Whether decoder layers differ in kind (dense and MoE MLPs in one stack)."""
        return len(set(self.moe_layers())) > 1

    def layers(self) -> tuple[LayerKind, ...]:
        """The model as the ordered chain of layers that pipeline stages cut."""
        return (LayerKind.EMBEDDING, *([LayerKind.DECODER] * self.num_layers),
                LayerKind.FINAL_NORM, LayerKind.LM_HEAD, LayerKind.LOSS)


@dataclass(frozen=True)
class EfficiencyCurve:
    """Achievable fraction of peak as a function of work size (FLOPs per kernel).

    Points are (size, efficiency) with sizes strictly increasing and efficiencies non-decreasing in
    (0, 1]; between points the curve is linear in log(size), outside it is clamped.
    """

    points: tuple[tuple[float, float], ...]

    def __post_init__(self) -> None:
        if not self.points:
            raise SpecError("efficiency curve needs at least one (size, efficiency) point")
        sizes = [p[0] for p in self.points]
        effs = [p[1] for p in self.points]
        if not all(finite(s) and finite(e) for s, e in self.points):
            raise SpecError(f"efficiency curve points must be finite numbers, got {list(self.points)}")
        if any(s <= 0 for s in sizes) or any(b <= a for a, b in zip(sizes, sizes[1:], strict=False)):
            raise SpecError(f"efficiency curve sizes must be positive and increasing, got {sizes}")
        if any(not 0 < e <= 1 for e in effs) or any(b < a for a, b in zip(effs, effs[1:], strict=False)):
            raise SpecError(f"efficiency curve values must be in (0, 1] and non-decreasing, got {effs}")

    def at(self, size: float) -> float:
        pts = self.points
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1]
        i = bisect.bisect_right([p[0] for p in pts], size)
        (x0, y0), (x1, y1) = pts[i - 1], pts[i]
        w = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return y0 + w * (y1 - y0)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's peaks and the achievable shares of them (physical quantities, fitted per GPU generation by
    benchmarks/calibration.py; hardware_profiles/SCHEMA.md says what each one means)."""

    name: str
    memory_gib: float
    hbm_gbs: float  # HBM bandwidth, GB/s
    peak_bf16_tflops: float
    peak_fp8_tflops: float | None  # None where the GPU has no fp8 tensor cores
    matmul_efficiency: EfficiencyCurve
    attention_efficiency: float  # fused attention forward, long causal sequences, head dim 128: share of bf16 peak
    memory_efficiency: float  # achievable fraction of HBM bandwidth for element-wise kernels
    overlap_efficiency: float  # 1 − the slowdown a collective causes the compute it overlaps
    architecture: str = "unknown"  # GPU generation (ampere, hopper, ...): selects the calibrated error band
    attention_half_seq: float = 1024.0  # key length at which fused attention reaches half its long-sequence rate
    attention_backward_ratio: float = 0.75  # fused attention backward rate / forward rate (FLOPs per second)
    fp8_matmul_ratio: float = 0.8  # fp8 GEMM share of fp8 peak / bf16 GEMM share of bf16 peak, same size

    def exposed(self, comm_s: float, compute_s: float) -> float:
        """Seconds a collective adds to the critical path when it runs beside `compute_s` of compute:
            exposed = max(comm − compute, 0) + κ · min(comm, compute),   κ = 1 − overlap_efficiency.
        What the compute cannot cover is exposed; while both run, the NCCL kernels take SMs and HBM bandwidth
        from the compute kernels and slow them by κ of the overlapped time (Rashidi et al. 2021, "Enabling
        compute-communication overlap in distributed deep learning training platforms"; Jangda et al. 2022).
        κ is fitted per GPU generation (benchmarks/calibration.py)."""
        kappa = 1.0 - self.overlap_efficiency
        return max(comm_s - compute_s, 0.0) + kappa * min(comm_s, compute_s)

    def peak(self, dtype: Dtype) -> float:
        """Dense peak in FLOP/s for `dtype`; fp8 falls back to bf16 where the GPU has no fp8 units."""
        if dtype is Dtype.FP8 and self.peak_fp8_tflops:
            return self.peak_fp8_tflops * 1e12
        return self.peak_bf16_tflops * 1e12

    def has_fp8(self, dtype: Dtype) -> bool:
        return dtype is Dtype.FP8 and bool(self.peak_fp8_tflops)


@dataclass(frozen=True)
class LinkSpec:
    """One network tier as seen by one GPU: per-direction bandwidth, latency, achievable fraction."""

    bandwidth_gbs: float  # GB/s per direction per GPU
    latency_us: float
    efficiency: float  # achieved bus bandwidth / line rate for large messages (nccl-tests)

    @property
    def bus_bytes_per_s(self) -> float:
        return self.bandwidth_gbs * 1e9 * self.efficiency


@dataclass(frozen=True)
class ClusterSpec:
    """`num_gpus` GPUs in nodes of `gpus_per_node`; scale-up domains of `scale_up_size` GPUs
    (NVLink/NVSwitch, xGMI; 1 where GPUs only share PCIe) and a scale-out network (NICs)."""

    name: str
    gpu: GpuSpec
    num_gpus: int
    gpus_per_node: int
    scale_up_size: int
    scale_up: LinkSpec
    scale_out: LinkSpec
    # where fitted values came from: one line per calibrated fragment merged in (`meshplan calibrate`)
    provenance: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_gpus", "gpus_per_node", "scale_up_size"):
            integer(getattr(self, name), name, 1, MAX_GPUS, SpecError)
        if self.num_gpus > self.gpus_per_node and self.num_gpus % self.gpus_per_node:
            raise SpecError(
                f"{self.num_gpus} GPUs is not a whole number of {self.gpus_per_node}-GPU nodes"
            )


@dataclass(frozen=True)
class Runtime:
    """What the training framework does that the cost depends on (kernels, overlap, precision of
    gradient reduction). Defaults describe a current Megatron-LM / torchtitan run."""

    attention: AttentionKernel = AttentionKernel.FLASH
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_bytes: int = 4  # fp32 gradient buckets (Megatron with bf16)
    multi_rail: bool = True  # collectives spread over all NICs of a group's members in a node (NCCL >= 2.12)
    measured: MeasuredCosts | None = None  # a profiled cost table replaces the analytical compute times
    # Mixture of experts: None routes dropless; a factor c pads every expert's buffer to c x its mean load
    # (GShard capacity, Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity).
    moe_capacity_factor: float | None = None
    # dropless routing: tokens on the busiest expert-parallel rank over the mean (1.0: perfectly balanced)
    moe_load_imbalance: float = 1.0
    # expert all-to-alls of one micro-batch run beside another's compute (Megatron-LM
    # --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe); off: they sit on the critical path
    moe_comm_overlap: bool = False
    # DeepEP-style dispatch: a token crosses to each remote scale-up domain holding its experts once and is
    # forwarded over NVLink there (Megatron's flex dispatcher with the deepep backend); off: one copy per expert
    moe_dedup_dispatch: bool = False
    # TP collectives split into chunks and pipelined with the GEMMs that produce or consume them (Megatron-LM
    # --tp-comm-overlap with Transformer Engine userbuffers, torchtitan async TP); off: each sits on the path
    tp_comm_overlap: bool = False
    # fp8 training keeps the weights as fp8 tensors and gathers them in fp8 (Megatron-LM --fp8-param-gather,
    # torchtitan float8 FSDP all-gather): ZeRO's weight all-gathers move 1 byte per parameter instead of 2
    fp8_param_gather: bool = False
    # schedules of several chunks per rank post their pipeline sends and receives asynchronously and wait on
    # them only when the data is needed (Megatron-LM's default with interleaving, --no-overlap-p2p-communication
    # turns it off; torch.distributed.pipelining's runtime always); 1F1B without chunks waits on each
    overlap_p2p_comm: bool = True

    def __post_init__(self) -> None:
        for name in ("moe_capacity_factor", "moe_load_imbalance"):
            value = getattr(self, name)
            if value is not None and not finite(value):
                raise SpecError(f"{name} must be a finite number >= 1, got {value!r}")
        if self.moe_capacity_factor is not None and self.moe_capacity_factor < 1.0:
            raise SpecError(f"moe capacity factor must be >= 1 (it pads buffers), got {self.moe_capacity_factor}")
        if self.moe_dedup_dispatch and self.moe_capacity_factor is not None:
            raise SpecError("deduplicated (DeepEP) dispatch routes dropless: it cannot pad to a capacity factor")
        if self.moe_load_imbalance < 1.0:
            raise SpecError(f"moe load imbalance must be >= 1 (busiest rank over the mean), got "
                            f"{self.moe_load_imbalance}")

    @property
    def moe_load_factor(self) -> float:
        """Tokens the busiest expert rank computes and exchanges, over the balanced mean."""
        return self.moe_capacity_factor if self.moe_capacity_factor is not None else self.moe_load_imbalance


@dataclass(frozen=True)
class JobSpec:
    seq_len: int
    global_batch: int  # sequences per optimizer step
    dtype: Dtype = Dtype.BF16
    runtime: Runtime = Runtime()

    def __post_init__(self) -> None:
        integer(self.seq_len, "seq_len", 1, MAX_SEQ_LEN, SpecError)
        integer(self.global_batch, "global_batch", 1, MAX_GLOBAL_BATCH, SpecError)

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch


def check_expert_degrees(model: ModelSpec, ep: int, etp: int) -> None:
    """The expert-parallel rules that depend on the model alone (Layout.validate adds the mesh's)."""
    if model.moe is None:
        if ep > 1 or etp > 1:
            raise LayoutError(f"ep {ep} and etp {etp} need a mixture-of-experts model; {model.name!r} is dense "
                              "(use ep 1, etp 1)")
        return
    if model.moe.num_experts % ep:
        raise LayoutError(f"experts {model.moe.num_experts} not divisible by ep {ep}")
    if model.moe.ffn_hidden_size % etp:
        raise LayoutError(f"expert width {model.moe.ffn_hidden_size} not divisible by etp {etp}")


@dataclass(frozen=True)
class Layout:
    """A parallel layout. Placement on the GPU mesh is TP innermost, then CP, DP, PP outermost.

    `stage_layers` optionally gives the number of decoder layers on each of the pp·vpp model chunks
    (in pipeline order); by default they are spread evenly, remainder to the middle chunks.
    `recompute_layers` optionally gives, per pipeline rank, how many of its decoder layers are fully
    recomputed (Megatron-LM's block method: the first ones of the rank); the others use `recompute`.

    Mixture-of-experts layers fold their own mesh over the same GPUs (Megatron-core's MoE parallel
    folding): the tp·cp·dp ranks of a pipeline stage become etp·ep·edp, experts are split over `ep`
    ranks and each expert's matrices over `etp`; expert gradients reduce over edp = tp·cp·dp/(etp·ep).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1
    mbs: int = 1
    sp: bool = False
    zero: ZeroStage = ZeroStage.NONE
    recompute: Recompute = Recompute.NONE
    schedule: Schedule = Schedule.ONE_F_ONE_B
    stage_layers: tuple[int, ...] | None = None
    recompute_layers: tuple[int, ...] | None = None
    ep: int = 1
    etp: int = 1
    # what selective recomputation recomputes (Megatron's --recompute-modules); empty unless recompute is selective
    recompute_modules: frozenset[RecomputeModule] = frozenset()

    def __post_init__(self) -> None:
        # one spelling per layout: selective without modules means Megatron's default, other modes carry none
        modules = ((self.recompute_modules or DEFAULT_RECOMPUTE_MODULES) if self.recompute is Recompute.SELECTIVE
                   else frozenset())
        object.__setattr__(self, "recompute_modules", frozenset(modules))

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same expert shard and reduce its gradients: tp·cp·dp / (etp·ep)."""
        return max(1, self.tp * self.cp * self.dp // (self.etp * self.ep))

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def num_microbatches(self, job: JobSpec) -> int:
        return job.global_batch // (self.mbs * self.dp)

    def chunk_rank(self, chunk: int) -> int:
        """Pipeline rank of model chunk `chunk`: k % pp (Megatron's interleaving), or sweeps down and back up for
        ZB-V and the wave (`wave_rank`: ZB-V's chunk k on rank k going down, then rank 2·pp − 1 − k)."""
        if self.schedule in WAVE_PLACED:
            return wave_rank(chunk, self.pp)
        return chunk % self.pp

    @property
    def embedding_rank(self) -> int:
        return self.chunk_rank(0)

    @property
    def head_rank(self) -> int:
        """The rank of the last chunk: LM head, loss and multi-token prediction."""
        return self.chunk_rank(self.pp * self.vpp - 1)

    @property
    def head_beside_embedding(self) -> bool:
        """Embedding and LM head on one rank (no pipeline, ZB-V, the wave): a tied head needs no copy or sync."""
        return self.embedding_rank == self.head_rank

    def rank_chunks(self, rank: int) -> tuple[int, ...]:
        """The model chunks of `rank`, in model order (the inverse of `chunk_rank`)."""
        if self.schedule in WAVE_PLACED:
            return wave_chunks(rank, self.pp, self.vpp)
        return tuple(range(rank, self.pp * self.vpp, self.pp))

    def chunk_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers per model chunk, in pipeline order (chunk k lives on rank `chunk_rank(k)`)."""
        if self.stage_layers is not None:
            return self.stage_layers
        chunks = self.pp * self.vpp
        base, extra = divmod(num_layers, chunks)
        # Extra layers go to the middle chunks: the ends also carry the embedding and the LM head.
        start = (chunks - extra) // 2
        return tuple(base + (1 if start <= i < start + extra else 0) for i in range(chunks))

    def validate(self, model: ModelSpec, job: JobSpec, num_gpus: int) -> None:
        """Raise LayoutError naming the first rule this layout breaks (the rules Megatron-LM
        enforces, REFERENCE.md section 2)."""
        for name in ("tp", "pp", "dp", "cp", "vpp", "mbs", "ep", "etp"):
            integer(getattr(self, name), name, 1, MAX_GPUS if name != "mbs" else MAX_GLOBAL_BATCH, LayoutError)
        for name in ("stage_layers", "recompute_layers"):
            counts = getattr(self, name)
            if counts is not None and not all(is_integer(n) for n in counts):
                raise LayoutError(f"{name} must be whole numbers of layers, got {list(counts)}")
        if self.world != num_gpus:
            raise LayoutError(
                f"world size {num_gpus} != tp {self.tp} * pp {self.pp} * cp {self.cp} * dp {self.dp}"
            )
        if model.num_attention_heads % self.tp:
            raise LayoutError(
                f"attention heads {model.num_attention_heads} not divisible by tp {self.tp}"
            )
        if model.num_kv_heads % self.tp and self.tp % model.num_kv_heads:
            raise LayoutError(
                f"kv heads {model.num_kv_heads} and tp {self.tp}: one must divide the other"
            )
        if self.sp and self.tp == 1:
            raise LayoutError("sequence parallelism needs tp > 1")
        if model.vision is not None and model.vision.num_attention_heads % self.tp:
            raise LayoutError(f"vision encoder heads {model.vision.num_attention_heads} not divisible by tp {self.tp} "
                              "(the encoder is split like the language model)")
        self._validate_experts(model)
        self._validate_modules(model)
        if self.cp > 1 and job.seq_len % (2 * self.cp):
            raise LayoutError(f"seq_len {job.seq_len} not divisible by 2 * cp = {2 * self.cp}")
        if job.global_batch % (self.mbs * self.dp):
            raise LayoutError(
                f"global batch {job.global_batch} not divisible by mbs {self.mbs} * dp {self.dp}"
            )
        m = self.num_microbatches(job)
        if self.schedule is Schedule.ZB_V:
            if self.vpp != 2 or self.pp == 1:
                raise LayoutError(f"zb-v runs two model chunks per rank: it needs vpp 2 and pp > 1, got vpp "
                                  f"{self.vpp}, pp {self.pp}")
            if m < 2 * self.pp - 1:
                raise LayoutError(f"zb-v needs at least 2 * pp - 1 = {2 * self.pp - 1} micro-batches, got {m}")
        elif self.schedule is Schedule.WAVE:
            if self.vpp % 2 or self.pp == 1:
                raise LayoutError(f"the wave schedule runs waves down and back up the ranks: it needs an even vpp "
                                  f"(2 per wave) and pp > 1, got vpp {self.vpp}, pp {self.pp}")
            if m < 2 * self.pp:
                raise LayoutError(f"the wave schedule needs at least 2 * pp = {2 * self.pp} micro-batches, got {m}")
        elif (self.schedule is Schedule.INTERLEAVED_1F1B) != (self.vpp > 1):
            raise LayoutError(f"the interleaved-1f1b schedule needs vpp > 1 and the others (but zb-v and wave) vpp 1;"
                              f" got {self.schedule.value} with vpp {self.vpp}")
        if self.vpp > 1 and self.schedule is Schedule.INTERLEAVED_1F1B:
            if self.pp == 1:
                raise LayoutError("virtual pipeline stages (vpp > 1) need pp > 1")
            if m % self.pp:
                raise LayoutError(
                    f"interleaved schedule needs micro-batches {m} divisible by pp {self.pp}"
                )
        chunks = self.pp * self.vpp
        if self.stage_layers is None:
            if model.num_layers < chunks:
                raise LayoutError(
                    f"layers {model.num_layers} < pp {self.pp} * vpp {self.vpp} = {chunks} model chunks"
                )
        else:
            if len(self.stage_layers) != chunks or any(n < 0 for n in self.stage_layers):
                raise LayoutError(f"stage_layers needs {chunks} non-negative counts (pp * vpp)")
            if sum(self.stage_layers) != model.num_layers:
                raise LayoutError(
                    f"stage_layers sum to {sum(self.stage_layers)}, model has {model.num_layers} layers"
                )
        if self.recompute_layers is not None:
            if self.recompute is Recompute.FULL:
                raise LayoutError("recompute_layers is for partial recomputation; recompute=full covers every layer")
            per_rank = self.rank_layers(model.num_layers)
            if len(self.recompute_layers) != self.pp or any(
                    not 0 <= r <= n for r, n in zip(self.recompute_layers, per_rank, strict=True)):
                raise LayoutError(
                    f"recompute_layers {list(self.recompute_layers)} needs one count per pp rank, each between 0 "
                    f"and that rank's layers {list(per_rank)}"
                )

    def _validate_modules(self, model: ModelSpec) -> None:
        """The rules megatron-core 0.16.1 applies to recompute_modules, and modules the model has none of."""
        mods = self.recompute_modules
        if RecomputeModule.MLA_UP_PROJ in mods and model.mla is None:
            raise LayoutError("recompute module mla_up_proj needs multi-latent attention; the model has none")
        has_moe = model.moe is not None
        for m in (RecomputeModule.MOE_ACT, RecomputeModule.MOE, RecomputeModule.SHARED_EXPERTS):
            if m in mods and not has_moe:
                raise LayoutError(f"recompute module {m.value} needs a mixture-of-experts model; {model.name} is dense")
        if RecomputeModule.SHARED_EXPERTS in mods and not (model.moe and model.moe.shared_ffn_hidden_size):
            raise LayoutError(f"recompute module shared_experts needs shared experts; {model.name} has none")

    def _validate_experts(self, model: ModelSpec) -> None:
        check_expert_degrees(model, self.ep, self.etp)
        if model.moe is None:
            return
        inner = self.tp * self.cp * self.dp
        if inner % (self.ep * self.etp):
            raise LayoutError(f"etp {self.etp} * ep {self.ep} must divide tp * cp * dp = {inner} (the ranks of "
                              "one pipeline stage, which the expert layers fold into etp x ep x expert-dp)")
        if self.ep > 1 and self.tp > 1 and not self.sp:
            raise LayoutError("expert parallelism with tp > 1 needs sequence parallelism (--sp)")

    def rank_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers held by each pipeline rank (all its model chunks)."""
        chunks = self.chunk_layers(num_layers)
        return tuple(sum(chunks[c] for c in self.rank_chunks(rank)) for rank in range(self.pp))

    def fully_recomputed(self, rank: int, num_layers: int) -> int:
        """Decoder layers of `rank` whose whole forward is recomputed in backward."""
        if self.recompute is Recompute.FULL:
            return self.rank_layers(num_layers)[rank]
        return self.recompute_layers[rank] if self.recompute_layers is not None else 0
