"""A parallel layout: the degrees, schedule, recomputation and stage split of a plan, with the rules
Megatron-LM enforces (`Layout.validate`).

Layout = mesh + pipeline + memory policy. `Layout.mesh` (meshcore.mesh: degrees, rank order, process groups),
`Layout.pipeline` (`Pipeline`: stages, model chunks, schedule, micro-batch, split; where each chunk runs) and
`Layout.memory` (`MemoryPolicy`: ZeRO stage, recomputation, offloading) are frozen views of its fields, each with
its own rules. Layout itself keeps one flat set of constructor keywords (`Layout(tp=8, pp=2, zero=...)`) and
`dataclasses.replace` on them, which hundreds of call sites, the plan reader and the search's candidates use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from meshcore.checks import MAX_GLOBAL_BATCH, MAX_GPUS, integer, is_integer
from meshcore.enums import (
    DEFAULT_RECOMPUTE_MODULES,
    Offload,
    Recompute,
    RecomputeModule,
    Schedule,
    ZeroStage,
    wave_chunks,
    wave_rank,
    with_implied,
)
from meshcore.errors import LayoutError
from meshcore.job import JobSpec
from meshcore.mesh import Mesh
from meshcore.model import ModelSpec, check_expert_degrees
from meshcore.schedules import DEFAULT_SCHEDULE, spec_of


@dataclass(frozen=True)
class Pipeline:
    """How a layout runs its pipeline: `pp` stages of `vpp` model chunks each under `schedule`, micro-batches of
    `mbs` sequences, and optionally the decoder layers of each of the pp·vpp chunks (`stage_layers`, in pipeline
    order; None: spread evenly, remainder to the middle chunks)."""

    pp: int = 1
    vpp: int = 1
    schedule: Schedule = DEFAULT_SCHEDULE
    mbs: int = 1
    stage_layers: tuple[int, ...] | None = None

    @property
    def chunks(self) -> int:
        return self.pp * self.vpp

    def chunk_rank(self, chunk: int) -> int:
        """Pipeline rank of model chunk `chunk`: k % pp (Megatron's interleaving), or sweeps down and back up for
        ZB-V and the wave (`wave_rank`: ZB-V's chunk k on rank k going down, then rank 2·pp − 1 − k)."""
        if spec_of(self.schedule).wave_placed:
            return wave_rank(chunk, self.pp)
        return chunk % self.pp

    def rank_chunks(self, rank: int) -> tuple[int, ...]:
        """The model chunks of `rank`, in model order (the inverse of `chunk_rank`)."""
        if spec_of(self.schedule).wave_placed:
            return wave_chunks(rank, self.pp, self.vpp)
        return tuple(range(rank, self.chunks, self.pp))

    def chunk_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers per model chunk, in pipeline order (chunk k lives on rank `chunk_rank(k)`)."""
        if self.stage_layers is not None:
            return self.stage_layers
        base, extra = divmod(num_layers, self.chunks)
        # Extra layers go to the middle chunks: the ends also carry the embedding and the LM head.
        start = (self.chunks - extra) // 2
        return tuple(base + (1 if start <= i < start + extra else 0) for i in range(self.chunks))

    def validate(self, m: int, num_layers: int) -> None:
        """The schedule's rules on vpp, pp and the micro-batch count `m`, and the split's on the layers."""
        self._validate_schedule(m)
        if self.stage_layers is None:
            if num_layers < self.chunks:
                raise LayoutError(
                    f"layers {num_layers} < pp {self.pp} * vpp {self.vpp} = {self.chunks} model chunks"
                )
            return
        if len(self.stage_layers) != self.chunks or any(n < 0 for n in self.stage_layers):
            raise LayoutError(f"stage_layers needs {self.chunks} non-negative counts (pp * vpp)")
        if sum(self.stage_layers) != num_layers:
            raise LayoutError(f"stage_layers sum to {sum(self.stage_layers)}, model has {num_layers} layers")

    def _validate_schedule(self, m: int) -> None:
        spec_of(self.schedule).check(self.pp, self.vpp, m)


@dataclass(frozen=True)
class MemoryPolicy:
    """What a layout does to fit: the ZeRO stage (what the shard group splits), recomputation (`recompute`, its
    selective `recompute_modules`, and per pipeline rank the first `recompute_layers` decoder layers fully
    recomputed, Megatron-LM's block method), and what lives in host memory (`offload`)."""

    zero: ZeroStage = ZeroStage.NONE
    recompute: Recompute = Recompute.NONE
    recompute_modules: frozenset[RecomputeModule] = frozenset()
    recompute_layers: tuple[int, ...] | None = None
    offload: frozenset[Offload] = frozenset()

    def validate(self, model: ModelSpec) -> None:
        self._validate_modules(model)
        self._validate_offload()

    def _validate_offload(self) -> None:
        if not all(isinstance(o, Offload) for o in self.offload):
            raise LayoutError(f"offload must hold {', '.join(o.value for o in Offload)}, got {sorted(self.offload)}")
        if Offload.PARAMS in self.offload and self.zero is not ZeroStage.WEIGHTS:
            raise LayoutError("offloading the weights streams each GPU's ZeRO-3 shard: it needs zero 3, got "
                              f"zero {int(self.zero)}")
        if Offload.OPTIMIZER in self.offload and self.zero is ZeroStage.NONE:
            raise LayoutError("offloading the optimizer updates each GPU's shard of it on the CPU: it needs zero 1, "
                              "2 or 3 (the distributed optimizer), got zero 0")

    def _validate_modules(self, model: ModelSpec) -> None:
        """The rules megatron-core 0.16.1 applies to recompute_modules, and modules the model has none of."""
        mods = self.recompute_modules
        if RecomputeModule.MLA_UP_PROJ in mods and model.mla is None:
            raise LayoutError("recompute module mla_up_proj needs multi-latent attention; the model has none")
        has_moe = model.moe is not None
        for m in (RecomputeModule.MOE_ACT, RecomputeModule.MOE, RecomputeModule.SHARED_EXPERTS):
            if m in mods and not has_moe:
                raise LayoutError(f"recompute module {m.value} needs a mixture-of-experts model; {model.name} is dense")
        if RecomputeModule.SHARED_EXPERTS in mods and not (model.moe and model.moe.shared_ffn_hidden_size):
            raise LayoutError(f"recompute module shared_experts needs shared experts; {model.name} has none")


@dataclass(frozen=True)
class Layout:
    """A parallel layout: the device mesh (`mesh`: degrees, rank order, process groups), the pipeline (`pipeline`:
    schedule and split) and the memory policy (`memory`: ZeRO stage, recomputation, offloading). Placement on the
    GPU mesh is TP innermost, then CP, DP (shard, then replicate), PP outermost (meshcore.mesh).

    `dp_replicate` is the replicate factor of data parallelism (HSDP: dp = dp_shard x dp_replicate, ZeRO/FSDP
    shards over the cp·dp_shard ranks and all-reduces each shard over dp_replicate replicas; PyTorch FSDP2's
    HYBRID_SHARD, torchtitan's data_parallel_replicate_degree). 1, the default, shards over all of dp·cp. ZeRO-0
    shards nothing, so every data-parallel rank is a replica: dp_replicate is then 1 or dp, two spellings of
    one layout (an all-reduce over dp·cp), torchtitan writing DDP as data_parallel_replicate_degree = dp.

    `stage_layers` optionally gives the number of decoder layers on each of the pp·vpp model chunks
    (in pipeline order); by default they are spread evenly, remainder to the middle chunks.
    `recompute_layers` optionally gives, per pipeline rank, how many of its decoder layers are fully
    recomputed (Megatron-LM's block method: the first ones of the rank); the others use `recompute`.

    Mixture-of-experts layers fold their own mesh over the same GPUs (Megatron-core's MoE parallel
    folding): the tp·cp·dp ranks of a pipeline stage become etp·ep·edp, experts are split over `ep`
    ranks and each expert's matrices over `etp`; expert gradients reduce over edp = tp·cp·dp/(etp·ep).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    vpp: int = 1
    mbs: int = 1
    sp: bool = False
    zero: ZeroStage = ZeroStage.NONE
    recompute: Recompute = Recompute.NONE
    schedule: Schedule = DEFAULT_SCHEDULE
    stage_layers: tuple[int, ...] | None = None
    recompute_layers: tuple[int, ...] | None = None
    ep: int = 1
    etp: int = 1
    # what selective recomputation recomputes (Megatron's --recompute-modules); empty unless recompute is selective
    recompute_modules: frozenset[RecomputeModule] = frozenset()
    # what lives in host memory (cost_models/memory/offload.py); streaming the weights implies offloading their
    # optimizer
    offload: frozenset[Offload] = frozenset()
    # the replicate factor of dp (HSDP); the search does not enumerate it yet (SearchSpec leaves it 1)
    dp_replicate: int = 1

    def __post_init__(self) -> None:
        # one spelling per layout: selective without modules means Megatron's default, other modes carry none
        modules = ((self.recompute_modules or DEFAULT_RECOMPUTE_MODULES) if self.recompute is Recompute.SELECTIVE
                   else frozenset())
        object.__setattr__(self, "recompute_modules", frozenset(modules))
        object.__setattr__(self, "offload", with_implied(frozenset(self.offload)))

    @cached_property
    def mesh(self) -> Mesh:
        """The device mesh of this layout (meshcore.mesh): the cost model's process groups and their tiers.
        Raises LayoutError (naming the factors) when dp_replicate does not divide dp or the experts do not fold."""
        self._check_replicate()
        return Mesh.of(tp=self.tp, cp=self.cp, dp_shard=self.dp // self.dp_replicate, dp_replicate=self.dp_replicate,
                       pp=self.pp, ep=self.ep, etp=self.etp)

    @cached_property
    def pipeline(self) -> Pipeline:
        return Pipeline(self.pp, self.vpp, self.schedule, self.mbs, self.stage_layers)

    @cached_property
    def memory(self) -> MemoryPolicy:
        return MemoryPolicy(self.zero, self.recompute, self.recompute_modules, self.recompute_layers, self.offload)

    @property
    def dp_shard(self) -> int:
        """The shard factor of dp: dp / dp_replicate."""
        return self.dp // self.dp_replicate

    @property
    def expert_dp(self) -> int:
        """Ranks that hold the same expert shard and reduce its gradients: tp·cp·dp / (etp·ep)."""
        return self.mesh.expert_dp

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp

    def num_microbatches(self, job: JobSpec) -> int:
        return job.global_batch // (self.mbs * self.dp)

    def chunk_rank(self, chunk: int) -> int:
        """Pipeline rank of model chunk `chunk` (`Pipeline.chunk_rank`)."""
        return self.pipeline.chunk_rank(chunk)

    @property
    def embedding_rank(self) -> int:
        return self.chunk_rank(0)

    @property
    def head_rank(self) -> int:
        """The rank of the last chunk: LM head, loss and multi-token prediction."""
        return self.chunk_rank(self.pp * self.vpp - 1)

    @property
    def head_beside_embedding(self) -> bool:
        """Embedding and LM head on one rank (no pipeline, ZB-V, the wave): a tied head needs no copy or sync."""
        return self.embedding_rank == self.head_rank

    def rank_chunks(self, rank: int) -> tuple[int, ...]:
        """The model chunks of `rank`, in model order (`Pipeline.rank_chunks`)."""
        return self.pipeline.rank_chunks(rank)

    def chunk_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers per model chunk, in pipeline order (`Pipeline.chunk_layers`)."""
        return self.pipeline.chunk_layers(num_layers)

    def validate(self, model: ModelSpec, job: JobSpec, num_gpus: int) -> None:
        """Raise LayoutError naming the first rule this layout breaks (the rules Megatron-LM
        enforces, REFERENCE.md section 2, and the mesh's own, meshcore.mesh): the degrees' types, the mesh
        against the GPUs, the model's heads, the experts, the memory policy, the sequence and batch, the pipeline."""
        self._check_types()
        self._check_replicate()
        # the dense mesh against the GPUs (the expert folding is checked below, with the model's expert rules)
        Mesh(tp=self.tp, cp=self.cp, dp_shard=self.dp_shard, dp_replicate=self.dp_replicate, pp=self.pp,
             world=num_gpus)
        self._check_heads(model)
        self._validate_experts(model)
        self.memory.validate(model)
        self._check_job(job)
        self.pipeline.validate(self.num_microbatches(job), model.num_layers)
        self._validate_recompute_layers(model)

    def _check_types(self) -> None:
        """Every degree a whole number in range; the per-stage counts whole numbers of layers."""
        for name in ("tp", "pp", "dp", "cp", "vpp", "mbs", "ep", "etp", "dp_replicate"):
            integer(getattr(self, name), name, 1, MAX_GPUS if name != "mbs" else MAX_GLOBAL_BATCH, LayoutError)
        for name in ("stage_layers", "recompute_layers"):
            counts = getattr(self, name)
            if counts is not None and not all(is_integer(n) for n in counts):
                raise LayoutError(f"{name} must be whole numbers of layers, got {list(counts)}")

    def _check_heads(self, model: ModelSpec) -> None:
        """TP splits the attention heads (and the vision encoder's); KV heads and TP divide one another; SP needs
        TP."""
        if model.num_attention_heads % self.tp:
            raise LayoutError(f"attention heads {model.num_attention_heads} not divisible by tp {self.tp}")
        if model.num_kv_heads % self.tp and self.tp % model.num_kv_heads:
            raise LayoutError(f"kv heads {model.num_kv_heads} and tp {self.tp}: one must divide the other")
        if self.sp and self.tp == 1:
            raise LayoutError("sequence parallelism needs tp > 1")
        if model.vision is not None and model.vision.num_attention_heads % self.tp:
            raise LayoutError(f"vision encoder heads {model.vision.num_attention_heads} not divisible by tp {self.tp} "
                              "(the encoder is split like the language model)")

    def _check_job(self, job: JobSpec) -> None:
        """The sequence splits over 2·cp (and over tp with SP); the global batch over mbs·dp."""
        if self.cp > 1 and job.seq_len % (2 * self.cp):
            raise LayoutError(f"seq_len {job.seq_len} not divisible by 2 * cp = {2 * self.cp}")
        if self.sp and job.seq_len % sp_multiple(self.tp, self.cp):
            raise LayoutError(f"sequence parallelism splits each rank's sequence over tp: seq_len {job.seq_len} not "
                              f"divisible by tp {self.tp}" + (f" * 2 * cp {self.cp}" if self.cp > 1 else ""))
        if job.global_batch % (self.mbs * self.dp):
            raise LayoutError(f"global batch {job.global_batch} not divisible by mbs {self.mbs} * dp {self.dp}")

    def _check_replicate(self) -> None:
        """HSDP's factors: dp_replicate divides dp; without ZeRO sharding it is 1 or dp (class docstring)."""
        integer(self.dp_replicate, "dp_replicate", 1, MAX_GPUS, LayoutError)
        if self.dp % self.dp_replicate:
            raise LayoutError(f"dp_replicate {self.dp_replicate} must divide dp {self.dp} (dp = dp_shard x "
                              "dp_replicate)")
        if self.zero is ZeroStage.NONE and self.dp_replicate not in (1, self.dp):
            raise LayoutError(f"dp_replicate {self.dp_replicate} with zero 0: nothing is sharded, so every one of the "
                              f"dp {self.dp} ranks is a replica (dp_replicate 1 or {self.dp}); HSDP, shard x "
                              "replicate, needs zero 1, 2 or 3")

    def _validate_recompute_layers(self, model: ModelSpec) -> None:
        """The fully recomputed layers per rank: one count per rank, within its layers (it needs the split)."""
        if self.recompute_layers is not None:
            if self.recompute is Recompute.FULL:
                raise LayoutError("recompute_layers is for partial recomputation; recompute=full covers every layer")
            per_rank = self.rank_layers(model.num_layers)
            if len(self.recompute_layers) != self.pp or any(
                    not 0 <= r <= n for r, n in zip(self.recompute_layers, per_rank, strict=True)):
                raise LayoutError(
                    f"recompute_layers {list(self.recompute_layers)} needs one count per pp rank, each between 0 "
                    f"and that rank's layers {list(per_rank)}"
                )

    def _validate_experts(self, model: ModelSpec) -> None:
        check_expert_degrees(model, self.ep, self.etp)
        if model.moe is None:
            return
        inner = self.tp * self.cp * self.dp
        if inner % (self.ep * self.etp):
            raise LayoutError(f"etp {self.etp} * ep {self.ep} must divide tp * cp * dp = {inner} (the ranks of "
                              "one pipeline stage, which the expert layers fold into etp x ep x expert-dp)")
        if self.ep > 1 and self.tp > 1 and not self.sp:
            raise LayoutError("expert parallelism with tp > 1 needs sequence parallelism (--sp)")
        _ = self.mesh  # with HSDP the experts fold into one replica: etp·ep divides tp·cp·dp_shard (the mesh says)

    def rank_layers(self, num_layers: int) -> tuple[int, ...]:
        """Decoder layers held by each pipeline rank (all its model chunks)."""
        chunks = self.chunk_layers(num_layers)
        return tuple(sum(chunks[c] for c in self.rank_chunks(rank)) for rank in range(self.pp))

    def fully_recomputed(self, rank: int, num_layers: int) -> int:
        """Decoder layers of `rank` whose whole forward is recomputed in backward."""
        if self.recompute is Recompute.FULL:  # every layer of the rank (its chunks' alone: a stage asks for its own)
            chunks = self.chunk_layers(num_layers)
            return sum(chunks[c] for c in self.rank_chunks(rank))
        return self.recompute_layers[rank] if self.recompute_layers is not None else 0


def sp_multiple(tp: int, cp: int) -> int:
    """What the sequence must divide by under sequence parallelism: tp, times the 2·cp load-balanced chunks of
    context parallelism (Megatron-LM splits each CP rank's s/cp tokens over tp; torchtitan asserts seq_len %
    (tp · 2 · cp) == 0 when it shards the sequence for both)."""
    return tp * (2 * cp if cp > 1 else 1)


def non_default_modules(layout: Layout) -> bool:
    """The layout recomputes modules other than selective recomputation's default (reports name them then)."""
    return bool(layout.recompute_modules) and layout.recompute_modules != DEFAULT_RECOMPUTE_MODULES
