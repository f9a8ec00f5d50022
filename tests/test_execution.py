"""How each runtime executes a layout (issue 29 items 2-3): the `execution` sections of the runtime profiles and the
cost functions that read them, checked against the figures they come from (torchtitan's code and December 2024
tables, the FlashAttention-3 paper's kernel figures)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.compute.elementwise import elementwise_bytes, fused_elementwise_bytes
from cost_models.compute.kernels import Gemm, flash_attention_time, gemm_fwd_bwd_time
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.sac import kept_token_bytes, linears
from hardware_profiles import load_hardware
from meshcore import Dtype, Recompute, Runtime
from meshcore.errors import InputError, SpecError
from meshcore.execution import MEGATRON_EXECUTION, Execution, Fp8Recipe, FsdpForm, HeldMemory, SelectiveForm
from meshcore.framework import Framework
from planner.api import evaluate, resolve
from planner.inputs.execution import execution_from_mapping
from planner.inputs.loaders import load_model
from planner.inputs.runtimes import load_runtime, with_execution

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_megatron_and_nemo_execute_as_the_cost_model_always_priced() -> None:
    """Megatron-LM's and NeMo's profiles hold Execution()'s values: their prices did not move."""
    for name in ("megatron", "nemo", "any", "deepspeed"):
        ex = load_runtime(name).execution
        assert (ex.fsdp, ex.eager, ex.compiled, ex.selective, ex.ring_merge) == (
            FsdpForm.PER_MODULE, None, None, SelectiveForm.MODULES, None)
    assert load_runtime("megatron").execution == MEGATRON_EXECUTION == Execution()
    assert load_runtime("nemo").execution == MEGATRON_EXECUTION


def test_torchtitan_profile_reads_its_code() -> None:
    ex = load_runtime("torchtitan").execution
    assert ex.fsdp is FsdpForm.PER_BLOCK and not ex.reshard_under_pp  # apply_fsdp: no reshard under PP
    assert (ex.sharded_weight_bytes, ex.optimizer_bytes) == (4.0, 8.0)  # fp32 sharded params, AdamW m and v
    assert ex.selective is SelectiveForm.OP_SAC and not ex.compile_default
    assert [c.recipe for c in ex.fp8] == [Fp8Recipe.TENSORWISE, Fp8Recipe.ROWWISE]
    # FlashAttention-2 over cuDNN on H100 (FA3 paper: 335/539 forward, 322/516 backward at 16k): the fitted share
    # stays near the kernel figures
    assert 0.45 <= ex.attention_share("hopper") <= 0.7 and ex.attention_share("ampere") == 1.0


def test_resolve_attaches_the_runtimes_execution() -> None:
    problem = resolve("llama3-8b", "h100-sxm", gpus=8, seq_len=8192, global_batch=16,
                      runtime=Runtime(framework=Framework.TORCHTITAN))
    assert problem.job.runtime.execution == load_runtime("torchtitan").execution
    assert with_execution(Runtime()).execution == MEGATRON_EXECUTION


def test_unknown_execution_key_and_bad_recipe_are_named() -> None:
    with pytest.raises(InputError, match="fused_qkv"):
        execution_from_mapping({"fused_qkv": True}, "runtime profile x")
    with pytest.raises(SpecError, match="runs fp8 recipe"):
        Runtime(execution=load_runtime("megatron").execution, fp8_recipe=Fp8Recipe.ROWWISE)


def test_flash_attention_2_takes_its_share_of_the_profiles_rate() -> None:
    gpu = load_hardware("h100-sxm", 8).gpu
    f1, b1 = flash_attention_time(1e13, 16384, 128, gpu)
    f2, b2 = flash_attention_time(1e13, 16384, 128, gpu, rate=0.62)
    assert f2 == pytest.approx(f1 / 0.62) and b2 == pytest.approx(b1 / 0.62)


def test_eager_elementwise_costs_what_compile_saves_in_torchtitans_table_1() -> None:
    """torchtitan Table 1 (Llama 3.1 8B, 8 H100s, FSDP, selective AC): torch.compile takes a step from 2.843 s
    (5,762 tokens/s/GPU) to 2.457 s (6,667): 0.386 s. The eager and compiled element-wise bytes of the torchtitan
    profile (each op its own kernel against inductor's fused chains, recomputed once more by the per-op policy)
    account for that saving within 20 %."""
    kw = dict(gpus=8, seq_len=8192, global_batch=16, mbs=2, zero=3, recompute="selective")
    hw = "h100-sxm-96gb-500w"
    eager = evaluate("llama3-8b", hw, runtime=Runtime(framework=Framework.TORCHTITAN, compile=False), **kw)
    compiled = evaluate("llama3-8b", hw, runtime=Runtime(framework=Framework.TORCHTITAN, compile=True), **kw)
    assert eager.step_time_s - compiled.step_time_s == pytest.approx(2.843 - 2.457, rel=0.2)


def test_torchtitan_compiled_elementwise_is_close_to_megatrons_fused_kernels() -> None:
    model = load_model("llama3-8b")
    knobs = LayerKnobs(1, 1, False, 1, Recompute.NONE)
    fused = sum(fused_elementwise_bytes(model, knobs, False))
    job = resolve(model, "h100-sxm", gpus=8, seq_len=8192, global_batch=8,
                  runtime=Runtime(framework=Framework.TORCHTITAN, compile=True)).job
    compiled = sum(elementwise_bytes(model, job, knobs, False))
    eager = sum(elementwise_bytes(model, replace(job, runtime=replace(job.runtime, compile=False)), knobs, False))
    assert 0.8 < compiled / fused < 1.3 and eager > 3 * compiled


def test_torchao_tensorwise_casts_cost_more_than_transformer_engines() -> None:
    gpu = load_hardware("h100-sxm", 8).gpu
    g = Gemm(16384, 14336, 4096)
    te = gemm_fwd_bwd_time(g, gpu, Dtype.FP8)
    tao = gemm_fwd_bwd_time(g, gpu, Dtype.FP8, casts=load_runtime("torchtitan").execution.fp8[0])
    assert tao[0] > te[0] and tao[1] > te[1]
    assert gemm_fwd_bwd_time(g, gpu, Dtype.BF16, casts=load_runtime("torchtitan").execution.fp8[0]) == \
        gemm_fwd_bwd_time(g, gpu, Dtype.BF16)


def test_op_sac_keeps_every_other_matmul_and_the_attention_output() -> None:
    """Llama's linears in call order wq, wk, wv, wo, w1, w3, w2: the policy keeps wq, wv, w1, w2 (odd calls) and the
    SDPA output; per token of Llama 3 8B at tp 1: input 2h + Q 2q + V 2kv + gate 2f + w2's output 2h + attention
    output 2q + log-sum-exp 4a = 8192 + 8192 + 2048 + 28672 + 8192 + 8192 + 128."""
    model = load_model("llama3-8b")
    assert kept_token_bytes(model, 1, False) == 8192 + 8192 + 2048 + 28672 + 8192 + 8192 + 128
    names = [(g.n, g.k) for g in linears(model, 1.0, 1)]
    assert names == [(4096, 4096), (1024, 4096), (1024, 4096), (4096, 4096), (14336, 4096), (14336, 4096),
                     (4096, 14336)]


def test_fsdp_memory_difference_between_8_and_128_gpus_matches_table_1_and_3() -> None:
    """torchtitan Tables 1 and 3 (Llama 3.1 8B, FSDP, local batch 2, selective AC): 82.4 / 77.0 / 76.8 GiB on 8
    GPUs against 67.0 / 62.0 / 61.8 on 128: the fp32 sharded weights, gradients and AdamW state (16 bytes a
    parameter) spread over 16x the ranks, 15.0-15.4 GiB."""
    kw = dict(seq_len=8192, mbs=2, zero=3, recompute="selective", runtime=Runtime(framework=Framework.TORCHTITAN))
    small = evaluate("llama3-8b", "h100-sxm-96gb-500w", gpus=8, global_batch=16, **kw)
    large = evaluate("llama3-8b", "h100-sxm-96gb-500w", gpus=128, global_batch=256, **kw)
    assert small.peak_memory_gib - large.peak_memory_gib == pytest.approx(15.2, rel=0.1)


def test_torchtitan_keeps_a_stages_weights_gathered_under_pp() -> None:
    """torchtitan does not reshard under a pipeline: the stage's weights stay gathered and its gradients accumulate
    in fp32; Megatron-FSDP gathers per module and frees them."""
    kw = dict(gpus=64, seq_len=4096, global_batch=64, tp=8, pp=4, mbs=1, zero=3, recompute="full")
    # torchtitan's FSDP with Megatron's pricing of the rest of the peak (cost_models/memory/held.py: HeldMemory())
    fsdp_only = replace(load_runtime(Framework.TORCHTITAN).execution, memory=HeldMemory(), logit_bytes=6.0)
    titan = evaluate("llama3-70b", "h100-sxm", runtime=Runtime(framework=Framework.TORCHTITAN, execution=fsdp_only),
                     **kw)
    mega = evaluate("llama3-70b", "h100-sxm", **kw)
    stage_params = 70.6e9 / 32
    held = max(s.other_gib for s in titan.stages) - max(s.other_gib for s in mega.stages)
    assert held == pytest.approx(stage_params * (2 + 4) / 2**30, rel=0.15)
    assert titan.breakdown.sharded_dp_comm_s == 0.0 < mega.breakdown.sharded_dp_comm_s


def test_torchtitans_published_runs_are_within_the_issue_target() -> None:
    """benchmarks/calibration.py: torchtitan's 18 December 2024 runs within 7 % mean (in-sample, committed
    profiles); the issue's figure before runtimes were priced was 35 %."""
    from published import titan_observations

    runs = titan_observations()
    errors = [abs(o.predict().step_time_s / o.measured_step_s - 1) for o in runs]
    assert len(runs) == 18 and sum(errors) / len(errors) < 0.07


def test_op_sac_counts_its_recomputed_matmuls_in_hardware_flops() -> None:
    """HFU counts what the per-op policy runs again: wk, wo and w3 (2·n·k each per token) on every dense layer."""
    from cost_models.compute.sac import recomputed_flops_per_token

    model = load_model("llama3-8b")
    assert recomputed_flops_per_token(model) == 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    pred = evaluate("llama3-8b", "h100-sxm-96gb-500w", gpus=8, seq_len=8192, global_batch=16, mbs=2, zero=3,
                    recompute="selective", runtime=Runtime(framework=Framework.TORCHTITAN))
    extra = 32 * 8192 * 16 * recomputed_flops_per_token(model) / pred.step_time_s / 8 / 1e12
    assert pred.hardware_tflops_per_gpu - pred.model_tflops_per_gpu == pytest.approx(extra)
