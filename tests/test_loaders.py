"""Model inputs: presets, model YAML, Hugging Face config.json; broken input gives a clean error."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cost_models.flops import total_params
from planner.errors import InputError
from planner.loaders import REQUIRED_MODEL_KEYS, load_model, model_from_mapping

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


def test_hf_gpt2_config(tmp_path: Path) -> None:
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
           "n_positions": 1024, "vocab_size": 50257}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert total_params(load_model(str(path))) == 124439808  # GPT-2 small, as counted by transformers


def test_hf_moe_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mixtral", "num_local_experts": 8}))
    with pytest.raises(InputError, match="mixture-of-experts"):
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
