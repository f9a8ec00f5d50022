"""`meshplan plan --cluster cluster.yaml`: plan across node groups of different hardware, print, write, emit."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from meshcore import Dtype, Recompute, Runtime, Target
from meshcore.errors import InputError
from planner.commands.common import report_to_stderr


def refuse_with_cluster(given: dict[str, bool]) -> None:
    """One line naming the flags that do not apply with --cluster."""
    bad = [flag for flag, on in given.items() if on]
    if bad:
        raise InputError(f"--cluster plans on its own node groups with 1f1b, one model chunk per rank and no CP or "
                         f"expert parallelism: drop {', '.join(bad)}")


def plan_on_cluster(cluster: Path, model: str | None, seq_len: int, batch: int, dtype: Dtype, runtime: Runtime, *,
                    tp: int | None, mbs: int | None, zero: int | None, recompute: Recompute | None,
                    max_tp: int | None, max_mbs: int, top_k: int, partial: bool, out: Path | None, as_json: bool,
                    emit_target: Target | None, record_timing: bool) -> None:
    """Plan (planner.api.plan_cluster), print the table or JSON, write the plan file, print a launcher config."""
    from meshcore import ZeroStage
    from meshcore.fileio import write_text_atomic
    from planner.api import plan_cluster
    from planner.outputs.heteroplan import HeteroPlan, emit_hetero, hetero_plan_dict
    from planner.search.hetero import HeteroSpec

    if model is None:
        raise InputError("give --model (a preset, model YAML or config.json) with --cluster")
    spec = HeteroSpec(tp=tp, mbs=mbs, zero=None if zero is None else ZeroStage(zero), recompute=recompute,
                      max_tp=max_tp, max_mbs=max_mbs, top_k=top_k, partial_recompute=partial)
    result = plan_cluster(model, cluster, seq_len=seq_len, global_batch=batch, dtype=dtype, runtime=runtime,
                          spec=spec)
    if not isinstance(result, HeteroPlan):  # one hardware after merging: the homogeneous plan
        from planner.outputs.planfile import dumps, plan_to_dict
        from planner.outputs.report import plan_table

        typer.echo(f"note: the groups of {cluster} are one hardware ({result.cluster.name}, no link named between "
                   "them): planned as one cluster", err=True)
        if out is not None:
            write_text_atomic(out, dumps(result, out, record_timing))
        typer.echo(json.dumps(plan_to_dict(result, record_timing), indent=2) if as_json else plan_table(result),
                   err=report_to_stderr(out))
        if emit_target is not None:
            from planner.outputs.emitters import emit as emit_config

            typer.echo(emit_config(result, emit_target).text)
        return
    data = hetero_plan_dict(result, record_timing)
    if out is not None:
        import yaml

        text = json.dumps(data, indent=2) + "\n" if str(out).endswith(".json") else yaml.safe_dump(
            data, sort_keys=False, width=120)
        write_text_atomic(out, text)
    err = report_to_stderr(out)
    if as_json:
        typer.echo(json.dumps(data, indent=2), err=err)
    else:
        from planner.outputs.heteroplan import hetero_table

        typer.echo(hetero_table(result), err=err)
        if out is not None:
            typer.echo(f"\nplan written to {out}", err=err)
    if emit_target is not None:
        typer.echo(emit_hetero(result, emit_target))
