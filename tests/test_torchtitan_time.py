"""How torchtitan's kernels take time where they differ from Megatron-core's (runtimes/torchtitan.yaml:
attention_backward, split_projections) and the sustained clock its 500 W H100s fit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cost_models.compute.gemms import attention_gemms, gemms_time, split_gemms, split_gemms_time
from cost_models.compute.kernels import flash_attention_time, gemm_fwd_bwd_time, gemm_time, memory_time
from hardware_profiles import load_hardware
from meshcore import Dtype, JobSpec, Runtime
from meshcore.framework import Framework
from planner.inputs.loaders import load_model
from planner.inputs.runtimes import load_runtime, with_execution
from planner.studies.fit import BOUNDS, Param

TITAN = load_runtime(Framework.TORCHTITAN).execution
TITAN_RUNTIME = with_execution(Runtime(framework=Framework.TORCHTITAN))
ROOT = Path(__file__).resolve().parents[1]


def test_flashattention2s_backward_runs_at_its_own_rate() -> None:
    """FlashAttention-3 paper (Shah et al. 2024, Figs. 5-6), H100, causal, head dim 128, 16k: FlashAttention-2's
    forward 335 and backward 322 TFLOP/s (the backward's FLOPs 2.5x the forward's): its backward takes
    2.5 x 335 / 322 = 2.60 x its forward time, where cuDNN's 0.85 would give 2.94."""
    assert TITAN.attention_backward_share("hopper") == pytest.approx(322 / 335, abs=0.01)
    gpu = load_hardware("h100-sxm", 8).gpu
    fwd, bwd = flash_attention_time(1e12, 16384, 128, gpu, 0.62, TITAN.attention_backward_share("hopper"))
    assert bwd / fwd == pytest.approx(2.5 * 335 / 322, rel=0.01)
    assert load_runtime(Framework.MEGATRON).execution.attention_backward_share("hopper") is None


def test_torchtitans_separate_kv_projections_are_hbm_bound_at_tp8() -> None:
    """torchtitan's Llama (models/llama/model.py) runs wq, wk, wv as separate nn.Linear: at TP 8 the 70B's wk is a
    [131072 x 8192] x [8192 x 128] GEMM in fp8, which reads more bytes than its FLOPs take at the fp8 rate, so it
    runs at HBM speed; the separate projections take longer than Megatron's fused QKV GEMM."""
    model = load_model("llama3-70b")
    cluster = load_hardware("h100-sxm-96gb-500w", 256)
    job = JobSpec(seq_len=8192, global_batch=512, dtype=Dtype.FP8, runtime=TITAN_RUNTIME)
    tokens = 16 * 8192
    groups = split_gemms(model, tokens, 8)
    wk = groups[0][1]
    assert (wk.m, wk.n, wk.k) == (tokens, 128, 8192)
    assert gemm_time(wk, cluster.gpu, Dtype.FP8) == pytest.approx(memory_time(wk.bytes(1.0), cluster.gpu))
    split = split_gemms_time(groups[:2], cluster, job)[0]
    fused = gemms_time(attention_gemms(model, tokens, 8), cluster, job)[0]
    assert split > 1.05 * fused


def test_a_shared_input_is_cast_to_fp8_once() -> None:
    """wq, wk and wv read one input: its FP8 cast (torchao tensorwise: 5 B per element) is paid once, not three
    times (TP's PrepareFloat8ModuleInput casts before the all-gather; a compiled block computes the cast once)."""
    model = load_model("llama3-8b")
    cluster = load_hardware("h100-sxm-96gb-500w", 8)
    job = JobSpec(seq_len=8192, global_batch=16, dtype=Dtype.FP8, runtime=TITAN_RUNTIME)
    qkv = split_gemms(model, 16384, 1)[0]
    casts = TITAN.casts(None)
    alone = sum(gemm_fwd_bwd_time(g, cluster.gpu, Dtype.FP8, 1.0, casts)[0] for g in qkv)
    shared = split_gemms_time((qkv,), cluster, job)[0]
    cast = memory_time(casts.input_bytes * 16384 * model.hidden_size, cluster.gpu)
    assert alone - shared == pytest.approx(2 * cast)


def test_the_500w_parts_fitted_clock_is_inside_its_physical_bounds() -> None:
    """The sustained tensor rate calibration writes into the 500 W profile (benchmarks/calibration.py --write) over
    the (500/700)^(1/3) derivation it states must lie in peak_scale's bounds: no closer to the bound than 1 % of
    the range (a fit that runs onto a bound names missing physics)."""
    text = (ROOT / "hardware_profiles" / "h100-sxm-96gb-500w.yaml").read_text()
    derived = float(re.search(r"# derived peak_bf16_tflops: ([0-9.]+)", text).group(1))  # type: ignore[union-attr]
    scale = load_hardware("h100-sxm-96gb-500w", 8).gpu.peak_bf16_tflops / derived
    lo, hi, _ = BOUNDS[Param.PEAK_SCALE]
    assert lo + 0.01 * (hi - lo) < scale < hi - 0.01 * (hi - lo)
