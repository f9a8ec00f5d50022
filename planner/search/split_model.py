"""The split problems of `planner.search.partition` and their answer, as data: a uniform stack (`SplitProblem`, its
affine stage model derived in partition's docstring) and a stack of layers of several kinds (`KindSplitProblem`).
Apart from the solvers so that posing a problem (`planner.search.splits`) or reading an ILP's answer does not load
numpy: a plan that solves no split (the interleaved and balanced candidates) starts without it (issue 36)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SplitProblem:
    num_layers: int
    num_microbatches: int
    t0: tuple[float, ...]  # per stage: time with one layer, no recomputation
    t1: float  # time per additional layer
    tr: float  # extra time per fully recomputed layer
    m0: tuple[float, ...]  # per stage: bytes with one layer
    m1: tuple[float, ...]  # per stage: bytes per additional layer
    mr: tuple[float, ...]  # per stage: bytes saved per fully recomputed layer
    transient: float  # bytes held while a recomputed layer runs its backward
    capacity: float
    partial_recompute: bool  # may recompute some layers of a stage fully
    w0: tuple[float, ...] = ()  # zero-bubble schedules: per stage, weight-gradient time with one layer
    w1: float = 0.0  # ... and per additional layer; the sum term of every stage but the last drops it

    def __post_init__(self) -> None:
        if not len(self.t0) == len(self.m0) == len(self.m1) == len(self.mr):
            raise ValueError("t0, m0, m1 and mr need one entry per stage")
        if self.t1 <= 0 or self.tr < 0 or any(b < 0 or a <= b for a, b in zip(self.m1, self.mr, strict=True)):
            raise ValueError("need t1 > 0, tr >= 0 and m1 > mr >= 0 per stage: a recomputed layer still "
                             "holds its weights and its input")

    @property
    def num_stages(self) -> int:
        return len(self.t0)


@dataclass(frozen=True)
class Split:
    layers: tuple[int, ...]
    recompute: tuple[int, ...]  # fully recomputed layers per stage
    stage_times: tuple[float, ...]
    objective: float  # (m − 1)·max + Σ

    @property
    def bottleneck(self) -> float:
        return max(self.stage_times)


@dataclass(frozen=True)
class KindSplitProblem:
    """The split problem for a stack whose layers differ in kind (dense and MoE MLPs): layer l has kind
    kinds[l] and each kind its own per-layer time and memory. Stage s holding layers [i, j), the first r of
    them fully recomputed (Megatron-LM's block method), costs
        T_s = t0_s + Σ_l t1[k_l] + Σ_{first r} tr[k_l]
        M_s = m0_s + Σ_l m1[s][k_l] − Σ_{first r} mr[s][k_l] + transient·[r > 0]  <=  capacity,
    where the sums run over the segment's layers; r is the fewest that fit. The objective is that of
    `SplitProblem`, solved over segments by the same bottleneck scan and min-plus DP."""

    kinds: tuple[int, ...]
    num_microbatches: int
    t0: tuple[float, ...]  # per stage
    t1: tuple[float, ...]  # per kind
    tr: tuple[float, ...]  # per kind
    m0: tuple[float, ...]  # per stage
    m1: tuple[tuple[float, ...], ...]  # per stage, per kind
    mr: tuple[tuple[float, ...], ...]  # per stage, per kind
    transient: float
    capacity: float
    partial_recompute: bool
    w0: tuple[float, ...] = ()  # zero-bubble schedules: per stage
    w1: tuple[float, ...] = ()  # per kind

    @property
    def num_layers(self) -> int:
        return len(self.kinds)

    @property
    def num_stages(self) -> int:
        return len(self.t0)
