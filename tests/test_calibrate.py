"""Calibration on the user's runs: a round trip through a profile with known perturbed parameters recovers
them well enough to predict held-out runs, a fit that cannot generalise is refused, and the fragment it writes
makes the preset predict what the fit did."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import planner
from cost_models.step import evaluate_layout
from hardware_profiles import load_hardware
from meshcore.errors import InputError
from planner.studies.calibrate import _predict, calibrate, check, fragment, load_runs, params_seen
from planner.studies.fit import Param

RUNS = [  # five layouts that stress different parameters: fp8 and bf16, TP, CP, FSDP, PP across nodes
    dict(name="a", model="llama3-8b", gpus=8, seq_len=8192, global_batch=64, dtype="bf16", tp=1, zero=1),
    dict(name="b", model="llama3-8b", gpus=8, seq_len=8192, global_batch=64, dtype="fp8", tp=2, zero=1),
    dict(name="c", model="llama3-8b", gpus=16, seq_len=4096, global_batch=128, tp=4, pp=2, mbs=2, zero=1),
    dict(name="d", model="llama3-8b", gpus=16, seq_len=16384, global_batch=32, dtype="fp8", tp=2, cp=2, zero=3),
    dict(name="e", model="llama3-70b", gpus=32, seq_len=8192, global_batch=64, tp=8, pp=4, vpp=2, zero=1),
]
TRUTH = {Param.GEMM_SCALE: 0.9, Param.ATTENTION_EFFICIENCY: 0.33, Param.FP8_MATMUL_RATIO: 0.8}


def _write(tmp_path: Path, runs: list[dict], name: str = "runs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"runs": runs}))
    return path


def _synthetic(tmp_path: Path) -> list:
    """The runs as a cluster with TRUTH's parameters would have measured them."""
    runs = load_runs(_write(tmp_path, [dict(r, step_time_s=1.0) for r in RUNS]), "h100-sxm")
    return [replace(r, step_time_s=_predict(r, TRUTH)) for r in runs]


def test_round_trip_recovers_perturbed_parameters(tmp_path: Path) -> None:
    runs = _synthetic(tmp_path)
    cal = calibrate(runs, "h100-sxm")
    check(cal)  # generalises: does not raise
    assert cal.before_pct > 8.0  # the preset is well off the synthetic cluster
    assert cal.after_pct < 2.0
    assert cal.held_out_pct < cal.before_pct / 2
    for param, truth in TRUTH.items():  # each moved most of the way from the preset to the truth
        assert abs(cal.after[param] - truth) < 0.5 * abs(cal.before[param] - truth), param


def test_fragment_makes_the_preset_predict_the_fit(tmp_path: Path) -> None:
    runs = _synthetic(tmp_path)
    cal = calibrate(runs, "h100-sxm")
    frag = tmp_path / "fitted.yaml"
    frag.write_text(yaml.safe_dump(fragment(cal, runs[0].cluster)))
    for run, fit in zip(runs, cal.runs, strict=True):
        cluster = load_hardware(f"h100-sxm,{frag}", run.cluster.num_gpus)
        predicted = evaluate_layout(run.model, cluster, run.job, run.layout).step_time_s
        assert predicted == pytest.approx(fit.after_s, rel=2e-3)  # the fragment rounds to 4 digits


def test_only_exercised_parameters_are_fitted(tmp_path: Path) -> None:
    one_node_bf16 = load_runs(_write(tmp_path, [dict(RUNS[0], step_time_s=1.0)]), "h100-sxm")
    assert Param.FP8_MATMUL_RATIO not in params_seen(one_node_bf16)
    assert Param.SCALE_OUT_EFFICIENCY not in params_seen(one_node_bf16)
    assert Param.SCALE_UP_EFFICIENCY in params_seen(one_node_bf16)
    assert {Param.FP8_MATMUL_RATIO, Param.SCALE_OUT_EFFICIENCY} <= set(params_seen(_synthetic(tmp_path)))


def test_refuses_one_run(tmp_path: Path) -> None:
    runs = load_runs(_write(tmp_path, [dict(RUNS[0], step_time_s=5.0)]), "h100-sxm")
    with pytest.raises(InputError, match="at least 2 runs"):
        calibrate(runs, "h100-sxm")


def test_refuses_a_fit_that_does_not_generalise(tmp_path: Path) -> None:
    """The same layout measured at half and at twice the prediction: whatever one run teaches, the other
    contradicts, so held-out predictions are worse than the preset's."""
    base = load_runs(_write(tmp_path, [dict(RUNS[0], step_time_s=1.0)]), "h100-sxm")[0]
    predicted = _predict(base, {})
    runs = [replace(base, name="fast", step_time_s=predicted / 2),
            replace(base, name="slow", step_time_s=predicted * 2)]
    cal = calibrate(runs, "h100-sxm")
    with pytest.raises(InputError, match="refused.*no better than the preset"):
        check(cal)


def test_csv_runs_read_like_yaml(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("name,model,gpus,seq_len,global_batch,dtype,tp,pp,zero,sp,step_time_s\n"
                    "x,llama3-8b,16,4096,128,bf16,4,2,1,true,4.5\n")
    (run,) = load_runs(path, "h100-sxm")
    assert (run.name, run.layout.tp, run.layout.pp, run.layout.sp, run.step_time_s) == ("x", 4, 2, True, 4.5)


@pytest.mark.parametrize(("entry", "message"), [
    (dict(RUNS[0], step_time_s=1.0, speed=3), "unknown keys \\['speed'\\]"),
    ({k: v for k, v in RUNS[0].items() if k != "model"} | {"step_time_s": 1.0}, "missing 'model'"),
    (dict(RUNS[0]), "missing 'step_time_s'"),
    (dict(RUNS[0], step_time_s="fast"), "step_time_s must be a number"),
    (dict(RUNS[0], step_time_s=float("nan")), "step_time_s must be a positive finite number"),
    (dict(RUNS[0], step_time_s=1.0, tp=3), "run 1: "),
    (dict(RUNS[0], step_time_s=1.0, zero=4), "zero must be 0, 1, 2 or 3"),
])
def test_bad_runs_are_refused_with_the_field(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_runs(_write(tmp_path, [entry]), "h100-sxm")


def test_cli_writes_the_fragment_and_refuses_without_writing(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    runs = _synthetic(tmp_path)
    good = _write(tmp_path, [dict(r, step_time_s=run.step_time_s) for r, run in zip(RUNS, runs, strict=True)],
                  "measured.yaml")
    out = tmp_path / "fitted.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(good), "--hardware", "h100-sxm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "held out" in result.output and out.is_file()
    preset = load_hardware("h100-sxm", 8).gpu.attention_efficiency
    fitted = load_hardware(f"h100-sxm,{out}", 8).gpu.attention_efficiency
    assert abs(fitted - 0.33) < 0.5 * abs(preset - 0.33)  # most of the way from the preset to the truth

    bad = _write(tmp_path, [dict(RUNS[0], name="fast", step_time_s=1.0), dict(RUNS[0], name="slow", step_time_s=30.0)],
                 "contradictory.yaml")
    refused = tmp_path / "refused.yaml"
    result = CliRunner().invoke(app, ["calibrate", str(bad), "--hardware", "h100-sxm", "--out", str(refused)])
    assert result.exit_code == 2 and "refused" in result.output and not refused.exists()
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _megatron_log(args: dict, step_ms: list[float], peak_mib: float = 40_000.0) -> str:
    """A Megatron-LM log in its own line formats (the helpers of tests/test_runlogs.py, which cite them)."""
    from test_runlogs import _args_block, _iteration_new

    lines = [_args_block(args)] + [_iteration_new(i + 1, ms) for i, ms in enumerate(step_ms)]
    lines.insert(2, f"[Rank 0] (after 1 iterations) memory (MB) | allocated: 1000.00 | max allocated: {peak_mib:.2f} "
                    f"| reserved: 50000.00 | max reserved: 50000.00")
    return "\n".join(lines) + "\n"


LLAMA3_8B_ARGS = dict(
    world_size=8, tensor_model_parallel_size=2, pipeline_model_parallel_size=1, context_parallel_size=1,
    virtual_pipeline_model_parallel_size=None, sequence_parallel=True, micro_batch_size=1, global_batch_size=64,
    seq_length=4096, use_distributed_optimizer=True, recompute_granularity=None, fp8=None, bf16=True,
    num_layers=32, hidden_size=4096, ffn_hidden_size=14336, num_attention_heads=32, group_query_attention=True,
    num_query_groups=8, kv_channels=128, padded_vocab_size=128256, swiglu=True,
    untie_embeddings_and_output_weights=True, normalization="RMSNorm", position_embedding_type="rope")


def test_a_megatron_log_is_a_run(tmp_path: Path) -> None:
    """Model, job and layout from the arguments block; the step from the iteration lines after warm-up."""
    path = tmp_path / "llama.log"
    path.write_text(_megatron_log(LLAMA3_8B_ARGS, [9000.0, 3100.0, 3000.0, 3000.0, 3050.0]))
    (run,) = load_runs(path, "h100-sxm")
    lay = run.layout
    assert (lay.tp, lay.pp, lay.dp, lay.sp, int(lay.zero), lay.mbs) == (2, 1, 4, True, 1, 1)
    assert (run.job.seq_len, run.job.global_batch, run.job.dtype.value, run.cluster.num_gpus) == (4096, 64, "bf16", 8)
    preset = planner.load_model("llama3-8b")
    for field in ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_kv_heads",
                  "vocab_size", "gated_mlp", "tied_embeddings"):
        assert getattr(run.model, field) == getattr(preset, field), field
    assert run.step_time_s == pytest.approx(3.025)  # the median after the first logged iteration
    assert run.peak_memory_gib == pytest.approx(40_000 / 1024)


def test_trial_manifest_pairs_each_log_with_its_layout(tmp_path: Path) -> None:
    """meshplan trial's folder, logs written as Megatron-LM would, read back through the manifest; trials
    without a log yet are left out."""
    from planner.outputs.emitters import Target, for_launcher
    from planner.search.space import SearchSpec
    from planner.studies.trial import MANIFEST, TrialLauncher, write_trials

    plan = planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                        spec=for_launcher(SearchSpec(top_k=3), Target.MEGATRON))
    trials = write_trials(plan, TrialLauncher.MEGATRON, 3, 10, tmp_path)
    ranked = (plan.best, *plan.alternatives)
    for t, step in zip(trials[:2], (4.2, 4.8), strict=True):
        (tmp_path / t.log).write_text(_megatron_log(LLAMA3_8B_ARGS, [step * 3000] + [step * 1000] * 9))
    runs = load_runs(tmp_path / MANIFEST, "h100-sxm")
    assert [r.name for r in runs] == ["trial-1", "trial-2"]
    assert [r.layout for r in runs] == [ranked[0].layout, ranked[1].layout]
    assert [r.step_time_s for r in runs] == pytest.approx([4.2, 4.8])
    assert all(r.cluster.num_gpus == 16 and r.job.global_batch == 64 for r in runs)


def test_plans_record_where_the_fitted_values_came_from(tmp_path: Path) -> None:
    """The fragment's `calibration:` section changes no number; plans made with it record it and keep it."""
    runs = _synthetic(tmp_path)
    cal = calibrate(runs, "h100-sxm")
    frag = tmp_path / "fitted.yaml"
    frag.write_text(yaml.safe_dump(fragment(cal, runs[0].cluster)))
    cluster = load_hardware(f"h100-sxm,{frag}", 8)
    (line,) = cluster.provenance
    assert line.startswith("fitted.yaml: fitted on 5 runs (a, b, c, d, e) of h100-sxm; mean |error| before ")
    without = {k: v for k, v in fragment(cal, runs[0].cluster).items() if k != "calibration"}
    (tmp_path / "bare.yaml").write_text(yaml.safe_dump(without))
    bare = load_hardware(f"h100-sxm,{tmp_path / 'bare.yaml'}", 8)
    assert bare.provenance == () and bare.gpu == cluster.gpu and bare.scale_out == cluster.scale_out
    best = planner.plan("llama3-8b", cluster, gpus=8, seq_len=4096, global_batch=32)
    planner.save_plan(best, tmp_path / "plan.yaml")
    assert yaml.safe_load((tmp_path / "plan.yaml").read_text())["hardware"]["provenance"] == [line]
    assert planner.load_plan(tmp_path / "plan.yaml").cluster.provenance == (line,)


def test_progress_after_every_fit(tmp_path: Path) -> None:
    """The fit on all runs, then one per held-out run: len(runs) + 1 reports, in order."""
    runs = _synthetic(tmp_path)[:3]
    calls: list[tuple[int, int]] = []
    calibrate(runs, "h100-sxm", progress=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_cli_calibrate_reports_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import app
    from planner.commands import studies

    made: list[tuple[str, list[tuple[int, int]]]] = []

    class Recorder:  # stands in for planner.commands.common.Progress
        def __init__(self, label: str = "") -> None:
            made.append((label, []))

        def __enter__(self) -> Recorder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def update(self, done: int, total: int) -> None:
            made[-1][1].append((done, total))

    monkeypatch.setattr(studies, "Progress", Recorder)
    runs = _write(tmp_path, [dict(RUNS[0], name="x", step_time_s=5.0), dict(RUNS[2], name="y", step_time_s=4.0)])
    result = CliRunner().invoke(app, ["calibrate", str(runs), "--hardware", "h100-sxm"])
    assert result.exit_code in (0, 2), result.output  # 2: refused after the fits; the progress came first
    assert made == [("fitting (all runs, then each held out)", [(1, 3), (2, 3), (3, 3)])]


def test_report_compares_logged_peak_memory(tmp_path: Path) -> None:
    """Runs that logged peak memory get a table of it against meshplan's prediction (not fitted)."""
    from planner.studies.calibrate import report

    runs = [replace(r, peak_memory_gib=40.0) if r.name == "a" else r for r in _synthetic(tmp_path)]
    cal = calibrate(runs, "h100-sxm")
    (a,) = [r for r in cal.runs if r.name == "a"]
    predicted = evaluate_layout(runs[0].model, runs[0].cluster, runs[0].job, runs[0].layout).peak_memory_gib
    assert (a.measured_gib, a.predicted_gib) == (40.0, pytest.approx(predicted))
    text = report(cal)
    assert "peak GiB" in text and f"{predicted:10.1f}" in text
    assert "peak GiB" not in report(calibrate(_synthetic(tmp_path), "h100-sxm"))
