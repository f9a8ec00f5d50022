"""Parameter counts and FLOPs against published figures and the papers' closed forms."""

from __future__ import annotations

import pytest

from cost_models.compute import flops as F
from meshcore import AttentionKernel, Runtime
from planner import evaluate, load_model
from planner.inputs.loaders import model_preset_names, published_params

MOE_PRESETS = [n for n in model_preset_names() if load_model(n).moe is not None]
DENSE_OPEN = [n for n in model_preset_names() if not n.startswith(("megatron", "gpt3")) and n not in MOE_PRESETS]


@pytest.mark.parametrize("name", DENSE_OPEN)
def test_open_model_parameter_counts_are_exact(name: str) -> None:
    """Hugging Face checkpoints publish exact totals (model cards / safetensors index)."""
    assert F.total_params(load_model(name)) == published_params(name)


@pytest.mark.parametrize("name", [n for n in model_preset_names() if n.startswith(("megatron", "gpt3"))])
def test_megatron_parameter_counts_match_papers(name: str) -> None:
    """Narayanan et al. 2021 Table 1 prints totals to 0.1B; Korthikanti et al. 2022 Table 3 to 1B."""
    assert F.total_params(load_model(name)) == pytest.approx(published_params(name), rel=0.03)


def test_moe_presets_exist() -> None:
    assert {"mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3"} <= set(MOE_PRESETS)


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_moe_total_and_active_counts_match_model_cards(name: str) -> None:
    """Model cards print totals to 3 significant figures (46.7B, 141B, 30.5B, 235B; DeepSeek-V3 671B for
    the main model, the MTP module apart) and active counts to 2 (12.9B, 39B, 3.3B, 22B, 37B)."""
    m = load_model(name)
    assert F.total_params(m) - F.mtp_params(m) == pytest.approx(published_params(name), rel=0.005)
    assert F.active_params(m) == pytest.approx(published_params(name, active=True), rel=0.02)
    assert F.active_params(m) < F.total_params(m)


def test_moe_exact_counts_from_checkpoints() -> None:
    """Exact safetensors totals: Mixtral-8x7B 46,702,792,704 and Qwen3-30B-A3B 30,532,122,624."""
    assert F.total_params(load_model("mixtral-8x7b")) == 46702792704
    assert F.total_params(load_model("qwen3-30b-a3b")) == 30532122624


def test_deepseek_v3_layer_kinds_and_mtp() -> None:
    """Three dense layers, then 58 MoE layers; the MTP module (one MoE decoder layer + 2h x h projection,
    embedding and head shared) is ~11.6B; the released checkpoint stores another embedding and head copy
    with it (2 x 129280 x 7168 = 1.85B), which brings it to the card's 14B and the total to 684.5B."""
    m = load_model("deepseek-v3")
    assert [m.moe.is_moe_layer(i) for i in range(5)] == [False, False, False, True, True]  # type: ignore[union-attr]
    assert sum(m.moe.is_moe_layer(i) for i in range(m.num_layers)) == 58  # type: ignore[union-attr]
    assert (F.mtp_params(m) + 2 * m.vocab_size * m.hidden_size) / 1e9 == pytest.approx(13.46, abs=0.05)
    assert (F.total_params(m) + 2 * m.vocab_size * m.hidden_size) / 1e9 == pytest.approx(684.5, abs=0.1)


def test_active_equals_total_for_dense() -> None:
    m = load_model("llama3-8b")
    assert F.active_params(m) == F.total_params(m)


def test_gpt3_175b_is_174_6b() -> None:
    # Narayanan et al. 2021 Table 2: 174.6B for the 96-layer, h=12288 model with vocabulary 51200.
    assert F.total_params(load_model("gpt3-175b")) / 1e9 == pytest.approx(174.6, abs=0.05)


@pytest.mark.parametrize("name", ["gpt3-175b", "megatron-530b", "megatron-1.7b"])
def test_hardware_flops_with_full_recompute_equal_narayanan_eq3(name: str) -> None:
    """With full recomputation our hardware FLOPs are Narayanan et al. 2021 eq. (3), term for term:
    96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    m = load_model(name)
    gpus, seq, batch = 8, 2048, 16
    pred = evaluate(m, "a100-80gb", gpus=gpus, seq_len=seq, global_batch=batch, tp=8, mbs=1,
                    recompute="full", runtime=Runtime(attention=AttentionKernel.UNFUSED))
    expected = F.narayanan_iteration_flops(batch, seq, m.num_layers, m.hidden_size, m.vocab_size)
    measured = pred.hardware_tflops_per_gpu * 1e12 * pred.step_time_s * gpus
    assert measured == pytest.approx(expected, rel=1e-9)


def test_model_flops_are_six_n_plus_attention() -> None:
    """Kaplan et al. 2020 / PaLM appendix B: 6·N per token plus 12·l·h·s attention, N without embeddings."""
    m = load_model("llama2-7b")
    seq = 4096
    n_matmul = m.num_layers * (F.attention_weight_params(m) + F.mlp_weight_params(m)) + m.vocab_size * m.hidden_size
    expected = 6 * n_matmul * seq + 12 * m.num_layers * m.q_dim * seq * seq
    assert F.model_flops_per_sequence(m, seq) == pytest.approx(expected, rel=1e-12)
