"""Megatron-LM: the plan as command-line arguments (a bash array, one per line) and the torchrun line.

Flag names are those of megatron/training/arguments.py (listed in megatron_flags.txt with their source).
Rules (REFERENCE.md section 2): DP comes from the world size; 1F1B without VPP, interleaved with it; an
even split needs nothing, uneven first/last stages use --decoder-first/last-pipeline-num-layers, any
other split (and any split with VPP that is not even) --pipeline-model-parallel-layout; partial
recomputation is the block method with one count for every stage; ZeRO-1 is the distributed optimizer,
ZeRO-2/3 Megatron-FSDP. MoE models get their experts, routing (all-to-all dispatcher, grouped GEMMs, the
capacity factor when the plan pads to one), --moe-layer-freq for dense/MoE mixes, expert parallelism and
MTP; MLA models their low-rank dimensions.
"""

from __future__ import annotations

import shlex

from meshcore import (
    Activation,
    AttentionKernel,
    Dtype,
    Norm,
    Offload,
    Recompute,
    RecomputeModule,
    ZeroStage,
    module_names,
    offload_names,
)
from meshcore.errors import UnsupportedModelError
from meshcore.framework import Framework
from meshcore.text import comment
from planner.outputs.emitters.common import (
    UnsupportedPlanError,
    describe,
    facts,
    offload_runner,
    partial_recompute,
    runs_schedule,
)
from planner.outputs.plan import Plan

FSDP_STRATEGY = {ZeroStage.GRADIENTS: "optim_grads", ZeroStage.WEIGHTS: "optim_grads_params"}


def _model_args(plan: Plan) -> list[tuple[str, object]]:
    m, job = plan.model, plan.job
    args: list[tuple[str, object]] = [
        ("--num-layers", m.num_layers), ("--hidden-size", m.hidden_size), ("--ffn-hidden-size", m.ffn_hidden_size),
        ("--num-attention-heads", m.num_attention_heads)]
    if m.head_dim * m.num_attention_heads != m.hidden_size and m.mla is None:  # MLA states its own head widths
        args.append(("--kv-channels", m.head_dim))
    if m.num_kv_heads != m.num_attention_heads:
        args += [("--group-query-attention", None), ("--num-query-groups", m.num_kv_heads)]
    args += [("--seq-length", job.seq_len), ("--max-position-embeddings", max(job.seq_len, m.learned_positions)),
             ("--position-embedding-type", "learned_absolute" if m.learned_positions else "rope"),
             ("--normalization", "LayerNorm" if m.norm is Norm.LAYERNORM else "RMSNorm"),
             ("--vocab-size", m.vocab_size)]
    if m.mlp_activation is Activation.SWIGLU:
        args.append(("--swiglu", None))
    elif m.mlp_activation is Activation.SQUARED_RELU:
        args.append(("--squared-relu", None))
    elif m.mlp_activation is Activation.GEGLU:
        raise UnsupportedModelError(f"Megatron-LM's command line has no GeGLU MLP ({m.name}): --swiglu is gated SiLU, "
                                    "--squared-relu and the default GELU are not gated (megatron-core builds GeGLU "
                                    "from Python: gated_linear_unit with activation_func gelu)")
    if not m.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not m.linear_bias:
        args.append(("--disable-bias-linear", None))
        if m.qkv_bias:
            args.append(("--add-qkv-bias", None))
    if not m.dropout:
        args += [("--attention-dropout", 0.0), ("--hidden-dropout", 0.0)]
    if m.qk_norm:
        args.append(("--qk-layernorm", None))
    return args + _attention_args(plan) + _mla_args(plan) + _moe_args(plan)


def _attention_args(plan: Plan) -> list[tuple[str, object]]:
    """What the model states of its rotary base, norm epsilon and sliding window (Megatron's defaults otherwise):
    --window-size w,0 (w keys to the left, none to the right) and --window-attn-skip-freq k (every k-th layer full)."""
    m = plan.model
    args: list[tuple[str, object]] = []
    if m.rope_theta is not None and not m.learned_positions:
        theta = m.rope_theta
        args.append(("--rotary-base", int(theta) if float(theta).is_integer() else theta))
    if m.norm_eps is not None:
        args.append(("--norm-epsilon", m.norm_eps))
    if m.sliding_window:
        args.append(("--window-size", f"{m.sliding_window},0"))
        if m.global_attention_every:
            args.append(("--window-attn-skip-freq", m.global_attention_every))
    return args


def _mla_args(plan: Plan) -> list[tuple[str, object]]:
    """Multi-head latent attention: --qk-head-dim is the no-rope part of a query/key head, --qk-pos-emb-head-dim
    its rotary part. --qk-layernorm gives MLA its RMSNorms on the query and key-value latents (DeepSeek-V3's
    q_a_layernorm and kv_a_layernorm, which meshplan counts): without it megatron-core 0.16.1 builds them as
    identities (gpt_layer_specs.py, the MLA branch of get_gpt_layer_local_spec; tests/test_megatron_model.py)."""
    mla = plan.model.mla
    if mla is None:
        return []
    args: list[tuple[str, object]] = [("--multi-latent-attention", None)]
    if not plan.model.qk_norm:  # otherwise already written with the other model flags
        args.append(("--qk-layernorm", None))
    if mla.q_lora_rank:
        args.append(("--q-lora-rank", mla.q_lora_rank))
    return args + [("--kv-lora-rank", mla.kv_lora_rank), ("--qk-head-dim", mla.qk_nope_head_dim),
                   ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim), ("--v-head-dim", mla.v_head_dim)]


def moe_layer_pattern(kinds: tuple[bool, ...]) -> str:
    """--moe-layer-freq as the Python list expression Megatron evaluates: 1 for an MoE layer, 0 for a dense one,
    one '[k]*n' term per run of equal layers (e.g. '[0]*3+[1]*58'), or '([0]*(s-1)+[1])*n' for a periodic stack."""
    flags = [int(k) for k in kinds]
    for period in range(1, len(flags) // 2 + 1):
        if len(flags) % period == 0 and flags == flags[:period] * (len(flags) // period) and period < len(flags):
            if period > 1:
                return f"({moe_layer_pattern(tuple(bool(f) for f in flags[:period]))})*{len(flags) // period}"
            break
    runs: list[tuple[int, int]] = []
    for flag in flags:
        if runs and runs[-1][0] == flag:
            runs[-1] = (flag, runs[-1][1] + 1)
        else:
            runs.append((flag, 1))
    return "+".join(f"[{flag}]*{n}" for flag, n in runs)


def _moe_args(plan: Plan) -> list[tuple[str, object]]:
    """Experts, routing and the token dispatcher the cost model assumes (all-to-all, grouped GEMMs), expert
    parallelism, and multi-token prediction."""
    m, lay, rt = plan.model, plan.best.layout, plan.job.runtime
    args: list[tuple[str, object]] = []
    if m.moe is not None:
        moe = m.moe
        args += [("--num-experts", moe.num_experts), ("--moe-router-topk", moe.top_k),
                 ("--moe-ffn-hidden-size", moe.ffn_hidden_size)]
        if moe.shared_ffn_hidden_size:
            args.append(("--moe-shared-expert-intermediate-size", moe.shared_ffn_hidden_size))
        if not all(m.moe_layers()):
            args.append(("--moe-layer-freq", moe_layer_pattern(m.moe_layers())))
        if moe.router_bias:  # aux-loss-free balancing (DeepSeek-V3) runs on sigmoid scores
            args += [("--moe-router-score-function", "sigmoid"), ("--moe-router-enable-expert-bias", None)]
        if moe.top_k == 1:  # a softmax over one chosen score has no gradient: Megatron routes top-1 pre-softmax
            args.append(("--moe-router-pre-softmax", None))
        if moe.group_top_k:
            args += [("--moe-router-num-groups", moe.groups), ("--moe-router-group-topk", moe.group_top_k)]
        if rt.moe_dedup_dispatch:
            args += [("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")]
        else:
            args.append(("--moe-token-dispatcher-type", "alltoall"))
        args.append(("--moe-grouped-gemm", None))
        if rt.moe_capacity_factor is not None:
            args += [("--moe-expert-capacity-factor", rt.moe_capacity_factor),
                     ("--moe-pad-expert-input-to-capacity", None)]
        args += [("--expert-model-parallel-size", lay.ep), ("--expert-tensor-parallel-size", lay.etp)]
        if rt.moe_comm_overlap and lay.ep > 1:
            if lay.pp > 1 and lay.vpp == 1:
                raise UnsupportedPlanError(
                    "Megatron-LM overlaps expert all-to-alls (--overlap-moe-expert-parallel-comm) only without a "
                    f"pipeline or with virtual stages; this plan runs pp {lay.pp} with vpp 1: re-plan with --vpp 2 "
                    "or more, or without --moe-comm-overlap")
            args += [("--overlap-moe-expert-parallel-comm", None), ("--delay-wgrad-compute", None)]
    if m.mtp_layers:
        args.append(("--mtp-num-layers", m.mtp_layers))
    return args


def _pipeline_args(plan: Plan) -> list[tuple[str, object]]:
    lay, f = plan.best.layout, facts(plan)
    if not runs_schedule(Framework.MEGATRON, lay):
        raise UnsupportedPlanError(f"Megatron-LM has no {lay.schedule.value} schedule (1F1B without VPP, "
                                   "interleaved with it); the nearest plan uses --schedule 1f1b")
    args: list[tuple[str, object]] = [("--pipeline-model-parallel-size", lay.pp)]
    if lay.pp == 1:
        return args
    chunks = f.chunks
    if f.uniform_chunks:
        if lay.vpp > 1:
            args.append(("--num-layers-per-virtual-pipeline-stage", chunks[0]))
        return args
    middle = chunks[1:-1]
    if lay.vpp == 1 and len(set(middle)) <= 1 and (lay.pp == 2 or middle[0] != 0):
        return args + [("--decoder-first-pipeline-num-layers", chunks[0]),
                       ("--decoder-last-pipeline-num-layers", chunks[-1])]
    return args + [("--pipeline-model-parallel-layout", pipeline_layout(chunks, plan.model.mtp_layers))]


def pipeline_layout(chunks: tuple[int, ...], mtp_layers: int = 0) -> str:
    """Megatron's layout string: chunks in pipeline order separated by '|', embedding 'E' first, the
    multi-token-prediction layers 'm' and the loss 'L' last, 't*n' for n decoder layers."""
    parts = [f"t*{n}" if n > 1 else "t" * n for n in chunks]
    parts[0] = "E" + parts[0]
    parts[-1] = parts[-1] + "m" * mtp_layers + "L"
    return "|".join(parts)


def _recompute_args(plan: Plan) -> list[tuple[str, object]]:
    lay = plan.best.layout
    block = partial_recompute(plan)
    if block is not None:
        if lay.recompute is Recompute.SELECTIVE:
            raise UnsupportedPlanError(
                "Megatron-LM cannot mix selective recomputation with fully recomputed layers; the nearest plan "
                f"recomputes {block} layers per stage fully and the rest not at all (--recompute none)")
        return [("--recompute-granularity", "full"), ("--recompute-method", "block"), ("--recompute-num-layers", block)]
    if lay.recompute is Recompute.FULL:
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    if lay.recompute is Recompute.SELECTIVE:
        return [("--recompute-granularity", "selective"),
                ("--recompute-modules", tuple(module_names(lay.recompute_modules)))]
    return []


def _offload_args(plan: Plan) -> list[tuple[str, object]]:
    """Megatron-core offloads the distributed optimizer's state and step to the CPU (HybridDeviceOptimizer), all
    of it with fraction 1, its copies beside compute; it has no weight offload, and meshplan does not write its
    activation offloading."""
    lay = plan.best.layout
    if not lay.offload:
        return []
    if lay.offload - {Offload.OPTIMIZER} or lay.zero is not ZeroStage.OPTIMIZER:
        raise UnsupportedPlanError(
            f"Megatron-LM offloads the distributed optimizer only (--optimizer-cpu-offload with ZeRO-1), not "
            f"{', '.join(offload_names(lay.offload))} with ZeRO-{int(lay.zero)} ({offload_runner(lay.offload)}); the "
            "nearest plan uses --zero 1 --offload optimizer")
    return [("--optimizer-cpu-offload", None), ("--optimizer-offload-fraction", 1.0),
            ("--overlap-cpu-optimizer-d2h-h2d", None)]


def fp8_recipe(plan: Plan) -> list[tuple[str, object]]:
    """megatron-core refuses moe_act and layernorm recomputation under FP8 with its default delayed scaling
    (TransformerConfig.__post_init__, 0.16.1); such plans name a current-scaling recipe: blockwise, the
    fine-grained scaling DeepSeek-V3 trains with (section 3.3.2; Transformer Engine >= 2.6 on Hopper)."""
    mods = plan.best.layout.recompute_modules
    if plan.job.dtype is Dtype.FP8 and mods & {RecomputeModule.MOE_ACT, RecomputeModule.LAYERNORM}:
        return [("--fp8-recipe", "blockwise")]
    return []


def arguments(plan: Plan) -> list[tuple[str, object]]:
    """(flag, value) pairs; value None for a switch."""
    lay, job = plan.best.layout, plan.job
    args = _model_args(plan)
    args += [("--tensor-model-parallel-size", lay.tp), *_pipeline_args(plan), ("--context-parallel-size", lay.cp)]
    if lay.cp > 1:
        args.append(("--cp-comm-type", "p2p"))
    if lay.sp:
        args.append(("--sequence-parallel", None))
    args += [("--micro-batch-size", lay.mbs), ("--global-batch-size", job.global_batch)]
    args += _recompute_args(plan)
    if lay.zero is ZeroStage.OPTIMIZER:
        args.append(("--use-distributed-optimizer", None))
        if lay.dp_replicate > 1:  # HSDP: the optimizer sharded over dp / N ranks, N instances
            args.append(("--num-distributed-optimizer-instances", lay.dp_replicate))
    elif lay.zero in FSDP_STRATEGY and lay.dp_replicate > 1:
        raise UnsupportedPlanError(f"meshplan does not write Megatron-FSDP's hybrid sharding (ZeRO-{int(lay.zero)} "
                                   f"with dp_replicate {lay.dp_replicate}); the nearest plan shards over every "
                                   "data-parallel rank (--dp-replicate 1) or uses ZeRO-1")
    elif lay.zero in FSDP_STRATEGY:
        args += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", FSDP_STRATEGY[lay.zero])]
    args += _offload_args(plan)
    if job.runtime.overlap_grad_reduce and lay.dp * lay.cp > 1:
        args.append(("--overlap-grad-reduce", None))
        if job.runtime.overlap_param_gather and lay.zero is ZeroStage.OPTIMIZER:
            args.append(("--overlap-param-gather", None))
    args.append(("--bf16", None))
    if job.dtype is Dtype.FP8:
        args.append(("--fp8-format", "hybrid"))
        args += fp8_recipe(plan)
    args.append(("--attention-backend", "flash" if job.runtime.attention is AttentionKernel.FLASH else "unfused"))
    return args


def emit(plan: Plan) -> str:
    f = facts(plan)
    lines = ["#!/usr/bin/env bash", comment(f"Megatron-LM launch for {describe(plan)}"),
             "# Written by meshplan; add data, tokenizer, optimizer and checkpoint arguments of your own.",
             "# Runs Megatron-LM's pretrain_gpt.py from $MEGATRON_LM (default: the current folder); stops if it is "
             "not there.",
             f"# World size {f.gpus} = {f.nodes} node(s) x {f.gpus_per_node} GPUs; DP is derived by Megatron-LM.",
             "MEGATRON_ARGS=("]
    for flag, value in arguments(plan):
        values = value if isinstance(value, tuple) else (value,)  # a tuple: several words (argparse nargs="*")
        lines.append(f"  {flag}" if value is None else f"  {flag} {' '.join(shlex.quote(str(v)) for v in values)}")
    lines += [")", "",
              'PRETRAIN="$(cd "${MEGATRON_LM:-.}" 2>/dev/null && pwd)/pretrain_gpt.py"  # absolute: torchrun may cd',
              'if [ ! -f "$PRETRAIN" ]; then',
              '  echo "error: no pretrain_gpt.py in ${MEGATRON_LM:-$PWD}: set MEGATRON_LM to your Megatron-LM '
              'checkout" >&2',
              "  exit 2",
              "fi",
              f'torchrun --nnodes {f.nodes} --nproc-per-node {f.gpus_per_node} --node-rank "${{NODE_RANK:-0}}" \\',
              '  --master-addr "${MASTER_ADDR:-localhost}" --master-port "${MASTER_PORT:-6000}" \\',
              '  "$PRETRAIN" "${MEGATRON_ARGS[@]}" "$@"', ""]
    return "\n".join(lines)
