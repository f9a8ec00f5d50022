"""Memory as a runtime holds it at its peak, beyond weights, optimizer state and stored activations, and what its
caching allocator reserves (meshcore.execution.HeldMemory, the `memory` section of a runtime profile). The
defaults price Megatron-core as cost_models/memory/footprint.py always has; torchtitan's values are read from its code
at the
build of its December 2024 tables (torchtitan 9dec370, torch 1963fc8; hardware_profiles/runtimes/torchtitan.yaml):

- the loss: train.py `F.cross_entropy(pred.flatten(0, 1).float(), labels)`. Without TP, ATen's log_softmax keeps its
  fp32 output for the backward; at the backward's peak that output (4 B per logit), nll_loss's fp32 gradient (4) and
  log_softmax's fp32 gradient (4) live together: 12 B. With TP torch's loss_parallel runs
  torch/distributed/tensor/parallel/loss.py: its fused nll/log-softmax backward returns
  `(grad_input + torch.exp(x)) * grad_output` beside the saved fp32 output x: x, grad_input, exp(x) and their sum,
  16 B per logit of the rank's V/tp vocabulary;
- under a pipeline the last stage keeps every micro-batch's output (the bf16 logits, 2 B) in
  `PipelineStage.output_chunks` until the step ends (torch/distributed/pipelining/stage.py, forward_one_chunk);
- FSDP2 never reshards the root module after its forward (`_lazy_init`: the root's post_forward_mesh_info is None;
  unconditionally in the torch of December 2024, in later torch when reshard_after_forward is left to FSDP), so the
  embedding, final norm and output layer stay gathered in bf16 through the backward;
- the loss's backward finishes before the last layer is recomputed (`del pred; loss.backward()`): the peak holds the
  larger of the two, not both;
- a layer recomputed under checkpointing allocates what its backward saves again and its gradients; torch's DTensor
  keeps TP's gathered inputs at full width h (`WorkingBytes.gathered`), unlike Transformer Engine's sequence-parallel
  GEMMs, which keep the sharded input and gather it again;
- PyTorch's caching allocator (torchtitan launches with expandable_segments) reports as max reserved more than the
  peak's allocations: the blocks of what each step allocates and frees (loss buffers, a layer's working set, under a
  pipeline the gradients accumulated unsharded) are cut up by tensors that live on; `reserve_share` of them is held
  beyond the peak, and never more than the GPU less what lives outside the allocator (CUDA context, NCCL buffers: with
  NVLink SHARP several GB per communicator on H100, NVIDIA/nccl issue 864, NeMo-Framework-Launcher PR 127). Both are
  fitted on torchtitan's printed peaks (benchmarks/calibration.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshcore import ModelSpec, Recompute
from meshcore.execution import HeldMemory


def loss_logit_bytes(tp: int, logit_bytes: float, held: HeldMemory) -> float:
    """Bytes per logit at the loss's backward peak: the vocabulary-parallel loss's (tp > 1) where the runtime has one
    of its own (HeldMemory.parallel_logit_bytes; torchtitan's loss_parallel 16), else `logit_bytes` (Megatron's
    fused vocabulary-parallel cross-entropy 6, torchtitan's F.cross_entropy 12)."""
    if tp > 1 and held.parallel_logit_bytes is not None:
        return held.parallel_logit_bytes
    return logit_bytes


def kept_logits_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, microbatches: int,
                      held: HeldMemory) -> float:
    """The last pipeline stage's outputs kept to the step's end: m · (mbs·s/cp) · V/tp · kept_logit_bytes."""
    return microbatches * mbs * seq_len / cp * model.vocab_size / tp * held.kept_logit_bytes


def root_gathered_bytes(end_params: float, held: HeldMemory, gather_bytes: float = 2.0) -> float:
    """FSDP2's root module gathered through the backward: the rank's embedding, final norm and output layer
    parameters `end_params` at `gather_bytes` (bf16: torchtitan's param_dtype); 0 where the runtime reshards it."""
    return end_params * gather_bytes if held.root_gathered else 0.0


def working_bytes(model: ModelSpec, seq_len: int, mbs: int, tp: int, cp: int, sp: bool, recompute: Recompute,
                  held: HeldMemory) -> float | None:
    """Bytes one layer allocates while recomputed and run backward, for its mbs·s/cp tokens: the runtime's count per
    token (HeldMemory.working_full / working_selective) of the widths h (gathered), h·r, q/t, kv/t and f/t; None where
    the runtime has no count for `recompute` (the caller keeps Megatron's: the layer's activations)."""
    counts = {Recompute.FULL: held.working_full, Recompute.SELECTIVE: held.working_selective}.get(recompute)
    if counts is None:
        return None
    h = model.hidden_size
    kv = max(1, model.num_kv_heads // tp) * model.head_dim
    per_token = counts.per_token(h, h / tp if sp else h, model.q_dim / tp, kv, model.ffn_hidden_size / tp)
    return mbs * seq_len / cp * per_token


def held_at_peak(loss: float, working: float, held: HeldMemory) -> float:
    """What the loss and a recomputed layer add to the peak: the larger where they come one after the other
    (HeldMemory.loss_apart), else both (Megatron's pricing)."""
    return max(loss, working) if held.loss_apart else loss + working


def allocator_reserve(transient: float, held: HeldMemory) -> float:
    """Bytes the caching allocator reserves beyond the peak's allocations: reserve_share of the memory allocated and
    freed within every step (`transient`: loss buffers, the layer working set, gradients accumulated unsharded)."""
    return held.reserve_share * transient


def reserved_gib(allocated_gib: float, reserve_gib: float, capacity_gib: float, outside_gib: float) -> float:
    """What torch.cuda.max_memory_reserved reports (torchtitan prints it as its memory): the allocations at the peak
    and the allocator's reserve, at most the GPU less the memory outside the allocator (past that the allocator frees
    its cached blocks and retries)."""
    return min(allocated_gib + reserve_gib, capacity_gib - outside_gib)


__all__ = ["allocator_reserve", "held_at_peak", "kept_logits_bytes", "loss_logit_bytes", "reserved_gib",
           "root_gathered_bytes", "working_bytes", "StageHeld"]


@dataclass(frozen=True)
class StageHeld:
    """What a stage holds in bytes besides its weights, gradients and optimizer states, for each micro-batch of
    activations it keeps in flight (`in_flight`): its stored decoder activations per micro-batch; other activations
    and working buffers; the allocator's reserve beyond them (`allocator_reserve`); with activation offload, what
    the offloaded activations leave on the GPU (about two layers' worth: one going out, one coming back in)."""

    stored: float
    other: float
    reserve: float
    offloaded: float | None = None  # None: activations stay on the GPU

    def in_flight(self, alive: float) -> tuple[float, float]:
        """(activations on the GPU, activations offloaded to the host) with `alive` micro-batches in flight."""
        if self.offloaded is None:
            return self.stored * alive, 0.0
        return self.offloaded, self.stored * alive
