"""The edge plan file's `inference` section (stages, prediction, the devices) and its summary lines."""

from __future__ import annotations

from typing import Any

from hardware_profiles import profile_mapping
from meshcore import ClusterSpec, ModelSpec
from meshcore.inference import Family
from planner.inputs.loaders import model_mapping
from planner.outputs.inferplan import document, plain
from planner.workloads.edge.search import EdgePlan
from planner.workloads.edge.spec import EdgeJob


def edge_document(model: ModelSpec, devices: list[ClusterSpec], job: EdgeJob, plan: EdgePlan) -> dict[str, Any]:
    """The plan file of an edge split: `hardware` is the first device, `inference.devices` all of them."""
    prediction = {k: getattr(plan, k) for k in ("ttft_s", "tpot_s", "e2e_s", "tokens_per_s", "bottleneck_s",
                                                "objective_value")}
    inference = {"family": Family.EDGE.value, "job": plain(job), "layout": {"stages": plain(plan.stages)},
                 "prediction": plain(prediction),
                 "search": {"method": "exact DP over (device, layers placed) in every device order",
                            "orders": plan.orders_tried, "optimal": True},
                 "devices": [profile_mapping(d) for d in devices]}
    doc = document(model_mapping(model), devices[0], len(devices), inference)
    doc["hardware"]["name"] = ",".join(d.name for d in devices)
    return doc


def summary_lines(inf: dict[str, Any]) -> list[str]:
    """The edge plan's prediction and its stages, one a line."""
    pred = inf["prediction"]
    lines = [f"  TTFT {pred['ttft_s'] * 1e3:.1f} ms, TPOT {pred['tpot_s'] * 1e3:.2f} ms, "
             f"{pred['tokens_per_s']:.1f} tokens/s, request {pred['e2e_s']:.2f} s"]
    for s in inf["layout"]["stages"]:
        lines.append(f"  {s['device']:22} layers {s['first_layer']:>3}-{s['first_layer'] + s['num_layers'] - 1:<3} "
                     f"decode {s['decode_s'] * 1e3:7.2f} ms  prefill {s['prefill_s'] * 1e3:8.1f} ms  memory "
                     f"{s['memory_gib']:5.1f} / {s['capacity_gib']:.1f} GiB")
    return lines
