"""Inputs -> specs: model presets, model YAML, Hugging Face config.json, and job parameters.

This is the only module of the planner that handles raw dicts from files. Every problem becomes an
`InputError` with one line naming the file, the key and what is allowed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any

from meshcore import MLASpec, ModelSpec, MoESpec, Norm, VisionSpec
from meshcore.checks import MAX_LAYERS, MAX_WIDTH, choice, identifier, integer, is_integer, not_found
from meshcore.enums import Activation
from meshcore.errors import InputError, SpecError
from meshcore.inputfile import MAX_SPEC_BYTES, parse_json, parse_yaml, read_text, shown
from planner.inputs.attention_keys import ATTENTION_KEYS, attention_fields, attention_mapping, hf_attention_keys
from planner.inputs.yamlfile import packaged_presets, refuse_non_file

REQUIRED_MODEL_KEYS = ("name", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                       "vocab_size", "gated_mlp", "tied_embeddings")
OPTIONAL_MODEL_KEYS = ("num_kv_heads", "head_dim", "norm", "activation", "qkv_bias", "linear_bias",
                       "learned_positions", "dropout", "published_params", "published_active_params", "qk_norm",
                       "mtp_layers", "moe_num_experts", "moe_top_k", "moe_ffn_hidden_size",
                       "moe_shared_ffn_hidden_size", "moe_first_dense_layers", "moe_every", "moe_router_bias",
                       "moe_groups", "moe_group_top_k", "mla_q_lora_rank", "mla_kv_lora_rank", "mla_qk_nope_head_dim",
                       "mla_qk_rope_head_dim",
                       "mla_v_head_dim", "vision_num_layers", "vision_hidden_size", "vision_ffn_hidden_size",
                       "vision_num_attention_heads", "vision_image_size", "vision_patch_size",
                       "vision_projector_hidden", "vision_class_token", "vision_images", *ATTENTION_KEYS)
_INT_KEYS = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "vocab_size",
             "num_kv_heads", "head_dim", "learned_positions", "mtp_layers", "moe_num_experts", "moe_top_k",
             "moe_ffn_hidden_size", "moe_shared_ffn_hidden_size", "moe_first_dense_layers", "moe_every",
             "moe_groups", "moe_group_top_k", "mla_q_lora_rank", "mla_kv_lora_rank", "mla_qk_nope_head_dim",
             "mla_qk_rope_head_dim", "mla_v_head_dim",
             "vision_num_layers", "vision_hidden_size", "vision_ffn_hidden_size", "vision_num_attention_heads",
             "vision_image_size", "vision_patch_size", "vision_projector_hidden", "vision_images")
_BOOL_KEYS = ("gated_mlp", "tied_embeddings", "qkv_bias", "linear_bias", "dropout", "qk_norm", "moe_router_bias",
              "vision_class_token")
_MOE_KEYS = ("moe_num_experts", "moe_top_k", "moe_ffn_hidden_size")
_VISION_KEYS = ("vision_num_layers", "vision_hidden_size", "vision_ffn_hidden_size", "vision_num_attention_heads",
                "vision_image_size", "vision_patch_size", "vision_projector_hidden")
_VISION_OPTIONAL = ("vision_class_token", "vision_images")
_MLA_KEYS = ("mla_q_lora_rank", "mla_kv_lora_rank", "mla_qk_nope_head_dim", "mla_qk_rope_head_dim", "mla_v_head_dim")

# Hugging Face model_type -> (gated MLP, norm, qkv bias, all-linear bias)
_HF_FAMILIES: MappingProxyType[str, tuple[bool, Norm, bool, bool]] = MappingProxyType({
    "llama": (True, Norm.RMSNORM, False, False),
    "mistral": (True, Norm.RMSNORM, False, False),
    "qwen2": (True, Norm.RMSNORM, True, False),
    "qwen3": (True, Norm.RMSNORM, False, False),
    "qwen3_moe": (True, Norm.RMSNORM, False, False),
    "mixtral": (True, Norm.RMSNORM, False, False),
    "deepseek_v3": (True, Norm.RMSNORM, False, False),
    "llama4_text": (True, Norm.RMSNORM, False, False),
    "gemma": (True, Norm.RMSNORM, False, False),
    "gemma2": (True, Norm.RMSNORM, False, False),
    "olmo2": (True, Norm.RMSNORM, False, False),
    "granite": (True, Norm.RMSNORM, False, False),
    "gpt_neox": (False, Norm.LAYERNORM, True, True),
    "gpt2": (False, Norm.LAYERNORM, True, True),
    "nemotron": (False, Norm.LAYERNORM, False, False),
})
_HF_QK_NORM = frozenset({"qwen3", "qwen3_moe"})  # per-head query/key RMSNorm
# Hugging Face activation names (transformers.activations.ACT2FN) -> the plain and the gated activation they make
_HF_ACTIVATIONS: MappingProxyType[str, tuple[Activation | None, Activation | None]] = MappingProxyType({
    "silu": (None, Activation.SWIGLU), "swish": (None, Activation.SWIGLU),
    "gelu": (Activation.GELU, Activation.GEGLU), "gelu_new": (Activation.GELU, Activation.GEGLU),
    "gelu_fast": (Activation.GELU, Activation.GEGLU), "gelu_pytorch_tanh": (Activation.GELU, Activation.GEGLU),
    "relu2": (Activation.SQUARED_RELU, None),  # Nemotron's squared ReLU
})


@functools.cache
def _preset_data() -> dict[str, dict[str, Any]]:
    """The presets file, parsed once per process (pure-Python YAML takes ~20 ms, every model lookup needs it)."""
    return packaged_presets("models.yaml")


def _presets() -> dict[str, dict[str, Any]]:
    """A copy of the presets for the caller to keep or change."""
    return copy.deepcopy(_preset_data())


def model_preset_names() -> list[str]:
    return list(_presets())


def published_params(name: str, active: bool = False) -> float | None:
    """The total (or active) parameter count the preset's source publishes (None for user models)."""
    entry = _presets().get(name)
    if entry is None:
        return None
    key = "published_active_params" if active and "published_active_params" in entry else "published_params"
    return float(entry[key])


def model_from_mapping(data: Any, origin: str) -> ModelSpec:
    """Model-YAML mapping -> ModelSpec. Keys: REQUIRED_MODEL_KEYS, optionally OPTIONAL_MODEL_KEYS."""
    allowed = ", ".join(REQUIRED_MODEL_KEYS + OPTIONAL_MODEL_KEYS)
    if not isinstance(data, dict):
        raise InputError(f"{origin}: expected a mapping of model keys ({allowed})")
    unknown = sorted(str(k) for k in set(data) - set(REQUIRED_MODEL_KEYS) - set(OPTIONAL_MODEL_KEYS))
    if unknown:
        raise InputError(f"{origin}: unknown keys {unknown}; allowed: {allowed}")
    missing = [k for k in REQUIRED_MODEL_KEYS if k not in data]
    if missing:
        raise InputError(f"{origin}: missing keys {missing}; allowed: {allowed}")
    for key in _INT_KEYS:
        if key in data and (isinstance(data[key], bool) or not isinstance(data[key], int)):
            raise InputError(f"{origin}: {key} must be an integer, got {data[key]!r}")
    for key in _BOOL_KEYS:
        if key in data and not isinstance(data[key], bool):
            raise InputError(f"{origin}: {key} must be true or false, got {data[key]!r}")
    norm = choice(Norm, data.get("norm", "rmsnorm"), f"{origin}: norm")
    activation = None if data.get("activation") is None else choice(Activation, data["activation"],
                                                                    f"{origin}: activation")
    heads = data["num_attention_heads"]
    if not isinstance(heads, int) or heads <= 0 or not isinstance(data["hidden_size"], int):
        raise InputError(f"{origin}: num_attention_heads must be a positive integer, got {heads!r}")
    head_dim = data.get("head_dim", data["hidden_size"] // heads)
    if "head_dim" not in data and data["hidden_size"] % heads:
        raise InputError(
            f"{origin}: hidden_size {data['hidden_size']} is not divisible by num_attention_heads "
            f"{heads}; give head_dim"
        )
    moe, mla = _moe_mla(data, origin)
    try:
        return ModelSpec(
            name=identifier(data["name"], f"{origin}: name"),
            num_layers=data["num_layers"],
            hidden_size=data["hidden_size"],
            ffn_hidden_size=data["ffn_hidden_size"],
            num_attention_heads=heads,
            num_kv_heads=data.get("num_kv_heads", heads),
            head_dim=head_dim,
            vocab_size=data["vocab_size"],
            gated_mlp=data["gated_mlp"],
            tied_embeddings=data["tied_embeddings"],
            norm=norm,
            activation=activation,
            qkv_bias=data.get("qkv_bias", False),
            linear_bias=data.get("linear_bias", False),
            learned_positions=data.get("learned_positions", 0),
            dropout=data.get("dropout", False),
            qk_norm=data.get("qk_norm", False),
            moe=moe,
            mla=mla,
            mtp_layers=data.get("mtp_layers", 0),
            vision=_vision(data, origin), **attention_fields(data, origin))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def _vision(data: dict[str, Any], origin: str) -> VisionSpec | None:
    """The optional vision encoder of a model mapping; it needs all of its required keys."""
    if not any(k in data for k in _VISION_KEYS + _VISION_OPTIONAL):
        return None
    missing = [k for k in _VISION_KEYS if k not in data]
    if missing:
        raise InputError(f"{origin}: a vision-language model needs all of {list(_VISION_KEYS)}; missing {missing}")
    try:
        return VisionSpec(num_layers=data["vision_num_layers"], hidden_size=data["vision_hidden_size"],
                          ffn_hidden_size=data["vision_ffn_hidden_size"],
                          num_attention_heads=data["vision_num_attention_heads"],
                          image_size=data["vision_image_size"], patch_size=data["vision_patch_size"],
                          projector_hidden=data["vision_projector_hidden"],
                          class_token=data.get("vision_class_token", True), images=data.get("vision_images", 1))
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None


def _moe_mla(data: dict[str, Any], origin: str) -> tuple[MoESpec | None, MLASpec | None]:
    """The optional MoE and MLA parts of a model mapping; each needs all of its required keys."""
    moe = mla = None
    extra = [k for k in data if k.startswith("moe_") and k not in _MOE_KEYS]
    if extra and not any(k in data for k in _MOE_KEYS):
        raise InputError(f"{origin}: {', '.join(extra)} describe MoE layers, which a model without "
                         f"{', '.join(_MOE_KEYS)} does not have")
    if any(k in data for k in _MOE_KEYS):
        if not all(k in data for k in _MOE_KEYS):
            raise InputError(f"{origin}: a MoE model needs all of {list(_MOE_KEYS)}")
        try:  # MoESpec checks each key's type and range and how they fit together
            moe = MoESpec(num_experts=data["moe_num_experts"], top_k=data["moe_top_k"],
                          ffn_hidden_size=data["moe_ffn_hidden_size"],
                          shared_ffn_hidden_size=data.get("moe_shared_ffn_hidden_size", 0),
                          first_dense_layers=data.get("moe_first_dense_layers", 0), every=data.get("moe_every", 1),
                          router_bias=data.get("moe_router_bias", False), groups=data.get("moe_groups", 1),
                          group_top_k=data.get("moe_group_top_k", 0))
        except SpecError as exc:
            raise InputError(f"{origin}: {exc}") from None
    if any(k in data for k in _MLA_KEYS):
        if not all(k in data for k in _MLA_KEYS):
            raise InputError(f"{origin}: an MLA model needs all of {list(_MLA_KEYS)}")
        try:
            mla = MLASpec(data["mla_q_lora_rank"], data["mla_kv_lora_rank"], data["mla_qk_nope_head_dim"],
                          data["mla_qk_rope_head_dim"], data["mla_v_head_dim"])
        except SpecError as exc:
            raise InputError(f"{origin}: {exc}") from None
    return moe, mla


def model_from_hf_config(config: Any, origin: str) -> ModelSpec:
    """Hugging Face config.json (the decoder families in _HF_FAMILIES, MoE ones included) -> ModelSpec."""
    if not isinstance(config, dict):
        raise InputError(f"{origin}: expected a JSON object")
    if config.get("model_type") == "llava":
        return _llava(config, origin)
    if config.get("model_type") == "llama4" and isinstance(config.get("text_config"), dict):
        config = {"model_type": "llama4_text", **config["text_config"]}  # the text stack; the vision tower apart
    kind = str(config.get("model_type"))
    if kind not in _HF_FAMILIES:
        raise InputError(
            f"{origin}: model_type {kind!r} is not supported; supported: {', '.join(sorted(_HF_FAMILIES))}"
        )
    gated, norm, qkv_bias, linear_bias = _HF_FAMILIES[kind]
    if kind == "gpt2":
        hidden = config.get("n_embd")
        names = {"num_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd"}
        ffn = config.get("n_inner") or (4 * hidden if isinstance(hidden, int) else None)
        tied, positions = True, config.get("n_positions", 1024)
        dropout = bool(config.get("resid_pdrop", 0.1))
    else:
        names = {"num_layers": "num_hidden_layers", "num_attention_heads": "num_attention_heads",
                 "hidden_size": "hidden_size"}
        ffn = config.get("intermediate_size")
        tied = bool(config.get("tie_word_embeddings", kind in ("gemma", "gemma2")))
        positions, dropout = 0, bool(config.get("hidden_dropout", 0.0))
        qkv_bias = bool(config.get("attention_bias", qkv_bias))
    values = {key: config.get(src) for key, src in names.items()}
    missing = [names[k] for k, v in values.items() if v is None] + (["intermediate_size"] if ffn is None else [])
    if missing or "vocab_size" not in config:
        raise InputError(f"{origin}: missing fields {missing + (['vocab_size'] * ('vocab_size' not in config))}")
    mapping = {
        "name": _hf_name(config, origin, kind),
        **values,
        "ffn_hidden_size": ffn,
        "num_kv_heads": _hf_kv_heads(config, values["num_attention_heads"], origin),
        "vocab_size": config["vocab_size"],
        "gated_mlp": gated,
        "tied_embeddings": tied,
        "norm": norm.value,
        "qkv_bias": qkv_bias,
        "linear_bias": linear_bias,
        "learned_positions": positions,
        "dropout": dropout,
    }
    if config.get("head_dim"):
        mapping["head_dim"] = config["head_dim"]
    mapping["qk_norm"] = kind in _HF_QK_NORM
    mapping["activation"] = _hf_activation(config, gated, origin)
    mapping.update(hf_attention_keys(config, kind))
    mapping.update(_hf_moe_keys(config, kind, origin))
    return model_from_mapping(mapping, origin)


def _hf_name(config: dict[str, Any], origin: str, kind: str) -> str:
    """The model's name: the config's _name_or_path, else its folder's name, else its model_type."""
    given = config.get("_name_or_path")  # transformers writes "" where a config was not loaded from a hub
    field = "_name_or_path" if given not in (None, "") else "the model's name (its folder's: no _name_or_path)"
    return identifier(given if given not in (None, "") else Path(origin).parent.name or kind, f"{origin}: {field}")


def _hf_kv_heads(config: dict[str, Any], heads: Any, origin: str) -> Any:
    """num_key_value_heads: null or absent means one per attention head (multi-head attention); anything else must be
    a positive integer (0, "" or false is not "absent")."""
    given = config.get("num_key_value_heads")
    return heads if given is None else integer(given, f"{origin}: num_key_value_heads (null: one per attention "
                                                       "head)", 1, MAX_WIDTH)


def _hf_activation(config: dict[str, Any], gated: bool, origin: str) -> str:
    """The MLP activation a config's `hidden_act` (GPT-2: `activation_function`) names for its (gated or plain) MLP;
    the default of that MLP (Activation.default) when it names none."""
    name = config.get("hidden_act", config.get("activation_function"))
    if name is None:
        return Activation.default(gated).value
    pair = _HF_ACTIVATIONS.get(str(name))
    found = None if pair is None else pair[gated]
    if found is None:
        allowed = [k for k, v in _HF_ACTIVATIONS.items() if v[gated] is not None]
        raise InputError(f"{origin}: hidden_act {name!r} is not supported for a {'gated' if gated else 'plain'} MLP; "
                         f"supported: {', '.join(allowed)}")
    return found.value


def _llava(config: dict[str, Any], origin: str) -> ModelSpec:
    """LLaVA (transformers' LlavaConfig): a CLIP vision tower (vision_config), a two-layer projector to the
    language model's width and the language model (text_config, Llama when it names no model_type)."""
    text, vision = config.get("text_config"), config.get("vision_config")
    if not isinstance(text, dict) or not isinstance(vision, dict):
        raise InputError(f"{origin}: a llava config needs text_config and vision_config objects")
    language = model_from_hf_config({"model_type": "llama", **text}, origin)
    try:
        spec = VisionSpec(num_layers=vision["num_hidden_layers"], hidden_size=vision["hidden_size"],
                          ffn_hidden_size=vision["intermediate_size"],
                          num_attention_heads=vision["num_attention_heads"],
                          image_size=vision["image_size"], patch_size=vision["patch_size"],
                          projector_hidden=language.hidden_size)
    except KeyError as exc:
        raise InputError(f"{origin}: vision_config is missing {exc.args[0]!r}") from None
    except SpecError as exc:
        raise InputError(f"{origin}: {exc}") from None
    return dataclasses.replace(language, vision=spec)


def _hf_moe_keys(config: dict[str, Any], kind: str, origin: str) -> dict[str, Any]:
    """The model-YAML MoE/MLA keys of a Mixtral, Qwen3-MoE or DeepSeek-V3 config (empty for dense ones).

    Field names and layer rules follow the transformers configuration classes: Mixtral routes every layer
    (num_local_experts, num_experts_per_tok, experts as wide as intermediate_size); Qwen3-MoE routes layer i
    when (i + 1) % decoder_sparse_step == 0; DeepSeek-V3 keeps the first first_k_dense_replace layers dense,
    adds n_shared_experts shared experts and MLA, and num_nextn_predict_layers MTP modules; Llama 4 alternates
    dense layers of width intermediate_size_mlp with MoE layers (every interleave_moe_layer_step-th, experts of
    width intermediate_size and one shared expert as wide)."""
    try:
        if kind == "llama4_text":
            step = config.get("interleave_moe_layer_step", 1)
            layers = config["num_hidden_layers"]
            if not (is_integer(step) and is_integer(layers) and step >= 1 and 1 <= layers <= MAX_LAYERS):
                raise InputError(f"{origin}: interleave_moe_layer_step must be an integer >= 1 and num_hidden_layers "
                                 f"one in [1, {MAX_LAYERS}], got {step!r} and {layers!r}")
            expected = list(range(step - 1, layers, step))
            if config.get("moe_layers") not in (None, expected):
                raise InputError(f"{origin}: moe_layers must be every interleave_moe_layer_step-th layer "
                                 f"({expected[:4]}...); give a model YAML for other patterns")
            return {"moe_num_experts": config["num_local_experts"], "moe_top_k": config["num_experts_per_tok"],
                    "moe_ffn_hidden_size": config["intermediate_size"],
                    "moe_shared_ffn_hidden_size": config["intermediate_size"], "moe_every": step,
                    "ffn_hidden_size": config["intermediate_size_mlp"]}
        if kind == "mixtral":
            return {"moe_num_experts": config["num_local_experts"], "moe_top_k": config["num_experts_per_tok"],
                    "moe_ffn_hidden_size": config["intermediate_size"]}
        if kind == "qwen3_moe":
            if config.get("mlp_only_layers"):
                raise InputError(f"{origin}: mlp_only_layers is not supported; give a model YAML with "
                                 "moe_first_dense_layers/moe_every instead")
            experts = config.get("num_experts", config.get("num_local_experts"))  # transformers 5 renamed it
            if experts is None:
                raise KeyError("num_experts")
            return {"moe_num_experts": experts, "moe_top_k": config["num_experts_per_tok"],
                    "moe_ffn_hidden_size": config["moe_intermediate_size"],
                    "moe_every": config.get("decoder_sparse_step", 1)}
        if kind == "deepseek_v3":
            if config.get("moe_layer_freq", 1) != 1:
                raise InputError(f"{origin}: moe_layer_freq must be 1, got {config['moe_layer_freq']}")
            return {"moe_num_experts": config["n_routed_experts"], "moe_top_k": config["num_experts_per_tok"],
                    "moe_ffn_hidden_size": config["moe_intermediate_size"],
                    "moe_shared_ffn_hidden_size": _product(config.get("n_shared_experts", 0),
                                                           config["moe_intermediate_size"]),
                    "moe_first_dense_layers": config.get("first_k_dense_replace", 0),
                    "moe_router_bias": config.get("topk_method", "noaux_tc") == "noaux_tc",
                    **({"moe_groups": config["n_group"], "moe_group_top_k": config["topk_group"]}
                       if config.get("n_group") not in (None, 1) and config.get("topk_group") else {}),
                    "mla_q_lora_rank": config.get("q_lora_rank") or 0, "mla_kv_lora_rank": config["kv_lora_rank"],
                    "mla_qk_nope_head_dim": config["qk_nope_head_dim"],
                    "mla_qk_rope_head_dim": config["qk_rope_head_dim"], "mla_v_head_dim": config["v_head_dim"],
                    "head_dim": _sum(config["qk_nope_head_dim"], config["qk_rope_head_dim"]),
                    "mtp_layers": config.get("num_nextn_predict_layers", 0)}
    except KeyError as exc:
        raise InputError(f"{origin}: missing field {exc.args[0]!r} for model_type {kind!r}") from None
    return {}


def _product(a: Any, b: Any) -> Any:
    """a x b when both are integers; otherwise `a` itself, which the integer check then names."""
    return a * b if is_integer(a) and is_integer(b) else a


def _sum(a: Any, b: Any) -> Any:
    """a + b when both are integers; otherwise the first that is not one, which the integer check then names."""
    return a + b if is_integer(a) and is_integer(b) else (b if is_integer(a) else a)


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name, a model YAML (.yaml/.yml) or a Hugging Face config (.json) -> ModelSpec."""
    if not isinstance(name_or_path, str):
        raise InputError(f"model must be a preset name or a path (str), got {name_or_path!r}")
    presets = _presets()
    if name_or_path in presets:
        return model_from_mapping({"name": name_or_path, **presets[name_or_path]}, f"preset {name_or_path!r}")
    allowed = "a preset (see `meshplan models`), a model YAML or a Hugging Face config.json"
    refuse_non_file(name_or_path, "model",
                    allowed + (f" ({shown(Path(name_or_path) / 'config.json')} is one)"
                               if os.path.isfile(Path(name_or_path) / "config.json") else ""))
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
        raise InputError(not_found("model", name_or_path, list(presets), allowed, (".yaml", ".yml", ".json")))
    text = read_text(path, "model file", MAX_SPEC_BYTES)
    if path.suffix == ".json":
        return model_from_hf_config(parse_json(text, shown(path)), str(path))
    return model_from_mapping(parse_yaml(text, shown(path)), str(path))


def model_mapping(model: ModelSpec) -> dict[str, Any]:
    """The inverse of `model_from_mapping`: the model-YAML keys of `model`."""
    return {"name": model.name, "num_layers": model.num_layers, "hidden_size": model.hidden_size,
            "ffn_hidden_size": model.ffn_hidden_size, "num_attention_heads": model.num_attention_heads,
            "num_kv_heads": model.num_kv_heads, "head_dim": model.head_dim, "vocab_size": model.vocab_size,
            "gated_mlp": model.gated_mlp, "tied_embeddings": model.tied_embeddings, "norm": model.norm.value,
            **({"activation": model.mlp_activation.value}
               if model.mlp_activation is not Activation.default(model.gated_mlp) else {}),
            "qkv_bias": model.qkv_bias, "linear_bias": model.linear_bias,
            "learned_positions": model.learned_positions, "dropout": model.dropout,
            **({"qk_norm": True} if model.qk_norm else {}), **_moe_mla_mapping(model), **attention_mapping(model)}


def _moe_mla_mapping(model: ModelSpec) -> dict[str, Any]:
    """The optional MoE, MLA and multi-token-prediction keys (absent for dense models)."""
    out: dict[str, Any] = {"mtp_layers": model.mtp_layers} if model.mtp_layers else {}
    if model.moe is not None:
        moe = model.moe
        out.update(moe_num_experts=moe.num_experts, moe_top_k=moe.top_k, moe_ffn_hidden_size=moe.ffn_hidden_size,
                   moe_shared_ffn_hidden_size=moe.shared_ffn_hidden_size,
                   moe_first_dense_layers=moe.first_dense_layers, moe_every=moe.every,
                   moe_router_bias=moe.router_bias)
        if moe.group_top_k:
            out.update(moe_groups=moe.groups, moe_group_top_k=moe.group_top_k)
    if model.vision is not None:
        v = model.vision
        out.update(vision_num_layers=v.num_layers, vision_hidden_size=v.hidden_size,
                   vision_ffn_hidden_size=v.ffn_hidden_size, vision_num_attention_heads=v.num_attention_heads,
                   vision_image_size=v.image_size, vision_patch_size=v.patch_size,
                   vision_projector_hidden=v.projector_hidden, vision_class_token=v.class_token,
                   vision_images=v.images)
    if model.mla is not None:
        mla = model.mla
        out.update(mla_q_lora_rank=mla.q_lora_rank, mla_kv_lora_rank=mla.kv_lora_rank,
                   mla_qk_nope_head_dim=mla.qk_nope_head_dim, mla_qk_rope_head_dim=mla.qk_rope_head_dim,
                   mla_v_head_dim=mla.v_head_dim)
    return out
