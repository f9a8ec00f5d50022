"""meshplan infer against published inference measurements (benchmarks/data/inference/published.yaml): SGLang and
vLLM serving tables, NVIDIA's Jetson generation rates, xDiT's Flux latencies. Nothing is fitted: every prediction
uses the hardware presets and engine profiles (hardware_profiles/engines/) as they are. Each serving run is priced
under the engine that ran it (vLLM with the benchmark's --num-scheduler-steps 10) and, with --no-engine, on the
bare GPU roofline; online runs take their batch from the rate (Little's law, `batch_at_rate`), not from the
measured latency. Prints one table per family and the mean |error|.

    python benchmarks/inference_accuracy.py [--no-engine]
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from statistics import mean
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hardware_profiles import load_hardware  # noqa: E402
from meshcore.inference import ReplicaLayout  # noqa: E402
from planner.inputs.loaders import load_model  # noqa: E402
from planner.workloads.diffusion.cost import evaluate_diffusion  # noqa: E402
from planner.workloads.diffusion.inputs import load_diffusion_model  # noqa: E402
from planner.workloads.diffusion.spec import DiffusionJob, DiffusionLayout  # noqa: E402
from planner.workloads.edge.search import search_edge  # noqa: E402
from planner.workloads.edge.spec import EdgeJob  # noqa: E402
from planner.workloads.serving.cost import batch_at_rate, decode_memory, evaluate_serving  # noqa: E402
from planner.workloads.serving.engine import EngineProfile  # noqa: E402
from planner.workloads.serving.engines import load_engine  # noqa: E402
from planner.workloads.serving.spec import PoolMode, ServingJob, ServingLayout  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "inference" / "published.yaml"
VLLM_SCHEDULER_STEPS = 10  # the benchmark's vLLM flag (published.yaml's source)


def run_engine(name: str, bare: bool) -> EngineProfile | None:
    """The engine profile of a published run, with the benchmark's own flags; None on the bare roofline."""
    if bare:
        return None
    engine = load_engine(name)
    return replace(engine, scheduler_steps=VLLM_SCHEDULER_STEPS) if name == "vllm" else engine


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred / meas - 1.0)


def serving(data: dict[str, Any], bare: bool = False) -> list[float]:
    errors: list[float] = []
    print(f"serving ({data['source'].split(',')[0]}), prompt {data['prompt_len']}, output {data['output_len']}")
    print(f"  {'case':52} {'measured':>9} {'predicted':>9} {'error':>7}")
    for run in data["offline"]:
        model, cluster = load_model(run["model"]), load_hardware(run["hardware"], run["gpus"])
        job = ServingJob(data["prompt_len"], data["output_len"], gpu_memory_utilization=run["memory"],
                         mode=PoolMode.COLOCATED, engine=run_engine(run["engine"], bare))
        r = ReplicaLayout(run["tp"])
        cap = decode_memory(model, cluster, job, r).max_batch
        limit = load_engine(run["engine"]).max_num_seqs  # the engine's default cap, vLLM's --max-num-seqs 256
        batch = min(cap, limit) if limit else cap
        pred = evaluate_serving(model, cluster, job, ServingLayout(r, 1, batch), run["gpus"]).tokens_per_s
        errors.append(_err(pred, run["tokens_per_s"]))
        case = f"offline {run['engine']} {run['model']} {run['gpus']}x{run['hardware']} (batch {batch})"
        print(f"  {case:52} {run['tokens_per_s']:9.0f} {pred:9.0f} {errors[-1]:+6.1f}%  output tokens/s")
    for run in data["online"]:
        model, cluster = load_model(run["model"]), load_hardware(run["hardware"], run["gpus"])
        job = ServingJob(data["prompt_len"], data["output_len"], mode=PoolMode.COLOCATED, rate=run["rps"],
                         engine=run_engine(run["engine"], bare))
        r = ReplicaLayout(run["tp"])
        batch = batch_at_rate(model, cluster, job, r, run["rps"])
        pred = evaluate_serving(model, cluster, job, ServingLayout(r, 1, batch), run["gpus"])
        for what, measured, predicted in (("TPOT", run["tpot_ms"], pred.tpot_s * 1e3),
                                          ("TTFT", run["ttft_ms"], pred.ttft_s * 1e3)):
            errors.append(_err(predicted, measured))
            case = f"{what} {run['engine']} {run['model']} rps {run['rps']} (batch {batch})"
            print(f"  {case:52} {measured:9.2f} {predicted:9.2f} {errors[-1]:+6.1f}%  ms")
    return errors


def edge(data: dict[str, Any]) -> list[float]:
    errors: list[float] = []
    print(f"\nedge ({data['source'].split(',')[0]}), MLC INT4, batch 1")
    print(f"  {'case':52} {'measured':>9} {'predicted':>9} {'error':>7}")
    for run in data["runs"]:
        plan = search_edge(load_model(run["model"]), [load_hardware(run["hardware"], 1)],
                           EdgeJob(data["prompt_len"], data["output_len"]))
        pred = 1.0 / plan.tpot_s
        errors.append(_err(pred, run["tokens_per_s"]))
        print(f"  {run['label'] + ' on ' + run['hardware']:44} {run['tokens_per_s']:9.2f} {pred:9.2f} "
              f"{errors[-1]:+6.1f}%  tokens/s")
    return errors


def diffusion(data: dict[str, Any]) -> tuple[list[float], list[float]]:
    eager: list[float] = []
    compiled: list[float] = []
    model = load_diffusion_model(data["model"])
    job = DiffusionJob(data["resolution"], data["steps"])
    print(f"\ndiffusion ({data['source'].split(',')[0]}), {data['model']} {data['resolution']} px, {data['steps']} "
          "steps, seconds per image")
    print(f"  {'case':28} {'PyTorch':>8} {'compile':>8} {'predicted':>9} {'vs PyTorch':>10} {'vs compile':>10}")
    for run in data["runs"]:
        cluster = load_hardware(data["hardware"], run["gpus"])
        layout = DiffusionLayout(ulysses=run["ulysses"], ring=run["ring"])
        pred = evaluate_diffusion(model, cluster, job, layout).latency_s
        eager.append(_err(pred, run["pytorch_s"]))
        compiled.append(_err(pred, run["compile_s"]))
        case = f"{run['gpus']} GPU ulysses {run['ulysses']} ring {run['ring']}"
        print(f"  {case:28} {run['pytorch_s']:8.2f} {run['compile_s']:8.2f} {pred:9.2f} {eager[-1]:+9.1f}% "
              f"{compiled[-1]:+9.1f}%")
    return eager, compiled


def main() -> None:
    data = yaml.safe_load(DATA.read_text())
    s = serving(data["serving"], bare="--no-engine" in sys.argv[1:])
    e = edge(data["edge"])
    eager, compiled = diffusion(data["diffusion"])
    ms, me, mc, mp = (mean(map(abs, x)) for x in (s, e, compiled, eager))
    print(f"\nmean |error|: serving {ms:.1f} % ({len(s)} figures), edge {me:.1f} % ({len(e)}), diffusion {mc:.1f} % "
          f"against torch.compile, {mp:.1f} % against PyTorch ({len(compiled)})")


if __name__ == "__main__":
    main()
