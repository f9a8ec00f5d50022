"""Activation checkpoints swapped to host memory as DeepSpeed runs it (issue 33 item 1): cpu_checkpointing with
partition_activations copies each fully recomputed layer's input to pageable host memory by a blocking copy before
the layer's forward and back by one at its backward (deepspeed/runtime/activation_checkpointing/checkpointing.py,
v0.3.0 and 0.19.8), priced by cost_models/memory/offload.py checkpoint_copy_time, allowed on the DeepSpeed runtime
for recompute full only, and emitted as DeepSpeed's activation_checkpointing section."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest
from launcher_support import deepspeed_config

from cost_models.compute.knobs import LayerTime
from cost_models.memory.offload import (
    HostCopies,
    checkpoint_copy_time,
    layer_offload_exposed,
    layer_offload_parts,
    pageable_bytes_per_s,
)
from hardware_profiles import load_hardware
from meshcore import GIB, Offload, Runtime, Target
from meshcore.errors import InfeasibleError, InputError, LayoutError
from meshcore.framework import Framework
from planner.api import evaluate, plan
from planner.inputs.runtimes import load_runtime
from planner.outputs.emitters import emit
from planner.outputs.emitters.common import UnsupportedPlanError
from planner.search.space import SearchSpec

DS = Runtime(framework=Framework.DEEPSPEED)
V100 = load_hardware("dgx2-v100", 1)
# the 10B GPT-2 of DeepSpeed's ZeRO-Offload tutorial (docs/_tutorials/zero-offload.md): 50 layers of hidden 4096,
# batch 10 x 1024 tokens on one V100 of a DGX-2, checkpoints and optimizer offloaded, overlap_comm off
TUTORIAL = {"seq_len": 1024, "global_batch": 10, "gpus": 1, "mbs": 10, "zero": 2, "recompute": "full", "dtype": "bf16"}
TUTORIAL_RUNTIME = replace(DS, overlap_grad_reduce=False)
GPT2_10B = str(Path(__file__).parent.parent / "benchmarks" / "data" / "offload" / "models" / "gpt2-10b.yaml")
CHECKPOINT_BYTES = 1024 * 10 * 4096 * 2  # one layer's fp16 input [s, b, h]: what partition_activations copies (tp 1)


def test_a_checkpoint_copy_is_blocking_and_pageable() -> None:
    """The copy runs at the staged pageable rate (benchmarks/data/offload/pageable_copies.yaml: CUDA's API
    synchronization behaviour; DeepSpeed PR #5301's 6x for pinned) and nothing hides it: it is exposed whole in the
    forward and again in the backward, however long the passes; the overlapped form hides it behind them."""
    rate = pageable_bytes_per_s(V100)
    assert checkpoint_copy_time(CHECKPOINT_BYTES, V100) == pytest.approx(CHECKPOINT_BYTES / rate)
    long = LayerTime(forward=1.0, backward=2.0)
    sync = layer_offload_parts(long, 0.0, CHECKPOINT_BYTES, V100, copies=HostCopies(checkpoints_sync=True))
    assert sync == pytest.approx((CHECKPOINT_BYTES / rate, CHECKPOINT_BYTES / rate))
    assert layer_offload_exposed(long, 0.0, CHECKPOINT_BYTES, V100) == 0.0
    # never below the overlapped form (the search's offload bound prices that one): with weights and gradients too
    short = LayerTime(forward=1e-3, backward=2e-3, recompute=1e-3)
    for copies in (HostCopies(checkpoints_sync=True), HostCopies(checkpoints_sync=True, gradients_in_stream=True)):
        assert layer_offload_exposed(short, 5e7, CHECKPOINT_BYTES, V100, 4e7, copies=copies) >= \
            layer_offload_exposed(short, 5e7, CHECKPOINT_BYTES, V100, 4e7)


def test_the_deepspeed_profile_copies_checkpoints_synchronously() -> None:
    ds, megatron = load_runtime(Framework.DEEPSPEED), load_runtime(Framework.MEGATRON)
    assert ds.execution.sync_checkpoint_copies and not megatron.execution.sync_checkpoint_copies
    assert ds.capabilities.offload_stages(Offload.ACTIVATIONS) == (0, 1, 2, 3)
    assert ds.capabilities.offload_checkpoints_only


def test_the_tutorials_checkpoints_on_the_host() -> None:
    """DeepSpeed's ZeRO-Offload tutorial (its log docs/assets/images/zero_offload_dp1_10B_log.png: backward 11,770
    and 12,636 ms) with its cpu_checkpointing: each of the 50 layers adds one blocking pageable copy of its 84 MB
    checkpoint to the forward and one to the backward, the GPU stops holding the 50 checkpoints (two stay), and host
    memory holds them; the backward lands within 5 % of the logged 11.8-12.6 s (without the copies, 10 % under)."""
    kept = evaluate(GPT2_10B, "dgx2-v100", runtime=TUTORIAL_RUNTIME, offload="optimizer,gradients", **TUTORIAL)
    moved = evaluate(GPT2_10B, "dgx2-v100", runtime=TUTORIAL_RUNTIME, offload="optimizer,gradients,activations",
                     **TUTORIAL)
    one_way = 50 * CHECKPOINT_BYTES / pageable_bytes_per_s(V100)
    a, b = kept.stages[0], moved.stages[0]
    assert b.offload_forward_s - a.offload_forward_s == pytest.approx(one_way)
    assert b.offload_s - a.offload_s == pytest.approx(2 * one_way)
    assert (a.activations_gib - b.activations_gib) * GIB == pytest.approx(48 * CHECKPOINT_BYTES)
    assert (b.host_gib - a.host_gib) * GIB == pytest.approx(50 * CHECKPOINT_BYTES)
    backward = b.time.backward + b.time.recompute + b.offload_s - b.offload_forward_s
    assert 11.770 * 0.95 < backward < 12.636 * 1.05


def test_only_fully_recomputed_layers_offload_on_deepspeed() -> None:
    """DeepSpeed moves checkpoints only: a pin of activation offload beside another recomputation is refused naming
    --recompute full, `evaluate` refuses such a layout, and a search pinned to the offload recomputes fully."""
    with pytest.raises(InputError, match="--recompute full"):
        plan("llama2-13b", "rtx4090", gpus=1, seq_len=4096, global_batch=4, runtime=DS,
             spec=SearchSpec(offload=frozenset({Offload.ACTIVATIONS}), recompute="none"))
    with pytest.raises(LayoutError, match="--recompute full"):
        evaluate(GPT2_10B, "dgx2-v100", runtime=DS, offload="optimizer,gradients,activations",
                 **{**TUTORIAL, "recompute": "selective"})
    p = plan("llama2-7b", "rtx4090", gpus=1, seq_len=4096, global_batch=4, runtime=DS, spec=SearchSpec(
        offload=frozenset({Offload.OPTIMIZER, Offload.GRADIENTS, Offload.PARAMS, Offload.ACTIVATIONS}), top_k=5))
    assert all(r.layout.recompute.value == "full" for r in (p.best, *p.alternatives))


def test_the_search_offloads_checkpoints_where_nothing_else_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Llama-2 13B at 32k tokens on one RTX 4090: with the weights, gradients and optimizer on the host the 40
    checkpoints (256 MiB each) still do not fit beside a layer's recomputation; on the host they do. The plan says
    so and its DeepSpeed config, parsed by DeepSpeed, asks for cpu_checkpointing with partition_activations."""
    job = {"gpus": 1, "seq_len": 32768, "global_batch": 1, "runtime": DS}
    states = frozenset({Offload.OPTIMIZER, Offload.GRADIENTS, Offload.PARAMS})
    with pytest.raises(InfeasibleError):
        plan("llama2-13b", "rtx4090", **job, spec=SearchSpec(offload=states))
    p = plan("llama2-13b", "rtx4090", **job, spec=SearchSpec(offload_auto=True, top_k=1))
    lay = p.best.layout
    assert Offload.ACTIVATIONS in lay.offload and lay.recompute.value == "full" and p.best.prediction.fits
    from planner.outputs.report import layout_line, plan_table

    assert "activations" in layout_line(lay)
    assert ("activations on the host: the checkpoints (layer inputs) of the 40 fully recomputed layers, by blocking "
            "copies to and from pageable host memory") in plan_table(p)
    cfg = json.loads(emit(p, Target.DEEPSPEED, strict=True).text)
    assert cfg["activation_checkpointing"]["cpu_checkpointing"] is True
    assert cfg["activation_checkpointing"]["partition_activations"] is True
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -e '.[validate]')")
    warnings.filterwarnings("ignore")
    ds = deepspeed_config(cfg, monkeypatch)
    checkpointing = ds.activation_checkpointing_config  # type: ignore[attr-defined]
    assert checkpointing.cpu_checkpointing and checkpointing.partition_activations


def test_checkpoints_kept_whole_over_tp_are_refused() -> None:
    """partition_activations splits a checkpoint over the TP ranks, as meshplan prices it with sequence
    parallelism: a TP plan without it is refused, naming --sp."""
    p = plan("llama2-7b", "h100-sxm", gpus=8, seq_len=4096, global_batch=8, runtime=DS, spec=SearchSpec(
        tp=2, sp=False, recompute="full", offload=frozenset({Offload.ACTIVATIONS}), top_k=1))
    with pytest.raises(UnsupportedPlanError, match="--sp"):
        emit(p, Target.DEEPSPEED, strict=True)
