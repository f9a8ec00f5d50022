"""What a serving engine adds to the GPU's roofline (cost_models.inference): host time per scheduler call, the
kernel-launch floor of eager iterations, the stall a prefill-first scheduler puts on decodes at a request rate,
and the waits in front of a prompt (the next scheduler call, the prompts ahead of it). Pure functions of an
`EngineProfile` (planner.workloads.serving.engine; data in hardware_profiles/engines/).
"""

from __future__ import annotations

import math

from planner.workloads.serving.engine import EngineProfile


def host_per_step(engine: EngineProfile, batch: float, gpu_s: float) -> float:
    """Host time a decode iteration of `batch` sequences waits for. One scheduler call costs
    h(b) = h_0 + h_1·b (scheduling, input preparation, output processing and detokenisation; vLLM RFC #6854
    measures 4 ms, 5-13 ms of GPU idle per decode step on v0.5) and is paid once per n = scheduler_steps
    iterations (multi-step scheduling, vLLM PR #7000): h(b)/n per iteration. An engine that overlaps the call
    with the GPU (SGLang v0.4's overlap scheduler, NanoFlow) exposes only what the GPU does not cover:
    max(0, h(b)/n − t_gpu)."""
    call = (engine.host_fixed_s + engine.host_per_seq_s * max(batch, 0.0)) / engine.scheduler_steps
    return max(0.0, call - gpu_s) if engine.overlap else call


def launch_floor(engine: EngineProfile, layers: int, graphed: bool) -> float:
    """Shortest an eagerly launched forward pass can take: every kernel costs the host one launch,
    layers · kernels_per_layer · launch_s; a CUDA-graph replay launches the whole pass at once (NVIDIA, "Getting
    Started with CUDA Graphs", 2019), taken as no floor."""
    return 0.0 if graphed else layers * engine.kernels_per_layer * engine.launch_s


def kernel_time(engine: EngineProfile, layers: int) -> float:
    """GPU time the kernels of a pass cost beyond their bytes and FLOPs, layers · kernels_per_layer · kernel_s:
    each kernel, graphed or not, starts, ramps up to full bandwidth and drains its last wave. Small in a prefill,
    a large share of a small-batch decode, whose kernels each move a few megabytes: gpt-fast's Llama-2-7B step
    on one A100 (104.9 tokens/s, 13.3 GB a step, 1700 GB/s the card's measured peak: 9.53 ms against 7.84 ms of
    streaming) leaves 1.7 ms over its 32 layers (pytorch-labs/gpt-fast README)."""
    return layers * engine.kernels_per_layer * engine.kernel_s


def decode_iteration(engine: EngineProfile, gpu_s: float, batch: float, layers: int) -> float:
    """One decode iteration under the engine: max(t_gpu + kernel time, launch floor) + exposed host time; graphed
    when the batch is within the engine's captured sizes (vLLM 0.6 captures 1, 2, 4, 8..256; SGLang 0.3 1, 2, 4,
    8..160)."""
    graphed = batch <= engine.cuda_graph_max_batch
    gpu = gpu_s + kernel_time(engine, layers)
    return max(gpu, launch_floor(engine, layers, graphed)) + host_per_step(engine, batch, gpu)


def prefill_iteration(engine: EngineProfile, gpu_s: float, layers: int, prompts: float = 1.0) -> float:
    """A prefill-only iteration of `prompts` prompts: eager (neither engine graphs prefills), one scheduler call
    for them, never overlapped (its output is the first token): max(t_gpu + kernel time, floor) + h_0 + h_1·n."""
    gpu = gpu_s + kernel_time(engine, layers)
    return max(gpu, launch_floor(engine, layers, False)) + engine.host_fixed_s + engine.host_per_seq_s * prompts


def scheduler_wait(engine: EngineProfile, step_s: float) -> float:
    """Mean wait of a Poisson arrival for the next scheduler call, which comes every n = scheduler_steps decode
    iterations of `step_s`: the residual of a deterministic interval, n · step / 2 (Kleinrock, Queueing Systems
    I, 1975, section 5.2: mean residual life E[T²]/(2E[T]) = T/2 for a constant T)."""
    return engine.scheduler_steps * step_s / 2.0


def md1_wait(rate: float, service_s: float) -> float:
    """Mean wait in queue of an M/D/1 server (Poisson arrivals at `rate`, constant service `service_s`), the
    Pollaczek-Khinchine formula with zero service variance: W = ρ·S / (2·(1 − ρ)), ρ = rate·S
    (Kleinrock 1975, eq. 5.73); infinite at ρ >= 1."""
    rho = rate * service_s
    return math.inf if rho >= 1.0 else rho * service_s / (2.0 * (1.0 - rho))


def prefill_stall_tpot(step_s: float, rate: float, prefill_s: float) -> float:
    """Time per output token when every arriving prompt runs alone and stalls the decodes for `prefill_s`
    (prefill-first scheduling): the decodes own a share 1 − ρ of the time, ρ = rate · prefill_s, so
    TPOT = step / (1 − ρ) (Sarathi-Serve, Agrawal et al. OSDI'24, section 3.2: generation stalls)."""
    rho = rate * prefill_s
    return math.inf if rho >= 1.0 else step_s / (1.0 - rho)
