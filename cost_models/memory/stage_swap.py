"""Pipeline stages swapped between GPU and host memory (Mobius: Feng et al., ASPLOS 2023, "Mobius: Fine Tuning
Large-Scale Models on Commodity GPU Servers").

The model is cut into S = k·G stages for G GPUs, more stages than GPUs can hold; GPU g runs stages g, g + G, ...,
each for all m micro-batches (GPipe order: every forward, then every backward in reverse), and holds only the
stage it runs and the one it prefetches. A stage's 16-bit weights come in over PCIe before its forward and again
before its backward, prefetched while the stage before it computes; its gradients go back beside its backward;
Adam runs on the host (cost_models/memory/offload.py, as ZeRO-Offload), after the last backward. With the copy of the
next stage hidden behind the current one, a GPU's pass over its k stages takes
    pass = load₁ + Σᵢ max(m·tᵢ, loadᵢ₊₁)          loadᵢ = Wᵢ / PCIe (gradients out: the other direction)
and the pipeline fills once per pass: (G − 1) micro-batch stage times before the last GPU starts. The step is
    step = fwd pass + (G − 1)·t_f + bwd pass + (G − 1)·t_b + CPU Adam over the GPU's share of the parameters
(the busiest GPU: the one whose stages hold the LM head). Mobius's stage sizes come from its MIP and its cross
mapping of stages to GPUs lessens PCIe contention; here stages are even and every GPU copies at once, sharing the
links as `offload.pcie_bytes_per_s` does. No launcher meshplan writes for runs this (Mobius is not public):
benchmarks/offload_papers.py prices it beside the published figures; the planner does not search it.
Not priced: each micro-batch's activation crossing to the next stage's GPU (every stage boundary crosses one). It runs
beside the other micro-batches' compute; priced as max(compute, transfer) per micro-batch over the RTX 4090 server's
host-staged path it moves the RoundPipe artifact's Mobius rows by 3 points at most.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_models.compute.knobs import LayerTime
from cost_models.memory.offload import cpu_adam_time, pcie_time
from meshcore import ClusterSpec


@dataclass(frozen=True)
class SwapStage:
    """One stage as stage swapping runs it: its compute per micro-batch (forward; backward with any recomputation)
    and the 16-bit bytes of its weights and of its gradients."""

    forward_s: float
    backward_s: float
    weight_bytes: float
    grad_bytes: float

    @classmethod
    def of_layers(cls, layers: list[LayerTime], params: float, weight_bytes: float = 2.0,
                  grad_bytes: float = 2.0) -> SwapStage:
        return cls(sum(t.forward for t in layers), sum(t.backward + t.recompute for t in layers),
                   params * weight_bytes, params * grad_bytes)


def swapped_pass(stages: list[SwapStage], microbatches: int, backward: bool, cluster: ClusterSpec) -> float:
    """One GPU's forward (or backward) pass over its `stages`, in the order it runs them: the first stage's weights
    load exposed, each next one's behind the current stage's m micro-batches (with the gradients of the backward
    going out the other way)."""
    if not stages:
        return 0.0
    total = pcie_time(stages[0].weight_bytes, cluster)
    for i, stage in enumerate(stages):
        compute = microbatches * (stage.backward_s if backward else stage.forward_s)
        nxt = pcie_time(stages[i + 1].weight_bytes, cluster) if i + 1 < len(stages) else 0.0
        out = pcie_time(stage.grad_bytes, cluster) if backward else 0.0
        total += max(compute, nxt, out)
    return total


def stage_swap_step(per_gpu: list[list[SwapStage]], microbatches: int, params_per_gpu: float,
                    cluster: ClusterSpec) -> float:
    """Seconds per step of stage swapping (module docstring): `per_gpu[g]` the stages GPU g runs, in its forward
    order; the busiest GPU's passes, the pipeline's fill in each direction (one micro-batch of each stage on the
    G − 1 GPUs before the last), and CPU Adam over `params_per_gpu` parameters."""
    gpus = len(per_gpu)
    fwd = max(swapped_pass(s, microbatches, False, cluster) for s in per_gpu)
    bwd = max(swapped_pass(s[::-1], microbatches, True, cluster) for s in per_gpu)
    fill_f = (gpus - 1) * max((s[0].forward_s for s in per_gpu if s), default=0.0)
    fill_b = (gpus - 1) * max((s[-1].backward_s for s in per_gpu if s), default=0.0)
    return fwd + fill_f + bwd + fill_b + cpu_adam_time(params_per_gpu, cluster)
