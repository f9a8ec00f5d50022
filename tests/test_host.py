"""Host issue time (cost_models/compute/host.py): a layer pass is never shorter than the host's time to issue it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_models.compute.host import (
    BACKWARD_OPS_RATIO,
    COLLECTIVE_HOST_OPS,
    DRAIN_OPS,
    LEGACY_LAYER_OPS,
    forward_ops,
    host_wait,
    layer_host_wait,
    microbatch_sync_s,
    step_sync_s,
    tp_collective_calls,
)
from cost_models.compute.knobs import LayerKnobs
from cost_models.compute.layer import decoder_layer_time
from hardware_profiles import load_hardware
from meshcore import JobSpec, Recompute
from meshcore.errors import SpecError
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


# ---- fixed costs beyond the layer's own operators (issue 30 item 1) ----------------------------------------------

def test_tp_collectives_are_host_calls_only_with_tp() -> None:
    """Megatron skips the collective of a TP group of one; without SP two all-reduces each way, with SP the four
    gathers and scatters forward and six backward of cost_models.compute.layer.sequence_parallel_tp_time."""
    assert tp_collective_calls(1, False) == (0.0, 0.0) == tp_collective_calls(1, True)
    assert tp_collective_calls(8, False) == (2.0, 2.0)
    assert tp_collective_calls(8, True) == (4.0, 6.0)
    slow = replace(H100, host_op_us=1000.0)
    llama = load_model("llama3-8b")
    bare = layer_host_wait(llama, slow, 1, False, (0.0, 0.0, 0.0), 0.0)
    with_tp = layer_host_wait(llama, slow, 1, False, (0.0, 0.0, 0.0), 0.0, calls=(4.0, 6.0))
    assert with_tp - bare == pytest.approx(10 * COLLECTIVE_HOST_OPS * 1e-3)


def test_legacy_layer_code_issues_more_operators() -> None:
    """Megatron-LM's own layer code (no Transformer Engine, the unfused attention core of 2021-22 and
    Megatron-DeepSpeed) issues LEGACY_LAYER_OPS more operators per forward than TE's fused layer."""
    llama = load_model("llama3-8b")
    assert forward_ops(llama, 1, False, legacy=True) == forward_ops(llama, 1, False) + LEGACY_LAYER_OPS


def test_small_layers_become_host_bound_as_tp_grows() -> None:
    """A 1.3B GPT layer (hidden 2048, sequence 2048, one sequence per micro-batch) on A100 with Megatron-LM's own
    layer code: at TP 1 the GPU's kernels hide the host; as TP divides the GPU's work and adds collective calls
    the host's issue time is exposed, more at TP 8 than at TP 2 (the shape the issue reports for single-node A100
    Megatron-DeepSpeed runs: the error grows with TP)."""
    from meshcore import AttentionKernel, Runtime
    from planner.inputs.loaders import model_from_mapping

    a100 = load_hardware("a100-80gb", 8)
    gpt = model_from_mapping({"name": "gpt-1.3b", "num_layers": 24, "hidden_size": 2048, "ffn_hidden_size": 8192,
                              "num_attention_heads": 16, "vocab_size": 50304, "gated_mlp": False,
                              "tied_embeddings": True, "norm": "layernorm", "linear_bias": True,
                              "learned_positions": 2048, "dropout": True}, "test")
    job = JobSpec(seq_len=2048, global_batch=64, runtime=Runtime(attention=AttentionKernel.UNFUSED))
    waits = [decoder_layer_time(gpt, job, a100, LayerKnobs(tp, 1, False, 1, Recompute.NONE)).host for tp in (1, 2, 8)]
    assert waits[0] == 0.0 < waits[2] and waits[1] <= waits[2]


def test_blocking_pipeline_sends_drain_the_queue_each_micro_batch() -> None:
    """Megatron-core's batch_p2p_sync (default true) synchronises after each batched send/receive: two per
    micro-batch and stage in 1F1B, each DRAIN_OPS operators of idle GPU plus the send's call; none without a
    pipeline or when the interleaved schedule overlaps its sends. The CUDA Graphs blog (NVIDIA, Gray 2019) measured
    what one sync costs the launch path: 2.9 µs kernels took 9.6 µs each with a sync after every launch and 3.8 µs
    without, 5.8 µs more per sync before any framework work: the priced drain is above that."""
    a100 = load_hardware("a100-80gb", 8)
    us = a100.host_op_us * 1e-6
    assert microbatch_sync_s(a100, 1, 1, False) == 0.0
    assert microbatch_sync_s(a100, 4, 1, False) == pytest.approx(2 * (DRAIN_OPS + COLLECTIVE_HOST_OPS) * us)
    assert microbatch_sync_s(a100, 4, 2, True) == 0.0
    assert microbatch_sync_s(a100, 4, 2, False) > 0.0
    assert DRAIN_OPS * us > (9.6 - 3.8) * 1e-6
    assert step_sync_s(a100) == pytest.approx(2 * DRAIN_OPS * us)


def test_halving_the_micro_batch_costs_fixed_time_per_pass() -> None:
    """Under a pipeline each extra micro-batch pays its syncs, and each extra layer pass its host-bound remainder: a
    smaller micro-batch is never priced as free (the step at mbs 1 exceeds the step at mbs 2 by more than the GEMM
    efficiency alone)."""
    from planner import evaluate

    kw = dict(gpus=8, seq_len=2048, global_batch=64, tp=2, pp=4, zero=1)
    one = evaluate("llama3-8b", "a100-80gb", mbs=1, **kw)
    two = evaluate("llama3-8b", "a100-80gb", mbs=2, **kw)
    assert one.breakdown.host_s > two.breakdown.host_s > 0.0


def test_the_dropless_dispatchers_sync_splits_the_forward() -> None:
    """Megatron-core's all-to-all dispatcher waits for the token counts before the expert all-to-all when routing is
    dropless (token_dispatcher.py, cuda_sync_point "before_ep_alltoall"): a host surplus after the sync cannot hide
    behind the attention's GPU time before it. A 10 ms GPU forward, 8 ms of it before the sync, with the host
    issuing (15 + 15) operators before and the rest after: two segments plus one drain, not one max."""
    host = replace(H100, host_op_us=100.0)
    ops = forward_ops(QWEN, 16, moe=True)
    passes = (0.010, 1.0, 0.0)  # the backward is long enough to hide its own operators
    whole = layer_host_wait(QWEN, host, 16, True, passes, 0.0)
    split = layer_host_wait(QWEN, host, 16, True, passes, 0.0, moe_sync_split=0.002)
    assert whole == pytest.approx(ops * 1e-4 - 0.010)
    post = ops - 30.0
    assert split == pytest.approx(max(0.0, 30 * 1e-4 - 0.008) + (post * 1e-4 - 0.002) + DRAIN_OPS * 1e-4)
    assert split > whole


def test_padding_to_a_capacity_removes_the_sync() -> None:
    """--moe-pad-expert-input-to-capacity makes the all-to-all's split sizes static (no device-to-host copy, no
    sync): the host-bound Qwen3-30B-A3B layer at EP 16 and micro-batch 1 waits less than its dropless twin, at the
    same load factor (capacity 1.0 against perfectly balanced dropless routing)."""
    knobs = LayerKnobs(1, 1, False, 1, Recompute.NONE, ep=16)
    padded = JobSpec(seq_len=4096, global_batch=64, runtime=replace(JOB.runtime, moe_capacity_factor=1.0))
    dropless = decoder_layer_time(QWEN, JOB, H100, knobs, moe=True)
    static = decoder_layer_time(QWEN, padded, H100, knobs, moe=True)
    assert static.forward == pytest.approx(dropless.forward)
    assert static.host < dropless.host
