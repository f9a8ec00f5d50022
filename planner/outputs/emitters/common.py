"""What every emitter reads off a plan, and the error for plans a launcher cannot express."""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshcore import Layout, Offload, Recompute, ZeroStage, module_names, non_default_modules, offload_names
from meshcore.errors import MeshplanError
from meshcore.framework import Framework
from meshcore.text import one_line
from planner.inputs.runtimes import load_runtime
from planner.outputs.plan import Plan


class UnsupportedPlanError(MeshplanError):
    """The launcher cannot run this plan as it is; the message names the nearest plan it can run."""

    exit_code = 2


def runs_schedule(framework: Framework, lay: Layout) -> bool:
    """Whether `framework` runs `lay`'s pipeline: no pipeline at all, or a schedule its runtime profile lists."""
    return lay.pp == 1 or lay.schedule in load_runtime(framework).capabilities.schedules


@dataclass(frozen=True)
class LaunchFacts:
    """Derived quantities the emitters share."""

    gpus: int
    nodes: int
    gpus_per_node: int
    chunks: tuple[int, ...]  # decoder layers per model chunk, pipeline order
    num_microbatches: int
    uniform_chunks: bool
    full_recompute_per_stage: tuple[int, ...]


def facts(plan: Plan) -> LaunchFacts:
    layout, model, cluster = plan.best.layout, plan.model, plan.cluster
    chunks = layout.chunk_layers(model.num_layers)
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    return LaunchFacts(
        gpus=cluster.num_gpus, nodes=math.ceil(cluster.num_gpus / per_node), gpus_per_node=per_node,
        chunks=chunks, num_microbatches=layout.num_microbatches(plan.job), uniform_chunks=len(set(chunks)) == 1,
        full_recompute_per_stage=tuple(layout.fully_recomputed(r, model.num_layers) for r in range(layout.pp)))


def partial_recompute(plan: Plan) -> int | None:
    """Layers fully recomputed on every stage when the plan recomputes part of each stage (block method),
    None when it does not; raise when stages differ, since launchers take one count for all stages."""
    layout = plan.best.layout
    if layout.recompute_layers is None:
        return None
    counts = set(layout.recompute_layers)
    if len(counts) > 1:
        raise UnsupportedPlanError(
            f"the plan fully recomputes {list(layout.recompute_layers)} layers on its pipeline stages; launchers take "
            f"one count for every stage: the nearest expressible plan recomputes {max(counts)} on each stage "
            "(or re-plan with --no-partial-recompute)")
    return counts.pop()


def describe(plan: Plan) -> str:
    """One line that names the plan (model, cluster, layout, prediction), for the headers of emitted files."""
    lay, pred = plan.best.layout, plan.best.prediction
    return one_line(f"{plan.model.name} on {plan.cluster.num_gpus} x {plan.cluster.name}: {layout_summary(lay)}; "
            f"predicted {pred.step_time_s:.3f} s/step, MFU {100 * pred.mfu:.1f} %")


def offload_runner(offload: frozenset[Offload]) -> str:
    """Which runtime meshplan writes for runs an offload choice, for a refusal to name: DeepSpeed for the optimizer,
    gradients, weights and NVMe; activations only as DeepSpeed's checkpoints of fully recomputed layers."""
    if Offload.ACTIVATIONS in offload:
        return ("DeepSpeed offloads activations only as the checkpoints of fully recomputed layers (--emit deepspeed "
                "with --recompute full)")
    return "DeepSpeed runs it: --emit deepspeed"


def layout_summary(lay: Layout) -> str:
    experts = f"ep {lay.ep}, etp {lay.etp}, " if lay.ep > 1 or lay.etp > 1 else ""
    return (f"tp {lay.tp}, pp {lay.pp}, dp {lay.dp}, cp {lay.cp}, {experts}vpp {lay.vpp}, mbs {lay.mbs}, "
            f"ZeRO-{int(lay.zero)}, recompute {lay.recompute.value}"
            + (f" ({' '.join(module_names(lay.recompute_modules))})" if non_default_modules(lay) else "")
            + (f", offload {'+'.join(offload_names(lay.offload))}" if lay.offload else ""))


__all__ = ["LaunchFacts", "Recompute", "UnsupportedPlanError", "ZeroStage", "describe", "facts", "partial_recompute"]
