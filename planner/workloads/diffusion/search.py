"""Diffusion search: every xDiT layout of `gpus` GPUs (cfg x pipefusion x ring x ulysses per replica, data-parallel
replicas, PipeFusion patch counts) for the lowest latency per image or the most images per second.

Branch and bound: candidates are priced in increasing order of a lower bound on their latency (the one-GPU
denoising spread perfectly over the replica, which no parallel method beats: communication and bubbles only add,
plus the text encoders and the VAE decode, which every replica runs),
and the scan stops once the bound cannot beat the k-th best. `exhaustive=True` prices every candidate (the
brute force the tests compare with).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from meshcore import ClusterSpec
from meshcore.errors import InfeasibleError
from meshcore.inference import Objective
from planner.workloads.diffusion.cost import DiffusionPrediction, evaluate_diffusion
from planner.workloads.diffusion.spec import DiffusionJob, DiffusionLayout, DiffusionModel, image_tokens

PATCH_FACTORS = (1, 2, 4, 8)  # PipeFusion patches = stages x factor


@dataclass(frozen=True)
class DiffusionCandidate:
    layout: DiffusionLayout
    prediction: DiffusionPrediction


@dataclass(frozen=True)
class DiffusionSearch:
    ranked: tuple[DiffusionCandidate, ...]
    candidates: int
    priced: int
    pruned_memory: int
    pruned_bound: int
    method: str

    @property
    def best(self) -> DiffusionCandidate:
        return self.ranked[0]


def diffusion_layouts(model: DiffusionModel, job: DiffusionJob, gpus: int) -> Iterator[DiffusionLayout]:
    """Layouts xDiT runs: ulysses divides the heads, sp x patches divides the image tokens, pipefusion at most the
    layers, cfg 2 only for CFG models, all multiplying to `gpus`."""
    tokens = image_tokens(model, job.resolution)
    for cfg in (1, 2) if model.cfg else (1,):
        for pf in range(1, min(gpus, model.num_layers) + 1):
            for ring in range(1, gpus + 1):
                for uly in range(1, model.num_heads + 1):
                    replica = cfg * pf * ring * uly
                    if model.num_heads % uly or gpus % replica:
                        continue
                    for patches in ((pf * f for f in PATCH_FACTORS) if pf > 1 else (1,)):
                        if tokens % (ring * uly * patches) == 0:
                            yield DiffusionLayout(uly, ring, pf, cfg, patches, gpus // replica)


def _score(job: DiffusionJob, pred: DiffusionPrediction) -> tuple[float, float]:
    if job.objective is Objective.THROUGHPUT:
        return (-pred.images_per_s, pred.latency_s)
    return (pred.latency_s, -pred.images_per_s)


def _bound(job: DiffusionJob, layout: DiffusionLayout, one_gpu: DiffusionPrediction) -> tuple[float, float]:
    """Best score a layout could reach: its replica's share of the one-GPU denoising (and of the VAE decode when it is
    patch-parallel), no communication, plus the text encoders every rank runs."""
    n = layout.replica_gpus
    latency = one_gpu.denoise_s / n + one_gpu.encode_s + one_gpu.decode_s / (n if job.parallel_vae else 1)
    if job.objective is Objective.THROUGHPUT:
        return (-layout.dp * job.batch / latency, latency)
    return (latency, -layout.dp * job.batch / latency)


def search_diffusion(model: DiffusionModel, cluster: ClusterSpec, job: DiffusionJob, gpus: int, *, top_k: int = 5,
                     exhaustive: bool = False) -> DiffusionSearch:
    """The best layouts, best first; InfeasibleError when none fits in memory."""
    layouts = list(diffusion_layouts(model, job, gpus))
    if not layouts:
        raise InfeasibleError(f"no xDiT layout of {gpus} GPUs suits {model.name} at {job.resolution} px (heads "
                              f"{model.num_heads}, {image_tokens(model, job.resolution)} image tokens)")
    ideal = evaluate_diffusion(model, cluster, job, DiffusionLayout())
    ordered = sorted(layouts, key=lambda lay: _bound(job, lay, ideal))
    found: list[DiffusionCandidate] = []
    priced = pruned_memory = pruned_bound = 0
    for i, layout in enumerate(ordered):
        if not exhaustive and len(found) >= top_k and _bound(job, layout, ideal) >= _score(job, found[-1].prediction):
            pruned_bound = len(ordered) - i
            break
        pred = evaluate_diffusion(model, cluster, job, layout)
        priced += 1
        if not pred.fits:
            pruned_memory += 1
            continue
        found = sorted([*found, DiffusionCandidate(layout, pred)], key=lambda c: _score(job, c.prediction))[:top_k]
    if not found:
        least = min(evaluate_diffusion(model, cluster, job, lay).memory_gib for lay in layouts)
        raise InfeasibleError(f"{model.name} at {job.resolution} px does not fit: at least {least:.1f} GiB per GPU "
                              f"against {cluster.gpu.memory_gib:.0f} GiB; use more PipeFusion stages (more GPUs) or "
                              "GPUs with more memory")
    method = "exhaustive" if exhaustive else "branch and bound on the perfect-scaling latency bound"
    return DiffusionSearch(tuple(found), len(layouts), priced, pruned_memory, pruned_bound, method)
