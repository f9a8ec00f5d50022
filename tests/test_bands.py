"""Error bands: quantiles, fallback order, widening, the band file, and the bands in evaluate and plan output."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli import app
from hardware_profiles import load_hardware
from meshcore import Dtype, JobSpec
from planner import InputError, load_plan, plan, save_plan
from planner.inputs.loaders import load_model
from planner.outputs import bands
from planner.outputs.bands import (
    BandLevel,
    Regime,
    Residual,
    SeqBand,
    fit_bands,
    load_bands,
    lookup,
    read_bands,
    regime_of,
    save_bands,
    step_time_band,
)

runner = CliRunner()
HOPPER_FP8_SHORT = Regime("hopper", Dtype.FP8, False, SeqBand.SHORT)


def _res(rs: list[float], regime: Regime = HOPPER_FP8_SHORT, source: str = "s") -> list[Residual]:
    return [Residual(regime, r, f"{regime.label}#{i}", source) for i, r in enumerate(rs)]


def test_quantiles_on_a_hand_made_set() -> None:
    """Six residuals, coverage 0.8: type-7 quantiles at 0.1 and 0.9 sit halfway between order statistics
    (h = 5·0.1 = 0.5 and 5·0.9 = 4.5): low = −0.10 + 0.5·0.05 = −0.075, high = 0.10 + 0.5·0.10 = 0.15."""
    rs = [0.20, -0.05, 0.10, -0.10, 0.0, 0.05]
    table = fit_bands(_res(rs), coverage=0.8)
    band = table.get("hopper/fp8/dense/short")
    assert band is not None and band.level is BandLevel.REGIME and band.n == 6
    assert band.low == pytest.approx(-0.075, abs=1e-15) and band.high == pytest.approx(0.15, abs=1e-15)
    assert (band.low, band.high) == pytest.approx(tuple(np.quantile(rs, [0.1, 0.9])), abs=1e-15)
    # every coarser key holds the same six residuals
    assert [b.regime for b in table.bands] == ["hopper/fp8/dense/short", "hopper/fp8/dense/*", "hopper/*/dense/*",
                                               "hopper/*/*/*", "any"]


def test_narrow_band_widened_to_two_percent_and_zero() -> None:
    table = fit_bands(_res([0.001, 0.002, 0.003, 0.004]))
    band = lookup(table, HOPPER_FP8_SHORT)
    assert (band.low, band.high) == (-0.02, 0.02)
    table = fit_bands(_res([0.10, 0.20, 0.30, 0.40]), coverage=0.5)  # all slower than predicted
    band = lookup(table, HOPPER_FP8_SHORT)
    assert band.low == -0.02 and band.high == pytest.approx(0.325)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=-0.9, max_value=3.0), min_size=4, max_size=40),
       st.floats(min_value=0.05, max_value=0.99))
def test_band_always_contains_zero(rs: list[float], coverage: float) -> None:
    band = lookup(fit_bands(_res(rs), coverage=coverage), HOPPER_FP8_SHORT)
    assert band.low <= -0.02 < 0 < 0.02 <= band.high
    low_s, high_s = step_time_band(2.0, band)
    assert low_s < 2.0 < high_s


def test_fallback_order_with_few_residuals() -> None:
    long_ = Regime("hopper", Dtype.FP8, False, SeqBand.LONG)
    bf16 = Regime("hopper", Dtype.BF16, False, SeqBand.SHORT)
    moe = Regime("hopper", Dtype.FP8, True, SeqBand.SHORT)
    ampere = Regime("ampere", Dtype.BF16, False, SeqBand.SHORT)
    table = fit_bands([*_res([0.01, 0.02, 0.03]), *_res([0.04, 0.05], long_), *_res([0.06, 0.07], bf16),
                       *_res([0.5], moe), *_res([-0.3, -0.2, -0.1, 0.0], ampere)])
    # 3 in hopper/fp8/dense/short: without the sequence band there are 5
    assert (lookup(table, HOPPER_FP8_SHORT).level, lookup(table, HOPPER_FP8_SHORT).n) == (BandLevel.NO_SEQ_BAND, 5)
    # 2 in hopper/bf16/dense/*: without dtype, hopper dense has 7
    b = lookup(table, bf16)
    assert (b.level, b.regime, b.n) == (BandLevel.NO_DTYPE, "hopper/*/dense/*", 7)
    # 1 hopper MoE run: hopper alone has 8
    b = lookup(table, moe)
    assert (b.level, b.regime, b.n) == (BandLevel.ARCHITECTURE, "hopper/*/*/*", 8)
    # ampere has its own regime band; nobody has fewer than MIN_RESIDUALS in the table
    assert lookup(table, ampere).level is BandLevel.REGIME
    assert all(b.n >= bands.MIN_RESIDUALS for b in table.bands)
    with pytest.raises(InputError, match="at least 4 residuals"):
        fit_bands(_res([0.1, 0.2, 0.3]))


def test_uncalibrated_architecture_gets_the_any_band_widened() -> None:
    table = fit_bands(_res([-0.2, -0.1, 0.1, 0.2, 0.3]), coverage=0.5)
    anyband = table.get("any")
    assert anyband is not None
    for arch in ("volta", "unknown"):
        b = lookup(table, Regime(arch, Dtype.BF16, False, SeqBand.SHORT))
        assert b.level is BandLevel.ANY
        assert (b.low, b.high) == pytest.approx((1.5 * anyband.low, 1.5 * anyband.high))
        assert arch in b.note and "1.5x" in b.note
    assert lookup(table, HOPPER_FP8_SHORT).note == ""


def test_regime_derivation() -> None:
    model, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 8)
    assert [SeqBand.of(s) for s in (4096, 4097, 16384, 16385)] == [SeqBand.SHORT, SeqBand.MEDIUM, SeqBand.MEDIUM,
                                                                    SeqBand.LONG]
    r = regime_of(model, cluster, JobSpec(seq_len=32768, global_batch=8, dtype=Dtype.FP8))
    assert r == Regime("hopper", Dtype.FP8, False, SeqBand.LONG, "megatron") and r.label == "hopper/fp8/dense/long"
    assert r.lookup_keys()[0] == (BandLevel.RUNTIME, "megatron/hopper/dense")
    assert regime_of(load_model("qwen3-30b-a3b"), cluster, JobSpec(seq_len=4096, global_batch=8)).moe


def test_yaml_round_trip(tmp_path: Path) -> None:
    table = fit_bands([*_res([-0.123456789, 0.0, 0.05, 0.31]),
                       *_res([0.1, 0.2, 0.3, 0.4], Regime("ampere", Dtype.BF16, True, SeqBand.MEDIUM))],
                      held_out=False, description="in-sample test")
    path = tmp_path / "bands.yaml"
    save_bands(table, path)
    text = path.read_text()
    assert text.startswith("#") and "--write-bands" in text and "leave-one-source-out" in text
    assert read_bands(path) == table
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write leaves no temporary file


def test_packaged_bands_load() -> None:
    table = load_bands()
    assert table.get("any") is not None and 0 < table.coverage < 1
    header = (Path(bands.__file__).parent / "error_bands.yaml").read_text().split("\ncoverage:")[0]
    assert "--write-bands" in header and "residuals:" in header


BAD = {
    "not yaml": "coverage: [0.9\n",
    "not a mapping": "- 1\n- 2\n",
    "unknown keys": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands: []\ncolour: red\n",
    "missing": "coverage: 0.9\nheld_out: true\nbands: []\n",
    "coverage": "coverage: 1.5\nheld_out: true\nresiduals: x\nbands: []\n",
    "no any": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands:\n- {regime: ampere/*/*/*, level: architecture, "
              "low: -0.1, high: 0.1, n: 5}\n",
    "low above zero": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands:\n- {regime: any, level: any, low: 0.1, "
                      "high: 0.2, n: 5}\n",
    "bad level": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands:\n- {regime: any, level: all, low: -0.1, "
                 "high: 0.2, n: 5}\n",
    "few": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands:\n- {regime: any, level: any, low: -0.1, "
           "high: 0.2, n: 2}\n",
    "string number": "coverage: 0.9\nheld_out: true\nresiduals: x\nbands:\n- {regime: any, level: any, low: '-0.1', "
                     "high: 0.2, n: 5}\n",
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_file_is_one_line_error(tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / bands.BANDS_FILE
    path.write_text(BAD[case])
    with pytest.raises(InputError) as err:
        read_bands(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    monkeypatch.setattr(bands.resources, "files", lambda package: tmp_path)  # the packaged loader, same checks
    with pytest.raises(InputError, match="error_bands.yaml"):
        load_bands()


EVAL = ["evaluate", "--model", "gpt3-175b", "--hardware", "a100-80gb", "--gpus", "64", "--seq-len", "2048",
        "--global-batch", "64", "--tp", "8", "--pp", "8", "--mbs", "1", "--recompute", "selective"]


def test_evaluate_json_carries_the_band() -> None:
    res = runner.invoke(app, [*EVAL, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    low, high = out["step_time_band_s"]
    assert low < out["step_time_s"] < high
    info = out["step_time_band"]
    assert info["regime"] == "megatron/ampere/dense" and info["residuals"] >= 4  # the runtime's own band
    assert low == pytest.approx(out["step_time_s"] * (1 + info["low_pct"] / 100))
    assert high == pytest.approx(out["step_time_s"] * (1 + info["high_pct"] / 100))


def test_evaluate_table_says_the_band() -> None:
    res = runner.invoke(app, EVAL)
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "step time" in x)
    assert "model error band" in line and "regime megatron/ampere/dense" in line and "n=" in line


def test_unknown_architecture_in_evaluate_json() -> None:
    res = runner.invoke(app, ["evaluate", "--model", "llama3-8b", "--hardware", "v100-32gb", "--gpus", "8",
                              "--seq-len", "2048", "--global-batch", "16", "--tp", "8", "--mbs", "1", "--json"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.output)["step_time_band"]
    assert info["regime"] == "any" and "volta" in info["note"]


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bands") / "plan.yaml"
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len",
                              "8192", "--global-batch", "512", "--out", str(path)])
    assert res.exit_code == 0, res.output
    assert "within model error" in res.output and "error band s" in res.output
    return path


def test_plan_file_marks_indistinguishable_alternatives(plan_file: Path) -> None:
    data = yaml.safe_load(plan_file.read_text())
    low, high = data["prediction"]["band_s"]
    step = data["prediction"]["simulated_step_time_s"] or data["prediction"]["step_time_s"]
    assert low < step < high
    assert data["alternatives"]
    for alt in data["alternatives"]:
        a_low, a_high = alt["band_s"]
        assert a_low < (alt["simulated_step_time_s"] or alt["step_time_s"]) < a_high
        assert alt["indistinguishable"] is (a_low <= high and low <= a_high)


def test_plan_table_marks_what_the_file_marks(plan_file: Path) -> None:
    data = yaml.safe_load(plan_file.read_text())
    res = runner.invoke(app, ["explain", str(plan_file)])
    assert res.exit_code == 0, res.output
    rows = [x for x in res.output.splitlines() if x[:4].strip().isdigit()]
    marked = [x[5] == "≈" for x in rows[1:]]
    assert len(marked) == len(data["alternatives"])
    assert marked == list(load_plan(plan_file).indistinguishable)


def test_old_plan_file_without_band_keys_loads(plan_file: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(plan_file.read_text())
    del data["prediction"]["band_s"], data["prediction"]["step_time_band"]
    for alt in data["alternatives"]:
        del alt["band_s"], alt["indistinguishable"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_plan(old)
    assert len(loaded.bands) == 1 + len(loaded.alternatives)
    res = runner.invoke(app, ["evaluate", "--plan", str(old), "--json"])
    assert res.exit_code == 0, res.output
    assert "step_time_band_s" in json.loads(res.output)
    again = tmp_path / "again.yaml"
    save_plan(loaded, again)
    assert "indistinguishable" in again.read_text()


def test_python_api_exposes_the_band() -> None:
    result = plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64)
    best = result.bands[0]
    assert best.low_s < result.best.step_time_s < best.high_s and best.step_s == result.best.step_time_s
    assert len(result.indistinguishable) == len(result.alternatives)
    assert result.indistinguishable == tuple(b.overlaps(best) for b in result.bands[1:])
