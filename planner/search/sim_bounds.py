"""Lower bounds on the simulated step time, so that the search prunes on the objective the plan reports.

A plan reports, and the search ranks by, `Ranked.step_time_s`: the discrete-event simulator's step where the
pipeline is simulated (`planner.search.simulate.simulable`), else the closed form. The closed-form bounds of
`planner.search.bounds` are below the closed form, not the simulator (on uneven stages, or with the zero-bubble
schedules, the simulator is often the faster of the two): these are below the simulator, from its rules
(cost_models.pipeline.simulator) alone. With per-chunk forward f_c, backward b_c (the input gradient when the backward
is
split) and weight gradient w_c, T_d the work of device d per micro-batch (the sum over its chunks; the simulator's
durations share a rank's stage time, sends excluded, over its chunks) and m micro-batches:
  (work)  the device does m·T_d of work and runs one op at a time: makespan >= m·T_d;
  (path)  its first op is a forward of a chunk c >= c_min(d) (its first chunk), which waits for the forwards of
          chunks 0 .. c − 1 and a send at each change of device, so it starts no earlier than
          head_d = Σ_{c < c_min(d)} f_c + x_d·hop (x_d: changes of device between chunks 0 .. c_min(d)); without
          a split backward its last op is a backward of a chunk c >= c_min(d), after which the backwards of the
          chunks below still run: tail_d = Σ_{c < c_min(d)} b_c + x_d·hop. makespan >= head_d + m·T_d + tail_d
          (the tail counted only where the backward is not split: a weight-gradient op may end a device's work).
Before a candidate is priced its split is unknown unless it takes balanced chunks; then the path bound holds on the
chunks as they fall, with every time replaced by a lower bound from the layer times. For a solved 1F1B (or GPipe)
split, one chunk per rank: path_d = S_d + m·T_d + 2d·hop with S_d = Σ_{j<d} T_j, and over every split whose T_d
sum to P, max_d path_d >= X with X the value at which all paths are equal (`minimax_fill`); that is about half the
1F1B bubble, (m + (p − 1)/2)·P/p, while the simulator on an even split shows all of it: a split whose first stages
are the slower ones is simulated faster than the closed form says. ZB-H1 and ZB-H2 get the same fill of their own
paths (`ordered_fills`: the forwards before a stage, φ·S_d + m·T_d + d·hop, and the path through its last input
gradient), which a candidate's key takes before its split is known; ZB-V and DualPipeV the fill of their forward
paths (`v_fill`, from the layer count and the least layer time); the wave gets the work bound. The fills are
planner.search.pipeline_fills'.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from cost_models.compute.knobs import LayerTime
from cost_models.memory.params import StageParams
from cost_models.pipeline.forms import W_SHARE
from cost_models.pipeline.simulator import Durations, Program
from cost_models.sync import kept_gathered, optimizer_time
from meshcore import GIB, ClusterSpec, JobSpec, ModelSpec, Offload, Schedule
from meshcore.schedules import DEFAULT_SCHEDULE, SPLIT_BACKWARD, ScheduleFamily, spec_of
from planner.search.bounds import SearchBounds
from planner.search.floors import whole_layers
from planner.search.held_kinds import HeldKinds
from planner.search.memory_floors import ROUNDING as _ROUNDING
from planner.search.pipeline_fills import (
    closed_fill,
    minimax_terms,
    ordered_fills,
    path_fill,
    trailing_w,
    v_fill_at,
    wave_fill_at,
)
from planner.search.recompute_rate import byte_rate
from planner.search.simulate import simulable
from planner.search.space import Candidate
from planner.search.split_paths import FloorSearch, Row, SplitMemory, SplitPaths, layer_prefix
from planner.search.tail_bounds import linear_traffic, staggered_tail


def changes_of_device(place: Sequence[int]) -> list[int]:
    """x[c]: how many of the hand-offs between chunks 0 .. c cross to another device."""
    out, count = [0], 0
    for c in range(1, len(place)):
        count += place[c] != place[c - 1]
        out.append(count)
    return out


def path_floor(place: Sequence[int], before: Sequence[float], work: Sequence[float], m: int, hop: float,
               both_ends: bool) -> float:
    """max over devices d of Σ_{c < c_min(d)} before[c] + m·work[d] + x·hop, x the device changes up to c_min(d),
    counted twice when `both_ends` (forward fill and backward drain; `before` then holds f_c + b_c, else f_c)."""
    first = [len(place)] * len(work)
    for c in range(len(place) - 1, -1, -1):
        first[place[c]] = c
    prefix, sent = [0.0], changes_of_device(place)
    for value in before:
        prefix.append(prefix[-1] + value)
    ends = 2 if both_ends else 1
    return max(prefix[first[d]] + m * work[d] + ends * sent[first[d]] * hop for d in range(len(work)))


def trailing_weight(program: Program, d: Durations) -> list[float]:
    """Per device, the most weight-gradient work that can follow its last backward op: the W ops after it in the order
    where the order places them, else the most a device may hold pending (`max_pending_w` + 1) of its largest."""
    out = []
    for device, order in enumerate(program.encoded):
        if not program.split_backward:
            out.append(0.0)
        elif program.explicit_w:
            last = next((i for i in range(len(order) - 1, -1, -1) if order[i][0] in (1, 3)), -1)  # from the end
            out.append(sum(d.weight[c] for kind, _, c in order[last + 1:] if kind == 2))
        else:
            own = [d.weight[c] for c, rank in enumerate(program.placement) if rank == device]
            held = (program.max_pending_w[device] if program.max_pending_w else 0) + 1
            out.append(held * max(own, default=0.0))
    return out


def durations_floor(program: Program, d: Durations, m: int) -> float:
    """The work and path bounds on the simulated pipeline of `program` with these per-chunk durations (after pricing:
    what decides whether the layout is worth simulating). With a split backward, also the path through each device's
    last backward op: its work but the weight gradients that may follow it, and the input gradients below it."""
    place = program.placement
    work = [0.0] * program.num_devices
    for c, device in enumerate(place):
        work[device] += d.forward[c] + d.backward[c] + d.weight[c]
    both = [f + b for f, b in zip(d.forward, d.backward, strict=True)]
    if not program.split_backward:
        return path_floor(place, both, work, m, d.p2p_s, True)
    head = path_floor(place, d.forward, work, m, d.p2p_s, False)
    trailing = trailing_weight(program, d)
    early = [m * w - t for w, t in zip(work, trailing, strict=True)]
    return max(head, path_floor(place, both, [e / m for e in early], m, d.p2p_s, True))


def split_rows(schedule: Schedule, pp: int, m: int, vpp: int, ends: Sequence[float], hop: float, tau: float,
               forward_share: float, weight_share: float) -> list[list[Row]]:
    """`split_feasible`'s rows of a solved split's path bounds: stage d's time at least ends[d] + the least time of its
    layers, the stages before it Σ their ends + P(l_d); its forward at least `forward_share` of a stage's time and its
    weight gradient at most `weight_share`. 1F1B and GPipe: S_d + m·T_d + 2d·hop. ZB-H1 and ZB-H2: the forwards
    before it, φ·S_d, + m·T_d + d·hop; and through its last input gradient, (1 − ω)·S_d + (m − n_d·ω)·T_d + 2d·hop
    (its order runs at most n_d = `trailing_w` weight gradients after it). ZB-V, DualPipeV and the wave (v chunks):
    stage d waits for the first chunk of each stage before it, at least (n_j − v)/v of its layers, each at least τ,
    the least layer time (the V's down chunk takes half a rank's layers rounded down, the wave's first chunk a v-th,
    balanced chunks as many as they fall): their forwards (ZB-V, DualPipeV) or forward and backward (the wave)."""
    rows = []
    before = 0.0
    family = spec_of(schedule).family
    for d in range(pp):
        e = ends[d]
        if family is ScheduleFamily.ONE_CHUNK:
            row = [(before + m * e + 2 * d * hop, 1.0, 0.0, float(m))]
        elif family is ScheduleFamily.ORDERED_W:
            row = [(forward_share * before + m * e + d * hop, forward_share, 0.0, float(m))]
            late = m - trailing_w(schedule, d, pp, m) * weight_share
            if late >= 1.0:
                row.append(((1 - weight_share) * before + late * e + 2 * d * hop, 1 - weight_share, 0.0, late))
        else:
            v_split = family is ScheduleFamily.V  # a V whose first ops are forwards
            share = forward_share if v_split else 1.0
            sends = d * hop if v_split else 2 * d * hop
            row = [(m * e + sends - share * tau * d, 0.0, share * tau / vpp, float(m))]
        rows.append(row)
        before += e
    return rows


class ReportedBounds(SearchBounds):
    """The search's bounds on the step time it reports: `SearchBounds`'s closed-form bounds where the pipeline is not
    simulated, the simulator's (module docstring) where it is. `key` orders and prunes the best-first scan, `tight_key`
    re-queues a candidate with the recomputation and slowest rank a fitting split needs, `group_floor` is below
    both for every member of a group (of every offload choice)."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, partial_recompute: bool = True) -> None:
        super().__init__(model, cluster, job, partial_recompute)
        self._paths: dict[tuple[object, ...], float] = {}
        self._splits: dict[tuple[object, ...], tuple[list[list[Row]], list[float]]] = {}
        self._split_paths: dict[Candidate, SplitPaths] = {}
        self._shares: dict[tuple[object, ...], tuple[float, float]] = {}
        self._ordered: dict[tuple[object, ...], list[tuple[float, float]]] = {}
        self._v: dict[tuple[object, ...], tuple[float, float, float, float]] = {}
        self._minimax: dict[tuple[int, int, float], tuple[float, float]] = {}
        self._shape_tails: dict[tuple[object, ...], float] = {}
        self._tail_part: dict[tuple[object, ...], tuple[StageParams, tuple[float, float] | None, float]] = {}

    def simulated(self, c: Candidate) -> bool:
        return simulable(c.pp, c.vpp, self.job.global_batch // (c.dp * c.mbs))

    def key(self, c: Candidate) -> float:
        return self.sim_bound(c) if self.simulated(c) else self.bound(c)

    def tight_key(self, c: Candidate, balanced: bool) -> float:
        return self.sim_tight_bound(c, balanced) if self.simulated(c) else self.tight_bound(c, balanced)

    def early_key(self, c: Candidate) -> float:
        """Below `tight_key(c, False)` at the cost of `recompute_floor` alone (the recomputation every fitting split
        needs, without the slowest rank of one, `fitting_slowest`, three times dearer): the same bound with the slowest
        rank's term at 0, where both bounds grow with it. The search queues a candidate here first and computes its
        tight key only if it comes up (most of a mixture-of-experts search's never do)."""
        extra = self.recompute_floor(c)
        if self.simulated(c):
            return self.sim_bound(c, extra, 0.0)
        return self._bound(c, extra, 0.0) if extra > 0 else self.bound(c)

    def sim_bound(self, c: Candidate, recomputed: float = 0.0, slowest: float = 0.0) -> float:
        """Lower bound on the simulated step of any split of `c` whose average rank recomputes at least `recomputed`
        seconds per micro-batch more than the candidate's own recomputation and whose slowest rank takes at least
        `slowest`: the work bound on the average and the slowest rank (`SearchBounds._bound`'s terms without the
        sends, which the simulator charges as hop latency) and the fill of a one-chunk schedule over any split
        (`sim_fill`: 1F1B and GPipe, ZB-H1 and ZB-H2); plus the tail."""
        stage, hop = self._family(c, self.beside(c))[:2]
        tail = self.shape_tail(c)
        stage += recomputed
        m = self.job.global_batch // (c.dp * c.mbs)
        work = max(m * max(stage, self.slowest(c), slowest), self.sim_fill(c, c.schedule, c.vpp, m, c.pp * stage, hop))
        return (work + tail) * (1 - _ROUNDING)

    def sim_tight_bound(self, c: Candidate, balanced: bool) -> float:
        """`sim_bound` with the recomputation and slowest rank any fitting split needs (`tight_bound`'s); for balanced
        chunks the path bound on the chunks as they fall (`balanced_path`)."""
        if balanced:
            tail = self.shape_tail(c)
            return max(self.sim_bound(c), (self.balanced_path(c) + tail) * (1 - _ROUNDING))
        extra, slowest = self.recompute_floor(c), self.fitting_slowest(c)
        if math.isinf(slowest):
            return math.inf
        return self.sim_bound(c, extra, slowest)

    def shape_tail(self, c: Candidate) -> float:
        """The least tail of `c` (gradient reduction, weight gather, optimizer step): `_family`'s, which holds for
        every vpp and schedule, or `tail_bounds.staggered_tail` of c's own (the windows of its vpp under the
        interleaved schedule, of one chunk under any other) plus the average stage's optimizer step as `_family`
        prices it (left out where the optimizer is offloaded: its step need not grow linearly with the parameters)."""
        beside = self.beside(c)
        v = c.vpp if spec_of(c.schedule).family is ScheduleFamily.INTERLEAVED else 1
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.mbs, c.zero, c.recompute, c.sp, c.ep, c.etp, c.modules,
               beside, c.offload, v)
        if key not in self._shape_tails:
            params, traffic, optimizer = self._tail_parts(c, beside)
            least = 0.0
            if traffic is not None:
                n = min(c.pp, self.job.global_batch // (c.dp * c.mbs)) if v > 1 else 0
                least = staggered_tail(*traffic, v, n, *self.pass_windows(c, params), self.job, self.cluster)
            self._shape_tails[key] = max(self._family(c, beside)[4], least + optimizer)
        return self._shape_tails[key]

    def _tail_parts(self, c: Candidate, beside: bool) -> tuple[StageParams, tuple[float, float] | None, float]:
        """(the average stage's parameters, its `linear_traffic`, None where weights stay gathered under the pipeline,
        its optimizer step, 0 where the optimizer is offloaded), once per degrees, ZeRO stage and offload choice."""
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, beside, c.offload)
        if key not in self._tail_part:
            job, cluster = self.job, self.cluster
            layout = c.but(vpp=1, schedule=DEFAULT_SCHEDULE).layout()
            params = self.params(c, beside).scaled(1 / c.pp)
            traffic = None if kept_gathered(layout, job) else linear_traffic(params, layout, job, cluster)
            optimizer = 0.0 if Offload.OPTIMIZER in c.offload else optimizer_time(params, layout, job, cluster)
            self._tail_part[key] = (params, traffic, optimizer)
        return self._tail_part[key]

    def split_rows(self, c: Candidate) -> tuple[list[list[Row]], list[float]]:
        """`split_feasible`'s rows and layer-time prefix of a candidate whose split is solved (one chunk per rank, ZB-V
        or the wave): every rank at least its ends and its layers at their cheapest (own or fully recomputed)."""
        key = (self.floor_key(c), c.vpp, c.schedule)
        if key not in self._splits:
            times = self.get(c)
            phi, omega = self.shares(c)
            part = self.partial_recompute  # else a solved split recomputes no layer of its own choosing
            least = {False: min(times.decoder.total, times.decoder_full.total) if part else times.decoder.total}
            if times.moe is not None and times.moe_full is not None:
                least[True] = min(times.moe.total, times.moe_full.total) if part else times.moe.total
            prefix = layer_prefix(self.layer_kinds, least.__getitem__, self.held(c))
            layout = c.layout()
            ends = [(times.embedding.total if r == layout.embedding_rank else 0.0)
                    + (times.head.total if r == layout.head_rank else 0.0) for r in range(c.pp)]
            hop = self._family(c, self.beside(c))[1]
            m = self.job.global_batch // (c.dp * c.mbs)
            self._splits[key] = (split_rows(c.schedule, c.pp, m, c.vpp, ends, hop, min(least.values()), phi, omega),
                                 prefix)
        return self._splits[key]

    def shares(self, c: Candidate) -> tuple[float, float]:
        """(φ, ω) of `split_rows`: the least forward share of a piece's time (a decoder layer of each kind, own or
        fully recomputed, the embedding, the head) and W_SHARE times the largest backward share, once per knobs."""
        key = (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)
        if key not in self._shares:
            times = self.get(c)
            kinds = [(t, full) for t, full in ((times.decoder, times.decoder_full), (times.moe, times.moe_full))
                     if t is not None and full is not None]
            pieces = [t for pair in kinds for t in pair] + [times.embedding, times.head]
            computes = [(t.forward, t.backward, t.forward + t.backward + t.recompute) for t in pieces]
            self._shares[key] = (min((f / total for f, _, total in computes if total > 0), default=0.0),
                                 W_SHARE * max((b / total for _, b, total in computes if total > 0), default=1.0))
        return self._shares[key]

    def sim_fill(self, c: Candidate, schedule: Schedule, vpp: int, m: int, total: float, hop: float) -> float:
        """The least simulated pipeline of a shape of `c` (1F1B, GPipe: `minimax_fill`; ZB-H1, ZB-H2: `ordered_fills`;
        ZB-V, DualPipeV: `v_fill`; the wave: `wave_fill`) over every split of `total` seconds per micro-batch; 0 for the
        others (their work bound is the caller's)."""
        family = spec_of(schedule).family
        if vpp == 1 and family is ScheduleFamily.ONE_CHUNK:  # `minimax_fill`, its terms once per (pp, m, hop)
            terms = self._minimax.get((c.pp, m, hop))
            if terms is None:
                terms = self._minimax[c.pp, m, hop] = minimax_terms(c.pp, m, hop)
            return (total + terms[0]) / terms[1]
        wave = family is ScheduleFamily.WAVE
        if wave or (vpp == 2 and family is ScheduleFamily.V):  # a = φ/2 (`v_fill`) or 1/v (`wave_fill`)
            knobs = (wave, vpp, c.pp, m, c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)
            if knobs not in self._v:
                a = 1.0 / vpp if wave else self.shares(c)[0] / 2
                self._v[knobs] = (a, *path_fill(a, [float(m)] * c.pp, 1), self.least_layer(c))
            a, alpha, beta, tau = self._v[knobs]
            if wave:
                return wave_fill_at(total, hop, a, alpha, beta, tau, self.model.num_layers, vpp)
            return v_fill_at(total, hop, a, alpha, beta, tau, self.model.num_layers)
        if vpp > 1 or family is not ScheduleFamily.ORDERED_W:
            return 0.0
        phi, omega = self.shares(c)
        key = (schedule, c.pp, m, phi, omega)
        if key not in self._ordered:
            self._ordered[key] = ordered_fills(schedule, c.pp, m, phi, omega)
        return max((total + beta * hop) / alpha for alpha, beta in self._ordered[key])

    def least_layer(self, c: Candidate) -> float:
        """τ of `v_fill`: the least time of a decoder layer of `c`'s kinds, own or fully recomputed."""
        times = self.get(c)
        kinds = {False: (times.decoder, times.decoder_full), True: (times.moe, times.moe_full)}
        return min(min(t.total for t in kinds[bool(k)] if t is not None) for k in set(self.layer_kinds))

    def split_memory(self, c: Candidate) -> SplitMemory | None:
        """`SplitMemory` of `c` (`fitting_slowest`'s terms); None where activations go to the host."""
        if Offload.ACTIVATIONS in c.offload:
            return None
        times, acts = self.get(c), self.activations(c)
        fixed, alive, s_dense, s_moe = self.rank_bytes(c)
        per_kind = {False: (times.decoder, times.decoder_full, acts.dense, s_dense),
                    True: (times.moe, times.moe_full, acts.moe, s_moe)}
        rates = [(0.0, byte_rate(base, full, act, acts.full), act, 0.0)  # `whole_layers`' (τ, ρ, a, s) of each kind
                 for base, full, act, _ in per_kind.values() if base is not None and full is not None]
        stored = acts.full if self.partial_recompute else math.inf  # what a layer stores at the least
        kinds, held = self.layer_kinds, self.held(c)
        state = layer_prefix(kinds, lambda moe: per_kind[moe][3], held)
        act = layer_prefix(kinds, lambda moe: per_kind[moe][2], held)
        least = layer_prefix(kinds, lambda moe: min(per_kind[moe][2], stored), held)
        frees, adds = whole_layers(rates, acts.full, 1.0) if self.partial_recompute else (0.0, 0.0)
        return SplitMemory(tuple(fixed), tuple(alive), tuple(state), tuple(act), tuple(least),
                           self.cluster.gpu.memory_gib * GIB, min(r[1] for r in rates), frees, adds)

    def split_paths(self, c: Candidate) -> SplitPaths:
        """`SplitPaths` of `c` (solved: `split_rows`, `split_memory`), once per candidate."""
        if c not in self._split_paths:
            self._split_paths[c] = SplitPaths(*self.split_rows(c), self.split_memory(c), self.held(c) is not None)
        return self._split_paths[c]

    def held(self, c: Candidate) -> HeldKinds | None:
        """The layer kinds a rank of `c` can hold (planner.search.held_kinds), where it holds chunks apart (vpp > 1)
        and the layers differ in kind; None where every rank's layers are one run or of one kind."""
        if c.vpp == 1 or len(set(self.layer_kinds)) == 1:
            return None
        return self.kinds_held(c.vpp)

    def split_bound(self, c: Candidate, known: float) -> float:
        """A lower bound on the simulated step of `c` (solved) at least `known` (one already): `SplitPaths.floor` plus
        the least tail."""
        search = self.split_search(c, known)
        search.finish()
        return self.split_key(c, known, search.low)

    def split_search(self, c: Candidate, known: float) -> FloorSearch:
        """`split_bound`'s search for the floor, one test at a time (`split_key` of its `low` at each step)."""
        return FloorSearch(self.split_paths(c), max(known - self.shape_tail(c), 0.0))

    def split_key(self, c: Candidate, known: float, low: float) -> float:
        """The bound on the simulated step of `c` (solved) that `low`, below the floor of its paths, gives."""
        return max(known, (low + self.shape_tail(c)) * (1 - _ROUNDING))

    def split_refuses(self, c: Candidate, step: float) -> bool:
        """Whether no split of `c` (solved) that fits can be simulated to a step below `step` (with the least tail)."""
        tail = self.shape_tail(c)
        return not self.split_paths(c).feasible(step * (1 + 1e-9) - tail)

    def balanced_path(self, c: Candidate) -> float:
        """The path bound on the balanced chunks of `c`, each device's work and each chunk's forward (and backward)
        at least its layers' times: the simulator shares a rank's stage time over its chunks by their layers."""
        key = (self.floor_key(c), c.vpp, c.schedule)
        if key not in self._paths:
            layout, times = c.layout(), self.get(c)
            emb, head, counts = self.ranks(c)
            moe = times.moe if times.moe is not None else times.decoder
            split = c.schedule in SPLIT_BACKWARD

            def rank_time(r: int, part: Callable[[LayerTime], float]) -> float:
                n_dense, n_moe = counts[r]
                return (n_dense * part(times.decoder) + n_moe * part(moe) + (part(times.embedding) if r == emb else 0.0)
                        + (part(times.head) if r == head else 0.0))

            work = [rank_time(r, lambda t: t.total) for r in range(c.pp)]
            early = [rank_time(r, lambda t: t.forward) for r in range(c.pp)] if split else work
            place = [layout.chunk_rank(k) for k in range(c.pp * c.vpp)]
            sizes = layout.chunk_layers(self.model.num_layers)
            before = [early[r] * (n / sum(counts[r]) if sum(counts[r]) else 1 / c.vpp) for r, n in zip(place, sizes,
                                                                                                       strict=True)]
            hop = self._family(c, self.beside(c))[1]
            m = self.job.global_batch // (c.dp * c.mbs)
            self._paths[key] = path_floor(place, before, work, m, hop, not split)
        return self._paths[key]

    def shape_floor(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]],
                    offloads: Sequence[frozenset[Offload]] = (frozenset(),)) -> float:
        """Below `key` of every member with every offload choice: the closed-form floor's fill for the shapes that are
        not simulated, the work bound and `sim_fill` (the same fill as `sim_bound`'s on A, below each member's
        stage) for those that are."""
        sides = self.sides(first, shapes)
        m, a, f, b, tail = self.group_parts(first, sides, offloads)
        slowest = min(self.slowest(first, side) for side in sides)
        return (self.least_pipe(first, shapes, m, (a, f, b), None, slowest) + tail) * (1 - 1e-9)

    def family_floor(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]]) -> float:
        """Below `shape_floor` of every group sharing `floor_key` with `first` and holding some of `shapes` (any ZeRO
        stage, replicate factor and offload choice): each shape's pipeline with A the layer times alone (`floor`'s;
        the ZeRO traffic and the tail are >= 0, and every shape's pipeline grows with A), the simulated ones' fill
        (`sim_fill`) with no sends (hop 0: it grows with the hop), the slowest rank the least of either head placement
        (each pipeline grows with it: its coefficient (m − 1/v)·1[S > A] is >= 0, and with A, as `closed_fill` grows
        faster than A·(1 − 1/v))."""
        m = self.job.global_batch // (first.dp * first.mbs)
        slowest = min(self.slowest(first, False), self.slowest(first, True))
        return self.least_pipe(first, shapes, m, self._average_parts(first), 0.0, slowest) * (1 - 1e-9) ** 2

    def least_pipe(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]], m: int,
                   parts: tuple[float, float, float], hop: float | None, slowest: float = 0.0) -> float:
        """The least over `shapes` of each one's pipeline on the average stage's (A, f̄, b̄) = `parts` with the slowest
        rank at least S = max(A, `slowest`): the work bound m·S and `sim_fill` (with this hop, or `first`'s) where it
        is simulated, else (m − 1)·A + `closed_fill` + (m − 1/v)·(S − A) (`_bound` takes S for the slowest rank,
        m − 1/v times or more: m for the V schedules, the wave and ZB-2p). A simulated shape's is at least the work
        bound m·S: once the least is there, the fills of the simulated shapes left are not computed (the least is the
        same)."""
        a, f, b = parts
        s = max(a, slowest)
        p, work, least = first.pp, m * s, math.inf
        for schedule, v in shapes:
            if simulable(p, v, m):
                if least <= work:
                    continue
                pipe = max(work, self.sim_fill(first, schedule, v, m, p * a, self.hop(first) if hop is None else hop))
            else:
                pipe = (m - 1) * a + closed_fill(schedule, v, p, a, f, b) + (m - 1 / v) * (s - a)
            least = min(least, pipe)
        return least
