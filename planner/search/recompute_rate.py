"""What full recomputation of layers costs the average stage at the least, for `SearchBounds.recompute_floor`: the
seconds per byte saved (`recompute_rates`; one kind's, `byte_rate`) and the stage's growth net of the exposed
communication a wider backward window may hide (`stage_growth`). Pure functions of numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from cost_models.compute.knobs import LayerTime


def recompute_rates(kinds: Sequence[tuple[LayerTime, LayerTime, float]], full_act: float,
                    kappa: float) -> tuple[float, float] | None:
    """(ρ_κ, ρ): the least seconds per activation byte that fully recomputing a layer adds, over the kinds
    (base, full: its times at the candidate's own recomputation and fully recomputed; a: its activation bytes) that
    save bytes (a > full_act). A layer adds t_k = full.total − base.total, of which w_k = full.recompute −
    base.recompute widen the backward window beside which sharded traffic runs; ρ = min_k t_k/(a_k − full_act) and
    ρ_κ = min_k (t_k − (1 − κ)·w_k)/(a_k − full_act), what remains if every such second hides (1 − κ) seconds of
    traffic (`GpuSpec.exposed`). None where no kind saves bytes, where full recomputation would change a forward or
    backward time or lower a layer's time (the bound's other terms price the candidate's own)."""
    rate_kappa, rate = math.inf, math.inf
    for base, full, act in kinds:
        added = full.total - base.total
        net = added - (1.0 - kappa) * max(full.recompute - base.recompute, 0.0)
        if full.forward != base.forward or full.backward != base.backward or net < 0:
            return None
        if act > full_act:
            rate_kappa, rate = min(rate_kappa, net / (act - full_act)), min(rate, added / (act - full_act))
    if not math.isfinite(rate_kappa) or rate_kappa <= 0:
        return None
    return rate_kappa, rate


def byte_rate(base: LayerTime, full: LayerTime, act: float, full_act: float) -> float:
    """ρ_k: the seconds per activation byte that fully recomputing a layer adds, (full.total − base.total)/(a −
    full_act) at no less than 0; 0 where its recomputation frees nothing (a <= full_act)."""
    return max((full.total - base.total) / (act - full_act), 0.0) if act > full_act else 0.0


def stage_growth(saved: float, rates: tuple[float, float], hideable: float) -> float:
    """A lower bound on what fully recomputed layers that save `saved` activation bytes (per rank in flight, averaged
    over the ranks) add to the average stage's seconds per micro-batch, exposed communication included, where wider
    backward windows can hide at most `hideable` seconds of that stage's exposure (its exposed sharded traffic less
    that beside an endless window, and its host copies).

    Proof. Layers x_k of kind k saving Σ_k x_k·(a_k − a_full) >= saved add T = Σ x_k·t_k seconds, W = Σ x_k·w_k of
    them to the backward window (`recompute_rates`). What that window hides of the traffic beside it is at most
    (1 − κ)·W (each `GpuSpec.exposed(c, w)` = max(c − w, 0) + κ·min(c, w) falls at slope at most 1 − κ in w) and at
    most `hideable` (exposure is nonincreasing in the window, at least its value beside an endless one). So the stage
    grows by at least max(T − (1 − κ)·W, T − hideable) >= max(ρ_κ·saved, ρ·saved − hideable), each of T − (1 − κ)·W
    and T at least its rate times the bytes saved. All of it on the average stage as `SearchBounds._bound` prices it
    (its exposure convex in traffic and window, the ranks' average is above it: Jensen), with T, W and the bytes
    saved averages over the ranks."""
    rate_kappa, rate = rates
    return max(rate_kappa * saved, rate * saved - hideable, 0.0)
