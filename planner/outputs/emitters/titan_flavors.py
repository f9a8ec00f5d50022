"""The models torchtitan can build, and which of them a plan's model is.

torchtitan defines each model in Python, as a named flavor of a model module (0.2.2: `llama3_args["8B"]`,
`qwen3_args`, `deepseekv3_args` in torchtitan/models/<module>/__init__.py; 0.3.0: config functions such as
`llama3_8b` in torchtitan/models/<module>/config_registry.py). Its job file names a module and a flavor and
has no keys for dimensions (0.2.2's [model] section takes name, flavor, hf_assets_path, converters and
print_after_conversion; unknown keys are rejected), so a model torchtitan has no flavor for cannot be written
as a job file at all. A plan's model is matched to a flavor by its architecture, not by its name: every field
below must agree (a preset renamed in a YAML still matches; a model named like a preset with other
dimensions does not). What meshplan does not price (rope theta, norm eps, routing score function,
torchtitan's auxiliary-loss-free expert bias) is the flavor's own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from meshcore import MLASpec, ModelSpec, MoESpec
from meshcore.errors import UnsupportedModelError

# MoE fields that fix the architecture; router_bias is left out: torchtitan keeps an expert bias for
# load balancing on every MoE flavor (MoEArgs.load_balance_coeff 1e-3), whatever the checkpoint has
MOE_FIELDS = ("num_experts", "top_k", "ffn_hidden_size", "shared_ffn_hidden_size", "first_dense_layers", "every",
              "groups", "group_top_k")


def architecture(model: ModelSpec) -> dict[str, Any]:
    """The fields of `model` a torchtitan flavor fixes, by name (MoE and MLA fields as moe.x, mla.x)."""
    out: dict[str, Any] = {
        "num_layers": model.num_layers, "hidden_size": model.hidden_size, "ffn_hidden_size": model.ffn_hidden_size,
        "num_attention_heads": model.num_attention_heads, "vocab_size": model.vocab_size,
        "gated_mlp": model.gated_mlp, "activation": model.mlp_activation.value,
        "tied_embeddings": model.tied_embeddings, "norm": model.norm.value,
        "qkv_bias": model.qkv_bias, "linear_bias": model.linear_bias, "learned_positions": model.learned_positions,
        "dropout": model.dropout, "qk_norm": model.qk_norm, "causal": model.causal,
        "vision encoder": model.vision is not None, "sliding_window": model.sliding_window}
    if model.mla is None:  # with MLA, meshplan derives KV heads and head size from the MLA ranks
        out.update(num_kv_heads=model.num_kv_heads, head_dim=model.head_dim, mla=None)
    else:
        out.update({f"mla.{f.name}": getattr(model.mla, f.name) for f in fields(MLASpec)})
    if model.moe is None:
        out["moe"] = None
    else:
        out.update({f"moe.{name}": getattr(model.moe, name) for name in MOE_FIELDS})
    return out


@dataclass(frozen=True)
class Flavor:
    module: str  # --model.name (0.2.x), --module (0.3.x)
    flavor: str  # --model.flavor (0.2.x)
    config: str | None  # the 0.3.0 config function (--config); None where 0.3.0 has none
    spec: ModelSpec  # the model as torchtitan builds it, in meshplan's terms

    @property
    def label(self) -> str:
        return f"{self.module} {self.flavor}"


def _dense(name: str, **dims: Any) -> ModelSpec:
    """A torchtitan decoder: SwiGLU MLP, RMSNorm, no biases, rotary positions, untied embeddings, no dropout."""
    return ModelSpec(name=name, gated_mlp=True, tied_embeddings=False, **dims)


def _llama3(flavor: str, config: str, dim: int, n_layers: int, n_heads: int, multiplier: float,
            multiple_of: int) -> Flavor:
    """torchtitan's llama3 TransformerModelArgs (n_kv_heads 8, vocab 128256, rope theta 500000, norm eps 1e-5);
    the SwiGLU width is FeedForward's: int(multiplier · int(2 · 4·dim / 3)) rounded up to a multiple of
    `multiple_of` (torchtitan/models/llama3/model/model.py)."""
    width = int(multiplier * int(2 * 4 * dim / 3))
    width = multiple_of * -(-width // multiple_of)
    spec = _dense(f"torchtitan llama3 {flavor}", num_layers=n_layers, hidden_size=dim, ffn_hidden_size=width,
                  num_attention_heads=n_heads, num_kv_heads=8, head_dim=dim // n_heads, vocab_size=128256)
    return Flavor("llama3", flavor, config, spec)


def _qwen3_moe(flavor: str, config: str | None, dim: int, n_layers: int, n_heads: int, hidden_dim: int,
               moe_inter_dim: int) -> Flavor:
    """torchtitan's qwen3 MoE flavors (Qwen3ModelArgs: head_dim 128, 4 KV heads, vocab 151936, QK norm, untied,
    every layer MoE with 128 experts, top-8, no shared expert)."""
    spec = _dense(f"torchtitan qwen3 {flavor}", num_layers=n_layers, hidden_size=dim, ffn_hidden_size=hidden_dim,
                  num_attention_heads=n_heads, num_kv_heads=4, head_dim=128, vocab_size=151936, qk_norm=True,
                  moe=MoESpec(num_experts=128, top_k=8, ffn_hidden_size=moe_inter_dim))
    return Flavor("qwen3", flavor, config, spec)


def _deepseek_v3_671b() -> Flavor:
    """torchtitan's deepseek_v3 671B (DeepSeekV3ModelArgs): 61 layers, the first 3 dense (inter_dim 18432),
    256 routed experts of width 2048, top-8 in 4 of 8 groups, one shared expert, MLA ranks 1536/512, head dims
    128 + 64 and 128, vocab 129280. It builds no multi-token-prediction module (0.3.0: num_mtp_layers 0)."""
    spec = _dense("torchtitan deepseek_v3 671B", num_layers=61, hidden_size=7168, ffn_hidden_size=18432,
                  num_attention_heads=128, num_kv_heads=128, head_dim=192, vocab_size=129280,
                  moe=MoESpec(num_experts=256, top_k=8, ffn_hidden_size=2048, shared_ffn_hidden_size=2048,
                              first_dense_layers=3, groups=8, group_top_k=4),
                  mla=MLASpec(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                              v_head_dim=128))
    return Flavor("deepseek_v3", "671B", "deepseek_v3_671b", spec)


# torchtitan 0.2.2's flavors (configs: 0.3.0's registry) of the models meshplan has presets for
FLAVORS: tuple[Flavor, ...] = (
    _llama3("8B", "llama3_8b", 4096, 32, 32, 1.3, 1024),
    _llama3("70B", "llama3_70b", 8192, 80, 64, 1.3, 4096),
    _llama3("405B", "llama3_405b", 16384, 126, 128, 1.2, 4096),
    _qwen3_moe("30B-A3B", "qwen3_30b_a3b", 2048, 48, 32, 6144, 768),
    _qwen3_moe("235B-A22B", None, 4096, 94, 64, 12288, 1536),  # 0.3.0 has no qwen3_235b_a22b config
    _deepseek_v3_671b(),
)
SUPPORTED = "; ".join(f"{m} " + ", ".join(f.flavor for f in FLAVORS if f.module == m)
                      for m in dict.fromkeys(f.module for f in FLAVORS))


def differences(model: ModelSpec, flavor: Flavor) -> list[str]:
    """`field value != flavor's value` for each field where `model` differs from `flavor`."""
    mine, theirs = architecture(model), architecture(flavor.spec)
    return [f"{key} {mine.get(key, '-')} != {theirs.get(key, '-')}" for key in dict.fromkeys([*mine, *theirs])
            if mine.get(key, "-") != theirs.get(key, "-")]


def flavor_of(model: ModelSpec) -> Flavor:
    """The torchtitan flavor that builds `model`, or UnsupportedModelError naming the nearest and what differs."""
    ranked = sorted(FLAVORS, key=lambda f: len(differences(model, f)))
    nearest = ranked[0]
    diff = differences(model, nearest)
    if not diff:
        return nearest
    shown = ", ".join(diff[:4]) + (f" and {len(diff) - 4} more" if len(diff) > 4 else "")
    raise UnsupportedModelError(
        f"torchtitan has no model definition for {model.name!r}: its nearest flavor, {nearest.label}, differs in "
        f"{shown}; torchtitan builds models only from flavors in its own code, and its job file cannot state "
        f"dimensions, so meshplan writes these flavors only, matched by architecture: {SUPPORTED}")


def mtp_caveat(model: ModelSpec, flavor: Flavor) -> str | None:
    """The one difference meshplan writes anyway, said in the file: multi-token-prediction layers, which none of
    these flavors builds (the job runs; its last stage is lighter than the plan priced)."""
    n = model.mtp_layers
    if n == flavor.spec.mtp_layers:
        return None
    assert flavor.spec.mtp_layers == 0
    return (f"{model.name} has {n} multi-token-prediction layer{'s' if n > 1 else ''}, which torchtitan's "
            f"{flavor.label} flavor does not build: this job trains without {'them' if n > 1 else 'it'}, so its "
            "last stage is lighter than the plan priced")
