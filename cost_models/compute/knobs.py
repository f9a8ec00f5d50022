"""What prices one layer and what it costs: the knobs a layer's time depends on (tp, cp, sp, mbs, recompute, the expert
mesh) and the seconds of one layer and micro-batch on one GPU by cause."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from meshcore import Recompute, RecomputeModule
from meshcore.mesh import Mesh


@dataclass(frozen=True)
class LayerTime:
    """Seconds for one layer and one micro-batch on one GPU."""

    forward: float = 0.0
    backward: float = 0.0
    recompute: float = 0.0
    tp_comm: float = 0.0
    cp_comm: float = 0.0  # exposed part only
    ep_comm: float = 0.0  # expert-parallel all-to-all (and expert-TP gathers), not overlapped
    host: float = 0.0  # the GPU waiting for the host to issue kernels (cost_models/compute/host.py)

    @property
    def total(self) -> float:
        return (self.forward + self.backward + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm
                + self.host)

    def __add__(self, other: LayerTime) -> LayerTime:
        return LayerTime(self.forward + other.forward, self.backward + other.backward,
                         self.recompute + other.recompute, self.tp_comm + other.tp_comm,
                         self.cp_comm + other.cp_comm, self.ep_comm + other.ep_comm, self.host + other.host)

    def scaled(self, k: float) -> LayerTime:
        return LayerTime(self.forward * k, self.backward * k, self.recompute * k, self.tp_comm * k,
                         self.cp_comm * k, self.ep_comm * k, self.host * k)

    @staticmethod
    def scaled_sum(parts: Sequence[tuple[LayerTime, float]]) -> LayerTime:
        """Σ t.scaled(k) over `parts`, left to right, field by field: the same floats as `scaled` and `+`, without
        building each term (planner.search.bounds makes one per stage of each layout family: thousands a search)."""
        acc = [0.0] * 7
        for i, (t, k) in enumerate(parts):
            row = (t.forward * k, t.backward * k, t.recompute * k, t.tp_comm * k, t.cp_comm * k, t.ep_comm * k,
                   t.host * k)
            acc = list(row) if i == 0 else [x + y for x, y in zip(acc, row, strict=True)]
        return LayerTime(*acc)


@dataclass(frozen=True)
class LayerKnobs:
    tp: int
    cp: int
    sp: bool
    mbs: int
    recompute: Recompute
    ep: int = 1
    etp: int = 1
    modules: frozenset[RecomputeModule] = frozenset()  # what selective recomputation recomputes (Layout's)

    @cached_property
    def mesh(self) -> Mesh:
        """The mesh a layer's collectives run on: its TP, CP, EP and ETP groups (`Mesh.for_layer`)."""
        return Mesh.for_layer(self.tp, self.cp, self.ep, self.etp)


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one decoder layer stores per micro-batch: dense and MoE layers at the layout's recomputation,
    and a fully recomputed layer (its input only)."""

    dense: float
    moe: float
    full: float
    vision: float = 0.0  # the vision encoder and projector (first stage), per micro-batch
    # what a layer holds while its backward recomputes it (full recomputation, torchtitan's per-op policy): its
    # activations without recomputation, the larger of a dense and an MoE layer's
    working: float = 0.0


@dataclass(frozen=True)
class LayerTimes:
    """The per-layer times a layout needs; they depend only on `LayerKnobs`. `head` includes the
    multi-token-prediction modules; `moe`/`moe_full` are None for dense models."""

    decoder: LayerTime
    decoder_full: LayerTime
    embedding: LayerTime
    head: LayerTime
    moe: LayerTime | None = None
    moe_full: LayerTime | None = None
