"""Parameter counts and FLOPs against published figures and the papers' closed forms."""

from __future__ import annotations

import pytest

from cost_models import flops as F
from planner import evaluate, load_model
from planner.loaders import model_preset_names, published_params
from planner.specs import AttentionKernel, Runtime


@pytest.mark.parametrize("name", [n for n in model_preset_names() if not n.startswith(("megatron", "gpt3"))])
def test_open_model_parameter_counts_are_exact(name: str) -> None:
    """Hugging Face checkpoints publish exact totals (model cards / safetensors index)."""
    assert F.total_params(load_model(name)) == published_params(name)


@pytest.mark.parametrize("name", [n for n in model_preset_names() if n.startswith(("megatron", "gpt3"))])
def test_megatron_parameter_counts_match_papers(name: str) -> None:
    """Narayanan et al. 2021 Table 1 prints totals to 0.1B; Korthikanti et al. 2022 Table 3 to 1B."""
    assert F.total_params(load_model(name)) == pytest.approx(published_params(name), rel=0.03)


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
