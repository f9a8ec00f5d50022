"""HSDP as a searched dimension (issue 29, item 2): where a runtime shards over part of the data-parallel ranks
and replicates across the rest, the search chooses the replicate factor with the other degrees, exactly: the best
plan is the best of every replicate factor it offers, priced one by one."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import planner
from cli import app
from hardware_profiles import load_hardware
from meshcore import Runtime, ZeroStage
from meshcore.errors import InputError
from meshcore.framework import Framework
from planner.inputs.runtimes import load_runtime
from planner.search.runtime_space import for_runtime
from planner.search.space import SearchSpec, replicate_options


def _spec(framework: Framework) -> SearchSpec:
    return for_runtime(SearchSpec(), load_runtime(framework))


def test_replicate_factors_are_whole_node_shard_groups_a_factor_of_four_apart() -> None:
    """256 data-parallel ranks on 8-GPU nodes: shard groups of 1, 4 and 16 nodes (r = 32, 8, 2) beside r = 1."""
    cluster = load_hardware("h100-sxm", 256)
    spec = _spec(Framework.TORCHTITAN)
    assert replicate_options(1, 1, 256, ZeroStage.WEIGHTS, cluster, spec) == [1, 2, 8, 32]
    # with tp 2 a node holds 4 shard ranks: groups of 4, 16 and 64 ranks
    assert replicate_options(2, 1, 128, ZeroStage.WEIGHTS, cluster, spec) == [1, 2, 8, 32]
    assert replicate_options(1, 1, 256, ZeroStage.NONE, cluster, spec) == [1]  # nothing sharded, nothing to replicate


@pytest.mark.parametrize(("framework", "stages"), [
    (Framework.MEGATRON, (1,)), (Framework.TORCHTITAN, (2, 3)), (Framework.NEMO, ()), (Framework.DEEPSPEED, ()),
    (Framework.ANY, (1, 2, 3))])
def test_the_runtime_decides_where_hsdp_is_searched(framework: Framework, stages: tuple[int, ...]) -> None:
    cluster = load_hardware("h100-sxm", 256)
    spec = _spec(framework)
    assert spec.hsdp_zero_choices == stages
    for zero in (ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS, ZeroStage.WEIGHTS):
        searched = replicate_options(1, 1, 256, zero, cluster, spec)
        assert (len(searched) > 1) == (int(zero) in stages), (framework, zero, searched)


def test_the_best_plan_is_the_best_replicate_factor_priced_one_by_one() -> None:
    """Exactness with HSDP in the space: pin every other degree of a pure-FSDP job on 2,048 GPUs (torchtitan); the
    plan's best step equals the least of `evaluate` over every replicate factor the search offers."""
    job = dict(gpus=2048, seq_len=8192, global_batch=2048, runtime=Runtime(framework=Framework.TORCHTITAN))
    pins = dict(tp=1, pp=1, cp=1, mbs=1, zero=3, recompute="none")
    plan = planner.plan("llama3-8b", "h100-sxm", **job, spec=SearchSpec(top_k=10, **pins))
    factors = replicate_options(1, 1, 2048, ZeroStage.WEIGHTS, load_hardware("h100-sxm", 2048),
                                _spec(Framework.TORCHTITAN))
    assert len(factors) > 2
    priced = {r: planner.evaluate("llama3-8b", "h100-sxm", **job, **pins, dp_replicate=r).step_time_s
              for r in factors}
    assert plan.best.prediction.step_time_s == pytest.approx(min(priced.values()), rel=1e-9)
    assert plan.best.layout.dp_replicate == min(priced, key=lambda r: (priced[r], r))
    for alt in plan.alternatives:  # every ranked layout is one of them, at the price evaluate gives it
        assert alt.prediction.step_time_s == pytest.approx(priced[alt.layout.dp_replicate], rel=1e-9)


def test_a_pinned_replicate_factor_is_kept_or_refused_by_the_runtime() -> None:
    job = dict(gpus=64, seq_len=8192, global_batch=512)
    pinned = planner.plan("llama3-8b", "h100-sxm", **job, runtime=Runtime(framework=Framework.TORCHTITAN),
                          spec=SearchSpec(dp_replicate=4, top_k=3))
    assert all(r.layout.dp_replicate == 4 for r in (pinned.best, *pinned.alternatives))
    with pytest.raises(InputError, match="DeepSpeed .* cannot run HSDP"):
        planner.plan("llama3-8b", "h100-sxm", **job, runtime=Runtime(framework=Framework.DEEPSPEED),
                     spec=SearchSpec(dp_replicate=4))
    with pytest.raises(InputError, match="ZeRO-3 with HSDP"):
        planner.plan("llama3-8b", "h100-sxm", **job, spec=SearchSpec(dp_replicate=4, zero=3))
    with pytest.raises(InputError, match="ZeRO-0 shards nothing"):
        SearchSpec(dp_replicate=2, zero=0)


def test_plan_dp_replicate_on_the_command_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plan.yaml"
    base = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len", "8192",
            "--global-batch", "512", "--runtime", "torchtitan"]
    res = CliRunner().invoke(app, [*base, "--dp-replicate", "8", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "dp_replicate: 8" in out.read_text()
    bad = CliRunner().invoke(app, [*base, "--dp-replicate", "3"])
    assert bad.exit_code == 2 and "dp_replicate 3" in bad.output
