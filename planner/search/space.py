"""The layout space: one flat generator of valid degree tuples, with every divisibility and topology
rule in one place (the same rules `Layout.validate` enforces, applied while generating so that no
invalid tuple is ever priced).

Dimensions and their ranges (each can be pinned through SearchSpec):
  tp   divisors of the GPU count up to the scale-up domain (and max_tp), dividing the attention heads
  cp   powers of two with seq/cp >= 2048 tokens per rank and seq % 2cp == 0 (off with no_cp)
  pp   divisors of what tp·cp leave, at most the layer count
  dp   the rest; the global batch must split into dp·mbs
  mbs  divisors of the per-replica batch up to max_mbs
  vpp  1, or 2..16 model chunks per rank with at least one layer each (interleaved 1F1B needs
       micro-batches % pp == 0)
  zero 0-3 (1-3 only when dp·cp > 1, or to offload); recompute none / selective / full; SP on whenever tp > 1
       (it only removes memory and element-wise work in this model), unless pinned.
  recompute modules  selective recomputation of Megatron's --recompute-modules, a short nested family of sets
       that free memory in this model (`module_sets`: layernorm, + moe_act, + mla_up_proj), or a pinned set.
  schedule  interleaved 1F1B, ZB-V (vpp 2) or the wave (1 or 2 waves, `max_waves`: vpp 2 or 4; its memory
            grows by p stages of activations per wave while its bubble halves; more when vpp is pinned)
            with vpp > 1; 1F1B or ZB-H1 otherwise (`schedules_for`).
  ep, etp   MoE models only: ep divides the experts, etp is 1 or tp, etp·ep divides tp·cp·dp
            (`expert_options`); dense models 1 and 1.
Dominated choices are not generated unless pinned, and the reason is a property of the cost model:
  - ZeRO-0 when dp·cp > 1: ZeRO-1 moves fewer bytes (reduce-scatter of fp32 gradients + all-gather of
    bf16 weights < all-reduce of fp32 gradients), updates fewer parameters and holds less state;
  - selective recomputation with fused attention: the kernel already recomputes its scores, so
    selective costs and saves exactly what no recomputation does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields, replace
from itertools import product
from types import MappingProxyType
from typing import Any

from meshcore import (
    DEFAULT_RECOMPUTE_MODULES,
    DEFAULT_SCHEDULE,
    SCHEDULES,
    WAVE_PLACED,
    AttentionKernel,
    ClusterSpec,
    JobSpec,
    Layout,
    ModelSpec,
    Offload,
    Recompute,
    RecomputeModule,
    Schedule,
    ScheduleFamily,
    ScheduleSpec,
    ZeroStage,
    default_schedule,
)
from meshcore.errors import LayoutError
from meshcore.layout import sp_multiple
from planner.search.searchspec import MAX_TOP_K as MAX_TOP_K  # re-exported: SearchSpec's home was this module
from planner.search.searchspec import MAX_VPP, MIN_TOKENS_PER_CP_RANK
from planner.search.searchspec import SearchSpec as SearchSpec

# the ranks and bits of `Candidate.sort_key`
_RECOMPUTE_RANK = MappingProxyType({r: i for i, r in enumerate(Recompute)})
_SCHEDULE_RANK = MappingProxyType({s: i for i, s in enumerate(Schedule)})
_MODULE_BITS = MappingProxyType({m: 1 << i for i, m in enumerate(RecomputeModule)})
_OFFLOAD_BITS = MappingProxyType({o: 1 << i for i, o in enumerate(Offload)})


@dataclass(frozen=True)
class Candidate:
    """Degrees of one layout family; the stage split and per-stage recomputation come later."""

    tp: int
    cp: int
    pp: int
    dp: int
    mbs: int
    vpp: int
    zero: ZeroStage
    recompute: Recompute
    sp: bool
    schedule: Schedule = DEFAULT_SCHEDULE
    ep: int = 1
    etp: int = 1
    modules: frozenset[RecomputeModule] = frozenset()  # with recompute selective (empty: Megatron's default)
    offload: frozenset[Offload] = frozenset()
    dp_replicate: int = 1  # HSDP: ZeRO/FSDP shards over cp·dp/dp_replicate ranks, replicated dp_replicate times

    def layout(self) -> Layout:
        """The candidate as a layout with balanced chunks (the split comes later)."""
        return Layout(tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, vpp=self.vpp, mbs=self.mbs, sp=self.sp,
                      zero=self.zero, recompute=self.recompute, schedule=self.schedule, ep=self.ep, etp=self.etp,
                      recompute_modules=self.modules, offload=self.offload, dp_replicate=self.dp_replicate)

    def but(self, **changes: Any) -> Candidate:
        """`dataclasses.replace(self, **changes)` at a tenth of its cost (the search makes a few hundred thousand):
        a copy of the fields with `changes` over them, without __init__ (Candidate has no checks to run). Only
        fields may change."""
        if not changes.keys() <= _FIELDS:
            raise TypeError(f"Candidate has no field {sorted(changes.keys() - _FIELDS)}")
        new = object.__new__(Candidate)
        new.__dict__.update(self.__dict__, **changes)
        return new

    def sort_key(self) -> tuple[int, ...]:
        """A total order on candidates (ties in the search break on it, so plans are reproducible)."""
        modules = sum(_MODULE_BITS[m] for m in self.modules) if self.modules else 0
        offload = sum(_OFFLOAD_BITS[o] for o in self.offload) if self.offload else 0
        return (self.tp, self.cp, self.pp, self.dp, self.mbs, self.vpp, int(self.zero),
                _RECOMPUTE_RANK[self.recompute], modules, int(self.sp), _SCHEDULE_RANK[self.schedule],
                self.ep, self.etp, offload, self.dp_replicate)


_FIELDS = frozenset(f.name for f in fields(Candidate))
_NAMES = tuple(f.name for f in fields(Candidate))


def _made(*values: Any) -> Candidate:
    """`Candidate(*values)` without __init__ (as `Candidate.but`: it has no checks to run), at half its cost."""
    new = object.__new__(Candidate)
    new.__dict__.update(zip(_NAMES, values, strict=True))
    return new


# what `SearchSpec.offload_auto` tries: nothing; the optimizer (ZeRO-Offload as Megatron-core runs it), with its
# gradients (as DeepSpeed runs it), with the weights (ZeRO-Infinity), each on the host or NVMe; the activations
# beside each
_O, _G, _P, _A, _N = Offload.OPTIMIZER, Offload.GRADIENTS, Offload.PARAMS, Offload.ACTIVATIONS, Offload.NVME
_STATES = ((), (_O,), (_O, _G), (_O, _G, _P), (_O, _G, _N), (_O, _G, _P, _N))
OFFLOAD_SETS = tuple(frozenset(s + a) for a in ((), (_A,)) for s in _STATES)


def offload_options(zero: ZeroStage, spec: SearchSpec, alone: bool = False, nvme: bool = False,
                    full: bool = True) -> list[frozenset[Offload]]:
    """What may live on the host at a ZeRO stage: the pin, every set of `OFFLOAD_SETS` with offload_auto, else
    nothing; the optimizer needs ZeRO 1-3 (a shard to update), the weights ZeRO-3 (a shard to stream), NVMe a host
    that has it (`nvme`), the activations full recomputation (`full`) where the runtime moves only its checkpoints
    (`SearchSpec.checkpoints_only`: DeepSpeed's cpu_checkpointing). Where the runtime's rules
    (`SearchSpec.offload_zero`) offload the gradients, its optimizer offload always takes them along (DeepSpeed's
    offload_optimizer moves each bucket to the host in the backward).
    A GPU `alone` in its data-parallel group has a ZeRO stage above 0 only to offload: there every choice offloads
    the optimizer, unless the stage is pinned (the user's layout, e.g. DeepSpeed's ZeRO-1 pipeline on one replica)."""
    sets = [spec.offload] if spec.offload is not None else (list(OFFLOAD_SETS) if spec.offload_auto else [frozenset()])
    rules = dict(spec.offload_zero) if spec.offload_zero is not None else None
    if rules is not None and Offload.GRADIENTS in rules:
        sets = list(dict.fromkeys(s | {Offload.GRADIENTS} if Offload.OPTIMIZER in s else s for s in sets))
    return [s for s in sets if (Offload.OPTIMIZER not in s or zero is not ZeroStage.NONE)
            and (Offload.PARAMS not in s or zero is ZeroStage.WEIGHTS)
            and (nvme or Offload.NVME not in s)
            and (full or not spec.checkpoints_only or Offload.ACTIVATIONS not in s)
            and (not alone or zero is ZeroStage.NONE or Offload.OPTIMIZER in s or spec.zero is not None)
            and (rules is None or all(int(zero) in rules.get(o, ()) for o in s))]


def schedules_for(pp: int, vpp: int, spec: SearchSpec, microbatches: int | None = None) -> list[Schedule]:
    """Schedules for a (pp, vpp): interleaved when vpp > 1 and the micro-batches divide by pp, ZB-V with two
    chunks per rank and at least 2p − 1 micro-batches, DualPipeV with two and 2p, V-Half and V-Min with two when
    pinned (their orders are built and simulated per (p, m): searched freely they made a DeepSeek-V3 search 8x
    slower, 6 -> 53 s), the wave with an even vpp (up to `max_waves` waves unless vpp is pinned) and at least 2p
    micro-batches; with one chunk per rank 1F1B, ZB-H1 and, from 2p − 1 micro-batches, ZB-H2 (GPipe is as fast as
    1F1B and keeps all m micro-batches in memory: generated only when pinned); without a pipeline only 1F1B, which
    then means no schedule at all."""
    if pp == 1 and vpp == 1:
        options = [DEFAULT_SCHEDULE]
    else:  # each schedule's rules (meshcore.schedules), the wave's count of waves, those searched only when pinned
        options = [s for s, rules in SCHEDULES.items()
                   if (rules.searched or s is spec.schedule) and _runs(rules, pp, vpp, microbatches, spec)]
    allowed = [s for s in options if spec.schedule_choices is None or s in spec.schedule_choices or pp == 1]
    return [s for s in allowed if spec.schedule is None or s is spec.schedule or pp == 1]


def _runs(rules: ScheduleSpec, pp: int, vpp: int, microbatches: int | None, spec: SearchSpec) -> bool:
    """Whether a schedule runs (pp, vpp, m) in the search (m None: not known yet): its own rules
    (`ScheduleSpec.runs`) and, for the wave, at most `max_waves` waves unless vpp is pinned."""
    return (rules.runs(pp, vpp, microbatches)
            and (rules.family is not ScheduleFamily.WAVE or vpp <= 2 * spec.max_waves or spec.vpp == vpp))


def divisors(n: int) -> list[int]:
    """The divisors of n in increasing order (trial division up to sqrt(n))."""
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _pinned(value: int | None, options: list[int]) -> list[int]:
    return [v for v in options if value is None or v == value]


def tp_options(model: ModelSpec, cluster: ClusterSpec, spec: SearchSpec) -> list[int]:
    limit = min(cluster.scale_up_size, spec.max_tp or cluster.scale_up_size)
    if spec.tp is not None:
        limit = max(limit, spec.tp)  # an explicit pin may cross the scale-up domain
    return _pinned(spec.tp, [t for t in divisors(cluster.num_gpus) if t <= limit
                             and (spec.tp_choices is None or t in spec.tp_choices)
                             and model.num_attention_heads % t == 0
                             and (model.num_kv_heads % t == 0
                                  or (spec.kv_replication and t % model.num_kv_heads == 0))])


def cp_options(job: JobSpec, rest: int, spec: SearchSpec) -> list[int]:
    if spec.cp is not None:  # a pin is honoured whenever the layout rules allow it
        ok = spec.cp >= 1 and rest % spec.cp == 0 and (spec.cp == 1 or job.seq_len % (2 * spec.cp) == 0)
        return [spec.cp] if ok else []
    if spec.no_cp:
        return [1]
    return [c for c in (1, 2, 4, 8, 16, 32, 64) if rest % c == 0
            and (c == 1 or (job.seq_len % (2 * c) == 0 and job.seq_len // c >= MIN_TOKENS_PER_CP_RANK))]


def _meshes(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec) -> Iterator[tuple[int, ...]]:
    """(tp, cp, pp, dp) with tp·cp·pp·dp = GPUs whose data-parallel degree divides the global batch."""
    gpus = cluster.num_gpus
    for tp in tp_options(model, cluster, spec):
        for cp in cp_options(job, gpus // tp, spec):
            for pp in _pinned(spec.pp, [p for p in divisors(gpus // (tp * cp)) if p <= model.num_layers
                                        and (spec.uneven_split or model.num_layers % p == 0)]):
                dp = gpus // (tp * cp * pp)
                if job.global_batch % dp == 0:
                    yield tp, cp, pp, dp


def _vpps(model: ModelSpec, pp: int, microbatches: int, spec: SearchSpec) -> list[int]:
    """1, 2..MAX_VPP chunks of at least one layer when interleaving is allowed (m % pp == 0), else 2 for ZB-V
    (m >= 2p − 1) and the even vpps of the wave (m >= 2p)."""
    vpps = [1]
    if pp < 2:
        return _pinned(spec.vpp, vpps)
    fits = [v for v in range(2, min(MAX_VPP, model.num_layers // pp) + 1)
            if spec.uneven_split or model.num_layers % (pp * v) == 0]
    if microbatches % pp == 0:
        vpps += fits
    else:
        vpps += [v for v in fits if any(rules.searched and _runs(rules, pp, v, microbatches, spec)
                                        for rules in SCHEDULES.values())]
    return _pinned(spec.vpp, vpps)


def expert_options(model: ModelSpec, tp: int, inner: int, sp: bool, spec: SearchSpec) -> list[tuple[int, int]]:
    """(ep, etp) pairs for a stage of `inner` = tp·cp·dp ranks: ep divides the experts, etp is 1 or tp (each
    expert whole, or split like the dense layers), etp·ep divides the stage's ranks, and ep > 1 with tp > 1
    needs SP. Dense models have (1, 1) only."""
    if model.moe is None:
        return [(1, 1)] if spec.ep in (None, 1) and spec.etp in (None, 1) else []
    etps = sorted({1, tp}) if spec.etp is None else [spec.etp]
    eps = _pinned(spec.ep, [e for e in divisors(model.moe.num_experts) if spec.max_ep is None or e <= spec.max_ep])
    return [(e, t) for t in etps for e in eps if inner % (e * t) == 0 and model.moe.ffn_hidden_size % t == 0
            and not (e > 1 and tp > 1 and not sp)]


def module_sets(model: ModelSpec, attention: AttentionKernel) -> list[frozenset[RecomputeModule]]:
    """Selective module sets worth searching for `model`, nested and cheapest first (cost_models.memory.footprint and
    cost_models.compute.layer price them): layernorm (the separate norms of MLA and MoE layers: a memory-bound kernel),
    then moe_act (MoE: the experts' activation, no all-to-all), then mla_up_proj (MLA: two GEMMs); each step frees
    bytes the previous set keeps. Dense models with fused norms get none; with unfused attention each set also
    recomputes core_attn (its s x s terms dominate). mlp, moe and shared_experts re-run GEMMs (and moe its
    all-to-alls) and are left to full recomputation or a pin."""
    steps: list[RecomputeModule] = []
    if model.mla is not None or model.moe is not None:
        steps.append(RecomputeModule.LAYERNORM)
    if model.moe is not None:
        steps.append(RecomputeModule.MOE_ACT)
    if model.mla is not None:
        steps.append(RecomputeModule.MLA_UP_PROJ)
    base = {RecomputeModule.CORE_ATTN} if attention is AttentionKernel.UNFUSED else set()
    return [frozenset(base | set(steps[:i + 1])) for i in range(len(steps))]


def recompute_options(model: ModelSpec, job: JobSpec, spec: SearchSpec,
                      ) -> list[tuple[Recompute, frozenset[RecomputeModule]]]:
    """(granularity, modules) pairs: a pinned module set; a pinned granularity; else none, selective (Megatron's
    default core_attn, unless fused attention makes it the same as none) and full (`module_family` comes later)."""
    flash = job.runtime.attention is AttentionKernel.FLASH
    if spec.recompute_modules:
        return [(Recompute.SELECTIVE, frozenset(spec.recompute_modules))]
    default = DEFAULT_RECOMPUTE_MODULES
    if spec.recompute is not None:
        return [(spec.recompute, default if spec.recompute is Recompute.SELECTIVE else frozenset())]
    return [(r, default if r is Recompute.SELECTIVE else frozenset()) for r in Recompute
            if not (r is Recompute.SELECTIVE and flash)]


def module_family(model: ModelSpec, job: JobSpec, spec: SearchSpec) -> list[frozenset[RecomputeModule]]:
    """The module sets the search may add (planner.search.exact: each only where the cheaper choice did not fit as it
    is); none when recomputation is pinned or the launcher has no --recompute-modules."""
    if not spec.module_recompute or spec.recompute is not None or spec.recompute_modules:
        return []
    return module_sets(model, job.runtime.attention)


def next_module_set(c: Candidate, family: list[frozenset[RecomputeModule]], job: JobSpec) -> Candidate | None:
    """The candidate with the next set of `family` after `c`'s recomputation (none with fused attention, else the
    default selective, then each set in turn); None after the last or for full recomputation."""
    if not family or c.recompute is Recompute.FULL:
        return None
    flash = job.runtime.attention is AttentionKernel.FLASH
    base = c.recompute is (Recompute.NONE if flash else Recompute.SELECTIVE) and c.modules in (
        frozenset(), DEFAULT_RECOMPUTE_MODULES)
    if base:
        return c.but(recompute=Recompute.SELECTIVE, modules=family[0])
    if c.modules in family and family.index(c.modules) + 1 < len(family):
        return c.but(modules=family[family.index(c.modules) + 1])
    return None


def replicate_options(tp: int, cp: int, dp: int, zero: ZeroStage, cluster: ClusterSpec, spec: SearchSpec
                      ) -> list[int]:
    """HSDP replicate factors r for a ZeRO stage: 1 (shard over every data-parallel rank), and where the runtime
    shards over part of them at this stage (`SearchSpec.hsdp_zero_choices`) every r > 1 dividing dp whose shard
    group, tp·cp·dp/r consecutive ranks (meshcore.mesh: TP innermost, then CP, then the shard), fills a power
    of four of whole scale-up domains (1, 4, 16, 64, ... nodes): one node as torchtitan's HSDP recipes use, up to
    the 128-512 GPU groups of JAX-style FSDP at scale, a factor of 4 apart to keep the space small (every other
    factor is a pin away: `dp_replicate`). A shard group inside part of a node saves little traffic over a whole
    node and is not searched. A pin is the only choice where it divides dp, else there is none."""
    if spec.dp_replicate is not None:
        return [spec.dp_replicate] if dp % spec.dp_replicate == 0 and (
            spec.dp_replicate == 1 or int(zero) in spec.hsdp_zero_choices) else []
    options = [1]
    if int(zero) not in spec.hsdp_zero_choices or zero is ZeroStage.NONE:
        return options
    domain = cluster.scale_up_size
    for r in divisors(dp)[1:]:
        group = tp * cp * dp // r
        nodes = group // domain
        if group % domain == 0 and nodes & (nodes - 1) == 0 and nodes.bit_length() % 2 and (dp // r) * cp > 1:
            options.append(r)
    return options


Family = tuple[Candidate, list[tuple[int, Schedule]], list[tuple[int, int]], list[frozenset[Offload]]]


def families(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec) -> Iterator[Family]:
    """The candidates as families: (the first candidate of a (mesh, mbs, ZeRO stage, recomputation, SP) choice, its
    (vpp, schedule) shapes, its (ep, etp) pairs, its offload choices). `candidates` is their product, in this order;
    a search groups them without building each one. The shapes are a function of (pp, micro-batches): one list per
    pair, shared by every family of it (read it, never change it)."""
    recomputes = recompute_options(model, job, spec)
    shaped: dict[tuple[int, int], list[tuple[int, Schedule]]] = {}
    for tp, cp, pp, dp in _meshes(model, cluster, job, spec):
        per_replica = job.global_batch // dp
        replicas = {z: replicate_options(tp, cp, dp, z, cluster, spec) for z in ZeroStage}
        experts = {(sp, r): expert_options(model, tp, tp * cp * dp // r, sp, spec)
                   for sp in (False, True) for r in {r for rs in replicas.values() for r in rs}}
        mbs_list = _pinned(spec.mbs, [b for b in divisors(per_replica) if b <= spec.max_mbs
                                      and (spec.mbs_choices is None or b in spec.mbs_choices)])
        allowed = [z for z in ZeroStage if spec.zero_choices is None or int(z) in spec.zero_choices]
        dominated = ZeroStage.NONE if ZeroStage.OPTIMIZER in allowed else None
        alone, nvme = dp * cp == 1, cluster.host.nvme_gbs > 0
        offloads = {(z, full): offload_options(z, spec, alone, nvme, full) for z in ZeroStage for full in (False, True)}
        zeros = [ZeroStage(spec.zero)] if spec.zero is not None else [  # alone: ZeRO 1-3 only to offload
            z for z in allowed
            if (z is not dominated or alone) and (not alone or z is ZeroStage.NONE or offloads[z, True])]
        if pp > 1 and spec.pipeline_zero_choices is not None:
            zeros = [z for z in zeros if int(z) in spec.pipeline_zero_choices]
        sps = [spec.sp] if spec.sp is not None else [tp > 1]
        shapes: dict[int, list[tuple[int, Schedule]]] = {}
        for mbs, zero, (recompute, modules), sp in product(mbs_list, zeros, recomputes, sps):
            if sp and (tp == 1 or job.seq_len % sp_multiple(tp, cp)):
                continue
            if spec.replicate_alone and zero is ZeroStage.NONE and dp > 1 and tp * pp * cp > 1:
                continue
            if mbs not in shapes:
                m = per_replica // mbs
                if (pp, m) not in shaped:
                    shaped[pp, m] = [(vpp, schedule) for vpp in _vpps(model, pp, m, spec)
                                     for schedule in schedules_for(pp, vpp, spec, m)]
                shapes[mbs] = shaped[pp, m]
            offs = offloads[zero, recompute is Recompute.FULL]
            if not shapes[mbs] or not offs:
                continue
            vpp, schedule = shapes[mbs][0]
            for r in replicas[zero]:
                if experts[sp, r]:
                    ep, etp = experts[sp, r][0]
                    yield (_made(tp, cp, pp, dp, mbs, vpp, zero, recompute, sp, schedule, ep, etp, modules,
                                 offs[0], r), shapes[mbs], experts[sp, r], offs)


def candidates(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec,
               offload_variants: bool = True) -> Iterator[Candidate]:
    """Every valid degree tuple, in a fixed order; without `offload_variants` each with the first of its
    `offload_options` only (the search adds the others when it reaches the candidate)."""
    for first, shapes, experts, offloads in families(model, cluster, job, spec):
        for vpp, schedule in shapes:
            for ep, etp in experts:
                for offload in offloads[:None if offload_variants else 1]:
                    yield replace(first, vpp=vpp, schedule=schedule, ep=ep, etp=etp, offload=offload)


PIN_NAMES = ("tp", "pp", "cp", "vpp", "mbs", "ep", "etp", "zero", "dp_replicate", "schedule", "recompute", "sp")
MAX_DIAGNOSED = 20_000  # combinations `no_layout_reason` tries before it gives up looking for a valid one


def _pinned_layout(gpus: int, tp: int, cp: int, pp: int, spec: SearchSpec) -> Layout:
    """The layout of the pins with the free dimensions at their least restrictive values (vpp 1, or 2 for zb-v and
    the wave; mbs 1; zero 0; no recomputation; SP with tp > 1; ep and etp 1); LayoutError when tp·cp·pp does not
    divide the GPUs."""
    if gpus % (tp * pp * cp):
        raise LayoutError(f"world size {gpus} not divisible by tp {tp} * pp {pp} * cp {cp} = {tp * pp * cp}")
    vpp = spec.vpp or (2 if spec.schedule in WAVE_PLACED else 1)
    schedule = spec.schedule or default_schedule(vpp)
    recompute = Recompute.SELECTIVE if spec.recompute_modules else (spec.recompute or Recompute.NONE)
    return Layout(tp=tp, pp=pp, dp=gpus // (tp * pp * cp), cp=cp, vpp=vpp, mbs=spec.mbs or 1,
                  sp=(tp > 1) if spec.sp is None else spec.sp, zero=ZeroStage(spec.zero or 0), recompute=recompute,
                  schedule=schedule, ep=spec.ep or 1, etp=spec.etp or 1,
                  recompute_modules=frozenset(spec.recompute_modules or ()))


def no_layout_reason(model: ModelSpec, cluster: ClusterSpec, job: JobSpec, spec: SearchSpec) -> str:
    """Why `candidates` yields nothing, in one line: the layout rule (Layout.validate's message, with its numbers)
    that the first combination of the pins breaks, the free degrees tried smallest first; or, when some combination
    passes the layout rules, the search's own limits that exclude it."""
    gpus, degrees = cluster.num_gpus, divisors(cluster.num_gpus)
    pins = ", ".join(f"{n} {getattr(spec, n).value if hasattr(getattr(spec, n), 'value') else getattr(spec, n)}"
                     for n in PIN_NAMES if getattr(spec, n) is not None)
    first: tuple[str, str] | None = None
    combos = product([spec.tp] if spec.tp else degrees, [spec.cp] if spec.cp else [1],
                     [spec.pp] if spec.pp else degrees)
    for i, (tp, cp, pp) in enumerate(combos):
        if i >= MAX_DIAGNOSED:
            break
        where = f"tp {tp}, pp {pp}, cp {cp}"
        try:
            layout = _pinned_layout(gpus, tp, cp, pp, spec)
            where += f", dp {layout.dp}, mbs {layout.mbs}, vpp {layout.vpp}"
            layout.validate(model, job, gpus)
        except LayoutError as exc:
            first = first or (where, str(exc))
            continue
        return (f"no valid layout for {gpus} GPUs within the search's limits{' with ' + pins if pins else ''}: {where} "
                f"passes the layout rules but is outside them (--max-tp or the scale-up domain "
                f"{cluster.scale_up_size}, a cost table's TP degrees and micro-batches, at least "
                f"{MIN_TOKENS_PER_CP_RANK} tokens per CP rank, the launcher's ZeRO stages and schedules, "
                "--even-split); relax them or pin that layout")
    assert first is not None
    rules = ("the global batch must split into dp x mbs and heads, layers and sequence must divide by tp, pp and 2 x cp"
             + ("; etp x ep must divide tp x cp x dp" if model.moe is not None else ""))
    return (f"no valid layout for {gpus} GPUs{' with ' + pins if pins else ''}: the first combination tried "
            f"({first[0]}) breaks a layout rule: {first[1]} (in general: {rules})")
