"""Heterogeneous clusters (issue 14 part 2): the cluster file, the search across node groups against the homogeneous
search and against brute force, the placement and what launchers can run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import planner
from cli import app
from cost_models.hetero import predict_hetero
from cost_models.step import evaluate_layout
from hardware_profiles import load_hardware
from meshcore import JobSpec, Recompute, Schedule, Target, ZeroStage
from meshcore.cluster import HeteroCluster, NodeGroup
from planner.api import make_layout, resolve
from planner.inputs.loaders import load_model
from planner.outputs.emitters.common import UnsupportedPlanError
from planner.outputs.heteroplan import HeteroPlan, emit_hetero, hetero_plan_dict, placement
from planner.search.exact import search
from planner.search.hetero import (
    HeteroSpec,
    _Costs,
    brute_force,
    candidates,
    search_hetero,
    solve_split,
    split_objective,
)
from planner.search.space import SearchSpec

runner = CliRunner()


def _group(name: str, hardware: str, nodes: int, gpn: int | None = None, memory: float | None = None) -> NodeGroup:
    spec = load_hardware(hardware, 1)
    if gpn is not None:
        spec = replace(spec, gpus_per_node=gpn, scale_up_size=min(spec.scale_up_size, gpn))
    if memory is not None:
        spec = replace(spec, gpu=replace(spec.gpu, memory_gib=memory))
    return NodeGroup(name, hardware, nodes, replace(spec, num_gpus=nodes * spec.gpus_per_node))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_identical_groups_plan_as_one_cluster(tmp_path: Path) -> None:
    """Two groups of one hardware (no link named) give the plan and step time of --hardware with all their GPUs."""
    path = _write(tmp_path, "groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\n"
                            "  - {name: b, hardware: h100-sxm, nodes: 1}\n")
    two = planner.api.plan_cluster("llama3-8b", path, seq_len=4096, global_batch=64, spec=HeteroSpec(top_k=1))
    one = planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                       spec=SearchSpec(max_mbs=4, top_k=1))
    assert isinstance(two, planner.Plan)
    assert two.best.layout == one.best.layout
    assert two.best.prediction.step_time_s == pytest.approx(one.best.prediction.step_time_s, rel=1e-12)


def test_hetero_search_on_identical_groups_equals_homogeneous_search() -> None:
    """Unmerged, the search across two identical groups finds the homogeneous search's split and step time for the
    same degrees (stages of tp·dp = 8 GPUs: every send crosses nodes in both models)."""
    model, job = load_model("llama3-8b"), JobSpec(seq_len=4096, global_batch=64)
    cluster = HeteroCluster("twins", (_group("a", "h100-sxm", 2), _group("b", "h100-sxm", 2)))
    spec = HeteroSpec(tp=2, dp=4, mbs=1, recompute=Recompute.NONE, all_groups=True, top_k=1)
    hetero = search_hetero(model, cluster, job, spec).best
    homo = search(model, load_hardware("h100-sxm", 32), job,
                  SearchSpec(tp=2, pp=4, mbs=1, zero=1, recompute=Recompute.NONE, schedule=Schedule.ONE_F_ONE_B,
                             vpp=1, cp=1, sp=True, top_k=1)).best
    assert hetero.layout.pp == homo.layout.pp == 4
    # the splits tie on the split objective J ((m - 1)·max + Σ of the stage times: 8,9,9,6 and 9,9,9,5 both, once a
    # fixed cost per micro-batch and stage is priced); the homogeneous search breaks the tie by its simulated step
    # and tail, the heterogeneous one by its solver's order: either split, same J, the same pricing on both sides
    split = tuple(s.layers for s in hetero.layout.stages)
    same = replace(hetero.layout, stages=tuple(replace(st, layers=n, full=0) for st, n in
                                               zip(hetero.layout.stages, homo.layout.chunk_layers(model.num_layers),
                                                   strict=True)))
    assert split_objective(model, job, cluster, hetero.layout) == pytest.approx(
        split_objective(model, job, cluster, same), rel=1e-12)
    problem = resolve(model, load_hardware("h100-sxm", 32), gpus=32, seq_len=4096, global_batch=64)
    homo_at_split = evaluate_layout(problem.model, problem.cluster, problem.job,
                                    make_layout(problem, tp=2, pp=4, mbs=1, zero=1, stage_layers=split))
    assert hetero.prediction.step_time_s == pytest.approx(homo_at_split.step_time_s, rel=1e-9)
    assert hetero.prediction.peak_memory_gib == pytest.approx(homo_at_split.peak_memory_gib, rel=1e-9)
    assert hetero.prediction.step_time_s == pytest.approx(homo.prediction.step_time_s, rel=1e-3)


SMALL = [  # (groups, memory GiB per group or None, global batch)
    ((("h", "h100-sxm", 1, 2), ("a", "a100-80gb", 1, 2)), (None, None), 8),
    ((("h", "h100-sxm", 1, 2), ("a", "a100-80gb", 2, 2)), (14.0, 12.0), 8),
    ((("h", "h100-sxm", 1, 2), ("a", "a100-80gb", 1, 2), ("l", "l40s", 1, 2)), (None, None, None), 4),
    ((("h", "h100-sxm", 1, 2), ("a", "a100-80gb", 1, 2), ("l", "l40s", 1, 2)), (13.0, 12.0, 11.0), 4),
]


@pytest.mark.parametrize("case", range(len(SMALL)))
def test_exact_split_equals_brute_force(case: int) -> None:
    """For every candidate of small clusters (2-3 groups, 6 layers, memory tight enough to recompute), the solver's
    J equals the least J over every composition priced stage by stage with the cost model."""
    groups, memory, batch = SMALL[case]
    cluster = HeteroCluster("small", tuple(_group(n, hw, k, gpn, mem) for (n, hw, k, gpn), mem
                                           in zip(groups, memory, strict=True)))
    model = replace(load_model("llama3-8b"), num_layers=6)
    job = JobSpec(seq_len=2048, global_batch=batch)
    spec = HeteroSpec(mbs=1)
    cache, compared, recomputed = _Costs(model, cluster, job), 0, False
    for c in candidates(model, cluster, job, spec):
        layout = c.skeleton(cluster)
        costs = {(g, t): cache.group(layout, g, t) for g, t in c.order}
        solved = solve_split(model, job, cluster, layout, costs, True)
        best = brute_force(model, cluster, job, replace(spec, dp=c.dp, recompute=c.recompute), only=c)
        if best is None:
            assert solved is None
            continue
        assert solved is not None
        assert solved[1] == pytest.approx(best[0], rel=1e-9)
        assert split_objective(model, job, cluster, solved[0], costs) == pytest.approx(best[0], rel=1e-9)
        compared += 1
        recomputed = recomputed or any(st.full for st in solved[0].stages)
    assert compared >= 5
    assert recomputed == (memory[0] is not None)  # the tight cases fit only by recomputing some layers


def test_search_prefers_the_faster_group_and_places_every_rank() -> None:
    """H100 + A100: the H100 stages hold more layers per stage; the placement covers every GPU used once."""
    model, job = load_model("llama3-8b"), JobSpec(seq_len=4096, global_batch=32)
    cluster = HeteroCluster("mixed", (_group("h100", "h100-sxm", 1), _group("a100", "a100-80gb", 1)))
    result = search_hetero(model, cluster, job, HeteroSpec(tp=2, all_groups=True, top_k=2))
    lay = result.best.layout
    per_stage = {g: [s.layers for s in lay.stages if s.group == g] for g in ("h100", "a100")}
    assert min(per_stage["h100"]) >= max(per_stage["a100"])
    again = predict_hetero(model, job, cluster, lay)
    assert again.step_time_s == pytest.approx(result.best.prediction.step_time_s, rel=1e-12)
    ranks = placement(cluster, lay)
    assert [r.rank for r in ranks] == list(range(lay.world))
    assert len({(r.group, r.node, r.gpu) for r in ranks}) == lay.world
    assert all(r.gpu < 8 and r.node == 0 for r in ranks)
    plan = HeteroPlan(model, cluster, job, result)
    data = hetero_plan_dict(plan)
    assert data["workload"] == "training-hetero" and len(data["placement"]["ranks"]) == lay.world
    text = emit_hetero(plan, Target.MEGATRON)
    assert "--tensor-model-parallel-size 2" in text and "0: " in text
    with pytest.raises(UnsupportedPlanError, match="Megatron-LM, NeMo or torchtitan") as refused:
        emit_hetero(plan, Target.DEEPSPEED)  # DeepSpeed splits stages itself; --even-split is not a --cluster flag
    assert "--even-split" not in str(refused.value)


def test_per_stage_tp_is_refused_by_name() -> None:
    model, job = load_model("llama3-8b"), JobSpec(seq_len=4096, global_batch=32)
    cluster = HeteroCluster("mixed", (_group("h100", "h100-sxm", 1), _group("a100", "a100-80gb", 1)))
    result = search_hetero(model, cluster, job, HeteroSpec(dp=2, mbs=1, zero=ZeroStage.OPTIMIZER, all_groups=True))
    mixed = next((r for r in (result.best, *result.alternatives) if not r.layout.uniform_tp), None)
    if mixed is None:
        pytest.skip("no alternative with mixed TP degrees")
    plan = HeteroPlan(model, cluster, job, replace(result, best=mixed))
    with pytest.raises(UnsupportedPlanError, match="one tensor-parallel size"):
        emit_hetero(plan, Target.MEGATRON)


BAD = [
    ("groups: []\n", "groups must be a list"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 1, gpus: 8}\n", "unknown keys ['gpus']"),
    ("groups:\n  - {name: a, hardware: h100-sxm}\n", "missing keys ['nodes']"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 0}\n", "nodes must be an integer"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: true}\n", "nodes must be an integer"),
    ("groups:\n  - {name: a, hardware: tpu-v9, nodes: 1}\n", "unknown hardware"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\n  - {name: a, hardware: a100-80gb, nodes: 1}\n",
     "unique"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\nlinks:\n  - {between: [a, z], bandwidth_gbs: 25, "
     "latency_us: 5}\n", "no group named z"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\n  - {name: b, hardware: a100-80gb, nodes: 1}\nlinks:\n"
     "  - {between: [a, b], bandwidth_gbs: -1, latency_us: 5}\n", "bandwidth_gbs"),
    ("groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\nspeed: 3\n", "unknown keys ['speed']"),
    ("- 1\n- 2\n", "expected a mapping"),
    ("groups: !!python/object/apply:os.system [echo hi]\n", "cannot read"),
    ("groups: [\n", "cannot read"),
]


@pytest.mark.parametrize("text,message", BAD)
def test_bad_cluster_files_fail_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    res = runner.invoke(app, ["plan", "--cluster", str(path), "--model", "llama3-8b", "--seq-len", "4096",
                              "--global-batch", "32"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.output
    assert "Traceback" not in res.output


def test_cluster_refuses_flags_it_does_not_use(tmp_path: Path) -> None:
    path = _write(tmp_path, "groups:\n  - {name: a, hardware: h100-sxm, nodes: 1}\n")
    res = runner.invoke(app, ["plan", "--cluster", str(path), "--hardware", "h100-sxm", "--model", "llama3-8b",
                              "--seq-len", "4096", "--global-batch", "32"])
    assert res.exit_code == 2 and "drop --hardware" in res.output


def test_plan_cluster_command_writes_placement(tmp_path: Path) -> None:
    path = _write(tmp_path, "groups:\n  - {name: h100, hardware: h100-sxm, nodes: 1}\n"
                            "  - {name: a100, hardware: a100-80gb, nodes: 1}\n"
                            "links:\n  - {between: [h100, a100], bandwidth_gbs: 12.5, latency_us: 10}\n")
    out = tmp_path / "plan.yaml"
    res = runner.invoke(app, ["plan", "--cluster", str(path), "--model", "llama3-8b", "--seq-len", "4096",
                              "--global-batch", "32", "--tp", "2", "--out", str(out), "--top-k", "2"])
    assert res.exit_code == 0, res.output
    assert "megatron:" in res.output and out.is_file()
    import yaml

    data = yaml.safe_load(out.read_text())
    assert data["placement"]["ranks"][0]["rank"] == 0
    assert data["cluster"]["links"][0]["bandwidth_gbs"] == 12.5
    from planner.outputs.planread import _validator

    assert not list(_validator().iter_errors(data))  # the shared plan schema describes it
    res = runner.invoke(app, ["emit", str(out), "--to", "megatron"])
    assert res.exit_code == 2 and "training-hetero" in res.output and "--cluster" in res.output
