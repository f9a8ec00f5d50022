"""Memory floors of one search: the least bytes a GPU, and a node's host memory, need in every layout that pricing a
candidate can return, so that a candidate which cannot fit is dropped before its split is solved.

GPU (`RankMemory.memory_floor`): a rank holding layers costs (cost_models.step.stage_cost)
    states of its parameters + stored activations · micro-batches in flight + its end pieces + buffers,
states linear in the parameters (cost_models.sync.stage_states) and a fully recomputed layer storing its input
only.
So a rank r costs at least fixed_r + Σ over its layers of c_rk, with fixed_r what rank r holds whatever its layers:
- on every rank, the memory outside the runtime's allocator (its buffers); what sharded data parallelism holds gathered
  per rank (`gathered_terms`: ZeRO-3's modules, FSDP2's block gradient); where every stage holds one (every layer fully
  recomputed, or per-op SAC), the working set of the layer being recomputed; the two layers' worth that activation
  offloading keeps on the GPU;
- on the embedding rank, its states (and FSDP2's root module gathered) and its activations in flight;
- on the head rank, its states (and the root module's), the loss at its peak as the runtime holds it per logit (beside
  the working set: the larger of the two where they come apart), under a pipeline every micro-batch's output kept to
  the step's end, and the multi-token-prediction layers' activations in flight.
c_rk = states of one layer of kind k + what the runtime holds gathered of its weights (FSDP2's ZeRO-2, or weights kept
gathered under a pipeline with their gradients accumulated unsharded) + the least bytes it stores per micro-batch (none
when activations go to the host) · the micro-batches rank r keeps in flight. Every layout priced gives each rank at
least one layer. With the layers as they fall (balanced chunks) the floor is the largest rank's: the balanced layout's
peak itself, to rounding (tests/test_search_bounds.py holds it there for every candidate of its jobs, so a term the
cost model adds and the floors miss fails it). When the split is solved, `packing_floor` bounds the best assignment.
The recomputed layer's transient copy is left out (>= 0).

Host (`RankMemory.host_floor`, with offloading): a GPU's host bytes are its offloaded optimizer state and weights
(linear in its parameters, cost_models.sync.host_state_bytes) and, with activation offloading, its stored
activations · micro-batches in flight; the node holding the busiest rank keeps min(GPUs per stage, GPUs per node)
GPUs of that rank's stage (cost_models.memory.offload.node_host_bytes), each needing at least the rank's floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from cost_models.compute import flops as F
from cost_models.compute.knobs import LayerActivations, LayerKnobs
from cost_models.compute.sac import per_op_sac
from cost_models.memory import footprint as M
from cost_models.memory import held as H
from cost_models.memory.gathered import fsdp_block, gathered_form
from cost_models.memory.offload import host_capacity_bytes, offload_working_bytes
from cost_models.memory.params import StageParams, embedding_params, head_params, one_layer_params, rank_params
from cost_models.pipeline.schedules import in_flight
from cost_models.step import layer_activations, rank_layer_ids
from cost_models.sync import host_state_bytes, stage_states
from meshcore import GIB, ClusterSpec, JobSpec, ModelSpec, Offload, Recompute, Schedule
from planner.search.floors import packing_exceeds, packing_floor
from planner.search.held_kinds import HeldKinds
from planner.search.space import Candidate

ROUNDING = 1e-9  # the floors sum the same bytes in another order: kept this far below
# a candidate's pipeline shape as the floors read it (`RankMemory.shape_of`): embedding rank, head rank, micro-batches
# in flight per rank, those at the embedding and at the head rounded up, each rank's (dense, MoE) layers when balanced
Shape = tuple[int, int, tuple[float, ...], int, int, tuple[tuple[int, int], ...]]


def outside_bytes(job: JobSpec) -> float:
    """Bytes per GPU outside the runtime's caching allocator (every stage's `buffers_gib` in cost_models.step)."""
    return job.runtime.priced_execution.memory.outside_allocator_gib * GIB


def gathered_terms(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, c: Candidate, block: float
                   ) -> tuple[float, float, float]:
    """(bytes per parameter of a stage, bytes per rank, bytes per parameter of the embedding and the head) that
    sharded data parallelism holds gathered beside the states on a stage of one layer or more: the cost model's
    `gathered_form` (cost_models.step), its gradients per trained parameter folded into the rate (the same products
    summed in another order: the floors keep ROUNDING below them)."""
    form = gathered_form(model, job, cluster, c.layout(), block)
    if form is None:
        return 0.0, 0.0, 0.0
    return form.weight + form.grad * job.trainable_fraction, form.fixed, form.root


def _state_bound_bytes(model: ModelSpec, job: JobSpec, cluster: ClusterSpec, c: Candidate,
                       rank_parameters: StageParams, unit: float) -> tuple[float, float]:
    """Least static bytes on the busiest stage, as (all weights/gradients/optimizer state of a TP rank
    (`rank_parameters`, over every stage), sharded by the ZeRO stage, spread evenly over pp stages, plus the memory
    outside the allocator; what sharded data parallelism holds gathered of them, `gathered_terms` but the root
    module's, which more data-parallel ranks do not shrink). Both the states and the gathered bytes are linear in a
    stage's parameters, so the busiest stage holds at least those of the average stage's."""
    average = rank_parameters.scaled(1 / c.pp)
    states = stage_states(average, c.layout(), job)
    rate, fixed, _ = gathered_terms(model, job, cluster, c, unit)
    return states.total + outside_bytes(job), average.total * rate + fixed


class RankMemory:
    """Per-rank memory of a search's candidates (module docstring), cached by what each part depends on."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, job: JobSpec, partial_recompute: bool = True) -> None:
        self.model, self.cluster, self.job = model, cluster, job
        # whether a solved split may recompute some layers of a stage fully (SearchSpec.partial_recompute: the runtime
        # runs per-stage counts); without, a solved split keeps every layer's activations as the candidate stores them
        self.partial_recompute = partial_recompute
        self.layer_counts = F.decoder_layer_counts(model)  # (dense, MoE) decoder layers
        self.layer_kinds = model.moe_layers()  # per decoder layer: an MoE layer
        self._params: dict[tuple[int, bool, int, int], StageParams] = {}
        self._states: dict[tuple[object, ...], tuple[float, float]] = {}
        self._beside: dict[tuple[int, int, Schedule], bool] = {}
        self._acts: dict[tuple[object, ...], LayerActivations] = {}
        self._end_bytes: dict[tuple[int, int, int, bool], tuple[float, float]] = {}
        self._rank_info: dict[tuple[int, int, Schedule], tuple[int, int, tuple[tuple[int, int], ...]]] = {}
        self._in_flight: dict[tuple[Schedule, int, int, int], tuple[float, ...]] = {}
        self._pieces: dict[tuple[object, ...], tuple[tuple[float, ...], tuple[float, ...]]] = {}
        self._rank_bytes: dict[Candidate, tuple[list[float], tuple[float, ...], float, float]] = {}
        self._piece_params: dict[tuple[int, int, int, bool], tuple[StageParams, ...]] = {}
        self._fixed_parts: dict[tuple[object, ...], tuple[float, ...]] = {}
        self._shape_ranks: dict[tuple[object, ...], tuple[int, Shape]] = {}  # (its number, the shape)
        self._exceeds: dict[tuple[int, int, float], bool] = {}  # `memory_exceeds` by the values it reads, interned
        self._reads: dict[tuple[object, ...], tuple[int, tuple[float, ...], tuple[float, float]]] = {}
        self._numbers: dict[tuple[object, ...], int] = {}  # the shapes and parts `memory_exceeds` reads, numbered
        self._gathered_parts: dict[tuple[object, ...], tuple[float, float, float, float]] = {}
        self._mtp_moe = model.moe is not None and model.moe.is_moe_layer(model.num_layers)
        self._held: dict[int, HeldKinds] = {}

    def knobs(self, c: Candidate) -> LayerKnobs:
        return LayerKnobs(c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)

    def beside(self, c: Candidate) -> bool:
        """Whether the candidate's embedding and LM head share a rank (it depends on pp, vpp and the schedule)."""
        key = (c.pp, c.vpp, c.schedule)
        if key not in self._beside:
            self._beside[key] = c.layout().head_beside_embedding
        return self._beside[key]

    def shape_beside(self, c: Candidate, vpp: int, schedule: Schedule) -> bool:
        """`beside` of `c` with this vpp and schedule."""
        key = (c.pp, vpp, schedule)
        if key not in self._beside:
            self._beside[key] = replace(c, vpp=vpp, schedule=schedule).layout().head_beside_embedding
        return self._beside[key]

    def state_bound(self, c: Candidate, beside: bool | None = None) -> float:
        """`_state_bound_bytes` in all, once per (degrees, ZeRO stage, head placement: c's own, or `beside` where the
        caller asks for another shape of c's, whose head sits elsewhere)."""
        return sum(self.state_parts(c, beside))

    def state_parts(self, c: Candidate, beside: bool | None = None) -> tuple[float, float]:
        """`_state_bound_bytes` of `state_bound`: (the states and the memory outside the allocator, the gathered)."""
        beside = self.beside(c) if beside is None else beside
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, beside, c.offload)
        if key not in self._states:
            self._states[key] = _state_bound_bytes(self.model, self.job, self.cluster, c, self.params(c, beside),
                                                   self._unit(c))
        return self._states[key]

    def params(self, c: Candidate, head_beside_embedding: bool) -> StageParams:
        """All parameters of one rank of the (tp, ep, etp) mesh, over every pipeline stage."""
        key = (c.tp, head_beside_embedding, c.ep, c.etp)
        if key not in self._params:
            self._params[key] = rank_params(self.model, self.job, c.tp, head_beside_embedding, c.ep, c.etp)
        return self._params[key]

    def activations(self, c: Candidate) -> LayerActivations:
        """Bytes one layer of each kind stores per micro-batch (`layer_activations`), once per knobs."""
        key = (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules)
        if key not in self._acts:
            self._acts[key] = layer_activations(self.model, self.cluster, self.job, self.knobs(c))
        return self._acts[key]

    def _ends(self, c: Candidate) -> tuple[float, float]:
        """(the head rank's loss at its peak, as the runtime holds it per logit, the embedding rank's activations less
        the vision encoder's per micro-batch in flight), once per (mbs, tp, cp, sp)."""
        key = (c.mbs, c.tp, c.cp, c.sp)
        if key not in self._end_bytes:
            model, job, ex = self.model, self.job, self.job.runtime.priced_execution
            per_logit = H.loss_logit_bytes(c.tp, ex.logit_bytes, ex.memory)
            self._end_bytes[key] = (M.logits_bytes(model, job.seq_len, c.mbs, c.tp, c.cp, per_logit)
                                    * (1 + model.mtp_layers),
                                    M.embedding_activation_bytes(model, job.seq_len, c.mbs, c.tp, c.cp, c.sp))
        return self._end_bytes[key]

    def _working(self, c: Candidate, acts: LayerActivations) -> float:
        """What a recomputed layer holds while it runs backward (`LayerActivations.working`) where every stage holds
        one (cost_models.step.stage_held: every layer fully recomputed, or per-op SAC), else 0."""
        if c.recompute is Recompute.FULL or per_op_sac(c.recompute, self.job):
            return acts.working
        return 0.0

    def ranks(self, c: Candidate) -> tuple[int, int, tuple[tuple[int, int], ...]]:
        """(embedding rank, head rank, (dense, MoE) decoder layers of each rank with balanced chunks)."""
        key = (c.pp, c.vpp, c.schedule)
        if key not in self._rank_info:
            layout, kinds = c.layout(), self.layer_kinds
            counts = tuple((len(ids) - sum(kinds[i] for i in ids), sum(kinds[i] for i in ids))
                           for ids in rank_layer_ids(layout, self.model.num_layers))
            self._rank_info[key] = (layout.embedding_rank, layout.head_rank, counts)
        return self._rank_info[key]

    def kinds_held(self, vpp: int) -> HeldKinds:
        """The MoE layers a rank of vpp chunks (one: a run of consecutive layers) holding n layers can hold
        (planner.search.held_kinds), once per vpp."""
        if vpp not in self._held:
            self._held[vpp] = HeldKinds.of(self.layer_kinds, vpp)
        return self._held[vpp]

    def alive(self, c: Candidate) -> tuple[float, ...]:
        """Micro-batches each rank keeps in flight (`cost_models.pipeline.schedules.in_flight`)."""
        m = self.job.global_batch // (c.dp * c.mbs)
        key = (c.schedule, c.pp, m, c.vpp)
        if key not in self._in_flight:
            self._in_flight[key] = tuple(in_flight(c.schedule, r, c.pp, m, c.vpp) for r in range(c.pp))
        return self._in_flight[key]

    def _gathered(self, c: Candidate) -> tuple[float, float, float, float]:
        """(bytes per parameter, bytes per rank, the root module's bytes on the embedding rank and on the head rank)
        of `gathered_terms`, once per (tp, pp, ZeRO stage, ep, etp, head placement)."""
        beside = self.beside(c)
        key = (c.tp, c.pp, c.zero, c.ep, c.etp, beside)
        found = self._gathered_parts.get(key)
        if found is None:
            model, job = self.model, self.job
            rate, every, ends = gathered_terms(model, job, self.cluster, c, self._unit(c))
            emb = embedding_params(model, job, c.tp) * ends if ends else 0.0
            head = head_params(model, job, c.tp, beside).total * ends if ends else 0.0
            found = self._gathered_parts[key] = (rate, every, emb, head)
        return found

    def _unit(self, c: Candidate) -> float:
        """The parameters of the block FSDP2 gathers and reduces at once: an MoE layer's on this rank where the model
        has MoE layers, else a dense layer's (cost_models.step.LayoutCosts.block_params)."""
        dense, moe = self._pieces_of(c)[:2]
        return fsdp_block(dense, moe if self.layer_counts[1] else StageParams(0.0))

    def _pieces_of(self, c: Candidate) -> tuple[StageParams, ...]:
        """Parameters of one dense layer, one MoE layer, the embedding and the head on one rank, once per (tp, ep, etp,
        head placement)."""
        key = (c.tp, c.ep, c.etp, self.beside(c))
        if key not in self._piece_params:
            model, job = self.model, self.job
            self._piece_params[key] = (one_layer_params(model, job, c.tp, c.ep, c.etp, False),
                                       one_layer_params(model, job, c.tp, c.ep, c.etp, True),
                                       StageParams(embedding_params(model, job, c.tp)),
                                       head_params(model, job, c.tp, key[3], c.ep, c.etp))
        return self._piece_params[key]

    def _piece_states(self, c: Candidate) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(states on the GPU: weights, gradients, optimizer; offloaded states on the host) of one dense layer, one
        MoE layer, the embedding and the head, in that order: the first three once for either head placement."""
        key = (c.tp, c.pp, c.dp, c.dp_replicate, c.cp, c.zero, c.ep, c.etp, c.offload)
        beside = self.beside(c)
        found = self._pieces.get((*key, beside))
        if found is None:
            layout, job, pieces = c.layout(), self.job, self._pieces_of(c)
            body = self._pieces.get((*key, not beside))  # the other placement's: the same first three
            gpu = body[0][:3] if body else tuple(stage_states(p, layout, job).total for p in pieces[:3])
            host = body[1][:3] if body else tuple(host_state_bytes(p, layout, job) if c.offload else 0.0
                                                  for p in pieces[:3])
            found = self._pieces[(*key, beside)] = (
                (*gpu, stage_states(pieces[3], layout, job).total),
                (*host, host_state_bytes(pieces[3], layout, job) if c.offload else 0.0))
        return found

    def rank_bytes(self, c: Candidate, acts: LayerActivations | None = None
                   ) -> tuple[list[float], tuple[float, ...], float, float]:
        """`_rank_bytes`, once per candidate (its memory floor, recomputation floor and slowest fitting rank read it;
        callers do not change the list)."""
        found = self._rank_bytes.get(c)
        if found is None:
            found = self._rank_bytes[c] = self._bytes_of_ranks(c, acts)
        return found

    def _bytes_of_ranks(self, c: Candidate, acts: LayerActivations | None
                        ) -> tuple[list[float], tuple[float, ...], float, float]:
        """(fixed bytes of each rank, micro-batches each keeps in flight, states of one dense and one MoE layer): the
        module docstring's fixed_r, as cost_models.step.stage_held and stage_cost count them (`acts`: c's
        `activations`, when the caller has them)."""
        emb, head, alive, at_emb, at_head, _ = self.shape_of(c)
        every, s_emb, first, s_head, logits, mtp, s_dense, s_moe = self.parts_of(c, acts)
        return self.fixed_of(c.pp, emb, head, at_emb, at_head, every, s_emb, first, s_head, logits, mtp), alive, \
            s_dense, s_moe

    @staticmethod
    def fixed_of(pp: int, emb: int, head: int, at_emb: int, at_head: int, every: float, s_emb: float, first: float,
                 s_head: float, logits: float, mtp: float) -> list[float]:
        """fixed_r of `_bytes_of_ranks` from `shape_of` and `parts_of`."""
        fixed = [every] * pp  # (every + 0.0 + 0.0 is every: the same floats as summing each rank's three terms)
        fixed[emb] = every + (s_emb + first * at_emb)
        fixed[head] = fixed[head] + (s_head + logits + mtp * at_head)
        return fixed

    def shape_of(self, c: Candidate) -> Shape:
        """(embedding rank, head rank, `alive`, the micro-batches in flight on the embedding and the head rank rounded
        up, each rank's layers with balanced chunks), once per (pp, vpp, schedule, micro-batches)."""
        return self._shape_id(c)[1]

    def _shape_id(self, c: Candidate) -> tuple[int, Shape]:
        """(a number for the value of `shape_of(c)`, that value): equal shapes, of other keys, share the number."""
        key = (c.pp, c.vpp, c.schedule, c.dp, c.mbs)
        found = self._shape_ranks.get(key)
        if found is None:
            emb, head, counts = self.ranks(c)
            alive = self.alive(c)
            shape = (emb, head, alive, math.ceil(alive[emb]), math.ceil(alive[head]), counts)
            found = self._shape_ranks[key] = (self._numbers.setdefault(shape, len(self._numbers)), shape)
        return found

    def parts_of(self, c: Candidate, acts: LayerActivations | None) -> tuple[float, ...]:
        """(bytes every rank holds, the embedding's states, its activations per micro-batch in flight, the head's
        states, its logits, the multi-token-prediction layers' activations per micro-batch in flight, states of one
        dense and one MoE layer) of `_bytes_of_ranks`, once per knobs, degrees, ZeRO stage, head placement and offload
        choice."""
        key = (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules, c.pp, c.dp, c.dp_replicate, c.zero,
               c.offload, self.beside(c))
        found = self._fixed_parts.get(key)
        if found is None:
            model, job = self.model, self.job
            rate, every, emb_root, head_root = self._gathered(c)
            dense, moe, emb, head = self._pieces_of(c)
            s_dense, s_moe, s_emb, s_head = self._piece_states(c)[0]
            s_dense, s_moe = s_dense + dense.total * rate, s_moe + moe.total * rate
            s_emb += emb.total * rate + emb_root
            s_head += head.total * rate + head_root
            acts = self.activations(c) if acts is None else acts
            loss, first = self._ends(c)
            working, memory = self._working(c, acts), job.runtime.priced_execution.memory
            m = job.global_batch // (c.dp * c.mbs)  # the head rank keeps every micro-batch's output under a pipeline
            kept = H.kept_logits_bytes(model, job.seq_len, c.mbs, c.tp, c.cp, m, memory) if c.pp > 1 else 0.0
            logits = H.held_at_peak(loss, working, memory) - working + kept  # (every rank's `every` holds working)
            mtp = model.mtp_layers * (acts.moe if self._mtp_moe else acts.dense)
            first += acts.vision
            every += outside_bytes(job) + working
            if Offload.ACTIVATIONS in c.offload:
                every += 2 * max(acts.dense, acts.moe)
            if c.offload:  # (nothing to hold without)
                every += offload_working_bytes(c.layout(), job)
            found = self._fixed_parts[key] = (every, s_emb, first, s_head, logits, mtp, s_dense, s_moe)
        return found

    def memory_floor(self, c: Candidate, balanced: bool) -> float:
        """Bytes at least one GPU needs in every layout that pricing `c` can return (module docstring): its balanced
        chunks when `balanced`, else any split of the layers with at least one per rank, any of them fully
        recomputed. A candidate whose floor exceeds the GPU's memory cannot fit."""
        return self._largest_rank(c, balanced, *self._gpu_rows(c, balanced))

    def memory_exceeds(self, c: Candidate, balanced: bool, capacity: float) -> bool:
        """Whether `memory_floor(c, balanced)` exceeds `capacity`; for a solved split by `packing_exceeds` (the same
        answer as the floor's). (The search asks for every member of every group it reaches: the balanced floor is
        summed here as `_largest_rank` sums it, the same floats, without building the rows.) Once per value of what
        it reads, by the numbers of its two parts (`_read_parts`, `_shape_id`): candidates of other schedules with the
        same micro-batches in flight, or other module sets storing alike, often read the same."""
        (reads, parts, stored), (shape_id, shape) = self._read_parts(c, balanced), self._shape_id(c)
        key = (reads, shape_id, capacity)
        found = self._exceeds.get(key)
        if found is None:
            found = self._exceeds[key] = self._exceeds_of(c.pp, balanced, capacity, shape, parts, stored)
        return found

    def _read_parts(self, c: Candidate, balanced: bool) -> tuple[int, tuple[float, ...], tuple[float, float]]:
        """(a number for (pp, balanced, `parts_of`, `stored`), those two), once per `parts_of`'s key and balanced."""
        key = (c.tp, c.cp, c.sp, c.mbs, c.recompute, c.ep, c.etp, c.modules, c.pp, c.dp, c.dp_replicate, c.zero,
               c.offload, self.beside(c), balanced)
        found = self._reads.get(key)
        if found is None:
            acts = self.activations(c)
            parts, stored = self.parts_of(c, acts), self.stored(c, acts, balanced)
            number = self._numbers.setdefault((c.pp, balanced, parts, stored), len(self._numbers))
            found = self._reads[key] = (number, parts, stored)
        return found

    def _exceeds_of(self, pp: int, balanced: bool, capacity: float, shape: Shape, parts: tuple[float, ...],
                    stored: tuple[float, float]) -> bool:
        """`memory_exceeds` from what it reads."""
        emb, head, alive, at_emb, at_head, counts = shape
        every, s_emb, first, s_head, logits, mtp, s_dense, s_moe = parts
        fixed = self.fixed_of(pp, emb, head, at_emb, at_head, every, s_emb, first, s_head, logits, mtp)
        a_dense, a_moe = stored
        if balanced:
            floor = max([fixed[r] + n_dense * (s_dense + a_dense * alive[r]) + n_moe * (s_moe + a_moe * alive[r])
                         for r, (n_dense, n_moe) in enumerate(counts)])
            return floor * (1 - ROUNDING) > capacity
        dense, moe = [s_dense + a_dense * a for a in alive], [s_moe + a_moe * a for a in alive]
        return packing_exceeds(fixed, *self.kind_rows(dense, moe), capacity, 1 - ROUNDING)

    def _gpu_rows(self, c: Candidate, balanced: bool) -> tuple[list[float], list[float], list[float]]:
        """(fixed_r, c_r of a dense layer, c_r of an MoE layer) of `memory_floor`, per rank."""
        acts = self.activations(c)
        fixed, alive, s_dense, s_moe = self.rank_bytes(c, acts)
        a_dense, a_moe = self.stored(c, acts, balanced)
        return fixed, [s_dense + a_dense * a for a in alive], [s_moe + a_moe * a for a in alive]

    def stored(self, c: Candidate, acts: LayerActivations, balanced: bool) -> tuple[float, float]:
        """Bytes a dense and an MoE layer store on the GPU per micro-batch in flight at the least (`_gpu_rows`)."""
        a_dense, a_moe = acts.dense, acts.moe
        if not balanced and self.partial_recompute:  # the split may recompute any layer fully: it stores its input
            a_dense, a_moe = min(a_dense, acts.full), min(a_moe, acts.full)
        if Offload.ACTIVATIONS in c.offload:  # stored activations live on the host (the GPU's two are in fixed)
            a_dense = a_moe = 0.0
        return a_dense, a_moe

    def kind_rows(self, dense: list[float], moe: list[float]) -> tuple[list[list[float]], list[int]]:
        """The per-rank bytes and the count of each kind of layer the model has (`packing_floor`'s arguments)."""
        n_dense, n_moe = self.layer_counts
        kinds = [(dense, n_dense), (moe, n_moe)]
        return [k for k, n in kinds if n], [n for _, n in kinds if n]

    def host_floor(self, c: Candidate, balanced: bool) -> float:
        """Host bytes at least one node needs in every layout that pricing `c` can return (module docstring); 0
        without offloading. A candidate whose floor exceeds `host_capacity` cannot fit."""
        if not c.offload:
            return 0.0
        emb, head, _ = self.ranks(c)
        h_dense, h_moe, h_emb, h_head = self._piece_states(c)[1]
        alive, acts = self.alive(c), self.activations(c)
        a_dense = a_moe = 0.0
        if Offload.ACTIVATIONS in c.offload:
            a_dense, a_moe = acts.dense, acts.moe
            if not balanced and self.partial_recompute:
                a_dense, a_moe = min(a_dense, acts.full), min(a_moe, acts.full)
        fixed = [(h_emb if r == emb else 0.0) + (h_head if r == head else 0.0) for r in range(c.pp)]
        rank = self._largest_rank(c, balanced, fixed, [h_dense + a_dense * a for a in alive],
                                  [h_moe + a_moe * a for a in alive])
        return c.layout().mesh.stage_group.per_node(self.cluster) * rank  # the busiest stage's GPUs in one node

    def host_capacity(self) -> float:
        return host_capacity_bytes(self.cluster)

    def _largest_rank(self, c: Candidate, balanced: bool, fixed: list[float], dense: list[float],
                      moe: list[float]) -> float:
        """The largest rank's fixed_r + Σ c_rk over its layers: as the balanced chunks fall, or over any split."""
        if balanced:
            floor = max(fixed[r] + n_dense * dense[r] + n_moe * moe[r]
                        for r, (n_dense, n_moe) in enumerate(self.ranks(c)[2]))
        else:
            floor = packing_floor(fixed, *self.kind_rows(dense, moe))
        return floor * (1 - ROUNDING)


def affine_rows(base: Sequence[float], scales: Sequence[float], values: Sequence[float]) -> list[list[float]]:
    """[[base[j] + a·values[j] for each j] for each a in scales]: numpy's for a large table (three times faster), plain
    floats for a small one (a small plan never imports numpy); the same operations, so the same floats."""
    if len(scales) * len(base) <= 512:
        return [[b + a * x for b, x in zip(base, values, strict=True)] for a in scales]
    import numpy as np

    rows: list[list[float]] = (np.asarray(base)[None, :] + np.asarray(scales)[:, None] * np.asarray(values)[None, :]
                               ).tolist()
    return rows
