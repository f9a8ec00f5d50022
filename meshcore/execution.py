"""How a training runtime executes a layout (the `execution` section of hardware_profiles/runtimes/NAME.yaml, read by
planner.inputs.runtimes): its FSDP form, the attention kernel it calls, element-wise fusion with and without
torch.compile, its FP8 recipes, what its selective activation checkpointing keeps, and its fixed host costs.

`Capabilities` (meshcore.framework) says WHAT a runtime runs; `Execution` says HOW FAST and in how much memory:
the cost model (cost_models/) reads it from `JobSpec.runtime.execution`, which planner.api.resolve fills from the
runtime's profile. The defaults describe Megatron-core with Transformer Engine, the stack the cost model was first
calibrated on (an `Execution()` prices a layout exactly as before runtimes had execution profiles).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class FsdpForm(str, Enum):
    """How weights are sharded and gathered under ZeRO-3."""

    PER_MODULE = "per-module"  # Megatron-FSDP / DeepSpeed ZeRO-3 as priced: each of a layer's 4 weight matrices
    PER_BLOCK = "per-block"  # PyTorch FSDP2 fully_shard on each transformer block: one gather per block


class AttentionImpl(str, Enum):
    """The fused attention kernel a runtime calls."""

    CUDNN = "cudnn"  # Transformer Engine's fused attention (cuDNN; FlashAttention-3 class on Hopper)
    FLASH2 = "flash2"  # FlashAttention-2 (PyTorch SDPA's flash backend)


class Fp8Recipe(str, Enum):
    """FP8 training recipes (who scales what, and how)."""

    DELAYED = "delayed"  # Transformer Engine delayed scaling (amax history)
    CURRENT = "current"  # Transformer Engine current (per-tensor, just-in-time) scaling, "FP8-CS"
    TENSORWISE = "tensorwise"  # torchao Float8Linear, dynamic per-tensor scaling
    ROWWISE = "rowwise"  # torchao Float8Linear, dynamic per-row scaling


class ExpertGemms(str, Enum):
    """How a runtime issues an MoE layer's per-expert GEMMs (cost_models.compute.moe_kernels.expert_gemm_groups)."""

    TE_STREAMS = "te-streams"  # Transformer Engine GroupedLinear: one cuBLAS GEMM per expert on 4 streams
    ONE_KERNEL = "one-kernel"  # one grouped kernel for all local experts (torch._grouped_mm, legacy GroupedMLP)
    SEQUENTIAL = "sequential"  # one expert after another (Megatron-core SequentialMLP, no --moe-grouped-gemm)


class SelectiveForm(str, Enum):
    """What `--recompute selective` means in a runtime."""

    MODULES = "modules"  # Megatron-core --recompute-modules (core_attn by default): cost_models.memory.footprint
    OP_SAC = "op-sac"  # torchtitan's per-op selective checkpointing: cost_models.compute.sac


@dataclass(frozen=True)
class ElementwiseBytes:
    """HBM bytes of a decoder layer's memory-bound kernels (norms, residual adds, rotary embedding, KV-head
    repetition, MLP activation) per token, as coefficients of the widths they run on: h (hidden, divided by tp under
    sequence parallelism), q and kv (query and key/value widths per TP rank), f (MLP width per TP rank); `norm`: the
    bytes per element of one RMSNorm, run on q and kv where the model normalises each query and key head (Qwen3's
    q_norm and k_norm; cost_models.compute.elementwise)."""

    h: float
    q: float
    kv: float
    f: float
    norm: float = 0.0

    def per_token(self, h: float, q: float, kv: float, f: float) -> float:
        return self.h * h + self.q * q + self.kv * kv + self.f * f


@dataclass(frozen=True)
class Elementwise:
    """Forward and backward element-wise bytes of one way of running a layer (eager or compiled)."""

    forward: ElementwiseBytes
    backward: ElementwiseBytes


@dataclass(frozen=True)
class Fp8Casts:
    """What an FP8 recipe quantises, in HBM bytes per element, around each FP8 GEMM (cost_models.compute.kernels):
    input_bytes     the forward's input X [m, k] (amax, scale, cast; with a transposed copy where the recipe keeps
                    one for the weight gradient);
    grad_bytes      the backward's output gradient dY [m, n];
    wgrad_bytes     the input re-cast in the backward for the weight gradient (recipes that keep only the
                    high-precision input);
    weight_bytes    per weight element and micro-batch (recipes that cast the weight in every pass; 0 where the
                    cast copy is cached for the step)."""

    recipe: Fp8Recipe
    input_bytes: float
    grad_bytes: float
    wgrad_bytes: float = 0.0
    weight_bytes: float = 0.0


@dataclass(frozen=True)
class WorkingBytes:
    """HBM bytes per token a decoder layer allocates while it is recomputed and run backward (what its backward
    saves again and the gradients it makes), as coefficients of the widths they have: gathered (the full hidden
    width h: TP's gathered inputs and unreduced outputs, which torch's DTensor keeps for the backward), h (÷tp under
    sequence parallelism), q, kv and f per TP rank."""

    gathered: float
    h: float
    q: float
    kv: float
    f: float

    def per_token(self, gathered: float, h: float, q: float, kv: float, f: float) -> float:
        return self.gathered * gathered + self.h * h + self.q * q + self.kv * kv + self.f * f


@dataclass(frozen=True)
class HeldMemory:
    """What a runtime holds at its memory peak beyond weights, optimizer state and stored activations, and how its
    allocator reserves it (cost_models/memory/held.py prices each; the defaults are Megatron-core's pricing as before):
    parallel_logit_bytes  bytes per logit of the vocabulary-parallel loss (tp > 1) at its backward peak (None: the
                          runtime's logit_bytes);
    kept_logit_bytes      bytes per logit of every micro-batch's output the last pipeline stage keeps to the step's
                          end (torch.distributed.pipelining's output_chunks: the bf16 logits, 2);
    root_gathered         FSDP2's root module (embedding, final norm, output layer) stays gathered from its forward to
                          the end of the backward (FSDP2 never reshards the root after forward);
    loss_apart            the loss's backward peak and a layer's recomputation come one after the other (the peak
                          holds the larger), not together;
    working_full, working_selective  bytes per token of a layer recomputed and run backward under full and selective
                          checkpointing (None: the layer's activations without recomputation);
    reserve_share         what the caching allocator reserves beyond the peak's allocations, as a share of the memory
                          allocated and freed within every step (loss buffers, the layer working set, gradients
                          accumulated unsharded under a pipeline): fragmentation (0: not modelled);
    outside_allocator_gib memory per GPU outside the caching allocator (CUDA context, NCCL communicators' buffers):
                          it counts against the GPU and caps what the allocator can reserve."""

    parallel_logit_bytes: float | None = None
    kept_logit_bytes: float = 0.0
    root_gathered: bool = False
    loss_apart: bool = False
    working_full: WorkingBytes | None = None
    working_selective: WorkingBytes | None = None
    reserve_share: float = 0.0
    outside_allocator_gib: float = 2.0


TE_DELAYED = Fp8Casts(Fp8Recipe.DELAYED, 4.0, 4.0)  # TE's fused cast-transpose: read 2, write the copy and transpose
TE_CURRENT = Fp8Casts(Fp8Recipe.CURRENT, 6.0, 6.0)  # the same after an amax pass over the tensor (read 2)


@dataclass(frozen=True)
class Execution:
    """How a runtime executes a layout (module docstring); every field says where the cost model reads it.

    fsdp: ZeRO-3's gather unit (cost_models.sync: gathers per layer; cost_models.memory.footprint: gathered
    working set);
    reshard_under_pp: FSDP frees gathered weights after the forward also under a pipeline (False: torchtitan keeps a
      stage's weights gathered across its micro-batches: one gather per step, the unsharded weights in memory);
    sharded_weight_bytes, optimizer_bytes: bytes per sharded parameter of the weights and the optimizer state
      (Megatron: bf16 weights 2, fp32 master + Adam 12; FSDP2: fp32 weights that are the master copy 4, Adam 8);
    attention, attention_rate: the kernel and its rate against the GPU profile's fused-attention figures, per GPU
      architecture (cost_models.compute.kernels.flash_attention_time; missing architecture: 1);
    attention_backward: the kernel's backward rate over its forward rate, per architecture (missing: the GPU
      profile's attention_backward_ratio);
    bucket_allreduce: ZeRO-2 reduces each micro-batch's gradient buckets by all-reduce, 2(n-1)/n of the bucket per
      rank, not reduce-scatter's (n-1)/n (DeepSpeed's stage_1_and_2.average_tensor with its default
      use_multi_rank_bucket_allreduce: a bucket whose gradients belong to several ranks' partitions is all-reduced
      and each rank keeps its slice; cost_models.sync.sharded_dp_exposed);
    split_projections: the model's query, key and value projections and its gate and up projections are separate
      GEMMs reading one input (torchtitan's Llama: wq, wk, wv; w1, w3), not one fused GEMM each
      (cost_models.compute.gemms.split_gemms);
    compile_default: torch.compile when the job does not say (Runtime.compile);
    eager, compiled: element-wise bytes per token without and with torch.compile (None: Transformer Engine's and
      Megatron-core's fused kernels as cost_models.compute.layer prices them);
    fp8: the FP8 recipes it runs with their casts, the first its default (Runtime.fp8_recipe);
    selective: what `--recompute selective` recomputes and keeps;
    ring_merge: ring attention's element-wise bytes per step and token (coefficients of q and kv), None: Transformer
      Engine's (cost_models.compute.layer.ring_attention_merge_time);
    logit_bytes: bytes per logit the loss holds at its peak on the last stage
    (cost_models.memory.footprint.logits_bytes);
    grad_accumulation_bytes: HBM bytes per trained parameter each micro-batch after a step's first spends adding its
      weight gradients into the ones accumulated so far, below ZeRO-2 (0: the GEMM accumulates them itself, Megatron's
      gradient_accumulation_fusion; cost_models.sync.grad_accumulation_time);
    sync_checkpoint_copies: the checkpoints of offloaded activations (Offload.ACTIVATIONS) move to and from pageable
      host memory by blocking copies on the compute stream, exposed whole (DeepSpeed's cpu_checkpointing with
      partition_activations; cost_models.memory.offload.checkpoint_copy_time); False: asynchronous copies to pinned
      memory beside the passes;
    expert_gemms: how the per-expert GEMMs of an MoE layer are issued (cost_models.compute.moe_kernels);
    host_layer_s, host_microbatch_s, host_step_s: fixed host time per layer pass (each forward, backward or
      recomputation of a layer), per micro-batch and stage, and per optimizer step, that no kernel hides;
    memory: what it holds at its memory peak beyond states and stored activations, and its allocator (HeldMemory);
    optimizer_group_params: an offloaded optimizer steps group by group of this many parameters beside the backward
      that completes their gradients (0: after the backward, as DeepSpeed and Megatron-core do; read as
      `optimizer_group_mparams`; cost_models.sync.optimizer_time);
    head_fp16_accumulation: the LM head's forward and input-gradient GEMMs go through torch.matmul with
      torch.backends.cuda.matmul.allow_fp16_accumulation set, at the GPU's peak_fp16acc_tflops where it has one
      (Megatron-core's output layer is its own ColumnParallelLinear, outside Transformer Engine, whose GEMMs accumulate
      in fp32 whatever the flag; its weight gradient is the fused fp32 accumulation into main_grad;
      cost_models.compute.layer.head_time);
    param_reuse_params: with ZeRO-3 parameter offload a fully recomputed layer of at most this many parameters keeps
      the weights its recomputed forward fetched for its backward (DeepSpeed's stage3_max_reuse_distance: a gathered
      weight is not released while its next use lies within that many parameters of the module trace; read as
      `param_reuse_mparams`); 0: every pass fetches them (cost_models.memory.offload.layer_offload_parts).
    """

    fsdp: FsdpForm = FsdpForm.PER_MODULE
    reshard_under_pp: bool = True
    sharded_weight_bytes: float = 2.0
    optimizer_bytes: float = 12.0
    attention: AttentionImpl = AttentionImpl.CUDNN
    attention_rate: tuple[tuple[str, float], ...] = ()
    attention_backward: tuple[tuple[str, float], ...] = ()
    compile_default: bool = False
    eager: Elementwise | None = None
    compiled: Elementwise | None = None
    fp8: tuple[Fp8Casts, ...] = (TE_DELAYED, TE_CURRENT)
    selective: SelectiveForm = SelectiveForm.MODULES
    ring_merge: Elementwise | None = None
    logit_bytes: float = 6.0
    expert_gemms: ExpertGemms = ExpertGemms.TE_STREAMS
    host_layer_s: float = 0.0
    host_microbatch_s: float = 0.0
    host_step_s: float = 0.0
    memory: HeldMemory = HeldMemory()
    split_projections: bool = False
    head_fp16_accumulation: bool = False
    bucket_allreduce: bool = False
    grad_accumulation_bytes: float = 0.0
    optimizer_group_params: float = 0.0
    sync_checkpoint_copies: bool = False
    param_reuse_params: float = 0.0

    def attention_share(self, architecture: str) -> float:
        """The kernel's rate on `architecture` over the GPU profile's fused-attention figure (1 if not listed)."""
        return next((rate for arch, rate in self.attention_rate if arch == architecture), 1.0)

    def attention_backward_share(self, architecture: str) -> float | None:
        """The kernel's backward rate over its own forward rate on `architecture` (None: the GPU profile's
        attention_backward_ratio, the figure of the kernel its attention figures describe)."""
        return next((ratio for arch, ratio in self.attention_backward if arch == architecture), None)

    def elementwise(self, compiled: bool | None) -> Elementwise | None:
        """The element-wise bytes with torch.compile on or off (None: the runtime's default); None: fused kernels."""
        on = self.compile_default if compiled is None else compiled
        return self.compiled if on else self.eager

    def casts(self, recipe: Fp8Recipe | None) -> Fp8Casts:
        """The casts of `recipe` (None: the runtime's default, its first); a recipe it does not run is a ValueError
        (planner.api refuses it first, naming the runtime)."""
        if recipe is None:
            return self.fp8[0]
        for casts in self.fp8:
            if casts.recipe is recipe:
                return casts
        raise ValueError(f"fp8 recipe {recipe.value} is not one of {', '.join(c.recipe.value for c in self.fp8)}")


MEGATRON_EXECUTION = Execution()  # Megatron-core with Transformer Engine: how every layout was priced before

__all__ = ["MEGATRON_EXECUTION", "TE_CURRENT", "TE_DELAYED", "AttentionImpl", "Elementwise", "ElementwiseBytes",
           "Execution", "ExpertGemms", "Fp8Casts", "Fp8Recipe", "FsdpForm", "HeldMemory", "SelectiveForm",
           "WorkingBytes"]
