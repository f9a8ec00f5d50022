"""Host issue time (cost_models/host.py): a layer pass is never shorter than the host's time to issue it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.host import BACKWARD_OPS_RATIO, forward_ops, host_wait, layer_host_wait
from cost_models.knobs import LayerKnobs
from cost_models.layer import decoder_layer_time
from hardware_profiles import load_hardware
from planner.core import JobSpec, Recompute
from planner.core.errors import SpecError
from planner.inputs.loaders import load_model

H100 = load_hardware("h100-sxm", 16)
QWEN = load_model("qwen3-30b-a3b")
JOB = JobSpec(seq_len=4096, global_batch=64)


def _moe_layer(cluster, ep: int, mbs: int = 1):  # type: ignore[no-untyped-def]
    return decoder_layer_time(QWEN, JOB, cluster, LayerKnobs(1, 1, False, mbs, Recompute.NONE, ep=ep), moe=True)


def test_wait_is_what_the_gpu_cannot_cover() -> None:
    slow = replace(H100, host_op_us=100.0)
    assert host_wait(100, 0.004, slow) == pytest.approx(0.006)  # 100 ops x 100 µs = 10 ms against 4 ms
    assert host_wait(100, 0.02, slow) == 0.0  # the GPU's 20 ms hide the host's 10 ms


def test_backward_issues_twice_the_forward() -> None:
    slow = replace(H100, host_op_us=1000.0)
    ops = forward_ops(QWEN, 8, True)
    wait = layer_host_wait(QWEN, slow, 8, True, (0.0, 0.0, 0.0), 0.0)
    assert wait == pytest.approx((1 + BACKWARD_OPS_RATIO) * ops * 1e-3)


def test_more_local_experts_issue_more_operators() -> None:
    assert forward_ops(QWEN, 8, True) > forward_ops(QWEN, 16, True) > forward_ops(QWEN, 128, True)
    assert forward_ops(QWEN, 8, False) < forward_ops(QWEN, 128, True)


def test_a_host_bound_moe_layer_waits_and_a_free_host_does_not() -> None:
    """Qwen3-30B-A3B at one sequence per micro-batch: small kernels, 16 local experts. With the calibrated H100
    host the layer waits for the host; with an instant host (CUDA graphs) it does not, and nothing else moves."""
    bound = _moe_layer(H100, ep=8)
    free = _moe_layer(replace(H100, host_op_us=0.0), ep=8)
    assert bound.host > 0
    assert free.host == 0
    assert bound.total == pytest.approx(free.total + bound.host)
    assert (bound.forward, bound.backward, bound.ep_comm) == (free.forward, free.backward, free.ep_comm)


def test_larger_micro_batches_hide_the_host() -> None:
    """The host's work per pass does not grow with the micro-batch; the GPU's does, so the wait per sequence falls."""
    one, four = _moe_layer(H100, ep=8, mbs=1), _moe_layer(H100, ep=8, mbs=4)
    assert four.host < 4 * one.host


def test_a_large_dense_layer_is_never_host_bound() -> None:
    llama = load_model("llama3-70b")
    t = decoder_layer_time(llama, JobSpec(seq_len=8192, global_batch=64), H100,
                           LayerKnobs(4, 1, True, 1, Recompute.NONE))
    assert t.host == 0


def test_negative_host_time_is_refused() -> None:
    with pytest.raises(SpecError, match="host_op_us"):
        replace(H100, host_op_us=-1.0)
