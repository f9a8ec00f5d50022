"""The serving plan file's `inference` section (prediction, search, alternatives, vLLM and SGLang launch commands)
and its summary lines."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from meshcore import GIB, ClusterSpec, ModelSpec
from meshcore.inference import Family
from planner.inputs.loaders import model_mapping
from planner.outputs.inferplan import document, plain
from planner.workloads.serving.cost import ServingPrediction
from planner.workloads.serving.launch import sglang_commands, vllm_commands
from planner.workloads.serving.search import ServingSearch
from planner.workloads.serving.spec import ServingJob


def _serving_prediction(p: ServingPrediction) -> dict[str, Any]:
    out = {k: v for k, v in asdict(p).items() if k not in ("memory", "prefill_memory")}
    mem = p.memory
    out.update(weights_gib=mem.weights / GIB, kv_cache_gib=max(mem.kv_budget, 0.0) / GIB,
               workspace_gib=mem.workspace / GIB, engine_memory_gib=mem.capacity / GIB)
    values: dict[str, Any] = plain(out)
    return values


def serving_document(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, gpus: int,
                     result: ServingSearch) -> dict[str, Any]:
    """The plan file of a serving search."""
    best = result.best
    inference = {
        "family": Family.SERVING.value, "job": plain(job), "layout": plain(best.layout),
        "prediction": _serving_prediction(best.prediction),
        "search": {"method": result.method, "replica_layouts": result.replica_layouts,
                   "pruned_memory": result.pruned_memory, "priced": result.priced, "slo_misses": result.slo_misses,
                   "optimal": True},
        "alternatives": [{"layout": plain(c.layout), "prediction": _serving_prediction(c.prediction)}
                         for c in result.ranked[1:]],
        "launch": {"vllm": vllm_commands(model.name, job, best.layout),
                   "sglang": sglang_commands(model.name, job, best.layout)},
    }
    return document(model_mapping(model), cluster, gpus, inference)


def _replica(r: dict[str, Any]) -> str:
    return f"tp{r['tp']} pp{r['pp']}" + (f" ep{r['ep']} (dp-attention {r['dp']})" if r["ep"] > 1 else "")


def _serving_layout(lay: dict[str, Any]) -> str:
    decode = f"{lay['replicas']} x [{_replica(lay['decode'])}] batch {lay['batch']}"
    if lay.get("prefill") is None:
        return decode
    return f"prefill {lay['prefill_replicas']} x [{_replica(lay['prefill'])}] + decode {decode}"


def summary_lines(inf: dict[str, Any]) -> list[str]:
    """The serving plan's layout, prediction, memory and the alternatives, one a line."""
    pred, lay = inf["prediction"], inf["layout"]
    engine = inf["job"].get("engine")
    under = f" under {engine['engine']} {engine['version']}" if engine else " (GPU roofline, no engine)"
    out = [f"  {_serving_layout(lay)}{under}",
           f"  TTFT {pred['ttft_s'] * 1e3:.1f} ms, TPOT {pred['tpot_s'] * 1e3:.2f} ms, {pred['tokens_per_s']:.0f} "
           f"output tokens/s ({pred['tokens_per_s_per_gpu']:.0f} per GPU, {pred['requests_per_s']:.2f} requests/s)",
           f"  per GPU: weights {pred['weights_gib']:.1f} GiB, KV cache {pred['kv_cache_gib']:.1f} GiB, workspace "
           f"{pred['workspace_gib']:.1f} GiB of {pred['engine_memory_gib']:.1f}; largest batch that fits "
           f"{pred['max_batch']} per decode replica"]
    for i, alt in enumerate(inf.get("alternatives", []), 2):
        p = alt["prediction"]
        out.append(f"  {i}. {_serving_layout(alt['layout'])}: {p['tokens_per_s']:.0f} tokens/s, TTFT "
                   f"{p['ttft_s'] * 1e3:.1f} ms, TPOT {p['tpot_s'] * 1e3:.2f} ms")
    return out
