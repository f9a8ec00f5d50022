"""Serving-engine profiles (hardware_profiles/engines/) and what they add to the serving roofline
(planner/workloads/serving/iteration.py), against SGLang's published "SGLang v0.3.0 vs vLLM v0.6.0" benchmark
(sgl-project/sglang benchmark/benchmark_vllm_060/README.md; benchmarks/data/inference/published.yaml): Llama 3.1 8B
on 1 A100-80GB and 70B on 4 H100, ShareGPT (mean prompt 230, output 194 tokens), vLLM --num-scheduler-steps 10."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from cli import app
from cost_models.inference import decode_step_time
from hardware_profiles import load_hardware
from meshcore.errors import InputError
from meshcore.inference import KvFormat, ReplicaLayout, WeightFormat
from planner.inputs.loaders import load_model
from planner.workloads.serving.cost import batch_at_rate, decode_memory, evaluate_serving, prefill_per_iteration, tpot
from planner.workloads.serving.engine import Engine, EngineProfile
from planner.workloads.serving.engines import engine_from_mapping, load_engine
from planner.workloads.serving.iteration import kernel_time, md1_wait, prefill_stall_tpot, scheduler_wait
from planner.workloads.serving.search import search_serving
from planner.workloads.serving.spec import PoolMode, ServingJob, ServingLayout

PROMPT, OUTPUT = 230, 194


def _vllm_bench() -> EngineProfile:
    return replace(load_engine(Engine.VLLM), scheduler_steps=10)  # the benchmark's flag


def _offline(model: str, hw: str, gpus: int, engine: EngineProfile | None, memory: float, cap: int | None) -> float:
    spec, cluster = load_model(model), load_hardware(hw, gpus)
    job = ServingJob(PROMPT, OUTPUT, gpu_memory_utilization=memory, mode=PoolMode.COLOCATED, engine=engine)
    r = ReplicaLayout(gpus)
    batch = decode_memory(spec, cluster, job, r).max_batch
    batch = min(batch, cap) if cap else batch
    return evaluate_serving(spec, cluster, job, ServingLayout(r, 1, batch), gpus).tokens_per_s


def _online(model: str, hw: str, gpus: int, engine: EngineProfile | None, rps: float) -> tuple[float, float]:
    spec, cluster = load_model(model), load_hardware(hw, gpus)
    job = ServingJob(PROMPT, OUTPUT, rate=rps, mode=PoolMode.COLOCATED, engine=engine)
    r = ReplicaLayout(gpus)
    b = batch_at_rate(spec, cluster, job, r, rps)
    p = evaluate_serving(spec, cluster, job, ServingLayout(r, 1, b), gpus)
    return p.ttft_s * 1e3, p.tpot_s * 1e3


def test_profiles_load_with_their_versions() -> None:
    assert load_engine("vllm").label == "vllm 0.6.0"
    assert load_engine("sglang").cuda_graph_max_batch == 160  # SGLang 0.3's capture_bs tops out at 160


def test_bad_profile_names_the_key() -> None:
    data = {"engine": "vllm", "version": "x", "host_fixed_s": -1.0, "host_per_seq_s": 0.0, "scheduler_steps": 1,
            "overlap": False, "cuda_graph_max_batch": 256, "kernels_per_layer": 12, "launch_s": 0.0, "kernel_s": 0.0,
            "policy": "prefill_first", "source": "test"}
    with pytest.raises(InputError, match="host_fixed_s"):
        engine_from_mapping(data, "test profile")
    with pytest.raises(InputError, match="policy"):
        engine_from_mapping({**data, "host_fixed_s": 0.0, "policy": "fifo"}, "test profile")


def test_md1_wait_is_pollaczek_khinchine() -> None:
    assert md1_wait(0.5, 1.0) == pytest.approx(0.5)  # ρ = 0.5: ρS / (2(1 − ρ)) = 0.5
    assert md1_wait(2.0, 0.5) == float("inf")


def test_iteration_is_the_prefill_stall_at_the_implied_rate() -> None:
    spec, cluster = load_model("llama3-8b"), load_hardware("a100-80gb", 1)
    job = ServingJob(PROMPT, OUTPUT, mode=PoolMode.COLOCATED, engine=load_engine("sglang"))
    r, b = ReplicaLayout(1), 20
    p = evaluate_serving(spec, cluster, job, ServingLayout(r, 1, b), 1)
    step = tpot(spec, cluster, job, r, b)
    rate = b / (OUTPUT * p.tpot_s)
    busy = (p.tpot_s - step) * OUTPUT / b
    assert p.tpot_s == pytest.approx(prefill_stall_tpot(step, rate, busy))


def test_offline_throughput_sglang_and_vllm() -> None:
    """Published output tokens/s: SGLang 4281.51 and vLLM 4132.37 (8B, A100), 3856.01 and 3700.64 (70B, 4 H100);
    the engines within issue 34's 20 % of each (today +19, +13, +13, -11 %: the waiting prompts prefilled as one
    batch; the paged decode attention over a thousand sequences' KV priced at streaming speed), and closer than
    the bare roofline over the four."""
    cases = (("llama3-8b", "a100-80gb", 1, load_engine("sglang"), 0.88, None, 4281.51, 0.20),
             ("llama3-8b", "a100-80gb", 1, _vllm_bench(), 0.90, 256, 4132.37, 0.20),
             ("llama3-70b", "h100-sxm", 4, load_engine("sglang"), 0.88, None, 3856.01, 0.20),
             ("llama3-70b", "h100-sxm", 4, _vllm_bench(), 0.88, 256, 3700.64, 0.20))
    engine_errors, bare_errors = [], []
    for model, hw, gpus, engine, memory, cap, published, tol in cases:
        pred = _offline(model, hw, gpus, engine, memory, cap)
        bare = _offline(model, hw, gpus, None, memory, cap)
        assert abs(pred / published - 1) <= tol, (model, engine.label, pred)
        engine_errors.append(abs(pred / published - 1))
        bare_errors.append(abs(bare / published - 1))
    assert sum(engine_errors) < sum(bare_errors), (engine_errors, bare_errors)


def test_vllm_multi_step_ttft_and_sglang_ttft() -> None:
    """Published median TTFT at 4 requests/s on Llama 3.1 8B / A100: SGLang 31.98 ms, vLLM 100.48 ms. vLLM's 10
    steps per scheduler call make a new prompt wait ~5 decode steps; the bare roofline says 27 ms for both."""
    sglang_ttft, sglang_tpot = _online("llama3-8b", "a100-80gb", 1, load_engine("sglang"), 4.0)
    vllm_ttft, _ = _online("llama3-8b", "a100-80gb", 1, _vllm_bench(), 4.0)
    assert abs(sglang_ttft / 31.98 - 1) <= 0.20
    assert abs(vllm_ttft / 100.48 - 1) <= 0.40
    assert vllm_ttft > 2 * sglang_ttft
    assert abs(sglang_tpot / 13.17 - 1) <= 0.20  # published median TPOT 13.17 ms


def test_scheduler_wait_grows_with_steps_per_call() -> None:
    one = load_engine("vllm")
    assert scheduler_wait(replace(one, scheduler_steps=10), 0.01) == pytest.approx(10 * scheduler_wait(one, 0.01))


def test_search_runs_under_an_engine() -> None:
    spec, cluster = load_model("llama3-8b"), load_hardware("h100-sxm", 4)
    bare = search_serving(spec, cluster, ServingJob(512, 128, mode=PoolMode.COLOCATED, tpot_slo_s=0.05), 4)
    engine = ServingJob(512, 128, mode=PoolMode.COLOCATED, tpot_slo_s=0.05, engine=load_engine("vllm"))
    found = search_serving(spec, cluster, engine, 4)
    assert found.best.prediction.tpot_s <= 0.05
    assert found.best.prediction.tokens_per_s < bare.best.prediction.tokens_per_s


def test_cli_caps_vllm_at_its_default_max_num_seqs() -> None:
    """vLLM 0.6 runs at most 256 sequences unless --max-num-seqs says more (EngineArgs.max_num_seqs); SGLang 0.3
    only as many as the KV pool holds (over 1,000 for Llama 3 8B on an A100-80GB at 230 + 194 tokens)."""
    base = ["infer", "serve", "--model", "llama3-8b", "--hardware", "a100-80gb", "--gpus", "1", "--prompt-len", "230",
            "--output-len", "194", "--mode", "colocated", "--json"]
    batches = {}
    for engine in ("vllm", "sglang"):
        result = CliRunner().invoke(app, [*base, "--engine", engine])
        assert result.exit_code == 0, result.output
        batches[engine] = json.loads(result.output)["inference"]["layout"]["batch"]
    assert batches["vllm"] == 256 and batches["sglang"] > 1000
    bad = CliRunner().invoke(app, [*base, "--engine", "tgi"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_disaggregated_ttft_queues_at_the_offered_rate() -> None:
    """A prefill pool offered a rate waits in an M/D/1 queue: TTFT rises by ρS/(2(1 − ρ)) over the idle pool's."""
    spec, cluster = load_model("llama3-70b"), load_hardware("h100-sxm", 8)
    layout = ServingLayout(ReplicaLayout(4), 1, 64, ReplicaLayout(4), 1)
    engine = load_engine("sglang")
    idle = evaluate_serving(spec, cluster, ServingJob(2048, 128, engine=engine), layout, 8)
    busy = evaluate_serving(spec, cluster, ServingJob(2048, 128, engine=engine, rate=5.0), layout, 8)
    service = idle.ttft_s  # one prefill iteration: the pool's service time
    assert busy.ttft_s - idle.ttft_s == pytest.approx(md1_wait(5.0, service), rel=1e-6)
    assert busy.ttft_s > idle.ttft_s


def test_kernel_time_reproduces_gpt_fast_on_one_and_eight_a100() -> None:
    """gpt-fast (pytorch-labs/gpt-fast README; benchmarks/data/inference/published.yaml): compiled, graphed,
    batch 1 on A100-80GB at 330 W, whose measured peak the README gives as 1700 GB/s. kernel_s comes from the
    Llama-2-7B figure (104.9 tokens/s); the Llama-2-70B figure on 8 GPUs (62.50 tokens/s, 80 layers, two
    all-reduces each) is the check it was not fitted on: the bare roofline says 80 tokens/s (+27 %)."""
    engine = load_engine(Engine.VLLM)
    for model, gpus, published, tol in (("llama2-7b", 1, 104.9, 0.02), ("llama2-70b", 8, 62.50, 0.08)):
        spec, cluster = load_model(model), load_hardware("a100-80gb", gpus)
        cluster = replace(cluster, gpu=replace(cluster.gpu, hbm_gbs=1700.0, memory_efficiency=1.0))
        gpu = decode_step_time(spec, cluster, ReplicaLayout(gpus), 1, 200, WeightFormat.BF16, KvFormat.BF16)
        pred = 1.0 / (gpu + kernel_time(engine, spec.num_layers))
        assert abs(pred / published - 1) <= tol, (model, pred)
        assert 1.0 / gpu > published * (1 + tol)  # without the kernels' own time the step is too short


def test_waiting_prompts_prefill_as_one_batch() -> None:
    """Fewer than one new prompt a decode iteration: that share of one prompt's prefill iteration; more: one
    batch, whose scheduler call and kernels are paid once and whose GEMMs run over all its tokens."""
    spec, cluster = load_model("llama3-70b"), load_hardware("h100-sxm", 4)
    job = ServingJob(PROMPT, OUTPUT, mode=PoolMode.COLOCATED, engine=load_engine("sglang"))
    r = ReplicaLayout(4)
    one = prefill_per_iteration(spec, cluster, job, r, 1.0)
    assert prefill_per_iteration(spec, cluster, job, r, 0.25) == pytest.approx(0.25 * one)
    assert prefill_per_iteration(spec, cluster, job, r, 4.0) < 4.0 * one
