"""Per-layer strategies on a chain of profiled layers: the model and its plain pricing (issue 16, part 1).

The search (`planner.search.layerwise_dp`) chooses, per layer, what this module prices; the brute-force tests
price every assignment with `price` and compare.

The model. A chain plan has pp stages and dp x G GPUs per stage, G the plan's (widest) TP degree; the
micro-batch of `mbs` samples belongs to one group of G GPUs, m = global batch / (dp x mbs) of them per step, as
in the uniform chain planner (`planner.search.chain`). Each layer l chooses
  - a TP degree t dividing G: the group then runs G/t replicas of the layer with t-way TP, each on mbs x t/G
    samples, so the layer's costs come from the table's row (kind, t, mbs x t/G); its gradients are reduced
    over its n_t = dp x G/t data-parallel ranks (stride t), ZeRO-1 (distributed optimizer) when n_t > 1, as
    the uniform planner does (ZeRO-1 moves fewer bytes than an all-reduce and holds less: it dominates ZeRO-0);
  - keep or recompute: keeping holds the row's activation_bytes per micro-batch in flight; recomputing holds
    only the layer's input (the earlier layer's output for this layer's samples; the chain's own input, the
    data batch, is not counted, as the uniform planner does not count it), runs the forward once more in the
    backward, and holds the layer's full activations transiently while it is recomputed (one layer at a time:
    the stage's peak adds the largest recomputed activation_bytes).
A layer at t whose neighbour before it runs at t' != t reshards the boundary activation: with t_hi = max(t, t')
the wider TP group gathers the activation of its samples, S = output_bytes(earlier layer's row) x t_hi / t'
(the earlier row covers mbs x t'/G samples), forward an all-gather and backward a reduce-scatter of its
gradient, both over t_hi ranks at stride 1 inside the scale-up domain (G <= its size):
    reshard = 2 x collective_time(ALL_GATHER, S, t_hi) = 2 x [α (t_hi − 1) + (t_hi − 1)/t_hi · S / busbw]
(cost_models.comm.collectives; nccl-tests factors). Between pipeline stages a send carries any layout (every receiving
rank
receives the part it needs): forward each rank sends its row's output_bytes, backward the gradient of the
stage's input for the first layer's samples, the earlier layer's group output x t/G.
A stage's per-micro-batch time T_s is the sum of its layers' forward + backward (+ forward when recomputed),
reshards and sends; its tail is its gradient reduction and weight gather per TP degree in use (one collective
each over the parameters at that degree, cost_models.sync.grad_sync_times, affine in the bytes) plus Adam on
the local shard; memory is states (cost_models.memory.footprint.state_bytes per parameter) + in_flight(1F1B) x stored
activations + the transient + the buffer allowance. The step is the uniform planner's:
    step = (m − 1) · max_s T_s + Σ_s T_s + max_s tail_s.
With every layer at t = G and nothing recomputed this is exactly the uniform plan (tp G, the same dp and mbs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cost_models.comm.collectives import Collective, collective, send_recv
from cost_models.memory import footprint as M
from cost_models.pipeline.schedules import in_flight
from cost_models.pipeline.stages import pipeline_time
from cost_models.sync import OPTIMIZER_BYTES_PER_PARAM, grad_sync_times
from meshcore import DEFAULT_SCHEDULE, GIB, ClusterSpec, ZeroStage
from meshcore.mesh import Group, Mesh
from planner.search.chain import ChainTable, LayerChoice


@dataclass(frozen=True)
class Option:
    """One layer at one TP degree: its row's costs (one rank, one replica's share of the micro-batch)."""

    tp: int
    forward_s: float
    time_s: float  # forward + backward
    activation: float  # bytes kept when not recomputed
    params: float  # on one rank
    output: float  # bytes of the output of this replica's samples


@dataclass(frozen=True)
class TpTerms:
    """Per-step constants of the layers at one TP degree: data-parallel ranks, state bytes per parameter, and the
    tail's affine pieces (seconds, seconds per parameter)."""

    tp: int
    ranks: int
    state_per_param: float
    sync_alpha: float
    tail_per_param: float

    @property
    def zero(self) -> ZeroStage:
        return ZeroStage.OPTIMIZER if self.ranks > 1 else ZeroStage.NONE


@dataclass(frozen=True)
class Setting:
    """One candidate (G, pp, dp, mbs) with every layer's options and the per-degree constants."""

    group: int
    pp: int
    dp: int
    mbs: int
    m: int
    options: tuple[tuple[Option, ...], ...]  # per layer, by TP degree
    group_output: tuple[float, ...]  # per layer: its output for the whole group's micro-batch (bytes)
    terms: tuple[TpTerms, ...]
    reshards: tuple[Mapping[tuple[int, int], float], ...]  # per layer l > 0: (tp of l − 1, tp of l) -> reshard s
    neighbours: Group  # the pipeline's send/recv pair (`_pipeline`)

    def option(self, layer: int, tp: int) -> Option:
        return next(o for o in self.options[layer] if o.tp == tp)

    def term(self, tp: int) -> TpTerms:
        return next(t for t in self.terms if t.tp == tp)

    def reshard(self, layer: int, before: int, after: int) -> float:
        """`reshard_time` from layer − 1 at TP `before` to `layer` at TP `after`, priced once in `setting`."""
        return self.reshards[layer][before, after]


def tp_terms(tp: int, group: int, dp: int, cluster: ClusterSpec, grad_bytes: int) -> TpTerms:
    """Layers at `tp`: n = dp·G/tp ranks at stride tp. grad_sync_times is affine in the parameters P on each of
    NCCL's (algorithm, protocol) pieces (latency + factor·P·bytes/algbw, cost_models/comm/nccl.py), so the tail of P
    parameters is sync_alpha + tail_per_param·P on the large-message piece gradient reductions run on, the second
    term adding Adam's 38 bytes per locally updated parameter (cost_models.sync.adam_step_time)."""
    mesh = Mesh(tp=tp, dp_shard=dp * group // tp)  # the layer's G/t replicas join the data-parallel ranks
    ranks = mesh.shard_group.size
    zero = ZeroStage.OPTIMIZER if ranks > 1 else ZeroStage.NONE

    def sync(p: float) -> float:
        return sum(grad_sync_times(p, zero, mesh.dense_data, cluster, grad_bytes, True))

    big = 1e9  # NCCL's time is piecewise affine in the bytes (its protocol changes with size): the secant of the
    beta = (sync(2 * big) - sync(big)) / big  # large-message piece, where gradient reductions run (Simple)
    adam = OPTIMIZER_BYTES_PER_PARAM / (ranks if zero >= ZeroStage.OPTIMIZER else 1) / (
        cluster.gpu.hbm_gbs * 1e9 * cluster.gpu.memory_efficiency)
    return TpTerms(tp, ranks, M.state_bytes(1.0, zero, ranks, grad_bytes).total, sync(big) - beta * big, beta + adam)


def setting(table: ChainTable, cluster: ClusterSpec, group: int, pp: int, dp: int, mbs: int, global_batch: int,
            grad_bytes: int = 4) -> Setting | None:
    """The candidate's options: layer l may run at t | G when G/t divides mbs and the table has (kind, t,
    mbs·t/G); None when a layer has no option."""
    options: list[tuple[Option, ...]] = []
    for kind in table.kinds:
        found = []
        for t in (t for t in range(1, group + 1) if group % t == 0 and (mbs * t) % group == 0):
            row = table.costs.get((kind, t, mbs * t // group))
            if row is not None:
                fwd, bwd, act, params, out = row
                found.append(Option(t, fwd / 1e3, (fwd + bwd) / 1e3, act, params, out))
        if not found:
            return None
        options.append(tuple(found))
    group_out = tuple(max(o.output * group / o.tp for o in opts) for opts in options)
    degrees = sorted({o.tp for opts in options for o in opts})
    terms = tuple(tp_terms(t, group, dp, cluster, grad_bytes) for t in degrees)
    priced: dict[tuple[float, int, int], float] = {}  # layers of one output at one degree reshard alike
    groups = {t: Mesh(tp=t).tp_group for t in degrees}

    def reshard(x: Option, y: Option) -> float:
        key = (x.output, x.tp, y.tp)
        if key not in priced:
            priced[key] = reshard_time(x, y, cluster, groups[max(x.tp, y.tp)])
        return priced[key]

    reshards = tuple({(x.tp, y.tp): reshard(x, y) for x in before for y in after}
                     for before, after in zip(((),) + tuple(options), options, strict=False))
    return Setting(group, pp, dp, mbs, global_batch // (dp * mbs), tuple(options), group_out, terms, reshards,
                   Mesh(tp=group, dp_shard=dp, pp=pp).pipeline_neighbours)


def reshard_time(before: Option, after: Option, cluster: ClusterSpec, group: Group | None = None) -> float:
    """Forward all-gather + backward reduce-scatter of the boundary activation between neighbours of different TP
    (module docstring): 2 x collective_time(ALL_GATHER, output x t_hi / t_before, t_hi, stride 1); `group`: the
    TP group of t_hi ranks, when the caller has it."""
    if before.tp == after.tp:
        return 0.0
    hi = max(before.tp, after.tp)
    return 2 * collective(Collective.ALL_GATHER, before.output * hi / before.tp,
                          Mesh(tp=hi).tp_group if group is None else group, cluster)


def stored_bytes(st: Setting, layer: int, opt: Option, recompute: bool) -> float:
    """Bytes one micro-batch leaves on each rank of the layer until its backward."""
    if not recompute:
        return opt.activation
    return st.group_output[layer - 1] * opt.tp / st.group if layer > 0 else 0.0


def send_in(st: Setting, first: int, opt: Option, cluster: ClusterSpec) -> float:
    """The gradient of a stage's input sent back to the stage before (none for the first stage's layer 0)."""
    if first == 0:
        return 0.0
    return send_recv(st.group_output[first - 1] * opt.tp / st.group, st.neighbours, cluster)


def send_out(st: Setting, last: Option, cluster: ClusterSpec) -> float:
    """A stage's output sent to the next stage: each rank sends its row's output bytes."""
    return send_recv(last.output, st.neighbours, cluster)


@dataclass(frozen=True)
class Priced:
    step_time_s: float
    stage_times: tuple[float, ...]
    stage_tails: tuple[float, ...]
    stage_memory_bytes: tuple[float, ...]


def alive(st: Setting, stage: int) -> float:
    """Micro-batches whose activations stage `stage` holds at its peak (1F1B)."""
    return in_flight(DEFAULT_SCHEDULE, stage, st.pp, st.m, 1)


def price(st: Setting, cluster: ClusterSpec, bounds: Sequence[int], choices: Sequence[LayerChoice]) -> Priced:
    """The plain cost model of one per-layer plan: stages [bounds[s], bounds[s + 1]) with `choices` per layer (the
    module docstring's formulas, written out once, layer by layer)."""
    times, tails, mems = [], [], []
    for s, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
        opts = [st.option(n, choices[n].tp) for n in range(a, b)]
        t = sum(o.time_s + (o.forward_s if choices[n].recompute else 0.0) for n, o in zip(range(a, b), opts,
                                                                                          strict=True))
        t += sum(st.reshard(n + 1, x.tp, y.tp) for n, x, y in zip(range(a, b), opts, opts[1:], strict=False))
        t += (send_in(st, a, opts[0], cluster) if s > 0 else 0.0) + (
            send_out(st, opts[-1], cluster) if s < st.pp - 1 else 0.0)
        params = {term.tp: sum(o.params for o in opts if o.tp == term.tp) for term in st.terms}
        tail = sum(term.sync_alpha + term.tail_per_param * params[term.tp] for term in st.terms if params[term.tp] > 0)
        states = sum(o.params * st.term(o.tp).state_per_param for o in opts)
        kept = sum(stored_bytes(st, n, o, choices[n].recompute) for n, o in zip(range(a, b), opts, strict=True))
        transient = max((o.activation for n, o in zip(range(a, b), opts, strict=True) if choices[n].recompute),
                        default=0.0)
        times.append(float(t))
        tails.append(float(tail))
        mems.append(float(states + alive(st, s) * kept + transient + M.BUFFER_ALLOWANCE_GIB * GIB))
    step = float(pipeline_time(times, st.m, 1, DEFAULT_SCHEDULE) + max(tails))
    return Priced(step, tuple(times), tuple(tails), tuple(mems))
