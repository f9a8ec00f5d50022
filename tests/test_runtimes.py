"""Plans for the runtime that will run them (issue 29, item 1): every plan is searched in its runtime's space
(hardware_profiles/runtimes/), records the runtime, and its best layout is one that runtime launches: its emitted
configuration passes the launcher's own parser where the project runs it (megatron-core's TransformerConfig,
torchtitan's ConfigManager, DeepSpeed's DeepSpeedConfig) and `emit` never substitutes for the plan's runtime."""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from cli import app
from cost_models.compute.flops import total_params
from meshcore import Runtime, Schedule
from meshcore.errors import InfeasibleError, InputError, LayoutError, UnsupportedModelError
from meshcore.framework import DEFAULT_FRAMEWORK, Framework
from planner.inputs.loaders import model_preset_names
from planner.inputs.runtimes import load_runtime
from planner.outputs.emitters import FRAMEWORK, emit
from planner.outputs.emitters.common import UnsupportedPlanError
from planner.search.runtime_space import for_runtime
from planner.search.space import SearchSpec
from planner.studies.trial import TrialLauncher, write_trials

REAL = (Framework.MEGATRON, Framework.NEMO, Framework.TORCHTITAN, Framework.DEEPSPEED)


def test_each_profile_loads_and_names_the_configuration_it_is_emitted_as() -> None:
    for framework in Framework:
        profile = load_runtime(framework)
        assert profile.framework is framework and profile.version and profile.source
        if framework is Framework.ANY:
            assert profile.target is None and "research mode" in profile.title
        else:
            assert profile.target is not None and FRAMEWORK[profile.target] is framework
            assert profile.version in profile.title and profile.label in profile.title
    assert DEFAULT_FRAMEWORK is Framework.MEGATRON


@pytest.mark.parametrize(("framework", "pins", "named"), [
    (Framework.MEGATRON, {"schedule": "zb-v"}, "zb-v schedule"),
    (Framework.NEMO, {"zero": 3}, "ZeRO-3"),
    (Framework.TORCHTITAN, {"zero": 1}, "ZeRO-1"),
    (Framework.DEEPSPEED, {"cp": 2}, "context parallelism"),
    (Framework.DEEPSPEED, {"zero": 3, "pp": 2}, "ZeRO-3 beside a pipeline"),
    (Framework.TORCHTITAN, {"tp": 2, "sp": False}, "TP without sequence parallelism"),
    (Framework.MEGATRON, {"offload": frozenset({"params"}), "zero": 3}, "params offloading"),
])
def test_a_pin_the_runtime_cannot_run_is_refused_by_name(framework: Framework, pins: dict, named: str) -> None:
    profile = load_runtime(framework)
    with pytest.raises(InputError) as info:
        for_runtime(SearchSpec(**pins), profile)
    assert named in str(info.value) and f"{profile.label} {profile.version}" in str(info.value)


def test_user_limits_survive_the_runtime() -> None:
    """A user's ZeRO and schedule choices and max_ep are intersected with the runtime's, not replaced."""
    spec = for_runtime(SearchSpec(zero_choices=(0, 1), schedule_choices=(Schedule.ONE_F_ONE_B,), max_ep=4),
                       load_runtime(Framework.MEGATRON))
    assert spec.zero_choices == (0, 1) and spec.schedule_choices == (Schedule.ONE_F_ONE_B,) and spec.max_ep == 4
    assert not spec.kv_replication and not spec.partial_recompute


def test_the_default_plan_is_megatron_and_the_research_mode_is_explicit() -> None:
    job = dict(gpus=64, seq_len=8192, global_batch=512)
    default = planner.plan("llama3-8b", "h100-sxm", **job)
    assert default.job.runtime.framework is Framework.MEGATRON
    assert default.best.layout.schedule in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED_1F1B)
    research = planner.plan("llama3-8b", "h100-sxm", runtime=Runtime(framework="any"), **job)
    assert research.best.prediction.step_time_s <= default.best.prediction.step_time_s


def test_megatron_divides_the_kv_heads_by_tp() -> None:
    """qwen3-30b-a3b has 4 query groups: megatron-core refuses TP 8 (num_query_groups % tp), meshplan's research
    mode replicates them."""
    job = dict(gpus=64, seq_len=4096, global_batch=256, spec=SearchSpec(tp=8, top_k=1))
    with pytest.raises(Exception, match="(?i)no layout|kv heads|tp 8"):
        planner.plan("qwen3-30b-a3b", "h100-sxm", **job)
    assert planner.plan("qwen3-30b-a3b", "h100-sxm", runtime=Runtime(framework="any"), **job).best.layout.tp == 8
    with pytest.raises(LayoutError, match="KV heads"):
        planner.evaluate("qwen3-30b-a3b", "h100-sxm", gpus=64, seq_len=4096, global_batch=256, tp=8, ep=8)


def _gpus(name: str) -> int:
    """A cluster the preset trains on: 64 GPUs up to 25B parameters, 256 up to 160B, else 1,024."""
    n = total_params(planner.load_model(name))
    return 64 if n < 25e9 else 256 if n < 160e9 else 1024


def _accepted_by_the_launcher(plan: planner.Plan, framework: Framework, text: str, tmp_path: Path) -> None:
    """The launcher's own parser takes the emitted text, where the project runs it (skipped where not installed)."""
    warnings.filterwarnings("ignore")
    if framework is Framework.MEGATRON:
        pytest.importorskip("megatron.core")
        from megatron.core.transformer import TransformerConfig
        from megatron.core.transformer.transformer_config import MLATransformerConfig
        from test_emitters import _megatron_kwargs

        cfg, _ = _megatron_kwargs(plan)
        config = MLATransformerConfig if cfg.pop("multi_latent_attention", False) else TransformerConfig
        config(**{k: v for k, v in cfg.items() if v is not None})
    elif framework is Framework.TORCHTITAN:
        pytest.importorskip("torchtitan")
        from torchtitan.config import ConfigManager

        path = tmp_path / "job.toml"
        path.write_text(text)
        job = ConfigManager().parse_args(["--job.config_file", str(path)])
        assert job.parallelism.pipeline_parallel_degree == plan.best.layout.pp
    elif framework is Framework.DEEPSPEED:
        cfg = json.loads(text)
        assert cfg["train_batch_size"] == plan.job.global_batch
        assert cfg["zero_optimization"]["stage"] == int(plan.best.layout.zero)


@pytest.mark.parametrize("framework", REAL, ids=[f.value for f in REAL])
@pytest.mark.parametrize("preset", model_preset_names())
def test_every_preset_plans_as_its_runtime_launches(preset: str, framework: Framework, tmp_path: Path) -> None:
    gpus = _gpus(preset)
    try:
        plan = planner.plan(preset, "h100-sxm", gpus=gpus, seq_len=2048, global_batch=gpus,
                            runtime=Runtime(framework=framework), spec=SearchSpec(top_k=1))
    except UnsupportedModelError as exc:
        assert framework is Framework.TORCHTITAN and "torchtitan has no model definition" in str(exc)
        return
    except InfeasibleError as exc:  # DeepSpeed's config has no expert parallelism: every GPU holds every expert
        assert framework is Framework.DEEPSPEED and planner.load_model(preset).moe is not None, exc
        return
    assert plan.job.runtime.framework is framework
    profile = load_runtime(framework)
    assert profile.target is not None
    if plan.model.vision is not None:  # no launcher configuration is written for VLMs yet: said, not substituted
        with pytest.raises(UnsupportedPlanError, match="vision-language"):
            emit(plan, profile.target)
        return
    emitted = emit(plan, profile.target)
    assert emitted.note is None
    _accepted_by_the_launcher(plan, framework, emitted.text, tmp_path)
    if framework.value in {t.value for t in TrialLauncher}:  # NeMo has no trial launcher
        [trial] = write_trials(plan, TrialLauncher(framework.value), 1, 2, tmp_path / "trial")
        assert trial.skipped is None and (tmp_path / "trial" / trial.script).is_file()


def test_plan_emit_and_trial_carry_the_runtime(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "16", "--seq-len",
                              "4096", "--global-batch", "64", "--runtime", "torchtitan", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "runtime: torchtitan (torchtitan 0.2.2)" in res.output
    assert "runtime:\n  name: torchtitan\n" in out.read_text()
    emitted = runner.invoke(app, ["emit", str(out)])  # --to defaults to the plan's runtime
    assert emitted.exit_code == 0 and "[parallelism]" in emitted.output and "NOTE" not in emitted.output
    trial = runner.invoke(app, ["trial", str(out), "--out", str(tmp_path / "t"), "--top-k", "2", "--steps", "3"])
    assert trial.exit_code == 0, trial.output
    assert (tmp_path / "t" / "trial-1" / "torchtitan.toml").is_file()


def test_trial_that_writes_nothing_exits_non_zero(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "16", "--seq-len",
                              "4096", "--global-batch", "64", "--runtime", "any", "--pp", "2", "--schedule", "zb-h1",
                              "--top-k", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    trial = runner.invoke(app, ["trial", str(out), "--to", "megatron", "--out", str(tmp_path / "t"), "--top-k", "1"])
    assert trial.exit_code == 3 and "runs none of the plan's 1 layouts" in trial.output


def test_trial_of_a_nemo_plan_exits_non_zero_saying_why(tmp_path: Path) -> None:
    """NeMo has no trial launcher: `trial` on a NeMo plan writes nothing and says which launchers it has."""
    runner = CliRunner()
    out = tmp_path / "p.yaml"
    res = runner.invoke(app, ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "16", "--seq-len",
                              "4096", "--global-batch", "64", "--runtime", "nemo", "--top-k", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    trial = runner.invoke(app, ["trial", str(out), "--out", str(tmp_path / "t"), "--top-k", "1"])
    assert trial.exit_code != 0 and "the plan's runtime is nemo" in trial.output
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(("framework", "zero", "runs"), [
    (Framework.MEGATRON, 1, True), (Framework.MEGATRON, 3, False), (Framework.NEMO, 1, False),
    (Framework.TORCHTITAN, 3, True), (Framework.DEEPSPEED, 3, False), (Framework.ANY, 2, True)])
def test_hsdp_where_the_runtime_runs_it(framework: Framework, zero: int, runs: bool) -> None:
    """HSDP (dp_replicate > 1) is evaluated only where the runtime shards over part of the data-parallel ranks:
    Megatron-LM's partial distributed optimizer (ZeRO-1, --num-distributed-optimizer-instances), torchtitan's FSDP2
    on a [replicate, shard] mesh (ZeRO-2/3)."""
    job = dict(gpus=64, seq_len=4096, global_batch=128, zero=zero, dp_replicate=4,
               runtime=Runtime(framework=framework))
    if not runs:
        with pytest.raises(LayoutError, match="dp_replicate 4"):
            planner.evaluate("llama3-8b", "h100-sxm", **job)
        return
    assert planner.evaluate("llama3-8b", "h100-sxm", **job).step_time_s > 0


def test_megatron_writes_the_partial_distributed_optimizer() -> None:
    from planner.api import make_layout, resolve
    from planner.outputs.emitters.megatron import arguments
    from planner.outputs.plan import Plan

    problem = resolve("llama3-8b", "h100-sxm", gpus=64, seq_len=4096, global_batch=128)
    layout = make_layout(problem, zero=1, dp_replicate=8)
    base = planner.plan("llama3-8b", "h100-sxm", gpus=64, seq_len=4096, global_batch=128, spec=SearchSpec(top_k=1))
    ranked = dataclasses.replace(base.best, layout=layout)
    args = dict(arguments(Plan(problem.model, problem.cluster, problem.job, ranked, (), None)))
    assert args["--num-distributed-optimizer-instances"] == 8 and "--use-distributed-optimizer" in args
