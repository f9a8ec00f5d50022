"""Gradient accumulation in autograd (cost_models/sync.py `grad_accumulation_time`): DeepSpeed below ZeRO-2 adds each
micro-batch's fp16 weight gradients into `.grad` in place (PyTorch's AccumulateGrad: read both, write one, 6 bytes
per parameter), every micro-batch after a step's first; Megatron-core's gradient_accumulation_fusion does it inside
the weight-gradient GEMM. Checked on BigScience's tr3m 1.3B table (benchmarks/data/pick_best/bigscience_tr3m_1b3.yaml:
8 V100, Megatron-DeepSpeed ZeRO-1, global batch 512, 23 s per step measured for TP 1 PP 1 micro-batch 1 without
recomputation)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hardware_profiles import load_hardware
from meshcore import AttentionKernel, Runtime
from meshcore.framework import Framework
from planner.api import evaluate
from planner.inputs.loaders import model_from_mapping
from planner.inputs.runtimes import load_runtime

V100_HBM = 900e9


def _model() -> dict[str, Any]:
    return {"name": "tr3m-1b3", "num_layers": 24, "hidden_size": 2048, "ffn_hidden_size": 8192,
            "num_attention_heads": 16, "vocab_size": 50304, "gated_mlp": False, "tied_embeddings": True,
            "norm": "layernorm", "linear_bias": True, "learned_positions": 2048, "dropout": True}


def _step(accumulation: float | None = None, global_batch: int = 512, **knobs: Any) -> float:
    """BigScience tr3m's step on 8 V100 (the pick-the-best job's switches) with DeepSpeed's profile, its
    grad_accumulation_bytes replaced by `accumulation` where given."""
    ex = load_runtime(Framework.DEEPSPEED).execution
    if accumulation is not None:
        ex = replace(ex, grad_accumulation_bytes=accumulation)
    runtime = Runtime(framework=Framework.DEEPSPEED, attention=AttentionKernel.UNFUSED, overlap_grad_reduce=False,
                      overlap_param_gather=False, grad_reduce_bytes=2, overlap_p2p_comm=False, execution=ex)
    model = model_from_mapping(_model(), "test")
    layout = {"tp": 1, "pp": 1, "mbs": 1, "zero": 1, "recompute": "none", "sp": False} | knobs
    return evaluate(model, load_hardware("v100-sxm2-4gpu", 8), gpus=8, seq_len=2048, global_batch=global_batch,
                    dtype="bf16", runtime=runtime, **layout).step_time_s


def test_deepspeed_profile_accumulates_in_fp16_grad() -> None:
    assert load_runtime(Framework.DEEPSPEED).execution.grad_accumulation_bytes == 6.0
    assert load_runtime(Framework.MEGATRON).execution.grad_accumulation_bytes == 0.0


def test_accumulation_is_six_bytes_per_parameter_for_every_micro_batch_after_the_first() -> None:
    """TP 1 PP 1 DP 8, micro-batch 1: 64 micro-batches, 63 of them add the 1.31 B parameters' gradients (24 layers of
    12·h² + 13·h, the 50304 x 2048 tied embedding, 2048 positions, the final norm) at 6 bytes each at the V100's HBM
    speed: 0.61 s of the 23 s the published table measures."""
    gpu = load_hardware("v100-sxm2-4gpu", 8).gpu
    h = 2048
    params = 24 * (12 * h * h + 13 * h) + 50304 * h + 2048 * h + 2 * h
    expected = 63 * params * 6 / (V100_HBM * gpu.memory_efficiency)
    added = _step() - _step(0.0)
    assert added == pytest.approx(expected, rel=0.02)
    assert _step(0.0) < _step() < 23.0  # towards the measured step, not past it


def test_none_under_zero_2_or_with_one_micro_batch() -> None:
    """ZeRO-2 reduces each micro-batch's gradients into its shard (priced by sharded_dp_exposed); a step of one
    micro-batch (global batch 64 over DP 8 at micro-batch 8) keeps autograd's first gradient without a copy."""
    assert _step(zero=2) == _step(0.0, zero=2)
    assert _step(global_batch=64, mbs=8) == _step(0.0, global_batch=64, mbs=8)
