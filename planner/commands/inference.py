"""`meshplan infer serve|edge|diffusion`: inference plans. Parse the flags, run the search, print the plan and write
the plan file (workload: inference)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from meshcore.checks import MAX_GPUS
from meshcore.inference import KvFormat, Objective, WeightFormat
from planner.commands.common import Hardware, MemoryGib, app, check, output_path, run, write_and_print
from planner.workloads.serving.engine import Engine
from planner.workloads.serving.spec import PoolMode

infer_app = typer.Typer(no_args_is_help=True, help="Plan inference: LLM serving, edge pipelines, diffusion "
                                                   "transformers.")
app.add_typer(infer_app, name="infer")

Out = Annotated[Path | None, typer.Option(parser=output_path, help="Write the plan here (.yaml, or .json).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")]
TopK = Annotated[int, typer.Option(min=1, max=100, help="Alternatives to keep and show.")]
PromptLen = Annotated[int, typer.Option(help="Prompt tokens per request.")]
OutputLen = Annotated[int, typer.Option(help="Output tokens per request.")]
KvDtype = Annotated[KvFormat, typer.Option("--kv-dtype", help="KV-cache number format.")]


def _emit_plan(document: dict[str, Any], out: Path | None, as_json: bool) -> None:
    from planner.outputs.inferplan import dumps
    from planner.workloads.plans import summary

    write_and_print(document, out, as_json, dumps, summary)


@infer_app.command()
def serve(
    model: Annotated[str, typer.Option(help="Preset name, model YAML or Hugging Face config.json.")],
    hardware: Hardware,
    gpus: Annotated[int, typer.Option(help="GPUs of the deployment.")],
    prompt_len: PromptLen,
    output_len: OutputLen,
    batch: Annotated[int | None, typer.Option(help="Concurrent requests over the deployment (default: the most that "
                                                   "meet the SLOs).")] = None,
    rate: Annotated[float | None, typer.Option(help="Requests per second the deployment must sustain.")] = None,
    ttft_slo: Annotated[float | None, typer.Option(help="Time-to-first-token SLO, seconds.")] = None,
    tpot_slo: Annotated[float | None, typer.Option(help="Time-per-output-token SLO, seconds.")] = None,
    objective: Annotated[Objective, typer.Option(help="Maximise throughput or minimise latency.")]
    = Objective.THROUGHPUT,
    weights: Annotated[WeightFormat, typer.Option(help="Weight format.")] = WeightFormat.BF16,
    kv_dtype: KvDtype = KvFormat.BF16,
    mode: Annotated[PoolMode, typer.Option(help="Co-located, disaggregated prefill/decode pools, or the better.")]
    = PoolMode.ANY,
    tp: Annotated[int | None, typer.Option(help="Pin tensor parallelism.")] = None,
    pp: Annotated[int | None, typer.Option(help="Pin pipeline parallelism.")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory the engine takes.")] = 0.9,
    max_num_seqs: Annotated[int | None, typer.Option(help="Largest batch per replica to consider (the engine's "
                                                          "--max-num-seqs; default: the engine's default, vLLM "
                                                          "256, else 1024).")] = None,
    engine: Annotated[Engine, typer.Option(help="Serving engine whose host time per iteration, CUDA graphs and "
                                                "scheduler are priced: vllm (0.6.0) or sglang (0.3.0); profiles in "
                                                "hardware_profiles/engines/. Default: vllm.")] = Engine.VLLM,
    top_k: TopK = 5,
    emit: Annotated[str | None, typer.Option(help="Also print launch arguments: vllm or sglang.")] = None,
    memory_gib: MemoryGib = None,
    out: Out = None,
    as_json: AsJson = False,
) -> None:
    """LLM serving: TP/PP/EP and replicas, co-located or disaggregated, under TTFT/TPOT SLOs."""

    def action() -> None:
        from hardware_profiles import HardwareOverrides, load_hardware
        from meshcore.errors import InputError, SpecError
        from planner.inputs.loaders import load_model
        from planner.workloads.serving.engines import load_engine
        from planner.workloads.serving.plan import serving_document
        from planner.workloads.serving.search import search_serving
        from planner.workloads.serving.spec import ServingJob

        check({"--gpus": (gpus, 1, MAX_GPUS), "--tp": (tp, 1, 1024), "--pp": (pp, 1, 1024)})
        profile = load_engine(engine)
        if emit not in (None, "vllm", "sglang"):
            raise InputError(f"--emit must be vllm or sglang, got {emit!r}")
        try:
            job = ServingJob(prompt_len, output_len, batch, rate, ttft_slo, tpot_slo, objective, weights, kv_dtype,
                             mode, gpu_memory_utilization=gpu_memory_utilization,
                             max_num_seqs=profile.max_num_seqs or 1024 if max_num_seqs is None else max_num_seqs,
                             engine=profile)
        except SpecError as exc:
            raise InputError(str(exc)) from None
        spec = load_model(model)
        cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
        result = search_serving(spec, cluster, job, gpus, top_k=top_k, tp=tp, pp=pp)
        document = serving_document(spec, cluster, job, gpus, result)
        _emit_plan(document, out, as_json)
        if emit is not None and not as_json:
            typer.echo(f"\n{document['inference']['launch'][emit]}")

    run(action)


@infer_app.command()
def edge(
    model: Annotated[str, typer.Option(help="Preset name, model YAML or Hugging Face config.json.")],
    devices: Annotated[str, typer.Option(help="Comma-separated device presets or profile YAMLs, e.g. "
                                              "orin-agx-64gb,orin-nx-16gb,orin-nx-16gb.")],
    prompt_len: PromptLen,
    output_len: OutputLen,
    batch: Annotated[int, typer.Option(help="Sequences in flight.")] = 1,
    objective: Annotated[Objective, typer.Option(help="Minimise request latency or the bottleneck stage.")]
    = Objective.LATENCY,
    weights: Annotated[WeightFormat, typer.Option(help="Weight format (int8/int4: weight-only).")] = WeightFormat.INT4,
    kv_dtype: KvDtype = KvFormat.BF16,
    reserve_gib: Annotated[float, typer.Option(help="Memory per device kept for the OS and runtime, GiB.")] = 2.0,
    out: Out = None,
    as_json: AsJson = False,
) -> None:
    """A transformer pipelined over a few edge devices (exact split, device order searched)."""

    def action() -> None:
        from hardware_profiles import load_hardware
        from meshcore.errors import InputError, SpecError
        from planner.inputs.loaders import load_model
        from planner.workloads.edge.plan import edge_document
        from planner.workloads.edge.search import search_edge
        from planner.workloads.edge.spec import EdgeJob

        names = [d.strip() for d in devices.split(",") if d.strip()]
        if not 1 <= len(names) <= 16:
            raise InputError(f"--devices takes 1 to 16 comma-separated devices, got {devices!r}")
        try:
            job = EdgeJob(prompt_len, output_len, batch, objective, weights, kv_dtype, reserve_gib)
        except SpecError as exc:
            raise InputError(str(exc)) from None
        spec = load_model(model)
        clusters = [load_hardware(n, 1) for n in names]
        plan = search_edge(spec, clusters, job)
        _emit_plan(edge_document(spec, clusters, job, plan), out, as_json)

    run(action)


@infer_app.command()
def diffusion(
    model: Annotated[str, typer.Option(help="Diffusion preset (flux1-dev, flux1-schnell, sd3-medium, dit-xl-2) or "
                                            "diffusion-model YAML.")],
    hardware: Hardware,
    gpus: Annotated[int, typer.Option(help="GPUs.")],
    resolution: Annotated[int, typer.Option(help="Image side in pixels.")] = 1024,
    steps: Annotated[int | None, typer.Option(help="Denoising steps (default: the model's).")] = None,
    batch: Annotated[int, typer.Option(help="Images per request.")] = 1,
    objective: Annotated[Objective, typer.Option(help="Minimise latency per image or maximise images/s.")]
    = Objective.LATENCY,
    max_sequence_length: Annotated[int | None, typer.Option(help="Prompt tokens of the T5 encoder (xfuser "
                                                                 "--max_sequence_length; default: the model's).")]
    = None,
    parallel_vae: Annotated[bool, typer.Option("--parallel-vae", help="Decode with xDiT's patch-parallel VAE.")]
    = False,
    top_k: TopK = 5,
    memory_gib: MemoryGib = None,
    out: Out = None,
    as_json: AsJson = False,
) -> None:
    """Diffusion transformers: Ulysses/ring sequence parallelism, PipeFusion, CFG parallelism (xDiT); prints the
    xfuser launch line."""

    def action() -> None:
        from hardware_profiles import HardwareOverrides, load_hardware
        from meshcore.errors import InputError, SpecError
        from planner.workloads.diffusion.inputs import load_diffusion_model
        from planner.workloads.diffusion.plan import diffusion_document
        from planner.workloads.diffusion.search import search_diffusion
        from planner.workloads.diffusion.spec import DiffusionJob, image_tokens

        check({"--gpus": (gpus, 1, MAX_GPUS)})
        spec = load_diffusion_model(model)
        try:
            job = DiffusionJob(resolution, spec.default_steps if steps is None else steps, batch, objective,
                               t5_tokens=max_sequence_length, parallel_vae=parallel_vae)
            image_tokens(spec, resolution)
        except SpecError as exc:
            raise InputError(str(exc)) from None
        cluster = load_hardware(hardware, gpus, HardwareOverrides(memory_gib=memory_gib))
        result = search_diffusion(spec, cluster, job, gpus, top_k=top_k)
        _emit_plan(diffusion_document(spec, cluster, job, gpus, result), out, as_json)

    run(action)
