"""torchtitan: a TOML job file for 0.2.x (`--job.config_file plan.toml`) and the override list for 0.3.x.

Mapping: ZeRO-0 is DDP (data_parallel_replicate_degree = dp); ZeRO-3 is FSDP2 resharding after forward
(data_parallel_shard_degree = dp), ZeRO-2 FSDP2 without resharding, HSDP (Layout.dp_replicate > 1) FSDP2 on the
[dp_replicate, dp_shard] mesh (data_parallel_replicate_degree = dp_replicate, data_parallel_shard_degree = dp /
dp_replicate); torchtitan has no ZeRO-1. The stage
split is written exactly as module_fqns_per_model_part (tok_embeddings, layers.i, norm, output, the
module names of torchtitan's decoder models). Schedules: "GPipe", "1F1B", "Interleaved1F1B", "ZBVZeroBubble",
"DualPipeV" (their stages in model order; torchtitan places them as a V itself). The schedules torchtitan has no
name for run from meshplan's op order (`BY_ACTIONS`): a one-wave plan (the wave with two chunks per rank) names
"ZBVZeroBubble" for that V placement, as do V-Half and V-Min, ZB-H1 and ZB-H2 name "1F1B" for one stage per rank, and
`pipeline_parallel_schedule_csv` gives the order, the action list `meshplan emit --to torch-actions` writes, which
torch's _PipelineScheduleRuntime then runs.
Recomputation: activation_checkpoint.mode none / selective (per-op) / full; per-stage partial counts do not exist.
The model is one of torchtitan's own flavors, matched by architecture (titan_flavors.py); any other model is
refused with UnsupportedModelError, since torchtitan's job file cannot state dimensions.

Gradient scale (torchtitan 0.2.2, measured by tests/test_launcher_training.py): the same model trains the same
way only if gradient clipping sees the same gradient, and 0.2.2's gradient is not the mean-loss gradient in two
layouts. No key of its job file changes how it normalises the loss, so the TOML compensates in the one key that
reads the gradient's size, training.max_norm (torchtitan's default 1.0, times the factor below):
- with pipelining (pp > 1) the gradient is the token sum, global_batch * seq_len times the mean: 0.2.2's
  build_pipeline_schedule (distributed/pipeline_parallel.py) builds the schedule with scale_grads=False and the
  trainer's loss_fn with reduction="sum" (components/loss.py), and the schedule runs backward on each
  micro-batch's sum; train.py divides by global_valid_tokens only after pp_schedule.step() has run backward, for
  the logged loss (pytorch/torchtitan#2972; fixed in 0.3.0, which passes global_valid_tokens into the schedule's
  loss_kwargs). Without pipelining, train.py divides before backward. Every label of torchtitan's text datasets
  is valid, so global_valid_tokens is global_batch * seq_len at every step.
- with DDP (ZeRO-0, dp > 1) the gradient is the mean divided by dp: 0.2.2 divides the loss by the global token
  count and its apply_ddp (models/llama3/infra/parallelize.py) still averages gradients over dp, where FSDP has
  its division turned off (disable_fsdp_gradient_division). 0.3.0 replicates through FSDP2 on a
  [dp_replicate, fsdp] mesh with that division off too.
AdamW (torchtitan's default optimizer) is invariant to a constant gradient scale up to its eps (1e-8 against
the square root of the second moment, which the scale grows with it), so clipping at max_norm * factor trains as
clipping at max_norm does without the scale. What stays different: the grad_norm torchtitan logs (factor times
the mean-loss norm), and eps's weight. With torchtitan 0.2.0 or 0.2.1 (which divide the loss themselves) set
max_norm back to 1.0; the 0.3 overrides (emit_cli) carry no max_norm, as 0.3.0 normalises before backward.
torchtitan 0.2.2's DDP is one-dimensional: its apply_ddp refuses data_parallel_replicate_degree beside tp, pp or cp
at start-up ("DDP has not supported > 1D parallelism"), so a ZeRO-0 plan with dp > 1 beside other dimensions is
refused here (emit writes the nearest layout it runs) and planning for torchtitan leaves such layouts out;
FSDP (ZeRO-2/3) is its data parallelism next to other dimensions.
"""

from __future__ import annotations

from typing import Any

from meshcore import SCHEDULES, Dtype, Layout, Recompute, ZeroStage, module_names, non_default_modules, spec_of
from meshcore.errors import UnsupportedModelError
from meshcore.text import comment
from planner.outputs.emitters.common import UnsupportedPlanError, describe, facts, offload_runner
from planner.outputs.emitters.titan_flavors import flavor_of, mtp_caveat
from planner.outputs.plan import Plan

TITAN_MAX_NORM = 1.0  # torchtitan's training.max_norm default (config/job_config.py), scaled by grad_scale()
ACTIONS_FILE = "pipeline_actions.csv"  # a BY_ACTIONS plan's op order: meshplan emit PLAN --to torch-actions
# Schedules torchtitan runs from meshplan's action list (pipeline_parallel_schedule_csv), each with the named schedule
# whose stage placement it shares (`ScheduleSpec.by_actions`): one stage per rank (1F1B's) or a V (ZBVZeroBubble's)
BY_ACTIONS = frozenset(s for s, rules in SCHEDULES.items() if rules.by_actions is not None)


def model_parts(plan: Plan) -> list[list[str]]:
    """Module names of each model chunk in pipeline order."""
    chunks = facts(plan).chunks
    parts, start = [], 0
    for i, n in enumerate(chunks):
        names = [f"layers.{j}" for j in range(start, start + n)]
        if i == 0:
            names.insert(0, "tok_embeddings")
        if i == len(chunks) - 1:
            names += ["norm", "output"]
        parts.append(names)
        start += n
    return parts


def titan_name(lay: Layout) -> str | None:
    """torchtitan's name of the schedule `lay` runs: its own, or that of the named schedule whose placement runs
    meshplan's action list; None where torchtitan has neither."""
    rules = spec_of(lay.schedule)
    return rules.torchtitan if rules.by_actions is None else spec_of(rules.by_actions).torchtitan


def refuse_unrunnable(lay: Layout) -> None:
    """UnsupportedPlanError naming what of `lay` torchtitan cannot run, and the nearest plan it can."""
    if lay.offload:
        raise UnsupportedPlanError("torchtitan's CPU offload moves FSDP's weights, gradients and optimizer together, "
                                   f"which meshplan does not write yet ({offload_runner(lay.offload)}); the nearest "
                                   "plan offloads nothing")
    if lay.zero is ZeroStage.OPTIMIZER:
        raise UnsupportedPlanError("torchtitan has no ZeRO-1 (distributed optimizer only); the nearest plans use "
                                   "FSDP: ZeRO-2 (--zero 2, no resharding after forward) or ZeRO-3 (--zero 3)")
    if non_default_modules(lay):
        raise UnsupportedPlanError(
            f"torchtitan cannot recompute Megatron modules ({', '.join(module_names(lay.recompute_modules))}): its "
            "activation checkpointing is per layer or per op; the nearest plan uses --recompute full or none")
    if lay.recompute_layers is not None:
        raise UnsupportedPlanError(
            f"torchtitan cannot recompute {list(lay.recompute_layers)} layers per stage; the nearest plan uses "
            "full recomputation everywhere (--recompute full) or none (--no-partial-recompute)")
    if spec_of(lay.schedule).wave_placed and lay.pp > 1 and lay.vpp != 2:
        raise UnsupportedPlanError(f"torchtitan places chunks as a V only two per rank (ZBVZeroBubble, DualPipeV): it "
                                   f"cannot place a wave of vpp {lay.vpp}; the nearest plan uses one wave (--vpp 2) or "
                                   "one of its own schedules")
    if titan_name(lay) is None and lay.pp > 1:
        raise UnsupportedPlanError(f"torchtitan has no {lay.schedule.value} schedule with one stage per rank (its "
                                   "zero-bubble schedules need several); the nearest plan uses 1f1b")


def parallelism_section(plan: Plan) -> dict[str, Any]:
    """The [parallelism] table: the mesh degrees, FSDP's resharding, the pipeline schedule and its parts."""
    lay, model = plan.best.layout, plan.model
    sharded = lay.zero >= ZeroStage.GRADIENTS
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": lay.dp_replicate if sharded else lay.dp,
        "data_parallel_shard_degree": lay.dp_shard if sharded else 1,
        "tensor_parallel_degree": lay.tp, "context_parallel_degree": lay.cp, "pipeline_parallel_degree": lay.pp,
    }
    if model.moe is not None:
        parallelism.update(expert_parallel_degree=lay.ep, expert_tensor_parallel_degree=lay.etp)
    if sharded:
        # ZeRO-3: torchtitan's default, which reshards after forward without a pipeline and keeps a stage's weights
        # gathered under one (what cost_models prices, Execution.reshard_under_pp); ZeRO-2 never reshards
        parallelism["fsdp_reshard_after_forward"] = "default" if lay.zero is ZeroStage.WEIGHTS else "never"
    if lay.pp > 1:
        listed = lay.schedule in BY_ACTIONS  # the named schedule's placement running the action list
        parallelism.update(pipeline_parallel_schedule=titan_name(lay), pipeline_parallel_microbatch_size=lay.mbs,
                           module_fqns_per_model_part=model_parts(plan))
        if parallelism["pipeline_parallel_schedule"] == "DualPipeV":
            # its F&B overlap hook only serves expert parallelism, and torchtitan refuses it beside activation
            # checkpointing; off, the pairs run back to back as meshplan prices them (it registers the hook anyway)
            overlap = lay.ep > 1 and lay.recompute is Recompute.NONE
            parallelism["pipeline_parallel_expert_parallel_overlap"] = overlap
        if listed:
            parallelism["pipeline_parallel_schedule_csv"] = ACTIONS_FILE
    return parallelism


def sections(plan: Plan) -> dict[str, dict[str, Any]]:
    lay, job, model = plan.best.layout, plan.job, plan.model
    flavor = flavor_of(model)  # before the layout: no other layout helps a model torchtitan cannot build
    refuse_unrunnable(lay)
    parallelism = parallelism_section(plan)
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}[lay.recompute]
    checkpoint: dict[str, Any] = {"mode": mode}
    if mode == "selective":
        checkpoint["selective_ac_option"] = "op"
    model_section: dict[str, Any] = {"name": flavor.module, "flavor": flavor.flavor}
    extra: dict[str, dict[str, Any]] = {}
    if job.dtype is Dtype.FP8:
        model_section["converters"] = ["quantize.linear.float8"]
        extra["quantize.linear.float8"] = float8_section(plan)
    if job.runtime.compiled:  # the blocks only: the loss runs eager as priced (Execution.logit_bytes)
        extra["compile"] = {"enable": True, "components": ["model"]}
    return {
        "job": {"description": describe(plan)},
        "model": model_section,
        "training": {"local_batch_size": job.global_batch // lay.dp, "global_batch_size": job.global_batch,
                     "seq_len": job.seq_len, "mixed_precision_param": "bfloat16"},
        "parallelism": parallelism,
        "activation_checkpoint": checkpoint,
        **extra,
    }


def float8_section(plan: Plan) -> dict[str, Any]:
    """torchao's float8 recipe as the plan's runtime prices it (Runtime.fp8_recipe, default tensorwise), with FSDP's
    float8 all-gather and its precomputed scales when the plan gathers fp8 weights (Runtime.fp8_param_gather, which
    torchtitan runs only with tensorwise scaling and sharded data parallelism)."""
    runtime = plan.job.runtime
    recipe = runtime.priced_execution.casts(runtime.fp8_recipe).recipe.value
    gather = (runtime.fp8_param_gather and recipe == "tensorwise"
              and plan.best.layout.zero >= ZeroStage.GRADIENTS)
    return {"recipe_name": recipe, "enable_fsdp_float8_all_gather": gather,
            "precompute_float8_dynamic_scale_for_fsdp": gather}


def grad_scale(plan: Plan) -> float:
    """How many times the mean-loss gradient torchtitan 0.2.2 clips and steps with for this layout (module doc):
    the tokens of a step with pipelining, 1/dp with DDP, else 1."""
    lay, job = plan.best.layout, plan.job
    if lay.pp > 1:
        return float(job.global_batch * job.seq_len)
    if lay.zero is ZeroStage.NONE and lay.dp > 1:
        return 1.0 / lay.dp
    return 1.0


def _max_norm_note(plan: Plan, scale: float) -> list[str]:
    """The header lines that say why max_norm is not torchtitan's default (module doc: gradient scale)."""
    lay, job = plan.best.layout, plan.job
    if lay.pp > 1:
        factor = f"{round(scale):,}"
        why = f"pipelined, it backpropagates the token sum of a step, {job.global_batch} x {job.seq_len} tokens"
    else:
        factor = f"1/{lay.dp}"
        why = f"its DDP averages over dp {lay.dp} gradients that are already means over the global batch"
    return [f"# max_norm = {TITAN_MAX_NORM} (torchtitan's default) x {factor}: torchtitan 0.2.2 clips and steps with "
            f"{factor} x the mean-loss gradient here ({why};",
            "# pytorch/torchtitan#2972), so clipping acts as in a layout without this scale; its logged grad_norm is "
            f"that multiple too. With torchtitan 0.2.0 or 0.2.1 set max_norm = {TITAN_MAX_NORM}."]


def _refuse_ddp_beside_others(plan: Plan) -> None:
    """torchtitan 0.2.2's DDP is its only parallelism or nothing (module doc): refuse the layout, so that `emit`
    writes the nearest one it runs (the capability `replicate_alone` keeps such layouts out of its search)."""
    lay = plan.best.layout
    if lay.zero is ZeroStage.NONE and lay.dp > 1 and lay.tp * lay.pp * lay.cp > 1:
        raise UnsupportedPlanError(
            f"torchtitan 0.2.2 runs DDP (ZeRO-0, data_parallel_replicate_degree {lay.dp}) only as the sole "
            "parallelism and stops at start-up beside tp, pp or cp (\"DDP has not supported > 1D parallelism\"); "
            "the nearest plan uses FSDP (--zero 2 or --zero 3)")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def emit_toml(plan: Plan) -> str:
    _refuse_ddp_beside_others(plan)
    lines = ["# torchtitan 0.2.x job file written by meshplan", comment(describe(plan)),
             f"# torchrun --nnodes {facts(plan).nodes} --nproc-per-node {facts(plan).gpus_per_node} "
             "-m torchtitan.train --job.config_file THIS_FILE", ""]
    caveat = mtp_caveat(plan.model, flavor_of(plan.model))
    if caveat is not None:
        lines[2:2] = [comment(f"note: {caveat}")]
    if plan.best.layout.schedule in BY_ACTIONS and plan.best.layout.pp > 1:
        lines[3:3] = [f"# the {plan.best.layout.schedule.value} op order, read from {ACTIONS_FILE} in the working "
                      "directory: "
                      f"meshplan emit PLAN --to torch-actions --out {ACTIONS_FILE}"]
    written = sections(plan)
    scale = grad_scale(plan)
    if scale != 1.0:
        written["training"]["max_norm"] = TITAN_MAX_NORM * scale
        lines[-1:-1] = _max_norm_note(plan, scale)
    for section, values in written.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def emit_cli(plan: Plan) -> str:
    """Overrides for torchtitan 0.3.x, which reads no TOML: one `--section.key value` per line. The split is
    stated as layers per (virtual) stage, so only even splits can be expressed this way."""
    model, f = plan.model, facts(plan)
    flavor = flavor_of(model)
    if flavor.config is None:
        raise UnsupportedModelError(f"torchtitan 0.3.0 has no config for {flavor.label} ({model.name}): use the "
                                    "torchtitan TOML target (0.2.x), which has the flavor")
    if plan.best.layout.schedule in BY_ACTIONS and plan.best.layout.pp > 1:
        raise UnsupportedPlanError(f"the torchtitan 0.3 target is not checked against a 0.3 release for an action-list "
                                   f"option, so {plan.best.layout.schedule.value} is written for the 0.2 TOML target "
                                   "only; the nearest plan uses one of torchtitan's own schedules")
    lines = [f"--module {flavor.module}", f"--config {flavor.config}"]
    for section, values in sections(plan).items():
        if section in ("job", "model"):
            continue
        for key, value in values.items():
            if key == "module_fqns_per_model_part":
                if not f.uniform_chunks:
                    raise UnsupportedPlanError(
                        f"the torchtitan 0.3 command line states the split as layers per stage; this plan splits "
                        f"{list(f.chunks)}: use the torchtitan TOML target, or the nearest plan, an even split of "
                        f"{model.num_layers} layers (re-plan with --pp {plan.best.layout.pp} and an even split)")
                key, value = "pipeline_parallel_layers_per_stage", f.chunks[0]
            lines.append(f"--{section}.{key} {_toml_value(value)}")
    caveat = mtp_caveat(model, flavor)
    note = "" if caveat is None else comment(f"note: {caveat}") + "\n"
    return ("# torchtitan 0.3.x overrides written by meshplan\n" + comment(describe(plan)) + "\n" + note
            + "\n".join(lines) + "\n")
