"""How it is trained: the sequence length, global batch and number format of the job, and what the
training framework does that the cost depends on (`Runtime`)."""

from __future__ import annotations

from dataclasses import dataclass

from meshcore.checks import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, MOE_LOAD_FACTOR, integer, physical, real
from meshcore.enums import AttentionKernel, Dtype
from meshcore.errors import SpecError
from meshcore.execution import MEGATRON_EXECUTION, Execution, Fp8Recipe
from meshcore.framework import DEFAULT_FRAMEWORK, Framework
from meshcore.measured import MeasuredCosts

MAX_LORA_RANK = 65536
MAX_PACKED_DOCS = 4096  # document lengths a job may list (a distribution's sample, not a dataset)


@dataclass(frozen=True)
class Runtime:
    """What the training framework does that the cost depends on (kernels, overlap, precision of
    gradient reduction), and which framework it is: `framework` sets the search space (the layouts that runtime
    runs, hardware_profiles/runtimes/) and the configuration a plan is emitted as. Defaults describe a current
    Megatron-LM run."""

    framework: Framework = DEFAULT_FRAMEWORK
    attention: AttentionKernel = AttentionKernel.FLASH
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_bytes: int = 4  # fp32 gradient buckets (Megatron with bf16)
    multi_rail: bool = True  # collectives spread over all NICs of a group's members in a node (NCCL >= 2.12)
    measured: MeasuredCosts | None = None  # a profiled cost table replaces the analytical compute times
    # Mixture of experts: None routes dropless; a factor c pads every expert's buffer to c x its mean load
    # (GShard capacity, Megatron --moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity).
    moe_capacity_factor: float | None = None
    # dropless routing: tokens on the busiest expert-parallel rank over the mean (1.0: perfectly balanced)
    moe_load_imbalance: float = 1.0
    # expert all-to-alls of one micro-batch run beside another's compute (Megatron-LM
    # --overlap-moe-expert-parallel-comm, DeepSeek's DualPipe); off: they sit on the critical path
    moe_comm_overlap: bool = False
    # DeepEP-style dispatch: a token crosses to each remote scale-up domain holding its experts once and is
    # forwarded over NVLink there (Megatron's flex dispatcher with the deepep backend); off: one copy per expert
    moe_dedup_dispatch: bool = False
    # TP collectives split into chunks and pipelined with the GEMMs that produce or consume them (Megatron-LM
    # --tp-comm-overlap with Transformer Engine userbuffers, torchtitan async TP); off: each sits on the path
    tp_comm_overlap: bool = False
    # fp8 training keeps the weights as fp8 tensors and gathers them in fp8 (Megatron-LM --fp8-param-gather,
    # torchtitan float8 FSDP all-gather): ZeRO's weight all-gathers move 1 byte per parameter instead of 2
    fp8_param_gather: bool = False
    # schedules of several chunks per rank post their pipeline sends and receives asynchronously and wait on
    # them only when the data is needed (Megatron-LM's default with interleaving, --no-overlap-p2p-communication
    # turns it off; torch.distributed.pipelining's runtime always); 1F1B without chunks waits on each
    overlap_p2p_comm: bool = True
    # the offloaded optimizer's host buffers are page-locked (DeepSpeed's offload_optimizer.pin_memory: true by
    # default from 0.19.5, false before, PR #8207); off: every gradient copy to or from them is a synchronous copy
    # staged through the driver's buffer (cost_models/memory/offload.py pageable_bytes_per_s)
    pinned_offload: bool = True
    # the offloaded ZeRO-3 weights' host copies are page-locked (DeepSpeed's offload_param.pin_memory: true by default
    # from 0.19.5, false before, PR #8207); off: each weight fetch is a copy from pageable memory that the host thread
    # stages through the driver's buffer (cost_models/memory/offload.py pageable_bytes_per_s, HostCopies)
    pinned_param_offload: bool = True
    # how the runtime executes a layout (its profile's `execution` section, meshcore.execution): filled from
    # hardware_profiles/runtimes/<framework>.yaml by planner.api.resolve; None prices as Megatron-core runs it
    execution: Execution | None = None
    # torch.compile of each transformer block (torchtitan training.compile); None: the runtime's default
    compile: bool | None = None
    # the FP8 recipe of an fp8 job (torchao tensorwise/rowwise, Transformer Engine delayed/current); None: the
    # runtime's default, the first its profile lists
    fp8_recipe: Fp8Recipe | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.framework, Framework):
            try:
                object.__setattr__(self, "framework", Framework(self.framework))
            except ValueError:
                raise SpecError(f"runtime must be one of {', '.join(f.value for f in Framework)}, got "
                                f"{self.framework!r}") from None
        # a factor pads (or loads) the busiest expert to that many times its mean: 1 at least, and past
        # MOE_LOAD_FACTOR's 64 it is no longer a load balance but a router sending everything to one expert
        if self.moe_capacity_factor is not None:
            physical(self.moe_capacity_factor, "moe_capacity_factor (it pads buffers)", MOE_LOAD_FACTOR, SpecError)
        physical(self.moe_load_imbalance, "moe_load_imbalance (busiest rank over the mean)", MOE_LOAD_FACTOR, SpecError)
        if self.moe_dedup_dispatch and self.moe_capacity_factor is not None:
            raise SpecError("deduplicated (DeepEP) dispatch routes dropless: it cannot pad to a capacity factor")
        if self.fp8_recipe is not None and not isinstance(self.fp8_recipe, Fp8Recipe):
            try:
                object.__setattr__(self, "fp8_recipe", Fp8Recipe(self.fp8_recipe))
            except ValueError:
                raise SpecError(f"fp8_recipe must be one of {', '.join(r.value for r in Fp8Recipe)}, got "
                                f"{self.fp8_recipe!r}") from None
        if self.fp8_recipe is not None and self.execution is not None and self.fp8_recipe not in {
                c.recipe for c in self.execution.fp8}:
            raise SpecError(f"runtime {self.framework.value} runs fp8 recipe(s) "
                            f"{', '.join(c.recipe.value for c in self.execution.fp8)}, not {self.fp8_recipe.value}")

    @property
    def priced_execution(self) -> Execution:
        """What the cost model prices: the runtime's execution profile, or Megatron-core's when none was resolved."""
        return self.execution if self.execution is not None else MEGATRON_EXECUTION

    @property
    def compiled(self) -> bool:
        """Whether the layer code runs under torch.compile (the job's choice, else the runtime's default)."""
        return self.priced_execution.compile_default if self.compile is None else self.compile

    @property
    def moe_load_factor(self) -> float:
        """Tokens the busiest expert rank computes and exchanges, over the balanced mean."""
        return self.moe_capacity_factor if self.moe_capacity_factor is not None else self.moe_load_imbalance


@dataclass(frozen=True)
class JobSpec:
    seq_len: int
    global_batch: int  # sequences per optimizer step
    dtype: Dtype = Dtype.BF16
    runtime: Runtime = Runtime()
    # share of the weights that train (1: pre-training and full fine-tuning; LoRA: its adapters over the frozen
    # weights, planner.api.lora_fraction): frozen weights keep no gradients or optimizer state, their gradients are
    # not reduced, and their weight-gradient GEMMs are not run
    trainable_fraction: float = 1.0
    lora_rank: int = 0  # the LoRA rank the trainable fraction comes from (0: not LoRA); reported, not priced
    # packed sequences: the lengths of the documents packed into each sequence, laid in order and repeated, the last
    # cut at seq_len; each attends only to itself (cost_models/compute/packing.py). Empty: one document per sequence
    packed_doc_lens: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        integer(self.seq_len, "seq_len", 1, MAX_SEQ_LEN, SpecError)
        integer(self.global_batch, "global_batch", 1, MAX_GLOBAL_BATCH, SpecError)
        real(self.trainable_fraction, "trainable_fraction", 0.0, 1.0, error=SpecError)
        integer(self.lora_rank, "lora_rank", 0, MAX_LORA_RANK, SpecError)
        if not isinstance(self.packed_doc_lens, tuple) or len(self.packed_doc_lens) > MAX_PACKED_DOCS:
            raise SpecError(f"packed_doc_lens must be a tuple of at most {MAX_PACKED_DOCS} document lengths, got "
                            f"{self.packed_doc_lens!r}")
        for n in self.packed_doc_lens:
            integer(n, "packed document length", 1, self.seq_len, SpecError)
        if self.lora_rank and self.trainable_fraction >= 1:
            raise SpecError(f"lora_rank {self.lora_rank} trains adapters only: trainable_fraction must be below 1 "
                            "(planner.api.resolve works it out from the model)")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.global_batch
