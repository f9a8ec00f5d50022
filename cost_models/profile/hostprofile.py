"""Measure the host's fixed costs with PyTorch: what `meshplan profile host` writes and cost_models/compute/host.py
prices.

A decoder layer (`layerprofile.decoder_module`, the model shrunk to one head group of width 64 and a sequence of
8 tokens, so that every kernel is far shorter than its launch and a pass's wall time is the host's) runs forward and
backward eagerly. The aten operators each pass dispatches are counted with a TorchDispatchMode (views and other
host-only operators among them); cost_models/compute/host.py counts coarser operators (`host.forward_ops`: a fused
norm, a
linear layer, the attention kernel, ...), so the host time per operator it prices (the node's host_op_us) is the
least wall time of a forward and backward over that count, forward_ops·(1 + BACKWARD_OPS_RATIO); the time per aten
operator is printed beside it. On a GPU the pass is not synchronised inside (the host's issue rate, launches
included); on a CPU the operators run as they are issued (the dispatcher and the tiny kernels).
  collective call  all_reduce of a one-element tensor in a one-process group (gloo on a CPU, nccl on a GPU): the host
                   time of one torch.distributed call (ProcessGroup, work object, enqueue);
  host sync        on a GPU, a one-element add followed by torch.cuda.synchronize, less the add alone: what a sync adds
                   to the launch path (0 on a CPU, where there is no queue to drain);
  optimizer step   AdamW (foreach) over the layer's parameters at that tiny width: the step's fixed launches.
torch is imported only here (the [profile] extra), and only inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from meshcore import ModelSpec
from meshcore.errors import InputError

TINY_HEAD_DIM = 64
TINY_TOKENS = 8


@dataclass(frozen=True)
class HostProfile:
    """What the host spends, measured on `device`."""

    device: str
    built_with: str
    forward_ops: int  # aten operators of one decoder layer's forward
    backward_ops: int  # and of its backward
    aten_us: float  # host microseconds per aten operator (forward and backward together, the least of the repeats)
    counted_ops: float  # operators of a forward and backward as cost_models/compute/host.py counts them
    op_us: float  # host microseconds per such operator (the node's host_op_us)
    collective_us: float  # one torch.distributed all_reduce call
    sync_us: float  # what one host synchronisation adds (GPU only)
    step_ms: float  # one optimizer step over the tiny layer's parameters


def tiny(model: ModelSpec) -> ModelSpec:
    """The model at the width of one head of TINY_HEAD_DIM (its operators, not its FLOPs)."""
    return replace(model, name=f"{model.name}@tiny", hidden_size=TINY_HEAD_DIM, num_attention_heads=1, num_kv_heads=1,
                   head_dim=TINY_HEAD_DIM, ffn_hidden_size=2 * TINY_HEAD_DIM, vocab_size=64, mla=None, moe=None)


def _least(fn: Callable[[], Any], repeats: int) -> float:
    """Microseconds of the fastest of `repeats` calls after two warm-ups: other processes only ever add to a host
    timing, so the least is the undisturbed cost (the median of a shared machine's timings is not)."""
    times = []
    for i in range(repeats + 2):
        begin = time.perf_counter_ns()
        fn()
        if i >= 2:
            times.append((time.perf_counter_ns() - begin) / 1e3)
    return min(times)


def count_ops(module: Any, x: Any) -> tuple[int, int]:
    """(forward, backward) aten operators `module` dispatches on input `x` (a TorchDispatchMode sees each one)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it untyped
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.n += 1
            return func(*args, **(kwargs or {}))

    with Count() as fwd:
        out = module(x)
        loss = out.float().square().mean()
    with Count() as bwd:
        loss.backward()
    module.zero_grad(set_to_none=True)
    return fwd.n, bwd.n


def _collective_us(device: Any, repeats: int) -> float:
    """Host microseconds of one all_reduce call in a one-process group (the default group where this process
    already has one, e.g. inside a test session or a launcher; else one of its own, destroyed after)."""
    import torch
    import torch.distributed as dist

    owned = not dist.is_initialized()
    if owned:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(1, device=device)
        calls = 50
        per = _least(lambda: [dist.all_reduce(t) for _ in range(calls)], repeats) / calls
        if device.type == "cuda":
            torch.cuda.synchronize()
        return per
    finally:
        if owned:
            dist.destroy_process_group()


def _sync_us(device: Any, repeats: int) -> float:
    import torch

    if device.type != "cuda":
        return 0.0
    t = torch.ones(1, device=device)
    torch.cuda.synchronize()
    calls = 50
    def add_and_sync() -> None:
        for _ in range(calls):
            t.add_(1)
            torch.cuda.synchronize()

    synced = _least(add_and_sync, repeats) / calls
    free = _least(lambda: [t.add_(1) for _ in range(calls)], repeats) / calls
    torch.cuda.synchronize()
    return max(0.0, synced - free)


def measure(model: ModelSpec, device_name: str = "cpu", repeats: int = 5) -> HostProfile:
    """Count and time the host's work for `model`'s decoder layer on `device_name` (cpu or cuda)."""
    import torch

    from cost_models.profile.layerprofile import decoder_module

    if device_name not in ("cpu", "cuda"):
        raise InputError(f"--device must be cpu or cuda, got {device_name!r}")
    if device_name == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: no CUDA device is visible to PyTorch")
    device = torch.device(device_name)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the host issues from one thread; tiny CPU kernels gain nothing from a pool but waits
    try:
        return _measure(model, device, repeats, decoder_module)
    finally:
        torch.set_num_threads(threads)


def _measure(model: ModelSpec, device: Any, repeats: int, decoder_module: Callable[[ModelSpec], Any]) -> HostProfile:
    import torch

    from cost_models.compute import host

    module, built_with = decoder_module(tiny(model))
    module = module.to(device)
    x = torch.randn(1, TINY_TOKENS, TINY_HEAD_DIM, device=device, requires_grad=True)
    f_ops, b_ops = count_ops(module, x)

    def forward_backward() -> float:
        begin = time.perf_counter_ns()
        module(x).float().square().mean().backward()
        end = time.perf_counter_ns()
        module.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (end - begin) / 1e3

    wall = min([forward_backward() for _ in range(repeats + 2)][2:])
    coarse = host.forward_ops(model, 1, False) * (1 + host.BACKWARD_OPS_RATIO)
    optimizer = torch.optim.AdamW(module.parameters(), foreach=True)
    for p in module.parameters():
        p.grad = torch.zeros_like(p)
    step_ms = _least(optimizer.step, repeats) / 1e3
    return HostProfile(device.type, built_with, f_ops, b_ops, wall / max(1, f_ops + b_ops), coarse, wall / coarse,
                       _collective_us(device, repeats), _sync_us(device, repeats), step_ms)


def fragment(profile: HostProfile, model: str) -> str:
    """A hardware-profile fragment (the node's host_op_us) with the other measurements as comments, set beside the
    counts cost_models/compute/host.py assumes."""
    from cost_models.compute import host

    op = max(profile.op_us, 1e-3)
    lines = [f"# Measured by `meshplan profile host` on {profile.device} ({model}'s decoder layer: "
             f"{profile.built_with},",
             f"# width {TINY_HEAD_DIM}, {TINY_TOKENS} tokens, so the host, not the kernels, sets the time):",
             f"#   operators per forward {profile.forward_ops}, per backward {profile.backward_ops} "
             f"(ratio {profile.backward_ops / max(1, profile.forward_ops):.2f}; cost_models/compute/host.py assumes "
             f"{host.BACKWARD_OPS_RATIO:g})",
             f"#   host time per aten operator {profile.aten_us:.2f} us; per operator as cost_models/compute/host.py "
             f"counts them ({profile.counted_ops:g} per forward and backward) {profile.op_us:.2f} us",
             f"#   one torch.distributed all_reduce call {profile.collective_us:.1f} us = "
             f"{profile.collective_us / op:.1f} operators (assumed {host.COLLECTIVE_HOST_OPS:g})",
             f"#   one host sync adds {profile.sync_us:.1f} us = {profile.sync_us / op:.1f} operators (assumed "
             f"{host.DRAIN_OPS:g} with the re-issue)",
             f"#   one AdamW step over the tiny layer {profile.step_ms:.3f} ms",
             "# Merge over a preset with --hardware PRESET,this_file.yaml.",
             "node:", f"  host_op_us: {profile.op_us:.3f}", ""]
    return "\n".join(lines)


__all__ = ["HostProfile", "count_ops", "fragment", "measure", "tiny"]
