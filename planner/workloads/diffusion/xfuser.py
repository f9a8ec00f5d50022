"""The xDiT (xfuser) launch line of a diffusion plan: `torchrun` over the plan's GPUs running xDiT's example script
for the model with the layout's degrees (flags in xfuser_flags.txt beside this module, checked against xfuser's
own parser in tests/test_diffusion_xdit.py)."""

from __future__ import annotations

import shlex

from planner.workloads.diffusion.spec import DiffusionJob, DiffusionLayout, DiffusionModel, t5_tokens

# xDiT's example script and the Hugging Face checkpoint of each built-in preset (xDiT's examples/run.sh)
CHECKPOINTS = {
    "flux1-dev": ("examples/flux_example.py", "black-forest-labs/FLUX.1-dev"),
    "flux1-schnell": ("examples/flux_example.py", "black-forest-labs/FLUX.1-schnell"),
    "sd3-medium": ("examples/sd3_example.py", "stabilityai/stable-diffusion-3-medium-diffusers"),
}
PROMPT = "a photograph of an astronaut riding a horse"


def xfuser_arguments(model: DiffusionModel, job: DiffusionJob, layout: DiffusionLayout) -> list[str]:
    """The xfuser flags of one layout: degrees, patches, CFG, replicas, the job's size and steps, torch.compile (what
    meshplan prices) and the VAE mode."""
    _, checkpoint = CHECKPOINTS.get(model.name, ("", f"PATH/TO/{model.name}"))
    args = ["--model", checkpoint, "--height", str(job.resolution), "--width", str(job.resolution),
            "--num_inference_steps", str(job.steps)]
    if model.text_tokens:
        args += ["--max_sequence_length", str(t5_tokens(model, job))]
    args += ["--ulysses_degree", str(layout.ulysses), "--ring_degree", str(layout.ring),
             "--pipefusion_parallel_degree", str(layout.pipefusion)]
    if layout.pipefusion > 1:
        args += ["--num_pipeline_patch", str(layout.patches), "--warmup_steps", str(job.warmup_steps)]
    if layout.cfg > 1:
        args.append("--use_cfg_parallel")
    if layout.dp > 1:
        args += ["--data_parallel_degree", str(layout.dp)]
    args.append("--use_torch_compile")
    if job.parallel_vae:
        args.append("--use_parallel_vae")
    return [*args, "--prompt", PROMPT]


def xfuser_command(model: DiffusionModel, job: DiffusionJob, layout: DiffusionLayout, gpus_per_node: int) -> str:
    """`torchrun ... SCRIPT FLAGS` for the plan's GPUs (several nodes: --nnodes, set the rendezvous yourself)."""
    script, _ = CHECKPOINTS.get(model.name, ("examples/YOUR_MODEL_example.py", ""))
    gpus = layout.gpus
    launcher = ["torchrun", f"--nproc_per_node={min(gpus, gpus_per_node)}"]
    if gpus > gpus_per_node:
        launcher.append(f"--nnodes={gpus // gpus_per_node}")
    return shlex.join([*launcher, script, *xfuser_arguments(model, job, layout)])
