"""The fills of a pipeline over every split of its work (planner.search.sim_bounds' path bounds before a split is
known): 1F1B and GPipe (`minimax_fill`), the zero-bubble orders (`ordered_fills`, from the rows of `path_fill`), the
V schedules (`v_fill`) and the wave (`wave_fill`), each the least the simulator can take over T_0 .. T_{p-1} summing
to a total; and the closed form's fill on the average stage (`closed_fill`, for the group floors)."""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.registry import pricing
from cost_models.pipeline.zb_auto import trailing_weight_ops
from meshcore import Schedule
from meshcore.schedules import ScheduleFamily, spec_of


def minimax_fill(total: float, pp: int, m: int, hop: float) -> float:
    """The least of max_d (S_d + m·T_d + 2d·hop) over T_0 .. T_{p−1} summing to `total`, S_d = Σ_{j<d} T_j: a lower
    bound on the simulated 1F1B (or GPipe) pipeline of any split with that total work per micro-batch.

    If every path were below X, T_d < (X − 2d·hop − S_d)/m, so S_{d+1} < S_d·(1 − 1/m) + (X − 2d·hop)/m and by
    induction total = S_p < X·(1 − q^p) − Σ_d (2d·hop/m)·q^(p−1−d), q = 1 − 1/m: X is at least the value below."""
    sends, share = minimax_terms(pp, m, hop)
    return (total + sends) / share


def minimax_terms(pp: int, m: int, hop: float) -> tuple[float, float]:
    """(Σ_d (2d·hop/m)·q^(p−1−d), 1 − q^p) of `minimax_fill`, which is (total + the first) / the second: what it
    reads besides the total, for a caller that asks for many totals of one (pp, m, hop)."""
    q = 1.0 - 1.0 / m
    return sum(2 * d * hop / m * q ** (pp - 1 - d) for d in range(pp)), 1.0 - q**pp


def path_fill(a: float, mu: Sequence[float], k: int) -> tuple[float, float]:
    """(α, β) with α·X − β·hop >= total for every X >= max_d (a·S_d + mu[d]·T_d + k·d·hop) over T_0 .. T_{p−1} >= 0
    summing to `total`, S_d = Σ_{j<d} T_j, for 0 <= a <= mu[d]: so the pipeline's path is at least (total + β·hop)/α
    (`minimax_fill` is a = 1, mu = m, k = 2). A lower bound on a pipeline whose stage d's path has that form for every
    split (the zero-bubble schedules' rows of `split_rows`, with S_d and T_d the stages' whole times).

    If every path were at most X, T_d <= (X − k·d·hop − a·S_d)/mu[d], so S_{d+1} <= (1 − a/mu[d])·S_d + (X −
    k·d·hop)/mu[d], a bound that grows with S_d; by induction S_d <= α_d·X − β_d·hop with α_{d+1} = (1 − a/mu[d])·α_d
    + 1/mu[d] and β_{d+1} = (1 − a/mu[d])·β_d + k·d/mu[d] from α_0 = β_0 = 0."""
    alpha = beta = 0.0
    for d, mu_d in enumerate(mu):
        keep = 1.0 - a / mu_d
        alpha, beta = keep * alpha + 1.0 / mu_d, keep * beta + k * d / mu_d
    return alpha, beta


def ordered_fills(schedule: Schedule, pp: int, m: int, forward_share: float, weight_share: float
                  ) -> list[tuple[float, float]]:
    """`path_fill`'s (α, β) of the rows `split_rows` gives ZB-H1 and ZB-H2 (family ORDERED_W, one chunk per rank):
    the forwards before stage d, φ·S_d + m·T_d + d·hop; and, where every stage has it (m − n_d·ω >= 1), the path
    through its last input gradient, (1 − ω)·S_d + (m − n_d·ω)·T_d + 2d·hop. Over any split of P seconds per
    micro-batch the pipeline is at least max over them of (P + β·hop)/α: a bound a candidate's key can take before
    its split is known (most of the 1F1B fill `minimax_fill` gives where m is small beside pp and the work bound alone
    sees none)."""
    fills = [path_fill(forward_share, [float(m)] * pp, 1)]
    late = [m - trailing_w(schedule, d, pp, m) * weight_share for d in range(pp)]
    if min(late) >= max(1.0, 1 - weight_share):
        fills.append(path_fill(1 - weight_share, late, 2))
    return fills


def v_fill(total: float, pp: int, m: int, hop: float, forward_share: float, tau: float, layers: int) -> float:
    """The least simulated V (ZB-V, DualPipeV, V-Half, V-Min: rank d holds chunks d and 2p − 1 − d and its first op is
    the forward of its down chunk d) over every split of `layers` layers, each at least `tau` seconds, whose ranks'
    times T_d sum to Q >= `total` (embedding and head anywhere). Rank d's down chunk holds at least (n_d − 1)/2 of its
    n_d layers (half rounded down, or balanced chunks) and the simulator shares a rank's time by layers, so that
    chunk's forward is at least φ·τ·(n_d − 1)/2 (φ = `forward_share`, a = φ/2) and rank d starts no earlier than
    a·τ·(N_d − d) + d·hop, N_d = Σ_{j<d} n_j: path_d >= m·T_d + a·τ·N_d + d·(hop − a·τ). Each layer taking at least
    τ, τ·Σ_{j>=d} n_j <= Σ_{j>=d} T_j = Q − S_d (S_d = Σ_{j<d} T_j), so N_d·τ >= L·τ − Q + S_d and path_d >=
    a·S_d + m·T_d + g_d with g_d = a·(L·τ − Q) + d·(hop − a·τ): `path_fill`'s rows (k = 1; its induction holds for
    any constants g_d and gives Q <= α·X − Σ_d w_d·g_d, Σ_d w_d = α, Σ_d w_d·d = β). So α·X >= Q − a·α·(L·τ − Q) −
    β·(hop − a·τ): X >= (Q + β·(hop − a·τ))/α − a·(Q − L·τ), whose coefficient of Q, 1/α − a = a·q^p/(1 − q^p) with
    q = 1 − a/m, is >= 0: the bound holds for any `total` <= Q and grows with it and with the hop."""
    a = forward_share / 2
    alpha, beta = path_fill(a, [float(m)] * pp, 1)
    return v_fill_at(total, hop, a, alpha, beta, tau, layers)


def v_fill_at(total: float, hop: float, a: float, alpha: float, beta: float, tau: float, layers: int) -> float:
    """`v_fill` from its `path_fill` (α, β) and a = φ/2."""
    return (total + beta * (hop - a * tau)) / alpha - a * (total - layers * tau)


def wave_fill(total: float, pp: int, m: int, hop: float, tau: float, layers: int, vpp: int) -> float:
    """The least simulated wave (vpp chunks per rank, chunk j·p + d on rank d in its even sweeps: rank d's first chunk
    is chunk d) over every split of `layers` layers, each at least `tau` seconds, whose ranks' times T_d sum to
    Q >= `total`. Rank d's first op is a forward of chunk d (every other chunk of the rank comes later in the model)
    and waits for the forwards of chunks 0 .. d − 1, the first chunks of the ranks before it; its last op is a
    backward of chunk d (its backward comes after those of the rank's later chunks), and the backwards of chunks
    d − 1 .. 0 follow it, each a send away. The wave's backward is whole (recomputation, input and weight gradient), so
    those chunks' forward and backward are their whole time, at least τ per layer, and rank j's first chunk holds
    ⌊n_j/v⌋ >= (n_j − v + 1)/v of its n_j layers (`splits.v_chunks`; balanced chunks as many at the least): path_d >=
    m·T_d + a·τ·(N_d − (v − 1)·d) + 2d·hop with a = 1/v, N_d = Σ_{j<d} n_j. As in `v_fill`, N_d·τ >= L·τ − Q + S_d,
    so path_d >= a·S_d + m·T_d + g_d with g_d = a·(L·τ − Q) + d·(2·hop − a·τ·(v − 1)), and `path_fill`'s induction gives
    X >= (Q + β·(2·hop − a·τ·(v − 1)))/α − a·(Q − L·τ), which grows with Q (`v_fill`'s argument) and the hop."""
    a = 1.0 / vpp
    alpha, beta = path_fill(a, [float(m)] * pp, 1)
    return wave_fill_at(total, hop, a, alpha, beta, tau, layers, vpp)


def wave_fill_at(total: float, hop: float, a: float, alpha: float, beta: float, tau: float, layers: int,
                 vpp: int) -> float:
    """`wave_fill` from its `path_fill` (α, β) and a = 1/v."""
    return (total + beta * (2 * hop - a * tau * (vpp - 1))) / alpha - a * (total - layers * tau)


def trailing_w(schedule: Schedule, stage: int, pp: int, m: int) -> int:
    """The most weight-gradient ops stage `stage`'s order runs after its last input gradient: the pending ones and the
    one the last input gradient releases (ZB-H1 keeps d pending, ZB-H2 2d: cost_models.pipeline.zero_bubble); an
    order laid out per (p, m) with no such rule (ZB-2p, `pending_w` 0) has them counted off it."""
    pending = spec_of(schedule).pending_w
    return pending * stage + 1 if pending else trailing_weight_ops(pricing(schedule).program(pp, m, 1).orders[stage])


def closed_fill(schedule: Schedule, v: int, p: int, a: float, f: float, b: float) -> float:
    """The least closed-form pipeline fill of a shape beyond (m − 1)·A on the average stage's (A, f̄, b̄)
    (`SearchBounds.group_floor`'s docstring has the proof)."""
    hides, family = pricing(schedule).hides, spec_of(schedule).family
    if pricing(schedule).laid_out:  # ZB-2p: no closed form bounds its fill
        return a
    if hides:  # each stage but the last hides at most `hides` weight gradients
        return p * a - hides * W_SHARE * p * b
    if family is ScheduleFamily.V:
        return a + (p - 1) * f / 2
    if family is ScheduleFamily.WAVE:
        return a + 2 * (p - 1) * max(f, a - f) / v
    return a * (1 + (p - 1) / v)
