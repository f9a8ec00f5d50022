"""Plans across node groups: the plan file (workload: training-hetero) with its per-rank placement, the table
`meshplan plan --cluster` prints, and what each launcher can run of it.

Placement. Stages are laid out in pipeline order, each group's stages on its nodes in node order; inside a stage
TP is innermost, then DP: stage s of TP degree t holds global ranks off_s + dp_rank·t + tp_rank (off_s the GPUs of
the stages before it), and, on its group, GPU index (s − first stage of the group)·t·dp + dp_rank·t + tp_rank,
node = index // gpus_per_node. With one TP degree this is Megatron-LM's default rank order (tp, then dp, then pp
outermost), so a launcher runs the placement when its nodes are started in the order of the host list (node rank
i = the i-th line): torchrun's --node-rank, a hostfile for mpirun/DeepSpeed.

Launchers. Megatron-LM (and NeMo, torchtitan, DeepSpeed) take one tensor-parallel size for every pipeline stage:
a plan whose groups use different TP degrees is refused by name (UnsupportedPlanError). With one TP degree the
plan is handed to the launcher's own emitter as the homogeneous layout it is (same pp, dp, uneven layer split,
per-stage recomputation), which writes Megatron-LM's --pipeline-model-parallel-layout or refuses what that launcher
cannot express, and the host order is prepended. Groups with different GPUs per node are refused (torchrun starts
the same number of processes on every node of one job).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cost_models.prediction import Prediction
from hardware_profiles import profile_mapping
from meshcore import DEFAULT_SCHEDULE, JobSpec, Layout, ModelSpec, Target
from meshcore.cluster import HeteroCluster, HeteroLayout
from meshcore.text import comment
from planner.inputs.loaders import model_mapping
from planner.outputs.emitters.common import UnsupportedPlanError, facts
from planner.outputs.plan import Plan
from planner.outputs.planfile import MESHPLAN_VERSION, SCHEMA_VERSION
from planner.outputs.report import prediction_dict
from planner.search.hetero import HeteroRanked, HeteroResult
from planner.search.ranked import Ranked

WORKLOAD = "training-hetero"


@dataclass(frozen=True)
class HeteroPlan:
    """The answer of a search across node groups: what it was made for and the ranked layouts."""

    model: ModelSpec
    cluster: HeteroCluster
    job: JobSpec
    result: HeteroResult


@dataclass(frozen=True)
class RankPlace:
    """Where one global rank runs and what it holds."""

    rank: int
    group: str
    node: int  # node index within its group
    gpu: int  # local GPU index on the node
    stage: int
    tp_rank: int
    dp_rank: int


def placement(cluster: HeteroCluster, layout: HeteroLayout) -> list[RankPlace]:
    """Every rank of `layout` (order and formula in the module docstring)."""
    out: list[RankPlace] = []
    rank, first_in_group = 0, 0
    for s, st in enumerate(layout.stages):
        if s == 0 or layout.stages[s - 1].group != st.group:
            first_in_group = s
        gpn = cluster.group(st.group).gpus_per_node
        for dp_rank in range(layout.dp):
            for tp_rank in range(st.tp):
                index = (s - first_in_group) * st.tp * layout.dp + dp_rank * st.tp + tp_rank
                out.append(RankPlace(rank, st.group, index // gpn, index % gpn, s, tp_rank, dp_rank))
                rank += 1
    return out


def host_order(cluster: HeteroCluster, layout: HeteroLayout) -> list[str]:
    """Nodes in the order their ranks start (`group/node`): node rank i is the i-th entry; idle groups last."""
    used = [g for g, _, _ in layout.runs()]
    order = [f"{g}/{n}" for g in used for n in range(cluster.group(g).nodes)]
    idle = [g.name for g in cluster.groups if g.name not in used]
    return order + [f"{g}/{n} (idle)" for g in idle for n in range(cluster.group(g).nodes)]


def _stage_rows(cluster: HeteroCluster, ranked: HeteroRanked) -> list[dict[str, Any]]:
    rows, first = [], 0
    for s, (st, cost) in enumerate(zip(ranked.layout.stages, ranked.prediction.stages, strict=True)):
        rows.append({"pp_rank": s, "group": st.group, "tp": st.tp, "first_layer": first,
                     "last_layer": first + st.layers - 1, "num_layers": st.layers, "full_recompute_layers": st.full,
                     "has_embedding": s == 0, "has_lm_head": s == ranked.layout.pp - 1,
                     "compute_s": cost.compute_s, "peak_memory_gib": cost.peak_memory_gib,
                     "capacity_gib": cluster.group(st.group).cluster.gpu.memory_gib})
        first += st.layers
    return rows


def _layout_dict(layout: HeteroLayout) -> dict[str, Any]:
    return {"pp": layout.pp, "dp": layout.dp, "tp_per_stage": [s.tp for s in layout.stages],
            "groups_in_order": [g for g, _, _ in layout.runs()], "layers_per_stage": [s.layers for s in layout.stages],
            "micro_batch_size": layout.mbs, "zero_stage": int(layout.zero), "recompute": layout.recompute.value,
            "schedule": DEFAULT_SCHEDULE.value}


def hetero_plan_dict(plan: HeteroPlan, record_timing: bool = False) -> dict[str, Any]:
    """The plan file: model, cluster (groups with their profiles, links), job, the layout and its stages, the
    prediction, the search's counts, the alternatives and the per-rank placement."""
    cluster, best, result, job = plan.cluster, plan.result.best, plan.result, plan.job
    prediction = {k: v for k, v in prediction_dict(best.prediction).items() if k != "stages"}
    return {
        "schema_version": SCHEMA_VERSION, "meshplan_version": MESHPLAN_VERSION, "workload": WORKLOAD,
        "model": model_mapping(plan.model),
        "cluster": {"name": cluster.name, "num_gpus": cluster.num_gpus,
                    "groups": [{"name": g.name, "hardware": g.hardware, "nodes": g.nodes,
                                "gpus_per_node": g.gpus_per_node, "profile": profile_mapping(g.cluster)}
                               for g in cluster.groups],
                    "links": [{"between": [a.name, b.name], "bandwidth_gbs": link.bandwidth_gbs,
                               "latency_us": link.latency_us}
                              for i, a in enumerate(cluster.groups) for b in cluster.groups[i + 1:]
                              for link in [cluster.link(a.name, b.name)]]},
        "job": {"seq_len": job.seq_len, "global_batch": job.global_batch, "dtype": job.dtype.value,
                "attention": job.runtime.attention.value, "overlap_grad_reduce": job.runtime.overlap_grad_reduce,
                "overlap_param_gather": job.runtime.overlap_param_gather,
                "grad_reduce_bytes": job.runtime.grad_reduce_bytes},
        "hetero": {
            "layout": _layout_dict(best.layout),
            "stages": _stage_rows(cluster, best),
            "prediction": prediction,
            "search": {"method": "enumerate (dp, mbs, recompute, group order, TP per group) best-first by a time "
                                 "bound; exact layer split per candidate (bottleneck scan + min-plus DP)",
                       "candidates": result.candidates, "evaluated": result.evaluated,
                       "pruned_time": result.pruned_time, "no_split_fits": result.infeasible,
                       "solve_time_s": round(result.solve_time_s, 3) if record_timing else None, "optimal": True},
            "alternatives": [{"step_time_s": r.prediction.step_time_s, "mfu": r.prediction.mfu,
                              "layout": _layout_dict(r.layout)} for r in result.alternatives],
            "launchers": launcher_support(plan)},
        "placement": {"host_order": host_order(cluster, best.layout),
                      "ranks": [p.__dict__ for p in placement(cluster, best.layout)]},
    }


def equivalent_plan(plan: HeteroPlan) -> Plan:
    """The plan as a homogeneous Plan the emitters read: one TP degree, the uneven split and per-stage recomputation;
    the cluster is the first group's profile sized to the GPUs used (the emitters read node counts from it)."""
    lay = plan.result.best.layout
    if not lay.uniform_tp:
        raise UnsupportedPlanError(
            f"the plan runs TP {[s.tp for s in lay.stages]} on its pipeline stages; Megatron-LM, NeMo, torchtitan and "
            "DeepSpeed take one tensor-parallel size for every stage: re-plan with --tp N (one TP degree) to get a "
            "plan they run")
    used = [plan.cluster.group(g) for g, _, _ in lay.runs()]
    if len({g.gpus_per_node for g in used}) > 1:
        raise UnsupportedPlanError(f"the groups used have {sorted({g.gpus_per_node for g in used})} GPUs per node; "
                                   "torchrun starts one number of processes per node for a whole job")
    tp = lay.stages[0].tp
    layout = Layout(tp=tp, pp=lay.pp, dp=lay.dp, mbs=lay.mbs, sp=tp > 1, zero=lay.zero, recompute=lay.recompute,
                    schedule=DEFAULT_SCHEDULE, stage_layers=tuple(s.layers for s in lay.stages),
                    recompute_layers=tuple(s.full for s in lay.stages) if any(s.full for s in lay.stages) else None)
    first = used[0].cluster
    cluster = replace(first, num_gpus=lay.world, name=plan.cluster.name)
    pred: Prediction = plan.result.best.prediction
    return Plan(plan.model, cluster, plan.job, Ranked(layout, pred), (), None)


def emit_hetero(plan: HeteroPlan, target: Target) -> str:
    """`target`'s configuration of the plan with the host order in front, or UnsupportedPlanError naming what the
    launcher lacks (never a substituted layout: re-plan with the pins the message names)."""
    from planner.outputs.emitters import EMITTERS, with_header_line

    equivalent = equivalent_plan(plan)
    split = facts(equivalent)
    if target is Target.DEEPSPEED and not split.uniform_chunks:  # its own refusal would suggest --even-split
        raise UnsupportedPlanError(f"DeepSpeed partitions pipeline stages itself and cannot give a faster group's "
                                   f"stages more layers (this plan splits {list(split.chunks)}); a plan across node "
                                   "groups splits by group speed: run it with Megatron-LM, NeMo or torchtitan")
    text = EMITTERS[target](equivalent)
    order = host_order(plan.cluster, plan.result.best.layout)
    head = [comment(f"Heterogeneous cluster {plan.cluster.name}: start the nodes in this order (node rank i = line "
                    "i), so that ranks follow the plan's placement:")] + [comment(f"  {i}: {n}") for i, n in
                                                                           enumerate(order)]
    return with_header_line(text, "\n".join(head))


def launcher_support(plan: HeteroPlan) -> dict[str, str]:
    """Per launcher: 'runs' or the reason it cannot run the plan (the plan file records it)."""
    out = {}
    for target in (Target.MEGATRON, Target.TORCHTITAN, Target.DEEPSPEED, Target.NEMO):
        try:
            emit_hetero(plan, target)
            out[target.value] = "runs (start nodes in placement.host_order)"
        except UnsupportedPlanError as exc:
            out[target.value] = str(exc)
    return out


def hetero_table(plan: HeteroPlan) -> str:
    """What `meshplan plan --cluster` prints: the best layout stage by stage, the figures, the alternatives."""
    best, cluster = plan.result.best, plan.cluster
    p, lay = best.prediction, best.layout
    groups = ", ".join(f"{g.name}: {g.nodes} x {g.gpus_per_node} {g.cluster.gpu.name}" for g in cluster.groups)
    lines = [f"{plan.model.name} on {cluster.name} ({groups})",
             f"best: pp {lay.pp} over {' -> '.join(f'{g} ({n} stages)' for g, _, n in lay.runs())}, dp {lay.dp}, "
             f"mbs {lay.mbs}, ZeRO-{int(lay.zero)}, recompute {lay.recompute.value}, 1f1b",
             f"step {p.step_time_s:.3f} s, {p.tokens_per_s:,.0f} tokens/s, MFU {100 * p.mfu:.1f} % (of the peaks of "
             f"the {lay.world} GPUs used), {p.num_microbatches} micro-batches",
             "", "stage group        tp layers full  compute s  memory GiB"]
    for row in _stage_rows(cluster, best):
        lines.append(f"{row['pp_rank']:>5} {row['group']:<12} {row['tp']:>3} {row['num_layers']:>6} "
                     f"{row['full_recompute_layers']:>4} {row['compute_s']:>10.4f} "
                     f"{row['peak_memory_gib']:>6.1f}/{row['capacity_gib']:g}")
    if plan.result.alternatives:
        lines += ["", "alternatives:"]
        for r in plan.result.alternatives:
            tps = "/".join(str(s.tp) for s in r.layout.stages)
            lines.append(f"  {r.prediction.step_time_s:.3f} s  pp {r.layout.pp} "
                         f"({' -> '.join(f'{g}x{n}' for g, _, n in r.layout.runs())}) dp {r.layout.dp} "
                         f"mbs {r.layout.mbs} tp {tps} {r.layout.recompute.value}")
    res = plan.result
    lines += ["", f"searched {res.candidates} candidates: {res.evaluated} priced, {res.pruned_time} pruned by the time "
                  f"bound, {res.infeasible} did not fit"]
    for name, verdict in launcher_support(plan).items():
        lines.append(f"{name}: {verdict}")
    return "\n".join(lines)
