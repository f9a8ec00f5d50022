"""Launcher configurations from a plan: pure functions Plan -> text.

Targets: megatron (Megatron-LM arguments as a bash array + the torchrun line), torchtitan (TOML for
torchtitan 0.2.x), torchtitan-cli (override list for torchtitan 0.3.x), deepspeed (ds_config.json),
nemo (NeMo-Run and Megatron-Bridge overrides), torch-actions (the pipeline's op order as the action list
torch.distributed.pipelining's runtime reads; torchtitan runs one-wave plans from it).

Each emitter raises `UnsupportedPlanError` for a plan its launcher cannot express, naming what is
unsupported. `emit` then (unless strict) searches the plan's own job again within what that launcher
can run (`CAPABILITIES`) and emits that layout instead, saying so in the result's `note`, in the file's
header where the format has comments, and with the predicted cost of the change: never a silently
different configuration. An action list is only ever the plan's own (it pairs with the plan's layout).
A model the launcher cannot build at all (torchtitan builds only its own flavors) raises
`UnsupportedModelError` (meshcore.errors), which no other layout would help: it is never substituted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from meshcore import SCHEDULES, Schedule, Target
from meshcore.errors import InfeasibleError
from meshcore.fileio import is_script
from meshcore.framework import Framework
from meshcore.text import comment
from planner.inputs.runtimes import with_execution
from planner.outputs.emitters import actions, deepspeed, megatron, nemo, torchtitan
from planner.outputs.emitters.common import UnsupportedPlanError, layout_summary
from planner.outputs.plan import Plan
from planner.search.exact import search
from planner.search.space import SearchSpec

EMITTERS: dict[Target, Callable[[Plan], str]] = {
    Target.MEGATRON: megatron.emit, Target.TORCHTITAN: torchtitan.emit_toml, Target.TORCHTITAN_CLI: torchtitan.emit_cli,
    Target.DEEPSPEED: deepspeed.emit, Target.NEMO: nemo.emit, Target.TORCH_ACTIONS: actions.emit,
}
# The runtime whose configuration each target is (hardware_profiles/runtimes/ says what each runs); the
# torch-actions list is the plan's own op order for torch.distributed.pipelining, priced in the research space.
FRAMEWORK = {Target.MEGATRON: Framework.MEGATRON, Target.NEMO: Framework.NEMO, Target.TORCHTITAN: Framework.TORCHTITAN,
             Target.TORCHTITAN_CLI: Framework.TORCHTITAN, Target.DEEPSPEED: Framework.DEEPSPEED,
             Target.TORCH_ACTIONS: Framework.ANY}
TITAN_SCHEDULES = tuple(s for s, rules in SCHEDULES.items() if rules.torchtitan_cli)
# What a target runs beyond its runtime's profile: torchtitan 0.3's command line states the split as layers per
# stage (even splits only) and has no action-list option; the action list runs every schedule meshplan orders.
CAPABILITIES: dict[Target, SearchSpec] = {
    Target.MEGATRON: SearchSpec(), Target.NEMO: SearchSpec(), Target.TORCHTITAN: SearchSpec(),
    Target.DEEPSPEED: SearchSpec(),
    Target.TORCHTITAN_CLI: SearchSpec(uneven_split=False, schedule_choices=TITAN_SCHEDULES),
    Target.TORCH_ACTIONS: SearchSpec(schedule_choices=tuple(Schedule)),
}
NEVER_SUBSTITUTED = frozenset({Target.TORCH_ACTIONS})  # the plan's own op order or nothing: it pairs with its layout
COMMENT = {Target.MEGATRON: "# ", Target.TORCHTITAN: "# ", Target.TORCHTITAN_CLI: "# ", Target.NEMO: "# "}


@dataclass(frozen=True)
class Emitted:
    text: str
    note: str | None  # set when the launcher could not run the plan's own layout


def emit(plan: Plan, target: Target, strict: bool = False) -> Emitted:
    """The launcher configuration of `plan`, or of the best layout `target` can run (see module doc)."""
    if plan.model.vision is not None:
        raise UnsupportedPlanError(
            f"no launcher configuration is written for vision-language models yet ({plan.model.name}): they train "
            "through the launchers' multimodal entry points (Megatron-LM examples/multimodal, NeMo's VLM recipes), "
            "whose arguments meshplan does not check; the plan file carries the layout")
    if plan.job.trainable_fraction < 1 and target is not Target.DEEPSPEED:
        raise UnsupportedPlanError(
            f"no {target.value} configuration is written for LoRA fine-tuning (rank {plan.job.lora_rank}): its "
            "adapters are set up in the training script (NeMo's PEFT recipes), which meshplan does not write; "
            "DeepSpeed runs it: --emit deepspeed writes the ds_config with PEFT's LoraConfig arguments")
    own = plan.job.runtime.framework is FRAMEWORK[target] and FRAMEWORK[target] is not Framework.ANY
    try:
        return Emitted(EMITTERS[target](plan), None)
    except UnsupportedPlanError as exc:
        if own:  # the plan was searched in this runtime's space: a refusal here is meshplan's bug, said so
            raise UnsupportedPlanError(f"{exc}; the plan was made for {target.value}, whose search space should "
                                       "have left this layout out: please report it") from None
        if strict or target in NEVER_SUBSTITUTED:
            raise
        reason = str(exc)
    try:
        nearest = substitute(plan, target)
    except InfeasibleError as exc:
        raise UnsupportedPlanError(f"{reason}; and no layout {target.value} can run fits this job ({exc})") from None
    old, new = plan.best.prediction.step_time_s, nearest.best.prediction.step_time_s
    note = (f"{target.value} cannot run this plan ({reason.split(';')[0]}); written instead: the fastest layout it can "
            f"run, {layout_summary(nearest.best.layout)}, predicted {new:.3f} s/step ({100 * (new / old - 1):+.1f} % "
            f"against the plan's {old:.3f} s); pass --strict to refuse instead")
    text = EMITTERS[target](nearest)
    prefix = COMMENT.get(target)
    if prefix is not None:
        text = with_header_line(text, comment(f"NOTE: {note}", prefix))
    return Emitted(text, note)


def substitute(plan: Plan, target: Target) -> Plan:
    """The fastest layout `target` runs for the job of `plan` (InfeasibleError when none fits): what `emit` writes
    when the launcher cannot run the plan's own layout, priced as that launcher's runtime executes it (its profile's
    execution, not the plan's runtime's)."""
    runtime = with_execution(replace(plan.job.runtime, framework=FRAMEWORK[target], execution=None))
    job = replace(plan.job, runtime=runtime)
    # the substitute offloads where the plan did (each choice the launcher's runtime runs): no silent drop
    result = search(plan.model, plan.cluster, job, replace(CAPABILITIES[target], top_k=1,
                                                           offload_auto=bool(plan.best.layout.offload)))
    return Plan(plan.model, plan.cluster, job, result.best, (), result.certificate)


def with_header_line(text: str, line: str) -> str:
    """`text` with `line` in front, after its `#!` line where it has one (a script keeps its interpreter line)."""
    if is_script(text):
        shebang, _, rest = text.partition("\n")
        return f"{shebang}\n{line}\n{rest}"
    return f"{line}\n{text}"


def for_launcher(spec: SearchSpec, target: Target) -> SearchSpec:
    """`spec` narrowed to what `target` runs beyond its runtime's profile (a search for `target` also runs with
    `FRAMEWORK[target]` as the job's runtime, which narrows it to that runtime: planner.search.runtime_space)."""
    cap = CAPABILITIES[target]
    schedules = cap.schedule_choices if spec.schedule_choices is None or cap.schedule_choices is None else tuple(
        s for s in spec.schedule_choices if s in cap.schedule_choices)
    return replace(spec, schedule_choices=schedules or spec.schedule_choices,
                   uneven_split=spec.uneven_split and cap.uneven_split)


__all__ = ["CAPABILITIES", "FRAMEWORK", "NEVER_SUBSTITUTED", "Emitted", "Target", "UnsupportedPlanError", "emit",
           "for_launcher", "substitute"]
