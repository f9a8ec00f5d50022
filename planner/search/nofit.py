"""Why a search found nothing that fits, in one line: the tightest resource (GPU memory for states or activations,
host memory for what is offloaded) with the leanest candidate's figures, and what would make the job fit."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from meshcore import GIB, JobSpec, Offload, offload_names
from planner.search.bounds import SearchBounds
from planner.search.memory_floors import outside_bytes
from planner.search.searchspec import SearchSpec
from planner.search.space import Candidate

HINTS_PREFIX = "; or try "  # what starts the suggestions (planner.fit_options replaces them with checked ones)


def fit_hints(spec: SearchSpec, job: JobSpec) -> str:
    """What the user left out that frees GPU memory: offloading (where the runtime runs any) and LoRA."""
    hints = []
    if spec.offload is None and not spec.offload_auto and (spec.offload_zero is None or spec.offload_zero):
        hints.append("--offload auto (the optimizer, gradients and weights in host memory or on NVMe)")
    rules = dict(spec.offload_zero) if spec.offload_zero is not None else None
    if rules is not None and Offload.PARAMS not in rules:
        hints.append("--runtime deepspeed --offload auto (DeepSpeed offloads the gradients and weights too)")
    if job.trainable_fraction >= 1:
        hints.append("--lora-rank 16 (train adapters over frozen weights)")
    return f"{HINTS_PREFIX}{' or '.join(hints)}" if hints else ""


def no_fit_message(layer_times: SearchBounds, pool: list[Candidate], hints: str = "") -> str:
    """Name the tightest resource and what would make the job fit (and `hints`: `fit_hints`)."""
    cluster, job = layer_times.cluster, layer_times.job
    need_bytes, _, leanest = min((layer_times.state_bound(c), c.sort_key(), c) for c in pool)
    need = need_bytes / GIB
    cap = cluster.gpu.memory_gib
    outside = outside_bytes(job) / GIB  # (counted in every stage's need)
    spare = cap - outside
    host = [(layer_times.host_floor(c, False), c.sort_key(), c) for c in pool
            if c.offload and layer_times.memory_floor(c, False) <= cap * GIB]
    host_cap = layer_times.host_capacity()
    if host and min(host)[0] > host_cap:  # what fits on the GPU offloads more than the hosts hold
        low, _, lean = min(host)
        return (f"no layout fits: those whose states fit in {cap:g} GiB per GPU offload more than host memory holds "
                f"(the leanest, tp {lean.tp}, pp {lean.pp}, ZeRO-{int(lean.zero)} offloading "
                f"{', '.join(offload_names(lean.offload))}, needs {low / GIB:.0f} GiB per node of the "
                f"{host_cap / GIB:.0f} usable); use more nodes, hosts with more memory or an NVMe tier (host nvme_gbs "
                "and nvme_gib in the hardware profile, --offload ...,nvme)" + hints)
    if need <= cap:
        return (f"no layout fits in {cap:g} GiB per GPU: weights and optimizer state fit (leanest: "
                f"{need:.1f} GiB with tp {leanest.tp}, pp {leanest.pp}, ZeRO-{int(leanest.zero)}) but activations do "
                f"not; use a shorter sequence than {job.seq_len}, a smaller batch, more GPUs or GPUs with more memory"
                + hints)
    gathered = layer_times.state_parts(leanest)[1] / GIB  # (held whole on every rank: more ranks do not shrink it)
    states = need - outside - gathered
    lead = (f"no layout fits in {cap:g} GiB per GPU: even the leanest (tp {leanest.tp}, pp {leanest.pp}, "
            f"ZeRO-{int(leanest.zero)}) needs {need:.1f} GiB for weights, gradients and optimizer state alone")
    if gathered >= spare:
        return (f"{lead}, {gathered:.1f} GiB of it the weights and gradients its sharding gathers whole, which "
                f"more GPUs do not shrink; use GPUs with at least {need + 4:.0f} GiB, more tensor or expert "
                "parallelism, or a smaller model" + hints)
    gpus = cluster.num_gpus * math.ceil(states / max(spare - gathered, 1e-9))
    return f"{lead}; use about {gpus} GPUs or more, GPUs with at least {need + 4:.0f} GiB, or a smaller model" + hints


def with_choices(cs: list[Candidate], choices: Callable[[Candidate], tuple[frozenset[Offload], ...]]
                 ) -> list[Candidate]:
    """Every candidate of `cs` with each offload choice `choices` gives it (the pool `no_fit_message` reads)."""
    return [replace(c, offload=o) for c in cs for o in choices(c)]
