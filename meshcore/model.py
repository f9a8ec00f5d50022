"""What is trained: the model's shape (dense, mixture of experts, multi-latent attention, a vision
encoder), validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore.checks import MAX_LAYERS, MAX_SEQ_LEN, MAX_WIDTH, identifier, integer, real
from meshcore.enums import Activation, LayerKind, Norm
from meshcore.errors import LayoutError, SpecError


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
    activation: Activation | None = None  # None: Activation.default(gated_mlp), filled in on construction
    # sliding-window attention (Mistral, Gemma 2/3): each query sees the last `sliding_window` keys (0: all), on
    # every layer, or with `global_attention_every` k > 0 on all but every k-th layer (layers k, 2k, ... see all;
    # Megatron-LM's --window-attn-skip-freq, Gemma 2's 2, Gemma 3's 6)
    sliding_window: int = 0
    global_attention_every: int = 0
    rope_theta: float | None = None  # rotary base where the source states it (None: the runtime's default)
    norm_eps: float | None = None  # the norms' epsilon where the source states it (None: the runtime's default)

    def __post_init__(self) -> None:
        identifier(self.name, "model name", SpecError)
        if self.activation is None:
            object.__setattr__(self, "activation", Activation.default(self.gated_mlp))
        elif self.activation.gated != self.gated_mlp:
            allowed = [a.value for a in Activation if a.gated == self.gated_mlp]
            raise SpecError(f"model {self.name!r}: activation {self.activation.value} "
                            f"{'needs' if self.activation.gated else 'cannot have'} a gated MLP; with gated_mlp "
                            f"{str(self.gated_mlp).lower()} allowed: {', '.join(allowed)}")
        for name in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                     "num_kv_heads", "head_dim", "vocab_size"):
            integer(getattr(self, name), f"model {self.name!r}: {name}", 1,
                    MAX_LAYERS if name == "num_layers" else MAX_WIDTH, SpecError)
        integer(self.learned_positions, f"model {self.name!r}: learned_positions", 0, MAX_SEQ_LEN, SpecError)
        integer(self.mtp_layers, f"model {self.name!r}: mtp_layers", 0, MAX_LAYERS, SpecError)
        integer(self.sliding_window, f"model {self.name!r}: sliding_window", 0, MAX_SEQ_LEN, SpecError)
        integer(self.global_attention_every, f"model {self.name!r}: global_attention_every", 0, self.num_layers,
                SpecError)
        for name, high in (("rope_theta", 1e12), ("norm_eps", 1.0)):
            if getattr(self, name) is not None:
                real(getattr(self, name), f"model {self.name!r}: {name}", 0.0, high, error=SpecError)
        if self.moe is not None and self.moe.count_moe_layers(self.num_layers) < 1:
            raise SpecError(f"model {self.name!r}: moe_first_dense_layers {self.moe.first_dense_layers} and moe_every "
                            f"{self.moe.every} leave no MoE layer among num_layers {self.num_layers} (need "
                            "moe_first_dense_layers + moe_every <= num_layers)")
        if self.num_attention_heads % self.num_kv_heads:
            raise SpecError(
                f"model {self.name!r}: num_attention_heads {self.num_attention_heads} is not a multiple "
                f"of num_kv_heads {self.num_kv_heads}"
            )

    def windowed_layers(self, seq_len: int) -> int:
        """Decoder layers whose queries see fewer keys than the sequence holds (0 without a window or when the
        window covers the sequence)."""
        if not self.sliding_window or self.sliding_window >= seq_len:
            return 0
        every = self.global_attention_every
        return self.num_layers - (self.num_layers // every if every else 0)

    @property
    def mlp_activation(self) -> Activation:
        """The activation, typed for callers (`activation` is never None after construction)."""
        assert self.activation is not None
        return self.activation

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
