"""Analytical parameter and FLOP counts against PyTorch: a meta-device reference model for parameters,
FlopCounterMode on CPU for forward + backward FLOPs (REFERENCE.md section 6). Skipped without torch."""

from __future__ import annotations

import pytest

from cost_models.compute import flops as F
from planner import load_model
from planner.inputs.loaders import model_from_mapping

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[profile]')")
nn = torch.nn
from cost_models.profile.torch_reference import Reference  # noqa: E402


@pytest.mark.parametrize("name", ["llama3-8b", "qwen2.5-7b", "gpt3-175b", "llama2-70b"])
def test_meta_device_parameter_count(name: str) -> None:
    m = load_model(name)
    with torch.device("meta"):
        model = Reference(m)
    assert sum(p.numel() for p in model.parameters()) == F.total_params(m)


@pytest.mark.parametrize("gated,tied,kv", [(True, False, 2), (False, True, 4)])
def test_flop_counter_forward_backward(gated: bool, tied: bool, kv: int) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    m = model_from_mapping({"name": "tiny", "num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 160,
                            "num_attention_heads": 4, "num_kv_heads": kv, "vocab_size": 96,
                            "gated_mlp": gated, "tied_embeddings": tied}, "tiny")
    torch.manual_seed(0)
    model = Reference(m)
    batch, seq = 2, 32
    ids = torch.randint(0, m.vocab_size, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        loss.backward()
    assert counter.get_total_flops() == pytest.approx(batch * F.model_flops_per_sequence(m, seq), rel=1e-12)


def _hf_moe_configs() -> dict[str, object]:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (the [profile] extra)")
    return {
        "mixtral": transformers.MixtralConfig(
            num_hidden_layers=2, hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=500, num_local_experts=4, num_experts_per_tok=2),
        "qwen3_moe": transformers.Qwen3MoeConfig(
            num_hidden_layers=4, hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_experts=8,
            num_experts_per_tok=2, decoder_sparse_step=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            vocab_size=500, tie_word_embeddings=False),
        "deepseek_v3": transformers.DeepseekV3Config(
            num_hidden_layers=4, hidden_size=128, intermediate_size=256, moe_intermediate_size=32, n_routed_experts=8,
            n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
            v_head_dim=16, vocab_size=500, n_group=2, topk_group=1),
        "llama4_text": transformers.Llama4TextConfig(
            num_hidden_layers=4, hidden_size=128, intermediate_size=64, intermediate_size_mlp=256, num_local_experts=4,
            num_experts_per_tok=1, interleave_moe_layer_step=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=32, vocab_size=500, tie_word_embeddings=False, use_qk_norm=False),
    }


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe", "deepseek_v3", "llama4_text"])
def test_moe_parameter_counts_equal_transformers_models(kind: str) -> None:
    """transformers' own Mixtral, Qwen3-MoE (every second layer MoE), DeepSeek-V3 (MLA, a dense first layer,
    a shared expert) and Llama 4's text stack (dense and MoE layers alternating, each MLP its own width) built
    on the meta device have exactly our count. transformers builds no MTP module, so
    that is left out, and keeps DeepSeek's router score bias as a buffer, so that is added in."""
    from transformers import AutoModelForCausalLM

    from planner.inputs.loaders import model_from_hf_config

    config = _hf_moe_configs()[kind]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    theirs = sum(p.numel() for p in model.parameters()) + sum(
        b.numel() for name, b in model.named_buffers() if name.endswith("e_score_correction_bias"))
    ours = model_from_hf_config(config.to_dict(), kind)  # type: ignore[attr-defined]
    assert ours.moe is not None
    assert F.total_params(ours) - F.mtp_params(ours) == theirs


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe", "deepseek_v3", "llama4_text"])
def test_moe_flops_equal_flop_counter_on_transformers_models(kind: str) -> None:
    """Forward + backward FLOPs of transformers' MoE models equal 3 x our forward count exactly, whatever the
    (random) router does: only the routed top-k experts, the shared expert, the router and MLA's factored
    projections are counted. The eager expert loop is asked for because FlopCounterMode does not count the
    grouped-GEMM kernels transformers 5 uses by default."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM

    from planner.inputs.loaders import model_from_hf_config

    config = _hf_moe_configs()[kind]
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", experts_implementation="eager")
    except TypeError:  # transformers 4: experts always run as an eager loop
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    batch, seq = 2, 32
    ids = torch.randint(0, 500, (batch, seq))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    ours = model_from_hf_config(config.to_dict(), kind)  # type: ignore[attr-defined]
    expected = batch * F.model_flops_per_sequence(ours, seq)
    if kind == "llama4_text":  # transformers runs every Llama 4 expert on every token, scores masked to zero
        assert ours.moe is not None
        unrouted = ours.moe.num_experts - ours.moe.top_k
        expected += (3 * 2 * batch * seq * unrouted * F.mlp_params_of_width(ours, ours.moe.ffn_hidden_size)
                     * F.decoder_layer_counts(ours)[1])
    assert counter.get_total_flops() == pytest.approx(expected, rel=1e-12)
