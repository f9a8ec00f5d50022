"""meshplan profile layers and plan --costs: real layers timed with PyTorch on the CPU, a cost table, and
plans priced from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from cost_models import flops as F
from cost_models import memory as M
from cost_models.profile import COLUMNS, read_costs
from planner import InputError, evaluate, load_model
from planner.specs import AttentionKernel, Recompute, Runtime

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[profile]')")
runner = CliRunner()


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("costs") / "c.csv"
    res = runner.invoke(app, ["profile", "layers", "--model", "llama3-8b", "--device", "cpu", "--scale", "0.0625",
                              "--tp", "1,2", "--mbs", "1,2", "--seq-len", "128", "--repeats", "3", "--out", str(path)])
    assert res.exit_code == 0, res.output
    return path


def test_table_has_the_documented_columns(table: Path) -> None:
    frame = pd.read_csv(table)
    assert tuple(frame.columns) == COLUMNS
    assert set(frame["kind"]) == {"embedding", "decoder", "lm_head"} and len(frame) == 12
    assert (frame["forward_ms"] > 0).all() and (frame["backward_ms"] > 0).all()
    dec = frame[frame["kind"] == "decoder"].set_index(["tp", "mbs"])
    # twice the micro-batch, twice the activations, but for what does not grow with it (mask, rotary tables)
    assert dec.loc[(1, 2), "activation_bytes"] == pytest.approx(2 * dec.loc[(1, 1), "activation_bytes"], rel=0.05)


def test_measured_parameters_match_the_formulas(table: Path) -> None:
    model, measured = read_costs(table)
    for tp in (1, 2):
        assert measured.params("decoder", tp) == M.decoder_params_per_rank(model, tp)


def test_measured_activations_against_the_memory_model(table: Path) -> None:
    """Eager PyTorch keeps a few more intermediates than fused kernels (GQA copies, RoPE halves): at least
    80 % of the analytical count for the attention the layer ran and at most 1.5 x."""
    model, measured = read_costs(table)
    got = measured.get("decoder", 1, 1).activation_bytes
    hf = "transformers" in str(pd.read_csv(table)["device"].iloc[0])
    kernel = AttentionKernel.FLASH if hf else AttentionKernel.UNFUSED
    want = M.layer_activation_bytes(model, 128, 1, 1, 1, False, Recompute.NONE, kernel)
    assert 0.8 * want <= got <= 1.5 * want


def test_hugging_face_layers_when_transformers_is_installed(table: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is not installed: the reference block was profiled")
    model, measured = read_costs(table)
    assert "transformers LlamaDecoderLayer" in str(pd.read_csv(table)["device"].iloc[0])
    assert measured.params("decoder", 1) == M.decoder_params_per_rank(model, 1)


def test_profiled_block_flops_equal_the_formula() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from cost_models.layerprofile import scaled, shard
    from cost_models.torch_reference import Block

    model = scaled(load_model("llama3-8b"), 0.0625)
    for tp in (1, 2):
        block = Block(shard(model, tp))
        x = torch.randn(1, 64, model.hidden_size, requires_grad=True)
        with FlopCounterMode(display=False) as counter:
            block(x).sum().backward()
        assert counter.get_total_flops() == pytest.approx(3 * F.decoder_matmul_flops(shard(model, tp), 64), rel=1e-12)


def test_plan_from_the_table_uses_its_times(table: Path, tmp_path: Path) -> None:
    model, measured = read_costs(table)
    pred = evaluate(model, "h100-sxm", gpus=8, seq_len=128, global_batch=64, tp=1, mbs=2,
                    runtime=Runtime(measured=measured))
    m = 64 // (8 * 2)
    dec, emb, head = (measured.get(k, 1, 2) for k in ("decoder", "embedding", "lm_head"))
    want = m * (model.num_layers * (dec.forward_s + dec.backward_s) + emb.forward_s + emb.backward_s
                + head.forward_s + head.backward_s)
    assert pred.breakdown.compute_s == pytest.approx(want, rel=1e-12)
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["plan", "--costs", str(table), "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "128", "--global-batch", "64", "--out", str(out)])
    assert res.exit_code == 0, res.output
    saved = yaml.safe_load(out.read_text())
    assert saved["costs"]["seq_len"] == 128 and saved["parallelism"]["tp"] in (1, 2)
    again = runner.invoke(app, ["evaluate", "--plan", str(out), "--json"])
    assert again.exit_code == 0 and '"step_time_s"' in again.output


def test_costs_errors(table: Path, tmp_path: Path) -> None:
    res = runner.invoke(app, ["plan", "--costs", str(table), "--hardware", "h100-sxm", "--gpus", "8",
                              "--seq-len", "256", "--global-batch", "64"])
    assert res.exit_code == 2 and "measured at seq_len 128, not 256" in res.output
    broken = tmp_path / "b.csv"
    broken.write_text("kind,tp\ndecoder,1\n")
    with pytest.raises(InputError, match="missing columns"):
        read_costs(broken)
