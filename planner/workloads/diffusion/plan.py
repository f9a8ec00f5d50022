"""The diffusion plan file's `inference` section (prediction with its parts, search, alternatives, the xfuser
launch command) and its summary lines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from meshcore import ClusterSpec
from meshcore.inference import Family
from planner.outputs.inferplan import document, plain
from planner.workloads.diffusion.cost import DiffusionPrediction
from planner.workloads.diffusion.inputs import diffusion_mapping
from planner.workloads.diffusion.search import DiffusionSearch
from planner.workloads.diffusion.spec import DiffusionJob, DiffusionModel
from planner.workloads.diffusion.xfuser import xfuser_command


def _diffusion_prediction(p: DiffusionPrediction) -> dict[str, Any]:
    values: dict[str, Any] = plain({**asdict(p), "fits": p.fits})
    return values


def diffusion_document(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, gpus: int,
                       result: DiffusionSearch) -> dict[str, Any]:
    """The plan file of a diffusion search (`model` holds the diffusion-model keys)."""
    best = result.best
    inference = {"family": Family.DIFFUSION.value, "job": plain(job), "layout": plain(best.layout),
                 "prediction": _diffusion_prediction(best.prediction),
                 "search": {"method": result.method, "candidates": result.candidates, "priced": result.priced,
                            "pruned_memory": result.pruned_memory, "pruned_bound": result.pruned_bound,
                            "optimal": True},
                 "alternatives": [{"layout": plain(c.layout), "prediction": _diffusion_prediction(c.prediction)}
                                  for c in result.ranked[1:]],
                 "launch": {"xfuser": xfuser_command(model, job, best.layout, cluster.gpus_per_node)}}
    return document(plain(diffusion_mapping(model)), cluster, gpus, inference)


def summary_lines(inf: dict[str, Any]) -> list[str]:
    """The diffusion plan's prediction, its parts and the alternatives, one a line."""
    pred, lay = inf["prediction"], inf["layout"]
    lines = [f"  {_diffusion_layout(lay)}: {pred['latency_s']:.3f} s per image ({pred['step_s'] * 1e3:.1f} ms "
             f"per step), {pred['images_per_s']:.3f} images/s, {pred['memory_gib']:.1f} / "
             f"{pred['capacity_gib']:.0f} GiB per GPU; perfect scaling would give {pred['compute_s']:.3f} s"]
    if "denoise_s" in pred:
        lines.append(f"  text encoders {pred['encode_s'] * 1e3:.1f} ms, denoising {pred['denoise_s']:.3f} s, "
                     f"VAE decode {pred['decode_s'] * 1e3:.1f} ms")
    for i, alt in enumerate(inf.get("alternatives", []), 2):
        lines.append(f"  {i}. {_diffusion_layout(alt['layout'])}: {alt['prediction']['latency_s']:.3f} s, "
                     f"{alt['prediction']['images_per_s']:.3f} images/s")
    return lines


def launch_lines(inf: dict[str, Any]) -> list[str]:
    """The xDiT launch command, when the plan has one."""
    return [f"  launch (xDiT): {inf['launch']['xfuser']}"] if "xfuser" in inf.get("launch", {}) else []


def _diffusion_layout(lay: dict[str, Any]) -> str:
    parts = [f"ulysses {lay['ulysses']}", f"ring {lay['ring']}", f"pipefusion {lay['pipefusion']}"]
    parts += [f"patches {lay['patches']}"] if lay["pipefusion"] > 1 else []
    return ", ".join([*parts, f"cfg {lay['cfg']}", f"dp {lay['dp']}"])
