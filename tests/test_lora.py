"""LoRA fine-tuning (JobSpec.trainable_fraction): adapters train, the frozen weights keep no gradients or optimizer
state and run no weight-gradient GEMMs."""

from __future__ import annotations

import pytest

from cost_models.compute.kernels import Gemm, gemm_fwd_bwd_time, gemm_time
from cost_models.memory.params import lora_fraction, lora_params
from hardware_profiles import load_hardware
from meshcore import Dtype, Target
from meshcore.errors import InputError, SpecError
from planner import evaluate, load_plan, plan, resolve, save_plan
from planner.inputs.loaders import load_model
from planner.outputs.emitters import emit
from planner.outputs.emitters.common import UnsupportedPlanError
from planner.search.space import SearchSpec

JOB = {"gpus": 8, "seq_len": 2048, "global_batch": 64}
LAYOUT = {"pp": 4, "zero": 1, "recompute": "full"}


def test_adapter_count_matches_peft() -> None:
    """PEFT prints 19,988,480 trainable parameters for Llama-2-7B with r = 8 on q, k, v, o, gate, up and down."""
    assert lora_params(load_model("llama2-7b"), 8) == 19_988_480
    model = load_model("llama3-70b")
    assert lora_params(model, 32) == pytest.approx(2 * lora_params(model, 16))
    assert 0 < lora_fraction(model, 16) < 0.01


def test_frozen_weights_skip_their_weight_gradients() -> None:
    gpu = load_hardware("h100-sxm", 8).gpu
    g = Gemm(4096, 4096, 4096)
    t = gemm_time(g, gpu, Dtype.BF16)
    assert gemm_fwd_bwd_time(g, gpu, Dtype.BF16) == pytest.approx((t, 2 * t))
    assert gemm_fwd_bwd_time(g, gpu, Dtype.BF16, 0.01) == pytest.approx((1.01 * t, 1.02 * t))
    assert gemm_fwd_bwd_time(g, gpu, Dtype.BF16, 0.0) == pytest.approx((t, t))


def test_lora_keeps_state_for_the_adapters_only_and_runs_faster() -> None:
    full = evaluate("llama2-13b", "rtx4090", **JOB, **LAYOUT)
    lora = evaluate("llama2-13b", "rtx4090", **JOB, **LAYOUT, lora_rank=16)
    share = lora_fraction(load_model("llama2-13b"), 16)
    s_full, s_lora = full.stages[1], lora.stages[1]
    assert s_lora.weights_gib == pytest.approx(s_full.weights_gib)
    assert s_lora.gradients_gib == pytest.approx(share * s_full.gradients_gib)
    assert s_lora.optimizer_state_gib == pytest.approx(share * s_full.optimizer_state_gib)
    assert lora.fits and not full.fits
    assert lora.breakdown.compute_s < full.breakdown.compute_s
    assert lora.breakdown.dp_comm_s < full.breakdown.dp_comm_s
    assert lora.model_tflops_per_gpu * lora.step_time_s < full.model_tflops_per_gpu * full.step_time_s


def test_lora_plan_file_round_trips_and_launchers_refuse_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = plan("llama3-8b", "rtx4090", **JOB, lora_rank=16, spec=SearchSpec(top_k=2))
    assert p.job.lora_rank == 16 and p.job.trainable_fraction < 0.01
    path = tmp_path / "lora.yaml"
    save_plan(p, path)
    back = load_plan(path, reprice=True)
    assert back.job.lora_rank == 16 and back.job.trainable_fraction == pytest.approx(p.job.trainable_fraction)
    assert back.best.prediction.step_time_s == pytest.approx(p.best.prediction.step_time_s)
    with pytest.raises(UnsupportedPlanError, match="LoRA"):
        emit(p, Target.MEGATRON)


def test_bad_lora_input() -> None:
    with pytest.raises(InputError, match="lora_rank"):
        resolve("llama3-8b", "rtx4090", **JOB, lora_rank=-1)
    with pytest.raises(SpecError, match="trainable_fraction"):
        from meshcore import JobSpec

        JobSpec(seq_len=8, global_batch=1, trainable_fraction=1.5)
