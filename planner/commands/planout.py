"""What `meshplan plan` does with a searched plan: write the plan file, print the table or JSON, print or write
the launcher configuration of --emit."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from meshcore import Target
from meshcore.framework import Framework
from planner.commands.common import report_to_stderr
from planner.outputs.plan import Plan

SLOW_SEARCH_S = 1.0  # a search past this (issue 36's budget) notes how to shorten it: --workers, or pins
PINS = "--tp, --pp, --cp, --schedule, --recompute"  # the pins that narrow a slow search the most (README, Search speed)


def workers_note(result: Plan, workers: int, cores: int | None = None) -> str | None:
    """The note `meshplan plan` prints on standard error where the search took longer than SLOW_SEARCH_S seconds
    (`workers`: the processes that searched; `cores`: os.cpu_count() when not given). One process on a machine with
    more cores: --workers splits the space by TP degree over processes that share their best plans, and returns the
    same plan (planner.search.parallel). Already over several processes, or on one core: pinning what the user knows
    narrows the space (the plan is then the best of the narrowed space), and research mode's space is the largest."""
    cert, cores = result.certificate, cores if cores is not None else os.cpu_count() or 1
    if cert is None or cert.solve_time_s <= SLOW_SEARCH_S:
        return None
    took = f"note: the search took {cert.solve_time_s:.1f} s " + (
        "in one process" if workers <= 1 else f"over {workers} processes")
    if workers <= 1 and cores >= 2:
        return (f"{took}; --workers N splits it by TP degree over N processes (up to one per core, {cores} here) and "
                "finds the same plan")
    research = result.job.runtime.framework is Framework.ANY
    return (f"{took}, past the {SLOW_SEARCH_S:g} s meant for one search; pinning what you know ({PINS}) narrows the "
            "space" + (", and a runtime's own space (--runtime megatron, ...) is smaller than research mode's"
                       if research else ""))


def show_plan(result: Plan, out: Path | None, as_json: bool, record_timing: bool,
              target: Target | None, emit_out: Path | None, workers: int = 1) -> None:
    """Write `result` to `out` (if given), print it (to standard error when a file goes to standard output), then
    the configuration of `target` to standard output or `emit_out`, then `workers_note` (`workers`: the processes
    that searched) on standard error."""
    from meshcore.fileio import write_text_atomic
    from planner.outputs.planfile import dumps, plan_to_dict
    from planner.outputs.report import plan_table

    if out is not None:
        write_text_atomic(out, dumps(result, out, record_timing))
    err = report_to_stderr(out, emit_out)
    if as_json:
        typer.echo(json.dumps(plan_to_dict(result, record_timing), indent=2), err=err)
    else:
        typer.echo(plan_table(result), err=err)
        if out is not None:
            typer.echo(f"\nplan written to {out}", err=err)
    if target is not None:
        emit_plan(result, target, emit_out, err)
    if (note := workers_note(result, workers)) is not None:
        typer.echo(note, err=True)


def emit_plan(result: Plan, target: Target, emit_out: Path | None, err: bool) -> None:
    """The configuration of `target` for `result`, with its note on standard error; to `emit_out` if given."""
    from meshcore.fileio import is_script, write_text_atomic
    from planner.outputs.emitters import emit as emit_config

    emitted = emit_config(result, target)
    if emitted.note:
        typer.echo(f"note: {emitted.note}", err=True)
    if emit_out is None:
        typer.echo(emitted.text)
    else:
        write_text_atomic(emit_out, emitted.text, executable=is_script(emitted.text))
        typer.echo(f"{target.value} configuration written to {emit_out}", err=err)
