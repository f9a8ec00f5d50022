"""The time bounds of one search, cached by what they depend on: per-layer times, the lower bound on the step time
(and its cheaper floors) that orders the best-first scan, and the tight bound with the recomputation and the slowest
rank a split needs to fit. The memory floors that drop a candidate before its split is solved are
planner.search.memory_floors's (`RankMemory`, which `SearchBounds` extends).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from cost_models.compute.knobs import LayerKnobs, LayerTime, LayerTimes
from cost_models.memory.params import StageParams
from cost_models.pipeline.forms import W_SHARE, wave_bubble
from cost_models.pipeline.hops import every_rank_hops
from cost_models.pipeline.registry import pricing
from cost_models.step import layer_times, p2p_exposure, pipeline_hop_time
from cost_models.sync import (
    dp_reduce_exposed,
    grad_accumulation_time,
    grad_traffic,
    optimizer_time,
    sharded_dp_exposed,
)
from meshcore import (
    DEFAULT_SCHEDULE,
    GIB,
    ClusterSpec,
    JobSpec,
    Layout,
    ModelSpec,
    Offload,
    Recompute,
    Schedule,
    ScheduleFamily,
    spec_of,
)
from planner.search.floors import excess_floor, least_bottleneck, least_bottleneck_floor, rank_time_costs
from planner.search.memory_floors import ROUNDING as _ROUNDING
from planner.search.memory_floors import RankMemory
from planner.search.offload_floor import offload_floor
from planner.search.pipeline_fills import closed_fill
from planner.search.recompute_rate import byte_rate, recompute_rates, stage_growth
from planner.search.space import Candidate
from planner.search.tail_bounds import pass_ceilings


class SearchBounds(RankMemory):
    """Per-layer times, step-time bounds and memory floors of one search, cached by what they depend on."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, partial_recompute: bool = True) -> None:
        super().__init__(model, cluster, job, partial_recompute)
        self._cache: dict[LayerKnobs, LayerTimes] = {}
        self._by_knobs: dict[tuple[object, ...], LayerTimes] = {}  # `_cache` by the candidate's knobs as a tuple
        self._bounds: dict[Candidate, float] = {}
        self._ceilings: dict[tuple[object, ...], tuple[float, float]] = {}
        self._families: dict[tuple[object, ...], tuple[float, float, float, float, float]] = {}
        self._sends: dict[tuple[int, int, Schedule], float] = {}
        self._hops: dict[tuple[int, ...], float] = {}
        self._grad_traffic: dict[tuple[object, ...], tuple[float, float]] = {}
        self._floors: dict[tuple[object, ...], float] = {}
        self._slowest: dict[tuple[object, ...], float] = {}
        self._parts: dict[tuple[object, ...], tuple[float, float, float]] = {}
        self._averages: dict[tuple[object, ...], LayerTime] = {}
        self._traffic: dict[tuple[object, ...], tuple[float, float]] = {}
        self._least: dict[tuple[object, ...], tuple[float, float]] = {}
        self._comm: dict[tuple[object, ...], tuple[float, float]] = {}
        self._family_parts: dict[tuple[object, ...], tuple[float, LayerTime, StageParams, float, Layout]] = {}
        self._recomputed: dict[Candidate, float] = {}
        self._endless: dict[tuple[object, ...], float] = {}

    def sends(self, c: Candidate) -> float:
        """Pipeline send/recv times on the average rank's critical path per micro-batch, in units of one send:
        every rank's hops over pp, times the exposed share (`p2p_exposure`); they depend on pp, vpp, schedule."""
        key = (c.pp, c.vpp, c.schedule)
        if key not in self._sends:
            layout = c.layout()
            hops = sum(every_rank_hops(layout))
            self._sends[key] = hops / c.pp * p2p_exposure(layout, self.job, self.cluster)
        return self._sends[key]

    def hop(self, c: Candidate) -> float:
        """One pipeline send of `c` (`pipeline_hop_time`), once per mesh and micro-batch size (what it reads)."""
        key = (c.tp, c.cp, c.pp, c.dp, c.dp_replicate, c.mbs, c.ep, c.etp)
        if key not in self._hops:
            self._hops[key] = pipeline_hop_time(self.model, self.job, self.cluster,
                                                c.but(vpp=1, schedule=DEFAULT_SCHEDULE).layout())
        return self._hops[key]

    def get(self, c: Candidate) -> LayerTimes:
        key = (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)
        if key not in self._by_knobs:
            self._by_knobs[key] = self._times(self.knobs(c))
        return self._by_knobs[key]

    def _times(self, knobs: LayerKnobs) -> LayerTimes:
        """`layer_times`, once per knobs; knobs that differ only in recomputation (and its modules, which full
        recomputation does not read) share the fully recomputed layers."""
        if knobs not in self._cache:
            full = None if knobs.recompute is Recompute.FULL else self._times(
                replace(knobs, recompute=Recompute.FULL, modules=frozenset()))
            self._cache[knobs] = layer_times(self.model, self.cluster, self.job, knobs, full)
        return self._cache[knobs]

    def bound(self, c: Candidate) -> float:
        if c not in self._bounds:
            self._bounds[c] = self._bound(c)
        return self._bounds[c]

    def group_floor(self, group: list[Candidate], offloads: Sequence[frozenset[Offload]] = (frozenset(),)) -> float:
        """A lower bound on `bound(c)` for every c of `group` with any of the offload choices `offloads`, candidates
        sharing `floor_key` (so their layer times, pipeline, micro-batches and ZeRO stage): with A, f̄, b̄ the average
        stage's layer time (with the least exposed ZeRO traffic, `_traffic_floor`, the least over the offload
        choices, as the tail's), forward and backward (the slowest rank takes at least A), each schedule's
        bound is at least (m − 1)·A + the tail's least plus A·(1 + (p − 1)/v) (1F1B, interleaved),
        p·A − k·W_SHARE·p·b̄ (ZB-H1 k = 2, ZB-H2 k = 3: cost_models.pipeline.registry, `hides`), A + (p − 1)·f̄/2 (ZB-V,
        DualPipeV) or A + 2(p − 1)·max(f̄, A − f̄)/v (the wave), the least over the group's schedules; each is at
        least A, so this is at least `floor`. Less 1e-9 of it for rounding."""
        return self.shape_floor(group[0], [(c.schedule, c.vpp) for c in group], offloads)

    def shape_floor(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]],
                    offloads: Sequence[frozenset[Offload]] = (frozenset(),)) -> float:
        """`group_floor` of the group of `first` with these (schedule, vpp) shapes (the search's groups hold their
        shapes, not a candidate each)."""
        m, a, f, b, tail = self.group_parts(first, self.sides(first, shapes), offloads)
        p = first.pp
        return ((m - 1) * a + min(closed_fill(s, v, p, a, f, b) for s, v in shapes) + tail) * (1 - 1e-9)

    def sides(self, first: Candidate, shapes: Sequence[tuple[Schedule, int]]) -> set[bool]:
        """Where the shapes of `first`'s group put the head: beside the embedding or not (`shape_beside`)."""
        return {self.shape_beside(first, v, s) for s, v in shapes}

    def group_parts(self, first: Candidate, sides: set[bool], offloads: Sequence[frozenset[Offload]]
                    ) -> tuple[int, float, float, float, float]:
        """(micro-batches, A with the least exposed ZeRO traffic, f̄, b̄, the least tail) of `group_floor`; the traffic
        depends on a shape through where it puts the head (`sides`)."""
        m = self.job.global_batch // (first.dp * first.mbs)
        a, f, b = self._average_parts(first)
        floors = [self._least_traffic(first, offloads, beside) for beside in sides]
        return m, a + min(t for t, _ in floors), f, b, min(t for _, t in floors)

    @staticmethod
    def group_key(c: Candidate) -> tuple[object, ...]:
        """What `group_floor` groups by: `floor_key` and the ZeRO stage."""
        return (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules, c.pp, c.zero, c.dp_replicate)

    def _least_traffic(self, c: Candidate, offloads: Sequence[frozenset[Offload]], beside: bool | None = None
                       ) -> tuple[float, float]:
        """The least of each of `_traffic_floor`'s terms over the offload choices `offloads`, once per (degrees, ZeRO
        stage, head placement (c's unless given), choices)."""
        beside = self.beside(c) if beside is None else beside
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, beside, tuple(offloads))
        if key not in self._least:
            floors = [self._traffic_floor(c, o, beside) for o in offloads]
            self._least[key] = (min(t for t, _ in floors), min(t for _, t in floors))
        return self._least[key]

    def _traffic_floor(self, c: Candidate, offload: frozenset[Offload] | None = None, beside: bool | None = None
                       ) -> tuple[float, float]:
        """(exposed ZeRO-2/3 traffic of the average stage per micro-batch, step tail) at the least: `_family`'s terms
        with windows long enough to hide all they can (exposed = κ·traffic, `GpuSpec.exposed`), which only shorter
        windows exceed; once per (degrees, ZeRO stage, head placement, offload choice: c's unless given). With such
        windows the communication does not depend on the offload choice (the gradient shard's copy to the host hides
        behind them too): it is priced once for all of them, the optimizer step for each."""
        beside = self.beside(c) if beside is None else beside
        offload = c.offload if offload is None else offload
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, beside, offload)
        if key not in self._traffic:
            model, job, cluster = self.model, self.job, self.cluster
            params = self.params(c, beside).scaled(1 / c.pp)
            layout = c.but(vpp=1, schedule=DEFAULT_SCHEDULE, offload=offload).layout()
            if key[:-1] not in self._comm:
                wide = LayerTime(forward=math.inf, backward=math.inf)
                self._comm[key[:-1]] = (sharded_dp_exposed(params, model.num_layers / c.pp, layout, job, cluster, wide),
                                        dp_reduce_exposed(params, layout, job, cluster, math.inf, math.inf, None,
                                                          self._grad_traffic_of(c, beside, params, layout)))
            traffic, reduce = self._comm[key[:-1]]
            self._traffic[key] = (traffic, reduce + optimizer_time(params, layout, job, cluster))
        return self._traffic[key]

    def _grad_traffic_of(self, c: Candidate, beside: bool, params: StageParams, layout: Layout) -> tuple[float, float]:
        """`sync.grad_traffic` of `c`'s average stage (`params`, `layout`), once per what it reads: the parameters
        (degrees and head placement), the mesh and the ZeRO stage."""
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, beside)
        if key not in self._grad_traffic:
            self._grad_traffic[key] = grad_traffic(params, layout, self.job, self.cluster)
        return self._grad_traffic[key]

    def _average_parts(self, c: Candidate) -> tuple[float, float, float]:
        """(total, forward, backward) of `_average`, once per `floor_key`."""
        key = self.floor_key(c)
        if key not in self._parts:
            avg = self._average(c)
            self._parts[key] = (avg.total, avg.forward, avg.backward)
        return self._parts[key]

    def floor(self, c: Candidate) -> float:
        """A lower bound on `bound(c)` at the cost of a look-up: the average stage's layer times (per (knobs, pp))
        over the micro-batches, less 1e-9 of it for rounding. Every term `_bound` adds to that is >= 0 (sends, ZeRO
        traffic, tail, the bubbles), and the pipeline fill (p − 1)·stage exceeds ZB-H1's hidden weight
        gradients, at most p·W_SHARE·backward <= (p − 1)·stage for p >= 2. The search orders candidates by it and
        computes `bound` only for those it reaches."""
        key = self.floor_key(c)
        if key not in self._floors:
            self._floors[key] = self._average(c).total * (1 - 1e-9)
        return self._floors[key] * (self.job.global_batch // (c.dp * c.mbs))

    @staticmethod
    def floor_key(c: Candidate) -> tuple[object, ...]:
        """What `floor` depends on (dp follows from tp, cp and pp on a given cluster)."""
        return (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules, c.pp)

    def _average(self, c: Candidate) -> LayerTime:
        """The average stage's layer times: all decoder layers, the embedding and the head over pp ranks (once per
        `floor_key`)."""
        key = self.floor_key(c)
        if key not in self._averages:
            times = self.get(c)
            n_dense, n_moe = self.layer_counts
            parts = [(times.decoder, n_dense / c.pp), (times.embedding, 1 / c.pp), (times.head, 1 / c.pp)]
            if times.moe is not None:
                parts.append((times.moe, n_moe / c.pp))
            self._averages[key] = LayerTime.scaled_sum(parts)
        return self._averages[key]

    def _bound(self, c: Candidate, recomputed: float = 0.0, slowest: float = 0.0) -> float:
        """Lower bound on the step time of any split of candidate `c` whose average stage recomputes at least
        `recomputed` seconds per micro-batch more than the candidate's own recomputation and whose slowest rank
        takes at least `slowest`.

        The pipeline takes at least (m + (pp − 1)/v) times the average stage (its slowest stage is at
        least the average) less, for ZB-H1 and ZB-H2, `hides` times the most weight gradients it hides
        (`_zb_h1_hidden`), the step tail at least the average stage's gradient reduction and optimizer step. Exposed
        communication is convex in (bytes, compute), so pricing it on the average stage under-estimates the average
        (Jensen).
        ZB-V and the wave add the bubble of cost_models.pipeline.stages on their slowest chunk, which takes at least the
        average chunk's forward and its time without it (less the weight gradients ZB-V moves); DualPipeV its largest
        2b − w per chunk, a rank's t − F − 1.5W, at least the average rank's (F, B: layer sums, alike for any split)."""
        stage, hop, forward, backward, tail = self._family(c, self.beside(c))
        stage += recomputed
        m = self.job.global_batch // (c.dp * c.mbs)
        if c.pp > 1:
            stage += self.sends(c) * hop
        slowest = max(stage, self.slowest(c), slowest)  # the slowest rank is at least the average and `slowest`
        costs, family = pricing(c.schedule), spec_of(c.schedule).family
        if costs.laid_out:  # ZB-2p: each rank runs its m micro-batches, no closed form bounds the rest
            return slowest * m + tail
        if family is ScheduleFamily.V and costs.waits_input_grad:  # every rank is busy m·t_r
            # ZB-V's bubble (p − 1)·max(f, b) + (p − 2)·max(f − b, 0) is at least the first term, which only grows
            return slowest * m + (c.pp - 1) * max(forward, stage - forward - W_SHARE * backward) / 2 + tail
        if family is ScheduleFamily.V:  # any V's: rank p − 1 waits p − 1 forwards; DualPipeV's (p − 1)·max(f, 2b − w)
            late = stage - forward - 1.5 * W_SHARE * backward if costs.paired_backward else 0.0
            return slowest * m + (c.pp - 1) * max(forward / 2, late) + tail
        if family is ScheduleFamily.WAVE:
            chunk = max(forward, stage - forward) / c.vpp
            return slowest * m + wave_bubble(c.pp, chunk, chunk) + tail
        hidden = costs.hides * W_SHARE * self._zb_h1_hidden(c, backward) if costs.hides else 0.0
        return slowest * (m - 1 / c.vpp) + stage * c.pp / c.vpp - hidden + tail

    def slowest(self, c: Candidate, beside: bool | None = None) -> float:
        """A lower bound on the slowest rank's seconds per micro-batch in any split of `c` (the head `beside` the
        embedding or not; c's by default): each rank holds whole layers (one or more), each at least the cheapest
        kind's time (own or full recomputation), the ends their pieces (`least_bottleneck_floor`)."""
        beside = self.beside(c) if beside is None else beside
        key = (self.floor_key(c), beside)
        if key not in self._slowest:
            times = self.get(c)
            n_dense, n_moe = self.layer_counts
            kinds = ((times.decoder, times.decoder_full, n_dense), (times.moe, times.moe_full, n_moe))
            per_layer = min(min(t.total, full.total) for t, full, n in kinds
                            if n and t is not None and full is not None)
            ends = [times.embedding.total + times.head.total] if beside else [times.embedding.total, times.head.total]
            base = ends + [0.0] * (c.pp - len(ends))
            self._slowest[key] = least_bottleneck_floor(base, per_layer, self.model.num_layers) * (1 - _ROUNDING)
        return self._slowest[key]

    def _zb_h1_hidden(self, c: Candidate, backward: float) -> float:
        """The most backward time ZB-H1 can hide in units of W_SHARE: every stage's but the last, Σ_r b_r − b_last
        = (p − 1)·b̄ + (b̄ − b_last), the last stage holding the head and at least one decoder layer."""
        times = self.get(c)
        n_dense, n_moe = self.layer_counts
        layers = [t.backward for t, n in ((times.decoder, n_dense), (times.moe, n_moe)) if n and t is not None]
        last = times.head.backward + min(layers, default=0.0)
        return (c.pp - 1) * backward + max(backward - last, 0.0)

    def _family(self, c: Candidate, head_beside_embedding: bool) -> tuple[float, float, float, float, float]:
        """What the bound needs that does not depend on vpp or the schedule (but for where the head sits):
        the average stage's time (without pipeline sends), one send, its forward and backward, and the tail priced with
        the widest overlap windows any vpp gives (`dp_reduce_exposed` with chunks = inf: the interleaved schedule's
        drain and warm-up, in the limit of ever finer chunks), itself a lower bound for any vpp since exposure only
        grows as windows shrink."""
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.mbs, c.zero, c.recompute, c.sp, c.ep, c.etp, c.modules,
               head_beside_embedding, c.offload)
        if key in self._families:
            return self._families[key]
        job, cluster = self.job, self.cluster
        hop, avg, params, sharded, bare_layout = self._bare_parts(c, head_beside_embedding)
        c = c.but(vpp=1, schedule=DEFAULT_SCHEDULE)
        layout = c.layout() if c.offload else bare_layout
        stage = avg.total + sharded + self._offload_floor(c)
        backward, forward = self.pass_windows(c, params)
        traffic = self._grad_traffic_of(c, head_beside_embedding, params, layout)
        tail = (dp_reduce_exposed(params, layout, job, cluster, backward, forward, math.inf, traffic)
                + optimizer_time(params, layout, job, cluster))
        self._families[key] = (stage, hop, avg.forward, avg.backward, tail)
        return self._families[key]

    @staticmethod
    def _parts_key(c: Candidate, beside: bool) -> tuple[object, ...]:
        """What `_bare_parts` depends on: `_family`'s key but the offload choice."""
        return (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.mbs, c.zero, c.recompute, c.sp, c.ep, c.etp, c.modules,
                beside)

    def _bare_parts(self, c: Candidate, beside: bool) -> tuple[float, LayerTime, StageParams, float, Layout]:
        """What `_family` reads that does not depend on the offload choice: one send, the average stage's layer times,
        its parameters, its exposed sharded traffic and its layout (no offload, one chunk)."""
        key = self._parts_key(c, beside)
        if key not in self._family_parts:
            bare = c.but(vpp=1, schedule=DEFAULT_SCHEDULE, offload=frozenset())
            layout, avg = bare.layout(), self._average(bare)
            params = self.params(bare, beside).scaled(1 / c.pp)
            self._family_parts[key] = (self.hop(bare), avg, params, sharded_dp_exposed(
                params, self.model.num_layers / c.pp, layout, self.job, self.cluster, avg), layout)
        return self._family_parts[key]

    def pass_windows(self, c: Candidate, params: StageParams) -> tuple[float, float]:
        """`tail_bounds.pass_ceilings` of `c` (once per `floor_key`), the backward with the gradient accumulation of
        `params`, the average stage's, where the runtime adds it in autograd."""
        key = self.floor_key(c)
        if key not in self._ceilings:
            self._ceilings[key] = pass_ceilings(self.get(c), self.layer_counts, c.pp)
        backward, forward = self._ceilings[key]
        if self.job.runtime.priced_execution.grad_accumulation_bytes:
            layout = c.but(vpp=1, schedule=DEFAULT_SCHEDULE).layout()
            backward += grad_accumulation_time(params, layout, self.job, self.cluster)
        return backward, forward

    def _offload_floor(self, c: Candidate) -> float:
        """`offload_floor.offload_floor` of `c`: exposed host copies of the average stage per micro-batch, at the
        least; 0 without weights or activations on the host."""
        if not c.offload & {Offload.ACTIVATIONS, Offload.PARAMS, Offload.GRADIENTS}:
            return 0.0
        dense, moe, _, _ = self._pieces_of(c)
        return offload_floor(c, self.get(c), self.activations(c), (dense, moe), self.layer_counts, self.job,
                             self.cluster) * (1 - _ROUNDING)

    def tight_bound(self, c: Candidate, balanced: bool) -> float:
        """`bound(c)` with the recomputation every split that fits needs (`recompute_floor`) and the slowest rank
        of any split that fits (`fitting_slowest`); for balanced chunks (whose recomputation is the candidate's own)
        with the slowest rank's own layers."""
        if balanced:  # the ranks hold the layers they hold: the slowest takes at least its layers and ends
            times, (emb, head, counts) = self.get(c), self.ranks(c)
            moe = times.moe.total if times.moe is not None else 0.0
            slowest = max(n_dense * times.decoder.total + n_moe * moe + (times.embedding.total if r == emb else 0.0)
                          + (times.head.total if r == head else 0.0) for r, (n_dense, n_moe) in enumerate(counts))
            return self._bound(c, 0.0, slowest * (1 - _ROUNDING))
        extra, slowest = self.recompute_floor(c), self.fitting_slowest(c)
        if math.isinf(slowest):  # no split fits
            return math.inf
        return self._bound(c, extra, slowest) if extra > 0 or slowest > self.slowest(c) else self.bound(c)

    def fitting_slowest(self, c: Candidate) -> float:
        """A lower bound on the slowest rank's seconds per micro-batch in any split of `c` that fits in memory.

        Rank r holding n layers of kind k takes at least f_r(n) = ends_r + n·τ_k + ρ_rk·(fixed_r + n·c_rk −
        capacity)⁺: τ_k the layer's time (or its fully recomputed one, if less), c_rk the bytes it keeps there without
        recomputation, and the excess saved by fully recomputed layers at ρ_rk, the seconds per byte they save there
        (sends and ZeRO traffic >= 0), and by whole layers (`floors.recompute_cost`: a rank a byte over recomputes
        one); it cannot hold them at all if even fully recomputed they exceed the GPU.
        Two relaxations, each below every split that fits (`least_bottleneck`): all layers, each rank's n of them of
        the kinds a rank can hold (`kinds_held`), every rank holding one or more; and each kind's layers alone (the
        others only add time and memory), a rank holding none or more. 0 where activations go to the host."""
        if Offload.ACTIVATIONS in c.offload:
            return 0.0
        times, acts = self.get(c), self.activations(c)
        fixed, alive, s_dense, s_moe = self.rank_bytes(c)
        n_dense, n_moe = self.layer_counts
        emb, head, _ = self.ranks(c)
        ends = [(times.embedding.total if r == emb else 0.0) + (times.head.total if r == head else 0.0)
                for r in range(c.pp)]
        cap = self.cluster.gpu.memory_gib * GIB
        part = self.partial_recompute  # else no layer of a solved split is recomputed: each keeps what it stores
        kinds = [(n, min(base.total, full.total) if part else base.total,
                  byte_rate(base, full, act, acts.full) if part else 0.0, act, states)
                 for n, base, full, act, states in ((n_dense, times.decoder, times.decoder_full, acts.dense, s_dense),
                                                    (n_moe, times.moe, times.moe_full, acts.moe, s_moe))
                 if n and base is not None and full is not None]
        held = self.kinds_held(c.vpp) if len(kinds) > 1 else None

        def costs(group: list[tuple[int, float, float, float, float]]) -> Callable[[int, int], float]:
            return rank_time_costs(ends, fixed, alive, cap, acts.full if part else math.inf, [k[1:] for k in group],
                                   held)

        alike = list(zip(ends, fixed, alive, strict=True))  # all of a rank that its costs read
        slowest = least_bottleneck(costs(kinds), c.pp, self.model.num_layers, 1, alike)
        if len(kinds) > 1:
            slowest = max([slowest] + [least_bottleneck(costs([k]), c.pp, k[0], 0, alike) for k in kinds])
        return slowest * (1 - _ROUNDING)

    def recompute_floor(self, c: Candidate) -> float:
        """`_recompute_floor`, once per candidate (its early key and its tight key both read it)."""
        found = self._recomputed.get(c)
        if found is None:
            found = self._recomputed[c] = self._recompute_floor(c)
        return found

    def _recompute_floor(self, c: Candidate) -> float:
        """Seconds per micro-batch that full recomputation adds at the least to the average stage of any split of
        `c` that fits in memory, net of the exposed traffic its wider windows may hide (`recompute_rate.stage_growth`).
        Rank r fits only if its fully recomputed layers save E_r = (fixed_r + Σ its layers' bytes − capacity)⁺, a
        recomputed layer of kind k saving (a_k − a_full)·alive_r: rank r saves at least E_r/alive_r bytes per
        micro-batch in flight, and Σ_r E_r/alive_r >= Σ_r λ_r·(fixed_r − capacity + its layers' bytes)/alive_r for
        any λ_r in [0, 1], bounded over every assignment as in `packing_floor` (λ all 1, or λ_r = max_k q_{r*k}/q_rk
        with q_rk = c_rk/alive_r and r* the rank with the most in flight); over pp, the average rank's."""
        if Offload.ACTIVATIONS in c.offload or not self.partial_recompute:  # none recomputed, or it frees nothing
            return 0.0
        times, acts = self.get(c), self.activations(c)
        fixed, alive, s_dense, s_moe = self.rank_bytes(c)
        kinds = [(n, base, full, act, states) for n, base, full, act, states in zip(
            self.layer_counts, (times.decoder, times.moe), (times.decoder_full, times.moe_full), (acts.dense, acts.moe),
            (s_dense, s_moe), strict=True) if n and base is not None and full is not None]
        rates = recompute_rates([k[1:4] for k in kinds], acts.full, 1.0 - self.cluster.gpu.overlap_efficiency)
        per_layer = [[states + act * a for a in alive] for _, _, _, act, states in kinds]
        if rates is None or min(min(row) for row in per_layer) <= 0:
            return 0.0
        excess = excess_floor([f - self.cluster.gpu.memory_gib * GIB for f in fixed], per_layer,
                              [k[0] for k in kinds], alive)
        return stage_growth(excess / c.pp, rates, self._hideable(c)) * (1 - _ROUNDING)

    def _hideable(self, c: Candidate) -> float:
        """What wider backward windows can hide of the average stage's exposure per micro-batch: its host copies and
        its sharded exposure less that beside an endless recomputation (`sharded_dp_exposed`: nonincreasing in it)."""
        beside = self.beside(c)
        key, (_, avg, params, _, layout) = self._parts_key(c, beside), self._bare_parts(c, beside)
        if key not in self._endless:
            self._endless[key] = sharded_dp_exposed(params, self.model.num_layers / c.pp, layout, self.job,
                                                    self.cluster, replace(avg, recompute=math.inf))
        return max(self._family(c, beside)[0] - avg.total - self._endless[key], 0.0)
