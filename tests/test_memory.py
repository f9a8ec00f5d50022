"""Memory model against Korthikanti et al. 2022 (Table 2 formulas, Figures 1 and 7) and properties."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models.memory import footprint as M
from meshcore import GIB, AttentionKernel, Recompute, Runtime
from planner import evaluate, load_model

UNFUSED = AttentionKernel.UNFUSED
NAMES = {"megatron-22b": "megatron-22b", "gpt3-175b": "gpt3-175b", "megatron-530b": "megatron-530b",
         "megatron-1t": "megatron-1t"}


@pytest.mark.parametrize("tp", [1, 2, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_table2_closed_forms(tp: int, sp: bool) -> None:
    """Korthikanti et al. 2022 Table 2 (bytes per layer, MHA GPT with 4h FFN and dropout)."""
    if sp and tp == 1:
        return
    m = load_model("gpt3-175b")
    s, b, h, a = 2048, 2, m.hidden_size, m.num_attention_heads
    got = M.layer_activation_bytes(m, s, b, tp, 1, sp, Recompute.NONE, UNFUSED)
    if sp:
        want = s * b * h / tp * (34 + 5 * a * s / h)
    else:
        want = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert got == pytest.approx(want, rel=1e-12)
    selective = M.layer_activation_bytes(m, s, b, tp, 1, sp, Recompute.SELECTIVE, UNFUSED)
    assert selective == pytest.approx(s * b * h * ((34 / tp) if sp else (10 + 24 / tp)), rel=1e-12)
    full = M.layer_activation_bytes(m, s, b, tp, 1, sp, Recompute.FULL, UNFUSED)
    assert full == pytest.approx(2 * s * b * h / (tp if sp else 1), rel=1e-12)


def _figure1(calibration_dir: Path) -> list[dict]:
    return yaml.safe_load((calibration_dir / "korthikanti2022_memory.yaml").read_text())["figure1_gib"]


@pytest.mark.parametrize("mode", ["none", "seqsel"])
@pytest.mark.parametrize("row", range(4))
def test_figure1_activation_memory_within_3pct(calibration_dir: Path, row: int, mode: str) -> None:
    """First-stage activation memory of the paper's Table 3 runs (Figure 1), within 3 %."""
    rec = _figure1(calibration_dir)[row]
    gpus = rec["tp"] * rec["pp"]
    pred = evaluate(NAMES[rec["model"]], "a100-80gb", gpus=gpus, seq_len=2048, global_batch=rec["gbs"],
                    tp=rec["tp"], pp=rec["pp"], vpp=rec["vpp"], mbs=rec["mbs"], sp=mode == "seqsel",
                    recompute="selective" if mode == "seqsel" else "none",
                    runtime=Runtime(attention=UNFUSED))
    assert pred.stages[0].activations_gib == pytest.approx(rec[mode]["activations"], rel=0.03)


@pytest.mark.parametrize("row", range(4))
def test_figure1_weights_and_optimizer_within_3pct(calibration_dir: Path, row: int) -> None:
    """18 bytes per parameter of the stage's decoder layers (the figure leaves out the embedding)."""
    rec = _figure1(calibration_dir)[row]
    m = load_model(NAMES[rec["model"]])
    layers = m.num_layers // rec["pp"]
    states = M.state_bytes(layers * M.decoder_params_per_rank(m, rec["tp"]), M.ZeroStage.NONE, 1, 4)
    assert states.total / GIB == pytest.approx(rec["none"]["params_and_optimizer"], rel=0.03)


def test_figure7_activation_shares(calibration_dir: Path) -> None:
    """Activation memory relative to TP-only without recomputation (Figure 7), within 3 % (absolute
    percentage points for the small shares)."""
    shares = yaml.safe_load((calibration_dir / "korthikanti2022_memory.yaml").read_text())[
        "figure7_activation_share_pct"]
    m = load_model("megatron-22b")

    def act(sp: bool, rc: Recompute) -> float:
        return M.layer_activation_bytes(m, 2048, 1, 8, 1, sp, rc, UNFUSED)

    base = act(False, Recompute.NONE)
    want = shares["megatron-22b"]
    got = {"seq": act(True, Recompute.NONE), "sel": act(False, Recompute.SELECTIVE),
           "seqsel": act(True, Recompute.SELECTIVE), "full": act(False, Recompute.FULL)}
    for key, value in got.items():
        assert 100 * value / base == pytest.approx(want[key], abs=max(0.03 * want[key], 0.5))


MODELS = ["llama3-8b", "gpt3-175b", "qwen2.5-7b", "llama2-70b"]


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 4]),
       mbs=st.integers(1, 8), sp=st.booleans(), kernel=st.sampled_from(list(AttentionKernel)))
def test_activation_properties(name: str, tp: int, cp: int, mbs: int, sp: bool, kernel: AttentionKernel) -> None:
    m = load_model(name)
    sp = sp and tp > 1

    def act(b: int, rc: Recompute, seq_par: bool = sp) -> float:
        return M.layer_activation_bytes(m, 4096, b, tp, cp, seq_par, rc, kernel)

    for rc in Recompute:
        assert act(mbs + 1, rc) > act(mbs, rc) > 0  # memory grows with micro-batch size
    assert act(mbs, Recompute.NONE) >= act(mbs, Recompute.SELECTIVE) >= act(mbs, Recompute.FULL)
    if tp > 1:
        assert act(mbs, Recompute.NONE, True) <= act(mbs, Recompute.NONE, False)


@settings(max_examples=25, deadline=None)
@given(zero=st.sampled_from([0, 1, 2, 3]), dp=st.sampled_from([2, 4, 8]))
def test_more_zero_sharding_never_needs_more_state(zero: int, dp: int) -> None:
    params = 1e9
    here = M.state_bytes(params, M.ZeroStage(zero), dp, 4).total
    if zero < 3:
        assert M.state_bytes(params, M.ZeroStage(zero + 1), dp, 4).total <= here
    assert M.state_bytes(params, M.ZeroStage.NONE, dp, 4).total == pytest.approx(18 * params)


def test_peak_memory_grows_with_microbatch_and_shrinks_with_recompute() -> None:
    kw = dict(gpus=8, seq_len=4096, global_batch=64, tp=4, pp=2)
    a = evaluate("llama3-8b", "h100-sxm", mbs=1, **kw)
    b = evaluate("llama3-8b", "h100-sxm", mbs=2, **kw)
    c = evaluate("llama3-8b", "h100-sxm", mbs=2, recompute="full", **kw)
    assert b.peak_memory_gib > a.peak_memory_gib > 0
    assert c.peak_memory_gib < b.peak_memory_gib
