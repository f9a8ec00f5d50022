"""The text summary of an inference plan file of any family (what `meshplan infer` prints and `meshplan explain`
shows): the frame here, each family's lines from its room."""

from __future__ import annotations

from typing import Any

from meshcore.inference import Family
from planner.workloads.diffusion import plan as diffusion_plan
from planner.workloads.edge import plan as edge_plan
from planner.workloads.serving import plan as serving_plan


def summary(data: dict[str, Any]) -> str:
    """Title line, the family's lines, the search method (and, for diffusion, the xDiT launch command)."""
    inf, hw = data["inference"], data["hardware"]
    family = inf["family"]
    name = data["model"].get("name", "model")
    lines = [f"{family} plan: {name} on {hw['num_gpus']} x {hw['name']}"]
    if family == Family.SERVING.value:
        lines += serving_plan.summary_lines(inf)
    elif family == Family.EDGE.value:
        lines += edge_plan.summary_lines(inf)
    else:
        lines += diffusion_plan.summary_lines(inf)
    search = inf["search"]
    lines.append(f"  search: {search['method']}" + (", optimal in the modelled space" if search.get("optimal") else ""))
    if family == Family.DIFFUSION.value:
        lines += diffusion_plan.launch_lines(inf)
    return "\n".join(lines)
