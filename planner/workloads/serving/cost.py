"""A whole serving deployment: replicas that prefill and decode together (continuous batching with chunked
prefill, vLLM/SGLang), or a prefill pool beside a decode pool (DistServe, Zhong et al. OSDI'24; Splitwise, Patel
et al. ISCA'24). From one replica's costs (cost_models.inference) to TTFT, TPOT, requests and tokens per second.

Co-located, steady state (Agrawal et al. 2024, Sarathi-Serve, section 3: prefills stall or stretch decodes): each
request costs one prefill and `output_len` decode iterations, so a replica running b requests admits b/out new
prompts per iteration and an iteration lasts
    T_it = t_decode(b) + (b / out) · t_prefill_busy
TPOT = T_it, throughput = b / T_it tokens/s, TTFT = prefill latency + one iteration (the prompt waits for the
running one). Disaggregated: the pools run at their own rates and the deployment at the slower,
    requests/s = min(n_p · dp_p / t_prefill_busy, n_d · b / (out · t_decode(b)))
TPOT = t_decode(b), TTFT = prefill latency (+ with an engine and a --rate the M/D/1 wait at each prefill rank's
share of the rate); the KV transfer delays the second token.

With a serving engine (job.engine, planner.workloads.serving.iteration) t_decode and t_prefill_busy are the engine's
iterations (host time per scheduler call, launch floor outside CUDA graphs), and a co-located prompt waits for the
next scheduler call (n·T_step/2 for n steps per call) and, in an M/D/1 queue, for the prompts ahead of it at the
arrival rate the batch implies, λ = b/(out·T_it) per replica (Little's law; equal to the offered rate at the
fixed point `batch_at_rate` finds). The mean iteration above is the prefill-first stall at that rate:
T_it = t_decode / (1 − λ·t_prefill). Means, not percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cost_models.inference import (
    PrefillCost,
    ServingMemory,
    decode_step_time,
    kv_transfer_time,
    prefill_cost,
    replica_memory,
    stage_layers,
)
from meshcore import ClusterSpec, ModelSpec
from meshcore.inference import ReplicaLayout
from planner.workloads.serving.engine import PrefillPolicy
from planner.workloads.serving.iteration import decode_iteration, md1_wait, prefill_iteration, scheduler_wait
from planner.workloads.serving.spec import ServingJob, ServingLayout


@dataclass(frozen=True)
class ServingPrediction:
    """What a deployment does: latencies in seconds, `tokens_per_s` output tokens per second of the whole
    deployment, `max_batch` the most requests a decode replica's KV cache holds."""

    ttft_s: float
    tpot_s: float
    e2e_s: float
    requests_per_s: float
    tokens_per_s: float
    tokens_per_s_per_gpu: float
    max_batch: int
    memory: ServingMemory
    prefill_memory: ServingMemory | None
    fits: bool
    meets_slo: bool
    kv_transfer_s: float = 0.0


def rank_batch(layout: ReplicaLayout, batch: int) -> int:
    """Requests on one attention rank of an engine running `batch`."""
    return math.ceil(batch / layout.dp)


def _memory(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout, context: int) -> ServingMemory:
    return replica_memory(model, cluster.gpu, r, context, job.weights, job.kv, job.block_size,
                          job.gpu_memory_utilization, min(job.prefill_chunk, max(job.prompt_len, 1)))


def decode_memory(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout) -> ServingMemory:
    """Memory of a replica that holds finished requests (prompt + output tokens of KV each)."""
    return _memory(model, cluster, job, r, job.context_len)


def tpot(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout, batch: int) -> float:
    """Decode step of an engine running `batch` requests, at the mean context of a generation, with the engine's
    host time and launch floor when the job names an engine."""
    b = rank_batch(r, batch)
    gpu = decode_step_time(model, cluster, r, b, job.mean_decode_context, job.weights, job.kv)
    if job.engine is None:
        return gpu
    return decode_iteration(job.engine, gpu, b, max(stage_layers(model.num_layers, r.pp)))


def _prefill(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout) -> PrefillCost:
    """One prompt's prefill, as the engine runs it (eager, one scheduler call) when the job names one."""
    pre = prefill_cost(model, cluster, r, job.prompt_len, job.weights)
    if job.engine is None:
        return pre
    layers = max(stage_layers(model.num_layers, r.pp))
    return PrefillCost(prefill_iteration(job.engine, pre.latency, layers),
                       prefill_iteration(job.engine, pre.busy, layers))


def _colocated_ttft(job: ServingJob, pre: PrefillCost, step: float, iteration: float, rank_batch_: int) -> float:
    """Without an engine: prefill latency + one iteration. With one: the wait for the next scheduler call, the
    M/D/1 wait behind the prompts ahead at the implied rate λ = b/(out·T_it), the prefill; a chunked prompt also
    shares its iteration with the decodes."""
    if job.engine is None:
        return pre.latency + step
    rate = rank_batch_ / (job.output_len * iteration)
    ttft = scheduler_wait(job.engine, step) + md1_wait(rate, pre.busy) + pre.latency
    return ttft + (step if job.engine.policy is PrefillPolicy.CHUNKED else 0.0)


def prefill_per_iteration(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout,
                          prompts: float) -> float:
    """Prefill time a co-located decode iteration carries when `prompts` = b/out new prompts arrive per iteration
    (one replaces each finished request). The scheduler admits every waiting prompt into one prefill batch (vLLM
    0.6 _schedule_prefills up to max_num_batched_tokens, SGLang 0.3 up to max_prefill_tokens): with at least one
    prompt an iteration, one batch of n = prompts, its GEMMs over all their tokens at once, the kernels' own time
    and one scheduler call paid once; fewer: that share of a prefill-only iteration of one prompt. Without an
    engine: the same batch, no host or kernel time. (Multi-step vLLM admits prompts every n steps only; its
    larger, rarer batches and the slots left empty meanwhile are not modelled.)"""
    n = max(prompts, 1.0)
    gpu = prefill_cost(model, cluster, r, job.prompt_len, job.weights, n).busy
    if job.engine is None:
        return prompts / n * gpu
    return prompts / n * prefill_iteration(job.engine, gpu, max(stage_layers(model.num_layers, r.pp)), n)


def _meets(job: ServingJob, ttft: float, step: float, rps: float) -> bool:
    ok = job.ttft_slo_s is None or ttft <= job.ttft_slo_s
    ok = ok and (job.tpot_slo_s is None or step <= job.tpot_slo_s)
    return ok and (job.rate is None or rps >= job.rate)


def evaluate_serving(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, layout: ServingLayout,
                     gpus: int) -> ServingPrediction:
    """Predict one deployment on `gpus` GPUs (the per-GPU figure divides by all of them)."""
    d = layout.decode
    mem = decode_memory(model, cluster, job, d)
    max_batch = mem.max_batch * d.dp
    step = tpot(model, cluster, job, d, layout.batch)
    out = job.output_len
    if layout.prefill is None:
        pre = _prefill(model, cluster, job, d)
        iteration = step + prefill_per_iteration(model, cluster, job, d, rank_batch(d, layout.batch) / out)
        rps = layout.replicas * layout.batch / (out * iteration)
        ttft = _colocated_ttft(job, pre, step, iteration, rank_batch(d, layout.batch))
        tpot_s, kvt, pmem = iteration, 0.0, None
        fits = layout.batch <= max_batch
    else:
        p = layout.prefill
        pre = _prefill(model, cluster, job, p)
        kvt = kv_transfer_time(model, cluster, p, job.prompt_len, job.kv)
        pmem = _memory(model, cluster, job, p, job.prompt_len)
        rate_p = layout.prefill_replicas * p.dp / pre.busy
        rate_d = layout.replicas * layout.batch / (out * step)
        rps, ttft, tpot_s = min(rate_p, rate_d), pre.latency, step
        if job.engine is not None and job.rate is not None:  # M/D/1 in front of each prefill rank at the offered rate
            ttft += md1_wait(job.rate / (layout.prefill_replicas * p.dp), pre.busy)
        fits = layout.batch <= max_batch and pmem.max_batch >= 1
    e2e = ttft + kvt + (out - 1) * tpot_s
    tokens = rps * out
    return ServingPrediction(ttft, tpot_s, e2e, rps, tokens, tokens / gpus, max_batch, mem, pmem, fits,
                             fits and _meets(job, ttft, tpot_s, rps), kvt)


def batch_at_rate(model: ModelSpec, cluster: ClusterSpec, job: ServingJob, r: ReplicaLayout, rate: float,
                  max_iterations: int = 100) -> int:
    """Requests in one co-located replica offered `rate` requests/s: the least fixed point of Little's law
    (Little 1961), b = ceil(rate · e2e(b)), iterated from b = 1 (e2e grows with b, so the iterates rise to it);
    capped at what the KV cache holds."""
    cap = max(decode_memory(model, cluster, job, r).max_batch * r.dp, 1)
    b = 1
    for _ in range(max_iterations):
        e2e = evaluate_serving(model, cluster, job, ServingLayout(r, 1, b), r.gpus).e2e_s
        nxt = min(cap, max(1, math.ceil(rate * e2e)))
        if nxt == b:
            break
        b = nxt
    return b
