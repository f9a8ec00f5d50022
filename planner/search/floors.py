"""Lower bounds over every way to give a pipeline's ranks their layers, for the search's floors (planner.search.bounds):
the heaviest rank's bytes (`packing_floor`), a weighted sum over ranks (`weighted_floor`), and the least bottleneck
of whole splits (`least_bottleneck`, `least_bottleneck_floor`). Pure functions of numbers."""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from operator import mul

from planner.search.held_kinds import HeldKinds


def weighted_floor(fixed: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int],
                   w: Sequence[float]) -> float:
    """A lower bound on Σ_r w_r·(fixed[r] + Σ per_layer[k][r] over the layers rank r holds), w >= 0, over every
    assignment of counts[k] layers of each kind k that gives every rank at least one: every rank is charged its
    fixed part and one layer of its cheapest kind, the other L − P layers μ_k = min_r w_r·c_rk each, the cheapest
    kinds first up to their counts (no assignment pays less)."""
    return _weighted(_least_ranks(fixed, per_layer), per_layer, counts, w)


def _least_ranks(fixed: Sequence[float], per_layer: Sequence[Sequence[float]]) -> list[float]:
    """fixed[r] + the cheapest layer of rank r: what `weighted_floor` charges each rank at least (computed once for
    every weighting of the same ranks)."""
    if len(per_layer) == 1:
        return [f + c for f, c in zip(fixed, per_layer[0], strict=True)]
    return [f + min(cs) for f, cs in zip(fixed, zip(*per_layer, strict=True), strict=True)]


def _weighted(least: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int],
              w: Sequence[float]) -> float:
    """`weighted_floor` from `_least_ranks`."""
    value: float = sum(map(mul, w, least))
    left = sum(counts) - len(least)
    for mu, n in sorted((min(map(mul, w, c)), n) for c, n in zip(per_layer, counts, strict=True)):
        take = min(n, max(left, 0))
        value, left = value + take * mu, left - take
    return value


def least_bottleneck(cost: Callable[[int, int], float], ranks: int, layers: int, least: int,
                     alike: Sequence[Hashable] | None = None) -> float:
    """min over whole splits (n_r >= `least`, Σ n_r = `layers`) of max_r cost(r, n_r), for costs that grow with n:
    every rank starts at `least` and each further layer goes to the rank whose next cost is least (the greedy min-max
    is optimal when every rank's costs grow). That greedy's bottleneck is the largest of the starting costs and the
    k-th least of all ranks' further costs cost(r, n), n > `least` (k = layers − least·ranks; each rank's grow, so
    they are taken in order). `alike`: per rank, a key on which its costs depend alone: ranks of one key have the
    same further costs, each of them counted once per rank, so the greedy runs over the keys (a V or wave pipeline's
    ranks are two kinds, the one with the embedding and head and the rest) to the same value."""
    if alike is None:
        alike = range(ranks)
    first: dict[Hashable, int] = {}
    weight: dict[int, int] = {}
    for r in range(ranks):
        q = first.setdefault(alike[r], r)
        weight[q] = weight.get(q, 0) + 1
    bottleneck = max((cost(r, least) for r in weight), default=0.0)
    nexts = [(cost(r, least + 1), r, least + 1) for r in weight]
    heapq.heapify(nexts)
    left = layers - least * ranks
    while left > 0:
        value, r, n = nexts[0]
        heapq.heapreplace(nexts, (cost(r, n + 1), r, n + 1))
        bottleneck = max(bottleneck, value)
        left -= weight[r]
    return bottleneck


def least_bottleneck_floor(base: Sequence[float], per_layer: float, layers: int) -> float:
    """The least T such that whole numbers n_r >= 1 with Σ n_r = `layers` give every rank base[r] + n_r·per_layer <= T
    (a lower bound on the slowest rank when every layer costs at least `per_layer`). From the fractional optimum
    T0 (at least every rank's base plus one layer) each rank holds ⌊(T0 − base_r)/per_layer⌋ layers, short of the
    total by D <= P; T is then the D-th smallest of the ranks' further thresholds base_r + (n_r + j)·per_layer, drawn
    from one sequence per distinct (base_r, n_r) with its ranks' multiplicity (most ranks hold no ends: a deep
    pipeline has two or three sequences, not P)."""
    if per_layer <= 0:
        return max(base)
    t0 = max(max(base) + per_layer, (sum(base) + layers * per_layer) / len(base))
    counts = [math.floor((t0 - b) / per_layer + 1e-9) for b in base]
    deficit = layers - sum(counts)
    if deficit <= 0:
        return t0
    nexts = [(b + (n + 1) * per_layer, b, n + 1, k) for (b, n), k in Counter(zip(base, counts, strict=True)).items()]
    heapq.heapify(nexts)
    while True:
        value, b, n, k = nexts[0]
        deficit -= k
        if deficit <= 0:
            return value
        heapq.heapreplace(nexts, (b + (n + 1) * per_layer, b, n + 1, k))


def packing_floor(fixed: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int]) -> float:
    """A lower bound on the least max_r (fixed[r] + Σ per_layer[k][r] over the layers rank r holds) over every
    assignment of counts[k] layers of each kind k to the ranks that gives every rank at least one layer: for weights
    w >= 0 summing to 1 the largest rank is at least the weighted mean, bounded by `weighted_floor`. The weights
    tried: each rank alone, all alike, and w_r ∝ 1/c_rk for each kind k (for one kind and no fixed bytes that is
    the fractional optimum)."""
    least = _least_ranks(fixed, per_layer)
    best = max(least)
    weightings: list[list[float]] = [[1.0] * len(fixed)]
    weightings += [[1 / x for x in c] for c in per_layer if min(c) > 0]
    for raw in weightings:
        total = sum(raw)
        best = max(best, _weighted(least, per_layer, counts, [x / total for x in raw]))
    return best


def packing_range(fixed: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int]
                  ) -> tuple[float, float]:
    """(below, above) `packing_floor`, each at the cost of one pass: its first term, the largest rank's fixed part and
    cheapest layer, and that plus (L − P)·max c_rk/P. Every weighted floor it takes is at most the latter: with
    weights summing to 1 the ranks' fixed parts and least layers weigh at most their largest, and each of the L − P
    other layers at most μ_k = min_r w_r·c_rk <= Σ_r w_r·c_rk/P <= max_r c_rk/P."""
    least = _least_ranks(fixed, per_layer)
    low = max(least)
    return low, low + max(sum(counts) - len(fixed), 0) * max(max(c) for c in per_layer) / len(fixed)


def packing_exceeds(fixed: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int], limit: float,
                    scale: float) -> bool:
    """Whether `packing_floor(fixed, per_layer, counts)`·scale > limit (scale > 0): by `packing_range`'s bracket where
    it decides (its least above the limit, or its most, with 1e-9 for the float error of the sums, below), else one
    weighted floor at a time until one exceeds. The floor is the largest of these terms and rounding a product is
    monotone: the same answer as the floor's, bit for bit, without computing the ranks' least layers twice."""
    least = _least_ranks(fixed, per_layer)
    low = max(least)
    if low * scale > limit:
        return True
    if (low + max(sum(counts) - len(fixed), 0) * max(max(c) for c in per_layer) / len(fixed)) * (1 + 1e-9) * scale \
            <= limit:
        return False
    weightings: list[list[float]] = [[1.0] * len(fixed)]
    weightings += [[1 / x for x in c] for c in per_layer if min(c) > 0]
    for raw in weightings:
        total = sum(raw)
        if _weighted(least, per_layer, counts, [x / total for x in raw]) * scale > limit:
            return True
    return False


def excess_floor(over: Sequence[float], per_layer: Sequence[Sequence[float]], counts: Sequence[int],
                 alive: Sequence[float]) -> float:
    """A lower bound on Σ_r (over[r] + Σ per_layer[k][r] over rank r's layers)⁺/alive[r] over every assignment with at
    least one layer per rank: for λ_r in [0, 1] it is at least `weighted_floor` with weights λ_r/alive_r; λ all 1,
    and λ_r = max_k q_{r*k}/q_rk with q_rk = per_layer[k][r]/alive_r and r* the rank with the most alive (which keeps
    every layer's least weighted cost where the all-ones weights put it while discounting the other ranks' room)."""
    ranks = range(len(over))
    top = max(ranks, key=lambda r: alive[r])
    lam = [max(row[top] / alive[top] / (row[r] / alive[r]) for row in per_layer) for r in ranks]
    least = _least_ranks(over, per_layer)
    return max(_weighted(least, per_layer, counts, [1 / a for a in alive]),
               _weighted(least, per_layer, counts, [lam[r] / alive[r] for r in ranks]))


def rank_time_costs(ends: Sequence[float], fixed: Sequence[float], alive: Sequence[float], capacity: float,
                    full_act: float, kinds: Sequence[tuple[float, float, float, float]], held: HeldKinds | None = None
                    ) -> Callable[[int, int], float]:
    """f_r(n) = ends_r + n·τ + `recompute_cost` of the rank's excess E_r = (fixed_r + n·kept_r − capacity)⁺, ∞ where
    even fully recomputed layers (storing `full_act` each per micro-batch in flight) exceed the capacity: for `kinds`
    of (τ_k, ρ_k, a_k, s_k) (a layer's seconds, seconds per byte its full recomputation saves, bytes stored per
    micro-batch, state bytes), each layer priced as the cheapest of them (planner.search.bounds.SearchBounds
    .fitting_slowest); for two kinds (dense, MoE) and the MoE layers a rank can hold (`held`), `kind_rank_costs`."""
    if held is not None and len(kinds) == 2:
        return kind_rank_costs(ends, fixed, alive, capacity, full_act, kinds[0], kinds[1], held)
    tau, rho = min(k[0] for k in kinds), min(k[1] for k in kinds)
    least = [min(s + min(a, full_act) * al for _, _, a, s in kinds) for al in alive]
    kept = [min(s + a * al for _, _, a, s in kinds) for al in alive]
    whole = [whole_layers(kinds, full_act, al) for al in alive]

    def cost(r: int, n: int) -> float:
        if fixed[r] + n * least[r] > capacity:
            return math.inf
        return ends[r] + n * tau + recompute_cost(fixed[r] + n * kept[r] - capacity, rho / alive[r], *whole[r])
    return cost


def whole_layers(kinds: Sequence[tuple[float, float, float, float]], full_act: float, alive: float
                 ) -> tuple[float, float]:
    """(the most bytes one fully recomputed layer frees on a rank keeping `alive` micro-batches in flight, the least
    seconds it adds) over `kinds` (`rank_time_costs`'), of those whose recomputation frees anything: (a_k − full)·alive
    and Δ_k = ρ_k·(a_k − full), the layer's recomputed time over its own (ρ_k is 0 where that is not more). (0, 0)
    where none frees any."""
    freeing = [(a - full_act, rho * (a - full_act)) for _, rho, a, _ in kinds if a > full_act]
    if not freeing:
        return 0.0, 0.0
    return max(f for f, _ in freeing) * alive, min(d for _, d in freeing)


def recompute_cost(excess: float, per_byte: float, frees: float, adds: float) -> float:
    """The least seconds fully recomputing whole layers adds to a rank over capacity by `excess` bytes: at least
    `per_byte` seconds per byte freed (the cheapest kind's rate), and at least ⌈excess/frees⌉ layers, each adding
    `adds` seconds or more (`whole_layers`: no layer frees more than `frees`, nor adds less): the stage's recomputed
    layers are whole (Layout.recompute_layers counts them), so a rank a byte over pays a layer. The count is taken
    below the quotient by a relative 1e-9, so that float error in the bytes never asks one layer more. 0 where
    `excess` <= 0."""
    if excess <= 0:
        return 0.0
    layers = math.ceil(excess / frees * (1 - 1e-9)) if frees > 0 else 0
    return max(per_byte * excess, layers * adds)


def kind_rank_costs(ends: Sequence[float], fixed: Sequence[float], alive: Sequence[float], capacity: float,
                    full_act: float, dense: tuple[float, float, float, float], moe: tuple[float, float, float, float],
                    held: HeldKinds) -> Callable[[int, int], float]:
    """`rank_time_costs` with each rank's n layers of both kinds as a rank can hold them (`held`: at least fewest[n]
    and at most most[n] MoE layers): its seconds Σ τ_k, its bytes kept and stored each at their least over those
    counts (`HeldKinds.least`; each is linear in the MoE layers held, and f_r grows with both), and ρ the lesser of the
    kinds' (`recompute_cost`, with `whole_layers` over both kinds). Each grows by at least a layer's least from n to
    n + 1 (held_kinds' last paragraph), and the recomputation with the bytes kept, so f_r grows with n; ∞ beyond the
    stack."""
    rho, t_dense, t_moe = min(dense[1], moe[1]), dense[0], moe[0]
    t_pick, size = held.pick(t_dense, t_moe), len(held.fewest)
    byal: dict[float, tuple[float, float, tuple[int, ...], float, float, tuple[int, ...]]] = {}
    for al in set(alive):
        l_dense, l_moe = dense[3] + min(dense[2], full_act) * al, moe[3] + min(moe[2], full_act) * al
        k_dense, k_moe = dense[3] + dense[2] * al, moe[3] + moe[2] * al
        byal[al] = (l_dense, l_moe, held.pick(l_dense, l_moe), k_dense, k_moe, held.pick(k_dense, k_moe))

    whole = {al: whole_layers((dense, moe), full_act, al) for al in byal}

    def cost(r: int, n: int) -> float:  # (`HeldKinds.least`'s values at n, the same floats, computed where read)
        l_dense, l_moe, l_pick, k_dense, k_moe, k_pick = byal[alive[r]]
        if n >= size:
            return math.inf
        x = l_pick[n]
        if fixed[r] + (l_dense * (n - x) + l_moe * x) > capacity:
            return math.inf
        kept, y = fixed[r] + (k_dense * (n - k_pick[n]) + k_moe * k_pick[n]), t_pick[n]
        return ends[r] + (t_dense * (n - y) + t_moe * y) + recompute_cost(kept - capacity, rho / alive[r],
                                                                          *whole[alive[r]])
    return cost
