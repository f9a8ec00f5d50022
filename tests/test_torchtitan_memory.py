"""Memory as torchtitan holds it (cost_models/memory/held.py, the `memory` section of hardware_profiles/runtimes/
torchtitan.yaml) against the peaks torchtitan's December 2024 tables print (pytorch/torchtitan,
benchmarks/llama3_h100_202412_torchtitan.md, Tables 1-6: max reserved GiB, the maximum over the GPUs of a run), and
Megatron's pricing left as it was."""

from __future__ import annotations

import pytest
from published import titan_observations

from cost_models.memory import held as H
from cost_models.memory.footprint import BUFFER_ALLOWANCE_GIB
from meshcore import Recompute, Runtime
from meshcore.execution import HeldMemory
from meshcore.framework import Framework
from planner.api import evaluate
from planner.inputs.loaders import load_model
from planner.inputs.runtimes import load_runtime

TITAN = load_runtime(Framework.TORCHTITAN).execution


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[float, float]]:
    """run id -> (printed GiB, predicted max reserved GiB) with the committed profiles."""
    return {o.run_id: (float(o.measured_memory_gib or 0), o.predict().reserved_gib) for o in titan_observations()}


def test_the_loss_holds_what_torchs_cross_entropy_allocates() -> None:
    """F.cross_entropy's backward peak: the saved log-softmax, nll_loss's gradient and log_softmax's gradient, fp32
    (12 B per logit); under TP loss_parallel's fused backward: x, zeros_like(x), exp(x) and their sum (16 B);
    Megatron's fused vocabulary-parallel cross-entropy keeps 6 B at any TP."""
    assert H.loss_logit_bytes(1, TITAN.logit_bytes, TITAN.memory) == 12
    assert H.loss_logit_bytes(8, TITAN.logit_bytes, TITAN.memory) == 16
    assert H.loss_logit_bytes(8, 6.0, HeldMemory()) == 6


def test_a_recomputed_70b_block_at_tp8_allocates_its_gathered_inputs() -> None:
    """Llama 3.1 70B, TP 8, 16 x 8192 tokens (Table 4): per token 8·h gathered + 2·h/8 + 8·q/8 + 12·f/8 =
    65,536 + 2,048 + 8,192 + 43,008 bytes, 14.7 GB for the block."""
    model = load_model("llama3-70b")
    got = H.working_bytes(model, 8192, 16, 8, 1, True, Recompute.FULL, TITAN.memory)
    assert got == pytest.approx(16 * 8192 * (8 * 8192 + 2 * 1024 + 8 * 1024 + 12 * 3584))
    assert H.working_bytes(model, 8192, 16, 8, 1, True, Recompute.FULL, HeldMemory()) is None


def test_reserved_is_capped_by_what_the_allocator_can_get() -> None:
    assert H.reserved_gib(70.0, 5.0, 94.0, 8.0) == 75.0
    assert H.reserved_gib(80.0, 10.0, 94.0, 8.0) == 86.0


@pytest.mark.parametrize(("run", "tolerance"), [
    ("tt2412_t1_8b_8gpu_fsdp", 0.05),  # Table 1, FSDP 8: 82.4 GiB
    ("tt2412_t2_8b_8gpu_fsdp8_cp1_s32k", 0.05),  # Table 2, 32k tokens, full AC, Float8: 83.9 GiB
    ("tt2412_t3_8b_128gpu_fsdp", 0.05),  # Table 3, FSDP 128: 67.0 GiB
    ("tt2412_t4_70b_256gpu_2d", 0.05),  # Table 4, FSDP 32 x TP 8: 71.9 GiB
    ("tt2412_t6_405b_512gpu_fsdp8_cp1_s32k", 0.07),  # Table 6, FSDP 8 x TP 8 x PP 8, 32k: 75.3 GiB
])
def test_published_peaks(runs: dict[str, tuple[float, float]], run: str, tolerance: float) -> None:
    printed, predicted = runs[run]
    assert predicted == pytest.approx(printed, rel=tolerance)


def test_the_printed_peaks_within_seven_percent_without_a_systematic_sign(runs: dict[str, tuple[float, float]]) -> None:
    """All 18 runs: mean |error| at most 7 % (issue 29), neither side holding more than 13 of them; before
    cost_models/memory/held.py the model was 18 % under, on all 18."""
    errors = [predicted / printed - 1 for printed, predicted in runs.values()]
    assert len(errors) == 18
    assert sum(abs(e) for e in errors) / len(errors) <= 0.07
    assert 5 <= sum(e < 0 for e in errors) <= 13


def test_sharding_the_states_over_16x_more_gpus_saves_what_table_1_and_3_differ_by(
        runs: dict[str, tuple[float, float]]) -> None:
    """Tables 1 and 3 run the same per-GPU work on 8 and 128 GPUs: the printed peaks differ by 15.4 GiB (82.4 - 67.0),
    FSDP2's fp32 weights, gradients and AdamW state (16 B per parameter) of 8.03 B parameters over 8 against 128."""
    p8, m8 = runs["tt2412_t1_8b_8gpu_fsdp"]
    p128, m128 = runs["tt2412_t3_8b_128gpu_fsdp"]
    assert m8 - m128 == pytest.approx(p8 - p128, rel=0.15)


def test_megatron_holds_what_it_held_before() -> None:
    """HeldMemory()'s defaults price Megatron-core as before: no allocator reserve, the 2 GiB allowance outside it,
    the loss and a recomputed layer's activations both at the peak."""
    pred = evaluate("llama3-70b", "h100-sxm", gpus=64, tp=8, pp=4, seq_len=8192, global_batch=64, mbs=1,
                    recompute="full", runtime=Runtime(framework=Framework.MEGATRON))
    assert all(s.reserve_gib == 0 and s.buffers_gib == BUFFER_ALLOWANCE_GIB for s in pred.stages)
    assert pred.reserved_gib == pytest.approx(max(s.peak_memory_gib for s in pred.stages) - BUFFER_ALLOWANCE_GIB)
