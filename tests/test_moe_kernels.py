"""The kernels of a mixture-of-experts layer beside its all-to-alls (cost_models/compute/moe_kernels.py) and FP8 casts
under
sequence parallelism (cost_models/compute/fp8.py), against the code that runs them and NVIDIA's published H100 runs."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cost_models.compute.fp8 import amax_reductions_time, sequence_parallel_casts, sharded_cast_bytes
from cost_models.compute.gemms import mlp_gemms
from cost_models.compute.kernels import Gemm, gemm_time
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.layer import decoder_layer_time
from cost_models.compute.moe import moe_gemms
from cost_models.compute.moe_kernels import (
    TE_GROUPED_STREAMS,
    expert_gemm_groups,
    expert_gemms_concurrent,
    permutation_bytes,
)
from hardware_profiles import load_hardware
from meshcore import Dtype, JobSpec, Recompute, Runtime
from meshcore.execution import TE_CURRENT, TE_DELAYED, Execution, ExpertGemms, Fp8Recipe
from planner.inputs.loaders import load_model
from planner.inputs.runtimes import load_runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_permutations_follow_megatrons_dispatchers() -> None:
    """megatron/core/transformer/moe/token_dispatcher.py: the all-to-all dispatcher permutes, sorts the received
    chunks by local expert (only with more than one), unsorts and unpermutes: 4 passes of 4·h bytes per routed copy;
    one local expert skips the sorts; the flex (DeepEP) dispatcher permutes only what it received: 2 passes."""
    h, copies = 4096, 1000.0
    assert permutation_bytes(copies, h, 16, dedup=False) == (16 * h * copies, 16 * h * copies)
    assert permutation_bytes(copies, h, 1, dedup=False) == (8 * h * copies, 8 * h * copies)
    assert permutation_bytes(copies, h, 16, dedup=True) == (8 * h * copies, 8 * h * copies)


def test_grouped_expert_gemms_keep_their_flops_and_issue_as_the_runtime_does() -> None:
    """Megatron-core's --moe-grouped-gemm runs Transformer Engine's GroupedLinear, one cuBLAS GEMM per expert on
    the 4 streams of transformer_engine/common/util/multi_stream.h (num_compute_streams = 4; Megatron's MoE README:
    "launch multiple local GEMM kernels in multiple streams"); torchtitan's torch._grouped_mm is one kernel;
    SequentialMLP one expert at a time. The FLOPs are the same; few rows per expert run below a dense GEMM's rate, and
    less so the more of them run at once."""
    assert TE_GROUPED_STREAMS == 4
    assert expert_gemms_concurrent(ExpertGemms.TE_STREAMS, 16) == 4
    assert expert_gemms_concurrent(ExpertGemms.TE_STREAMS, 2) == 2
    assert expert_gemms_concurrent(ExpertGemms.ONE_KERNEL, 16) == 16
    assert expert_gemms_concurrent(ExpertGemms.SEQUENTIAL, 16) == 1
    assert load_runtime("torchtitan").execution.expert_gemms is ExpertGemms.ONE_KERNEL
    assert load_runtime("megatron").execution.expert_gemms is ExpertGemms.TE_STREAMS
    one = Gemm(256, 1536, 2048)  # Qwen3-30B-A3B's FC1 on 256 routed rows
    gpu = load_hardware("h100-sxm", 8).gpu
    times = {}
    for issue in ExpertGemms:
        g, n = expert_gemm_groups(one, 16, expert_gemms_concurrent(issue, 16))
        assert g.flops * n == pytest.approx(16 * one.flops)
        times[issue] = n * gemm_time(g, gpu, Dtype.BF16)
    assert times[ExpertGemms.ONE_KERNEL] < times[ExpertGemms.TE_STREAMS] < times[ExpertGemms.SEQUENTIAL]
    model = load_model("qwen3-30b-a3b")
    knobs = LayerKnobs(tp=1, cp=1, sp=False, mbs=1, recompute=Recompute.NONE, ep=8)
    flops = {issue: sum(g.flops * n for g, n in moe_gemms(model, knobs, 4096, issue=issue)) for issue in ExpertGemms}
    assert len({round(f) for f in flops.values()}) == 1


def test_nvidias_published_moe_runs_within_the_issue_target() -> None:
    """NVIDIA's Megatron-Bridge H100 MoE rows (25.09, 25.11, 26.04.01: DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B,
    GPT-OSS-120B; benchmarks/data/calibration/published_runs_h100.yaml) in-sample with the committed profiles within
    the issue's 12 % mean, each within 10 %, the run benchmarks/calibration.py sets aside apart (25.11's Qwen3-30B,
    1.99x 25.09's step on the same layout). Qwen3-235B-A22B on 256 GPUs, 25.11: 1,575 tokens/s/GPU published."""
    from published import h100_observations

    runs = [o for o in h100_observations()[0] if o.moe and o.run_id != "mbridge_25.11_h100_Qwen3_30B_a3B_16gpus"]
    errors = {o.run_id: o.predict().step_time_s / o.measured_step_s - 1 for o in runs}
    assert len(runs) == 8
    assert sum(abs(e) for e in errors.values()) / len(errors) < 0.12
    assert max(abs(e) for e in errors.values()) < 0.10
    assert abs(errors["mbridge_25.11_h100_Qwen3_235B_a22B_256gpus"]) < 0.05


def test_fp8_casts_run_on_the_shard_before_the_gather() -> None:
    """Transformer Engine under sequence parallelism casts the normed input of QKV / FC1 and the output gradient of
    the projection / FC2 on the local T/t rows and gathers the FP8 copy (layernorm_linear.py, base.py
    grad_output_preprocess), then transposes the gathered tensor: (b − 1)/t + 2 bytes per element for a recipe of b
    (delayed 4: 2.375 at t = 8; current 6: 2.625). GEMMs of other widths keep their casts; torchao's recipes too."""
    assert sharded_cast_bytes(TE_DELAYED.input_bytes, 8) == pytest.approx(2.375)
    assert sharded_cast_bytes(TE_CURRENT.input_bytes, 8) == pytest.approx(2.625)
    h = 8192
    qkv, proj, up = Gemm(4096, 1280, h), Gemm(4096, h, 1024), Gemm(4096, 128, 512)
    assert sequence_parallel_casts(qkv, h, TE_DELAYED, 8).input_bytes == pytest.approx(2.375)
    assert sequence_parallel_casts(qkv, h, TE_DELAYED, 8).grad_bytes == TE_DELAYED.grad_bytes
    assert sequence_parallel_casts(proj, h, TE_DELAYED, 8).grad_bytes == pytest.approx(2.375)
    assert sequence_parallel_casts(up, h, TE_DELAYED, 8) == TE_DELAYED
    assert sequence_parallel_casts(qkv, h, TE_DELAYED, 1) == TE_DELAYED
    tensorwise = load_runtime("torchtitan").execution.casts(Fp8Recipe.TENSORWISE)
    assert sequence_parallel_casts(qkv, h, tensorwise, 8) == tensorwise


def _layer_ratio(tp: int, runtime: Runtime = Runtime()) -> float:
    """FP8 over BF16 seconds of one Llama 3.1 405B decoder layer (8k tokens, SP) on H100 at TP `tp`."""
    model, cluster = load_model("llama3-405b"), load_hardware("h100-sxm", 8)
    knobs = LayerKnobs(tp=tp, cp=1, sp=tp > 1, mbs=1, recompute=Recompute.NONE)
    job = JobSpec(seq_len=8192, global_batch=64, dtype=Dtype.FP8, runtime=runtime)
    return (decoder_layer_time(model, job, cluster, knobs).total
            / decoder_layer_time(model, replace(job, dtype=Dtype.BF16), cluster, knobs).total)


def test_fp8_gains_at_tp8_as_nvidia_measured() -> None:
    """Issue 30: NVIDIA's FP8/BF16 step ratio at TP 8 is 0.63-0.68. Llama 3.1 405B's decoder layer at TP 8 (the
    Megatron-Bridge H100 recipe's TP) comes out in that range; priced with its casts on the whole gathered tensors
    (the same bytes under a recipe the shard rule does not apply to) it would be over 1 % slower."""
    tp8 = _layer_ratio(8)
    assert 0.63 <= tp8 <= 0.68
    whole = Execution(fp8=(replace(TE_DELAYED, recipe=Fp8Recipe.TENSORWISE),))
    assert _layer_ratio(8, Runtime(execution=whole)) > tp8 * 1.01


def test_current_scaling_reduces_amax_over_the_tp_group() -> None:
    """Current scaling needs one scale for the gathered tensor: a 4-byte all-reduce over the TP ranks per column
    layer forward and row layer backward (latency-bound); delayed scaling reduces once per step (not per layer)."""
    cluster = load_hardware("h100-sxm", 8)
    knobs = LayerKnobs(tp=8, cp=1, sp=True, mbs=1, recompute=Recompute.NONE)
    current = JobSpec(seq_len=4096, global_batch=8, dtype=Dtype.FP8,
                      runtime=Runtime(execution=Execution(), fp8_recipe=Fp8Recipe.CURRENT))
    f, b = amax_reductions_time(current, cluster, knobs, 2)
    assert f == b > 0
    assert f < 1e-3  # microseconds, not milliseconds
    assert amax_reductions_time(replace(current, runtime=Runtime()), cluster, knobs, 2) == (0.0, 0.0)
    assert amax_reductions_time(replace(current, dtype=Dtype.BF16), cluster, knobs, 2) == (0.0, 0.0)
    assert mlp_gemms(load_model("llama3-8b"), 10, 10)[0].k == 4096
