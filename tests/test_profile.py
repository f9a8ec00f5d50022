"""meshplan profile layers and plan --costs: real layers timed with PyTorch on the CPU, a cost table, and
plans priced from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from cli import app
from cost_models.compute import flops as F
from cost_models.memory import footprint as M
from cost_models.profile.tables import COLUMNS, read_costs
from meshcore import AttentionKernel, Recompute, Runtime
from planner import InputError, evaluate, load_model

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


def _saved_per_token(model, seq_len: int, hf: bool) -> int:  # type: ignore[no-untyped-def]
    """Elements one TP rank's decoder layer saves for backward per token (mbs 1), tensor by tensor, as the
    profiler counts them (saved-tensor hooks, each distinct tensor once, parameters excluded). Both blocks keep
    the two norms' inputs (layer input, residual), their normalised copies before the weight and one rsqrt per
    token each (eager RMSNorm), the norms' outputs (the QKV and FC1 GEMM inputs), the attention output (also
    the output projection's input) and, in the MLP, the gate output, SiLU output, up output and their product.
    Hugging Face's layer adds rotary cos and sin (d each per position) and gives SDPA the rotated Q, K and V
    (GQA inside the kernel), which keeps a log-sum-exp per head; the reference block repeats K and V to the a
    query heads and keeps the softmax output (a·s) and the causal s x s mask (s per token at mbs 1)."""
    h, f, d = model.hidden_size, model.ffn_hidden_size, model.head_dim
    a, g, s = model.num_attention_heads, model.num_kv_heads, seq_len
    common = 2 * h + 2 * h + 2 + 2 * h + a * d + 4 * f
    if hf:
        return common + 2 * d + (a * d + 2 * g * d) + a
    return common + (a * d + 2 * a * d) + a * s + s


def test_measured_activations_are_the_tensors_the_layer_saves(table: Path) -> None:
    """The profiled activation bytes are exactly the tally of what the layer that ran saves (16-bit each), and
    that is the memory model's count plus what eager PyTorch keeps and fused kernels do not: Hugging Face's
    layer against the fused (flash) count adds the normalised copies 2h + 2, the rotary tables 2d and the
    separate SiLU output f, and records the fp32 log-sum-exp (4 B per head in the model) at 2 B. Both sides
    count whole tensors of known shapes, so they match exactly, with no tolerance."""
    model, measured = read_costs(table)
    got = measured.get("decoder", 1, 1).activation_bytes
    hf = "transformers" in str(pd.read_csv(table)["device"].iloc[0])
    assert (model.hidden_size, model.ffn_hidden_size, model.num_attention_heads, model.num_kv_heads,
            model.head_dim) == (256, 896, 2, 1, 128)  # llama3-8b at scale 1/16: the sizes the tally below uses
    assert got == 128 * 2 * _saved_per_token(model, 128, hf)
    if hf:
        flash = M.layer_activation_bytes(model, 128, 1, 1, 1, False, Recompute.NONE, AttentionKernel.FLASH)
        h, f, d, a = model.hidden_size, model.ffn_hidden_size, model.head_dim, model.num_attention_heads
        assert got == flash + 128 * 2 * (2 * h + 2 + 2 * d + f) - 128 * 2 * a


def test_reference_block_activations_are_the_tensors_it_saves(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference block (what is profiled without transformers) measured the same way, whether or not
    transformers is installed here."""
    from cost_models.profile import layerprofile
    from cost_models.profile.torch_reference import Block

    monkeypatch.setattr(layerprofile, "decoder_module", lambda part: (Block(part), "reference block"))
    model = layerprofile.scaled(load_model("llama3-8b"), 0.0625)
    calls: list[tuple[int, int]] = []
    rows = layerprofile.profile_layers(model, [1], [1], 128, "cpu", 1, lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]  # decoder, embedding, LM head: the progress bar's steps
    decoder = next(r for r in rows if r.kind == "decoder")
    assert decoder.activation_bytes == 128 * 2 * _saved_per_token(model, 128, hf=False)


def test_hugging_face_layers_when_transformers_is_installed(table: Path) -> None:
    pytest.importorskip("transformers", reason="transformers is not installed: the reference block was profiled")
    model, measured = read_costs(table)
    assert "transformers LlamaDecoderLayer" in str(pd.read_csv(table)["device"].iloc[0])
    assert measured.params("decoder", 1) == M.decoder_params_per_rank(model, 1)


def test_profiled_block_flops_equal_the_formula() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from cost_models.profile.layerprofile import scaled, shard
    from cost_models.profile.torch_reference import Block

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


def test_a_cpu_table_planned_for_a_gpu_is_warned_about(table: Path, tmp_path: Path) -> None:
    """Issue 31 item 6: a table profiled on a CPU planned against H100 printed MFU 0.0 % and an H100 error band
    without a word; now one warning line says whose times they are. A GPU's table gets none."""
    args = ["plan", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "128", "--global-batch", "64"]
    res = runner.invoke(app, [*args, "--costs", str(table)])
    assert res.exit_code == 0, res.output
    assert f"warning: the cost table {table} was measured on cpu" in res.output
    assert "do not describe h100-sxm (a GPU)" in res.output
    frame = pd.read_csv(table)
    frame["device"] = "cuda (NVIDIA H100 80GB HBM3)"
    gpu = tmp_path / "gpu.csv"
    frame.to_csv(gpu, index=False)
    quiet = runner.invoke(app, [*args, "--costs", str(gpu)])
    assert quiet.exit_code == 0 and "warning" not in quiet.output
