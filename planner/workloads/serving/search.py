"""Serving search: every replica layout (TP within the scale-up domain, PP, expert parallelism over TP x DP for MoE
models), co-located or as disaggregated prefill and decode pools, with the batch each replica runs.

Exact within that space: layouts and pool sizes are enumerated, and the batch is found by bisection, which is
exact because every figure it tests is monotone in the batch (decode step, iteration, TTFT and KV pages grow with
it; b / T_it does not fall): for throughput the largest batch that fits and meets the SLOs is the best, for
latency the smallest that meets the rate. With `exhaustive=True` every batch and every pool split is priced
instead (the brute force tests/test_inference.py checks the search against).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from cost_models.inference import prefill_cost
from meshcore import ClusterSpec, ModelSpec
from meshcore.errors import InfeasibleError
from meshcore.inference import Objective, ReplicaLayout
from planner.workloads.serving.cost import ServingPrediction, decode_memory, evaluate_serving
from planner.workloads.serving.spec import PoolMode, ServingJob, ServingLayout

MAX_PP = 16


@dataclass(frozen=True)
class ServingCandidate:
    layout: ServingLayout
    prediction: ServingPrediction


@dataclass(frozen=True)
class ServingSearch:
    """Best first; `replica_layouts` enumerated, `pruned_memory` whose weights do not fit, `priced` deployments
    priced, `slo_misses` deployments that fit but missed an SLO or the rate."""

    ranked: tuple[ServingCandidate, ...]
    replica_layouts: int
    pruned_memory: int
    priced: int
    slo_misses: int
    method: str

    @property
    def best(self) -> ServingCandidate:
        return self.ranked[0]


def replica_layouts(model: ModelSpec, cluster: ClusterSpec, gpus: int, tp: int | None = None,
                    pp: int | None = None) -> list[ReplicaLayout]:
    """TP a power of two within the scale-up domain dividing the heads, with KV heads divisible by TP or TP by
    them (vLLM's rule); PP up to 16 stages and the layers; for MoE models also ep = tp x dp over dp attention
    ranks, the experts divisible by ep. Each layout fits in `gpus` GPUs."""
    g, heads = model.num_kv_heads, model.num_attention_heads
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if t <= min(cluster.scale_up_size, gpus) and heads % t == 0
           and (g % t == 0 or t % g == 0) and (tp is None or t == tp)]
    out: list[ReplicaLayout] = []
    for t in tps:
        for p in range(1, min(MAX_PP, model.num_layers, gpus // t) + 1):
            if pp is not None and p != pp:
                continue
            out.append(ReplicaLayout(t, p))
            if model.moe is None:
                continue
            for dp in range(1, gpus // (t * p) + 1):
                ep = t * dp
                if ep > 1 and model.moe.num_experts % ep == 0 and gpus % (t * p * dp) == 0:
                    out.append(ReplicaLayout(t, p, ep=ep, dp=dp))
    return out


def _largest(ok: Callable[[int], bool], hi: int, exhaustive: bool) -> int:
    """Largest b in [1, hi] with ok(b), ok true up to some b and false after; 0 if none."""
    if exhaustive:
        return max((b for b in range(1, hi + 1) if ok(b)), default=0)
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def _smallest(ok: Callable[[int], bool], hi: int, exhaustive: bool) -> int:
    """Smallest b in [1, hi] with ok(b), ok false up to some b and true after; 0 if none."""
    if exhaustive:
        return next((b for b in range(1, hi + 1) if ok(b)), 0)
    lo, best = 1, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        if ok(mid):
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    return best


def _slo_ok(job: ServingJob, p: ServingPrediction) -> bool:
    return p.fits and (job.ttft_slo_s is None or p.ttft_s <= job.ttft_slo_s) and (
        job.tpot_slo_s is None or p.tpot_s <= job.tpot_slo_s)


def _rate_ok(job: ServingJob, p: ServingPrediction) -> bool:
    return job.rate is None or p.requests_per_s >= job.rate


class _Pricer:
    """Prices deployments and counts them."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: ServingJob, gpus: int) -> None:
        self.model, self.cluster, self.job, self.gpus = model, cluster, job, gpus
        self.priced = 0

    def __call__(self, layout: ServingLayout) -> ServingPrediction:
        self.priced += 1
        return evaluate_serving(self.model, self.cluster, self.job, layout, self.gpus)

    def choose_batch(self, make: Callable[[int], ServingLayout], hi: int, replicas: int,
                     exhaustive: bool) -> ServingCandidate | None:
        """The best batch for a deployment shape `make(batch)`, or None when no batch meets the constraints."""
        job = self.job
        if job.batch is not None:
            b = math.ceil(job.batch / replicas)
        elif job.objective is Objective.THROUGHPUT:
            b = _largest(lambda x: _slo_ok(job, self(make(x))), hi, exhaustive)
        elif job.rate is not None:
            b = _smallest(lambda x: _rate_ok(job, self(make(x))), hi, exhaustive)
        else:
            b = 1
        if not 1 <= b <= max(hi, 1) and job.batch is None:
            return None
        layout = make(max(b, 1))
        pred = self(layout)
        return ServingCandidate(layout, pred) if pred.meets_slo else None


def _key(job: ServingJob) -> Callable[[ServingCandidate], tuple[float, ...]]:
    if job.objective is Objective.THROUGHPUT:
        return lambda c: (-c.prediction.tokens_per_s, c.prediction.e2e_s)
    return lambda c: (c.prediction.e2e_s, -c.prediction.tokens_per_s)


def _colocated_layout(r: ReplicaLayout, replicas: int, batch: int) -> ServingLayout:
    return ServingLayout(r, replicas, batch)


def _split_layout(p: ReplicaLayout, n_p: int, d: ReplicaLayout, n_d: int, batch: int) -> ServingLayout:
    return ServingLayout(d, n_d, batch, p, n_p)


def _colocated(price: _Pricer, layouts: list[ReplicaLayout], caps: dict[ReplicaLayout, int],
               exhaustive: bool) -> Iterator[ServingCandidate]:
    for r in layouts:
        if price.gpus % r.gpus or not caps[r]:
            continue
        n = price.gpus // r.gpus
        hi = min(caps[r], price.job.max_num_seqs * r.dp)
        found = price.choose_batch(functools.partial(_colocated_layout, r, n), hi, n, exhaustive)
        if found is not None:
            yield found


def _pool_splits(gpus: int, p: ReplicaLayout, d: ReplicaLayout, exhaustive: bool) -> Iterator[tuple[int, int]]:
    """(prefill replicas, decode replicas) that fit in `gpus`; without `exhaustive` only the most decode replicas
    for each prefill count (more decode replicas never lower the deployment's rate at a given batch)."""
    for n_p in range(1, (gpus - d.gpus) // p.gpus + 1):
        top = (gpus - n_p * p.gpus) // d.gpus
        yield from ((n_p, n_d) for n_d in (range(1, top + 1) if exhaustive else (top,)) if n_d >= 1)


def _disaggregated(price: _Pricer, layouts: list[ReplicaLayout], caps: dict[ReplicaLayout, int],
                   exhaustive: bool) -> Iterator[ServingCandidate]:
    job, model, cluster = price.job, price.model, price.cluster
    prefill = [p for p in layouts if caps[p] or decode_memory(model, cluster, job, p).kv_budget > 0]
    for p in prefill:
        pre = prefill_cost(model, cluster, p, job.prompt_len, job.weights)
        if job.ttft_slo_s is not None and pre.latency > job.ttft_slo_s:
            continue
        for d in layouts:
            if not caps[d] or p.gpus + d.gpus > price.gpus:
                continue
            hi = min(caps[d], job.max_num_seqs * d.dp)
            splits = list(_pool_splits(price.gpus, p, d, exhaustive))
            if not exhaustive and job.objective is Objective.LATENCY and job.rate is not None:
                need = math.ceil(job.rate * pre.busy / p.dp - 1e-12)
                splits = [s for s in splits if s[0] >= need]  # fewer prefill replicas cannot keep up
            for n_p, n_d in splits:
                found = price.choose_batch(functools.partial(_split_layout, p, n_p, d, n_d), hi, n_d, exhaustive)
                if found is not None:
                    yield found


def search_serving(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, gpus: int, *, top_k: int = 5,
                   tp: int | None = None, pp: int | None = None, exhaustive: bool = False) -> ServingSearch:
    """The best deployments of `model` on `gpus` GPUs for `job`, best first; InfeasibleError when none fits or
    meets the SLOs (naming what binds)."""
    layouts = replica_layouts(model, cluster, gpus, tp, pp)
    caps = {r: decode_memory(model, cluster, job, r).max_batch * r.dp for r in layouts}
    price = _Pricer(model, cluster, job, gpus)
    found: list[ServingCandidate] = []
    if job.mode is not PoolMode.DISAGGREGATED:
        found += _colocated(price, layouts, caps, exhaustive)
    if job.mode is not PoolMode.COLOCATED and gpus >= 2:
        found += _disaggregated(price, layouts, caps, exhaustive)
    pruned = sum(1 for r in layouts if not caps[r])
    if not found:
        raise InfeasibleError(_why_none(model, cluster, job, gpus, layouts, caps))
    ranked = tuple(sorted(found, key=_key(job))[:top_k])
    method = "exhaustive" if exhaustive else "enumeration of replica layouts and pool splits, batch by bisection"
    return ServingSearch(ranked, len(layouts), pruned, price.priced, price.priced - len(found), method)


def _why_none(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, gpus: int, layouts: list[ReplicaLayout],
              caps: dict[ReplicaLayout, int]) -> str:
    """The tightest resource when nothing qualifies."""
    if not layouts:
        return (f"no tensor-parallel degree of {model.name} (heads {model.num_attention_heads}, KV heads "
                f"{model.num_kv_heads}) fits the scale-up domain of {cluster.scale_up_size} and {gpus} GPUs")
    if not any(caps.values()):
        mem = max((decode_memory(model, cluster, job, r) for r in layouts), key=lambda m: m.kv_budget)
        return (f"{model.name} does not fit on {gpus} x {cluster.gpu.name}: weights {mem.weights / 2**30:.1f} GiB "
                f"per GPU at best leave {mem.kv_budget / 2**30:.1f} GiB for the KV cache (one request needs "
                f"{mem.kv_per_sequence / 2**30:.2f} GiB); use more GPUs, int8/int4/fp8 weights or fp8 KV")
    parts = [f"--ttft-slo {job.ttft_slo_s}" if job.ttft_slo_s else "", f"--tpot-slo {job.tpot_slo_s}"
             if job.tpot_slo_s else "", f"--rate {job.rate}" if job.rate else "",
             f"--batch {job.batch}" if job.batch else ""]
    return (f"no deployment on {gpus} GPUs meets {' '.join(p for p in parts if p) or 'the constraints'}: relax them, "
            "add GPUs, or use faster ones")
