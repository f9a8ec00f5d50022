"""Analytical parameter and FLOP counts against PyTorch: a meta-device reference model for parameters,
FlopCounterMode on CPU for forward + backward FLOPs (REFERENCE.md section 6). Skipped without torch."""

from __future__ import annotations

import pytest

from cost_models import flops as F
from planner import load_model
from planner.loaders import model_from_mapping

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[profile]')")
nn = torch.nn
from cost_models.torch_reference import Reference  # noqa: E402


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
