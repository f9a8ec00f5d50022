"""Model inputs: presets, model YAML, Hugging Face config.json; broken input gives a clean error."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.compute.flops import total_params
from meshcore.errors import InputError
from planner.inputs.loaders import REQUIRED_MODEL_KEYS, load_model, model_from_mapping

TINY = {"name": "tiny", "num_layers": 4, "hidden_size": 256, "ffn_hidden_size": 1024,
        "num_attention_heads": 8, "vocab_size": 1000, "gated_mlp": False, "tied_embeddings": True}


def test_model_yaml_defaults(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(TINY))
    m = load_model(str(path))
    assert (m.num_kv_heads, m.head_dim) == (8, 32)


def test_unknown_key_lists_allowed(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({**TINY, "hiddn_size": 3}))
    with pytest.raises(InputError, match=r"unknown keys \['hiddn_size'\]; allowed: name, num_layers"):
        load_model(str(path))


def test_missing_key_lists_allowed() -> None:
    data = {k: v for k, v in TINY.items() if k != "vocab_size"}
    with pytest.raises(InputError, match=r"missing keys \['vocab_size'\]"):
        model_from_mapping(data, "m.yaml")


def test_unknown_preset_names_alternatives() -> None:
    with pytest.raises(InputError, match="unknown model 'llama9'"):
        load_model("llama9")


def test_hf_llama_config_matches_preset(tmp_path: Path) -> None:
    """The released Llama-3-8B config.json fields give the preset's exact parameter count."""
    cfg = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings": 8192}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert total_params(load_model(str(path))) == total_params(load_model("llama3-8b"))


def test_hf_qwen2_has_qkv_bias(tmp_path: Path) -> None:
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
           "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert total_params(load_model(str(path))) == 7615616512  # Qwen2.5-7B model card


def test_hf_qwen3_config_counts_qk_norms(tmp_path: Path) -> None:
    cfg = {"model_type": "qwen3", "num_hidden_layers": 36, "hidden_size": 4096, "intermediate_size": 12288,
           "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
           "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert total_params(load_model(str(path))) == 8190735360  # Qwen3-8B safetensors total


def test_hf_gpt2_config(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
           "n_positions": 1024, "vocab_size": 50257}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert total_params(load_model(str(path))) == 124439808  # GPT-2 small, as counted by transformers


HF_MOE_CONFIGS = {
    "mixtral-8x7b": {"model_type": "mixtral", "num_hidden_layers": 32, "hidden_size": 4096,
                     "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                     "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2,
                     "tie_word_embeddings": False},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
                      "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4,
                      "head_dim": 128, "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
                      "moe_intermediate_size": 768, "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "tie_word_embeddings": False},
    "deepseek-v3": {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
                    "intermediate_size": 18432, "num_attention_heads": 128, "num_key_value_heads": 128,
                    "vocab_size": 129280, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048, "first_k_dense_replace": 3, "moe_layer_freq": 1,
                    "topk_method": "noaux_tc", "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "num_nextn_predict_layers": 1, "n_group": 8,
                    "topk_group": 4,
                    "tie_word_embeddings": False},
}


@pytest.mark.parametrize("preset", sorted(HF_MOE_CONFIGS))
def test_hf_moe_configs_match_presets(tmp_path: Path, preset: str) -> None:
    """The released configs' fields (transformers' Mixtral/Qwen3-MoE/DeepSeek-V3 classes) give the presets."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_MOE_CONFIGS[preset]))
    from_hf, ours = load_model(str(path)), load_model(preset)
    assert from_hf.moe == ours.moe and from_hf.mla == ours.mla and from_hf.mtp_layers == ours.mtp_layers
    assert total_params(from_hf) == total_params(ours)


def test_hf_moe_missing_field_is_named(tmp_path: Path) -> None:
    cfg = dict(HF_MOE_CONFIGS["mixtral-8x7b"])
    del cfg["num_experts_per_tok"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="num_experts_per_tok"):
        load_model(str(path))


def test_moe_yaml_needs_all_moe_keys(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 128,
                                    "num_attention_heads": 4, "vocab_size": 100, "gated_mlp": True,
                                    "tied_embeddings": False, "moe_num_experts": 8}))
    with pytest.raises(InputError, match="moe_top_k"):
        load_model(str(path))


scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=3),
                      max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.dictionaries(st.sampled_from([*REQUIRED_MODEL_KEYS, "num_kv_heads", "head_dim", "bogus"]),
                            values, max_size=10))
def test_random_yaml_never_crashes(tmp_path: Path, data: dict) -> None:
    path = tmp_path / "rand.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        load_model(str(path))
    except InputError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_random_bytes_as_yaml_and_json(tmp_path: Path, text: str) -> None:
    for suffix in (".yaml", ".json"):
        path = tmp_path / f"junk{suffix}"
        path.write_text(text)
        with contextlib.suppress(InputError):
            load_model(str(path))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cfg=st.dictionaries(st.sampled_from(["model_type", "hidden_size", "num_hidden_layers",
                                            "num_attention_heads", "num_key_value_heads", "intermediate_size",
                                            "vocab_size", "head_dim", "n_embd", "n_layer", "n_head"]),
                           st.one_of(st.sampled_from(["llama", "gpt2", "qwen2", "bert"]), scalars), max_size=11))
def test_random_hf_config_never_crashes(tmp_path: Path, cfg: dict) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with contextlib.suppress(InputError):
        load_model(str(path))


MOE_TINY = {**TINY, "gated_mlp": True, "moe_num_experts": 8, "moe_top_k": 2, "moe_ffn_hidden_size": 256}


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_layers": 10**20}, r"num_layers must be an integer in \[1, 10000\], got 100000000000000000000"),
    ({"num_layers": 10001}, r"num_layers must be an integer in \[1, 10000\], got 10001"),
    ({"vocab_size": 2**40}, r"vocab_size must be an integer in \[1, 16777216\]"),
    ({"learned_positions": -1}, r"learned_positions must be an integer in \[0, 16777216\], got -1"),
    ({"mtp_layers": -2}, r"mtp_layers must be an integer in \[0, 10000\], got -2"),
])
def test_absurd_model_numbers_are_refused(changes: dict, message: str) -> None:
    """Numbers far beyond any real model are refused before anything is built (10**20 layers used to raise an
    OverflowError building the per-layer tuple)."""
    with pytest.raises(InputError, match=message):
        model_from_mapping({**TINY, **changes}, "m.yaml")


def test_absurd_layer_count_in_hf_config(tmp_path: Path) -> None:
    for model_type, layers_key in (("llama", "num_hidden_layers"), ("gpt2", "n_layer")):
        cfg = {"model_type": model_type, "hidden_size": 256, "n_embd": 256, "num_attention_heads": 8, "n_head": 8,
               "intermediate_size": 1024, "vocab_size": 1000, layers_key: 10**20}
        path = tmp_path / "config.json"
        path.write_text(json.dumps(cfg))
        with pytest.raises(InputError, match=r"num_layers must be an integer in \[1, 10000\]"):
            load_model(str(path))


@pytest.mark.parametrize(("changes", "message"), [
    ({"moe_every": 0}, r"moe_every must be an integer in \[1, 10000\], got 0"),
    ({"moe_every": -1}, r"moe_every must be an integer"),
    ({"moe_first_dense_layers": 5}, "moe_first_dense_layers 5 and moe_every 1 leave no MoE layer among num_layers 4"),
    ({"moe_first_dense_layers": 2, "moe_every": 3}, "leave no MoE layer among num_layers 4"),
    ({"moe_first_dense_layers": -1}, r"moe_first_dense_layers must be an integer in \[0, 10000\], got -1"),
    ({"moe_top_k": 9}, "moe_top_k 9 must be at most moe_num_experts 8"),
    ({"moe_groups": 3}, "moe_groups must divide moe_num_experts"),
    ({"moe_num_experts": 10**20}, r"moe_num_experts must be an integer in \[1, 16777216\]"),
])
def test_moe_keys_out_of_range(changes: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        model_from_mapping({**MOE_TINY, **changes}, "m.yaml")


def test_moe_first_dense_layers_at_the_limit_is_kept() -> None:
    """The last layer may be the only MoE layer: 3 dense layers then one MoE layer of 4."""
    m = model_from_mapping({**MOE_TINY, "moe_first_dense_layers": 3}, "m.yaml")
    assert m.moe_layers() == (False, False, False, True)


def test_hf_moe_fields_of_the_wrong_type_are_named(tmp_path: Path) -> None:
    """DeepSeek-V3 and Llama 4 fields the loader multiplies or iterates over are checked first."""
    base = {"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
            "intermediate_size": 512, "vocab_size": 1000, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
            "v_head_dim": 16}
    path = tmp_path / "config.json"
    for changes, message in (({"n_shared_experts": "two"}, "moe_shared_ffn_hidden_size must be an integer"),
                             ({"n_group": "8", "topk_group": 2}, "moe_groups must be an integer"),
                             ({"kv_lora_rank": -4}, "mla_kv_lora_rank must be an integer")):
        path.write_text(json.dumps({**base, **changes}))
        with pytest.raises(InputError, match=message):
            load_model(str(path))
    path.write_text(json.dumps({**base, "n_group": None}))
    assert load_model(str(path)).moe.groups == 1


def test_activation_from_yaml_and_hf_config(tmp_path: Path) -> None:
    """`activation` defaults to what the MLP implies (SwiGLU gated, GELU plain); a Hugging Face config's hidden_act
    names it (relu2: Nemotron's squared ReLU); a wrong or inconsistent one says what is allowed."""
    from meshcore.enums import Activation

    assert model_from_mapping(TINY, "m.yaml").activation is Activation.GELU
    assert model_from_mapping({**TINY, "gated_mlp": True}, "m.yaml").activation is Activation.SWIGLU
    assert model_from_mapping({**TINY, "activation": "squared_relu"}, "m.yaml").activation is Activation.SQUARED_RELU
    with pytest.raises(InputError, match=r"activation must be one of swiglu, geglu, gelu, squared_relu, got"):
        model_from_mapping({**TINY, "activation": "relu"}, "m.yaml")
    with pytest.raises(InputError, match="activation swiglu needs a gated MLP; .* allowed: gelu, squared_relu"):
        model_from_mapping({**TINY, "activation": "swiglu"}, "m.yaml")
    cfg = {"model_type": "nemotron", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 16384, "vocab_size": 256000, "hidden_act": "relu2",
           "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model = load_model(str(path))
    assert (model.activation, model.gated_mlp) == (Activation.SQUARED_RELU, False)
    path.write_text(json.dumps({**cfg, "model_type": "gemma", "hidden_act": "gelu_pytorch_tanh"}))
    assert load_model(str(path)).activation is Activation.GEGLU
    path.write_text(json.dumps({**cfg, "model_type": "llama", "hidden_act": "relu2"}))
    with pytest.raises(InputError, match="hidden_act 'relu2' is not supported for a gated MLP; supported: silu"):
        load_model(str(path))


@pytest.mark.parametrize(("given", "said"), [
    ("llama-3-70b", "did you mean 'llama3-70b'?"), ("Llama3-70B", "did you mean 'llama3-70b'?"),
    ("llama3", "did you mean one of llama3-8b, llama3-70b, llama3-405b?"),
    ("llama3-7b", "did you mean one of llama3-70b, llama3-8b"),  # the close ones, not only the closest
    ("Mistral7B", "did you mean 'mistral-7b'?"),  # compared without case and separators
    ("qwen/confg.json", "model 'qwen/confg.json': no such file")])
def test_a_near_miss_names_the_preset_or_the_missing_file(given: str, said: str) -> None:
    """Issue 31 item 3: a typo gets "did you mean", a missing file is named as missing (was "unknown model")."""
    with pytest.raises(InputError, match=re.escape(said)):
        load_model(given)


def test_a_near_miss_of_a_hardware_preset() -> None:
    from hardware_profiles import load_hardware

    with pytest.raises(InputError, match=re.escape("did you mean one of h100-pcie, h100-sxm")):
        load_hardware("h100", 8)


def test_hf_sliding_window_rope_theta_and_norm_eps_reach_the_cost_and_megatron(tmp_path: Path) -> None:
    """Issue 31 item 4: Mistral's 4,096-key window at 8k halves the windowed layers' attention pairs (s·w − w²/2
    of s²/2: 0.75 of causal), Gemma 2 keeps every second layer global, and the Megatron arguments state the window,
    the rotary base and the norm epsilon (they were ignored without a word)."""
    import planner
    from cost_models.compute.flops import attended_fraction
    from planner.outputs.emitters.megatron import arguments

    base = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 32000, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
    path = tmp_path / "mistral" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "mistral", "sliding_window": 4096, **base}))
    model = load_model(str(path))
    assert (model.sliding_window, model.global_attention_every, model.rope_theta, model.norm_eps) == \
        (4096, 0, 1e6, 1e-6)
    assert attended_fraction(model, 8192, causal=True) == pytest.approx(0.375)  # (8192*4096 - 4096²/2) / 8192²
    assert attended_fraction(model, 4096, causal=True) == 0.5  # the window covers the sequence
    gemma = tmp_path / "gemma2" / "config.json"
    gemma.parent.mkdir()
    gemma.write_text(json.dumps({"model_type": "gemma2", "sliding_window": 4096, "head_dim": 128, **base}))
    g = load_model(str(gemma))
    assert g.global_attention_every == 2 and g.windowed_layers(8192) == 16
    windowed = planner.evaluate(str(path), "h100-sxm", gpus=8, seq_len=8192, global_batch=8)
    full = planner.evaluate("mistral-7b", "h100-sxm", gpus=8, seq_len=8192, global_batch=8)
    assert windowed.breakdown.compute_s < full.breakdown.compute_s
    plan = planner.plan(str(path), "h100-sxm", gpus=8, seq_len=8192, global_batch=8, spec=planner.SearchSpec(top_k=1))
    args = dict(arguments(plan))
    assert (args["--rotary-base"], args["--norm-epsilon"], args["--window-size"]) == (1000000, 1e-6, "4096,0")
    assert "window-attn-skip-freq" not in str(args)
