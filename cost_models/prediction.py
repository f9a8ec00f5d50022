"""What a prediction says: the step time and headline figures, the seconds of the step by cause, and each pipeline
rank's time and memory."""

from __future__ import annotations

from dataclasses import dataclass, field

from cost_models.compute.knobs import LayerTime


@dataclass(frozen=True)
class StageCost:
    """One pipeline rank: its layers, time per micro-batch and peak memory per GPU."""

    pp_rank: int
    first_layer: int  # decoder layer indices, inclusive; -1/-1 when the stage holds none
    last_layer: int
    num_layers: int
    has_embedding: bool
    has_lm_head: bool
    time: LayerTime  # per micro-batch, all model chunks of this rank
    p2p_s: float  # per micro-batch
    sharded_dp_exposed_s: float  # per micro-batch (ZeRO-2/3)
    dp_exposed_s: float  # per step
    optimizer_s: float  # per step
    weights_gib: float
    gradients_gib: float
    optimizer_state_gib: float
    activations_gib: float  # stored decoder-layer activations at the stage's peak
    other_gib: float  # embedding/logits activations, recompute and ZeRO-3 working buffers
    buffers_gib: float
    layers: StageLayers = field(default_factory=lambda: StageLayers())
    offload_s: float = 0.0  # per micro-batch: host copies (weights, activations) their passes do not hide
    offload_forward_s: float = 0.0  # the part of offload_s in the forward passes
    host_gib: float = 0.0  # host memory per GPU: offloaded optimizer state, weights and activations
    # what the caching allocator reserves beyond the peak's allocations (cost_models.memory.held)
    reserve_gib: float = 0.0

    @property
    def compute_s(self) -> float:
        """Forward + backward (+ recompute) seconds per micro-batch, communication included."""
        return self.time.total + self.p2p_s + self.sharded_dp_exposed_s + self.offload_s

    @property
    def peak_memory_gib(self) -> float:
        return self.peak_with(self.activations_gib)

    def peak_with(self, activations_gib: float) -> float:
        """`peak_memory_gib` with `activations_gib` in place of the stage's own activations (the split search reads a
        stage's peak at other counts of micro-batches in flight)."""
        return (self.weights_gib + self.gradients_gib + self.optimizer_state_gib + activations_gib
                + self.other_gib + self.buffers_gib)


@dataclass(frozen=True)
class Breakdown:
    """Seconds of one step by cause, along the critical path; they add up to the step time."""

    compute_s: float
    recompute_s: float
    tp_comm_s: float
    cp_comm_s: float
    ep_comm_s: float
    pp_p2p_s: float
    sharded_dp_comm_s: float
    bubble_s: float
    dp_comm_s: float
    optimizer_s: float
    embedding_sync_s: float
    host_s: float = 0.0  # the GPU waiting for the host to issue kernels (host-bound layers)
    offload_s: float = 0.0  # host copies of offloaded weights and activations their passes do not hide

    def as_dict(self) -> dict[str, float]:
        return {k.removesuffix("_s"): v for k, v in self.__dict__.items()}


def step_breakdown(stages: list[StageCost], m: int, pipe_s: float, emb_sync_s: float) -> Breakdown:
    """Seconds of a step by cause: the slowest stage's terms over the `m` micro-batches, the rest of the pipeline
    term `pipe_s` as its bubble, and the tail (gradient reduction, optimizer) of the stage with the longest."""
    worst = max(stages, key=lambda s: s.compute_s)
    tail = max(stages, key=lambda s: s.dp_exposed_s + s.optimizer_s)
    t = worst.time
    return Breakdown(
        compute_s=m * (t.forward + t.backward), recompute_s=m * t.recompute, tp_comm_s=m * t.tp_comm,
        cp_comm_s=m * t.cp_comm, ep_comm_s=m * t.ep_comm, pp_p2p_s=m * worst.p2p_s,
        sharded_dp_comm_s=m * worst.sharded_dp_exposed_s, bubble_s=pipe_s - m * worst.compute_s,
        dp_comm_s=tail.dp_exposed_s, optimizer_s=tail.optimizer_s, embedding_sync_s=emb_sync_s, host_s=m * t.host,
        offload_s=m * worst.offload_s)


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    peak_memory_gib: float
    memory_capacity_gib: float
    fits: bool
    bubble_fraction: float
    num_microbatches: int
    breakdown: Breakdown
    stages: tuple[StageCost, ...]
    host_memory_gib: float = 0.0  # what offloading needs of the busiest node's host memory
    host_capacity_gib: float = 0.0  # what offloading may use of it

    @property
    def reserved_gib(self) -> float:
        """What torch.cuda.max_memory_reserved would report on the busiest GPU (torchtitan prints it as its memory):
        each stage's allocations at its peak (without what lives outside the caching allocator) and the allocator's
        reserve, capped by the GPU less that outside memory (cost_models.memory.held.reserved_gib)."""
        return max(min(s.peak_memory_gib - s.buffers_gib + s.reserve_gib, self.memory_capacity_gib - s.buffers_gib)
                   for s in self.stages)


@dataclass(frozen=True)
class StageLayers:
    """Decoder layers of one pipeline rank by kind, and how many of each are fully recomputed."""

    dense: int = 0
    moe: int = 0
    dense_full: int = 0
    moe_full: int = 0

    @property
    def total(self) -> int:
        return self.dense + self.moe

    @property
    def full(self) -> int:
        return self.dense_full + self.moe_full

    @staticmethod
    def of(kinds: tuple[bool, ...], n_full: int) -> StageLayers:
        """Counts for the layers with MoE flags `kinds` (in order), the first `n_full` fully recomputed."""
        moe = sum(kinds)
        moe_full = sum(kinds[:n_full])
        return StageLayers(len(kinds) - moe, moe, n_full - moe_full, moe_full)
