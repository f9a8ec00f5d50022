"""The named choices of a plan: number formats, recomputation and its modules, pipeline schedules, ZeRO
stages, norms, attention kernels and layer kinds (str/int enums: their values are the plan file's and the
launchers' spellings)."""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import TypeVar

from meshcore.errors import LayoutError

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


N = TypeVar("N", bound=Enum)


def _parse_names(cls: type[N], text: str, what: str, also: str = "") -> frozenset[N]:
    """Comma-separated values of the enum `cls`; a LayoutError naming the unknown ones and what is allowed."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    allowed = [str(m.value) for m in cls]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise LayoutError(f"unknown {what} {', '.join(unknown) or repr(text)}; allowed: {also}{', '.join(allowed)}")
    return frozenset(cls(n) for n in names)


class RecomputeModule(str, Enum):
    """Parts of a decoder layer that selective recomputation may recompute: megatron-core 0.16.1's
    `--recompute-modules` choices (TransformerConfig.recompute_modules; cost_models.memory.footprint says what each
    frees).
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
        return _parse_names(cls, text, "recompute module(s)")


# Megatron's default for --recompute-granularity selective
DEFAULT_RECOMPUTE_MODULES = frozenset({RecomputeModule.CORE_ATTN})


def module_names(modules: frozenset[RecomputeModule]) -> list[str]:
    """Module names in Megatron's order (the enum's)."""
    return [m.value for m in RecomputeModule if m in modules]


class Schedule(str, Enum):
    """Pipeline schedules: each member's traits are its `meshcore.schedules.ScheduleSpec`, its pricing
    cost_models.pipeline.registry's `SchedulePricing` (a new schedule adds its member and those two entries)."""

    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED_1F1B = "interleaved-1f1b"
    ZB_H1 = "zb-h1"  # zero-bubble, backward split into input and weight gradients (Qi et al. 2023, Figure 3 top)
    ZB_H2 = "zb-h2"  # zero-bubble with 2p − 1 micro-batches in flight, a parallelogram (Qi et al. 2023, Figure 3)
    ZB_2P = "zb-2p"  # the zero-bubble paper's automatic schedule within 2p micro-batches of activations (section 3.1)
    ZB_V = "zb-v"  # zero-bubble on two chunks per rank placed as a V (Qi et al. 2024; torch's ZBVZeroBubble)
    DUALPIPE_V = "dualpipe-v"  # DeepSeek's DualPipeV: a V of two chunks, F&B pairs (DualPipe repo; torch, torchtitan)
    V_HALF = "v-half"  # a V of two chunks at half 1F1B's activations (Qi et al., NeurIPS 2024, "Controllable Memory")
    V_MIN = "v-min"  # a V of two chunks at a third of 1F1B's activations (same paper)
    WAVE = "wave"  # chunks placed as waves down and back up the ranks (Hanayo, Liu et al. SC'23), unsplit backward


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


class Offload(str, Enum):
    """What lives in host memory instead of the GPU's, moved over PCIe as the step needs it."""

    OPTIMIZER = "optimizer"  # Adam state and fp32 master weights; Adam runs on the CPU (ZeRO-Offload)
    PARAMS = "params"  # the weights too, copied in layer by layer before each pass (ZeRO-Infinity; needs ZeRO-3)
    ACTIVATIONS = "activations"  # stored activations, copied out after a layer's forward and back for its backward
    # the gradients too: each layer's goes to the host during every backward, accumulated there in fp32; the GPU
    # keeps a reduce bucket (ZeRO-Offload, DeepSpeed's offload_optimizer)
    GRADIENTS = "gradients"
    NVME = "nvme"  # the offloaded optimizer state (and weights) on NVMe, host memory only staging it (ZeRO-Infinity)

    @classmethod
    def parse(cls, text: str) -> frozenset[Offload]:
        """"none" or comma-separated targets, e.g. "optimizer,activations"."""
        if text.strip() == "none":
            return frozenset()
        return _parse_names(cls, text, "offload target(s)", "none, auto (plan) or comma-separated ")


def with_implied(offload: frozenset[Offload]) -> frozenset[Offload]:
    """The targets with what they imply: streaming the weights offloads their optimizer and gradients too (ZeRO-Infinity
    keeps no gradient shard on the GPU); offloaded gradients feed an optimizer on the host; NVMe holds what the
    optimizer offload put on the host."""
    if Offload.PARAMS in offload:
        offload = offload | {Offload.GRADIENTS}
    if Offload.GRADIENTS in offload or Offload.NVME in offload:
        offload = offload | {Offload.OPTIMIZER}
    return offload


def offload_names(offload: frozenset[Offload]) -> list[str]:
    """Offload targets in the enum's order."""
    return [o.value for o in Offload if o in offload]


class Activation(str, Enum):
    """The MLP's activation, as its kernels run it (cost_models.compute.layer.activation_bytes prices each): gated
    ones halve
    FC1's doubled output (gate · up), plain ones map FC1's output element-wise."""

    SWIGLU = "swiglu"  # silu(gate) · up, fused (Megatron-core bias_swiglu; Llama, Qwen, Mistral, DeepSeek)
    GEGLU = "geglu"  # gelu(gate) · up, fused (Gemma)
    GELU = "gelu"  # fused bias + GELU (Megatron-core bias_gelu; GPT-2/3, GPT-NeoX)
    SQUARED_RELU = "squared_relu"  # relu(x)², unfused: NeMo's torch.pow(F.relu(x), 2) (Nemotron-3/4)

    @property
    def gated(self) -> bool:
        return self in (Activation.SWIGLU, Activation.GEGLU)

    @classmethod
    def default(cls, gated_mlp: bool) -> Activation:
        """What a model that names no activation runs: SwiGLU when gated, GELU otherwise."""
        return cls.SWIGLU if gated_mlp else cls.GELU


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


class Target(str, Enum):
    """A launcher meshplan writes configurations for (planner.outputs.emitters); here, at the bottom, so that the
    command line can offer the choices without importing the emitters."""

    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    TORCHTITAN_CLI = "torchtitan-cli"
    DEEPSPEED = "deepspeed"
    NEMO = "nemo"
    TORCH_ACTIONS = "torch-actions"
