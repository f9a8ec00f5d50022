"""torch.distributed.pipelining action list: the plan's pipeline op order as the compute-only CSV that
`_PipelineScheduleRuntime._load_csv` reads (torchtitan: `parallelism.pipeline_parallel_schedule_csv`).

One row per pipeline rank, one cell per op: `{stage}{type}{micro-batch}`, stage = model chunk in pipeline
order, type F (forward), B (full backward), or I and W (input and weight gradient) for the zero-bubble schedules
(DualPipeV has both). torch
infers which rank holds each chunk from the rows and adds the sends and receives itself. The orders are those of
`cost_models.pipeline.schedules.program`, the ones the simulator prices: every schedule meshplan searches has one.
"""

from __future__ import annotations

from cost_models.pipeline.schedules import program
from cost_models.pipeline.simulator import Op, OpKind
from meshcore import Schedule
from planner.outputs.emitters.common import UnsupportedPlanError, facts
from planner.outputs.plan import Plan


def _cell(op: Op, split_backward: bool) -> str:
    kind = {OpKind.F: "F", OpKind.B: "I" if split_backward else "B", OpKind.W: "W", OpKind.BW: "B"}[op.kind]
    return f"{op.chunk}{kind}{op.microbatch}"


def emit(plan: Plan) -> str:
    lay = plan.best.layout
    if lay.pp == 1:
        raise UnsupportedPlanError("the plan has no pipeline (pp 1): there is no action list to write")
    return action_rows(lay.schedule, lay.pp, facts(plan).num_microbatches, lay.vpp)


def action_rows(schedule: Schedule, pp: int, num_microbatches: int, vpp: int) -> str:
    """The CSV text: one row of actions per pipeline rank."""
    prog = program(schedule, pp, num_microbatches, vpp)
    return "".join(",".join(_cell(op, prog.split_backward) for op in order) + "\n" for order in prog.orders)
