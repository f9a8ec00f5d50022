"""What `meshplan plan` does with a chain table (`--costs` of a CNN or any chain of profiled layers): recognise it,
say why no launcher takes its plan, and print or write its plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from planner.commands.common import report_to_stderr

if TYPE_CHECKING:
    from planner.api import ChainPlans


def chain_table(costs: Path) -> bool:
    """Whether a cost table is a chain of layers rather than a transformer's (pandas loads only for tables)."""
    from planner.search.chain import is_chain_table

    return is_chain_table(str(costs))


def no_chain_launcher(per_layer: bool) -> str:
    """Why --emit and --launcher are refused for chain tables."""
    from planner.search.chain import NO_LAUNCHER

    return NO_LAUNCHER if per_layer else ("no launcher emitter takes a chain table's plan (Megatron-LM, torchtitan, "
                                          "DeepSpeed and NeMo configs describe transformer stacks); the plan file "
                                          "carries the layout")


def print_chain(chain: ChainPlans, out: Path | None, as_json: bool) -> None:
    """Write and print the plans of a chain table."""
    import yaml

    from meshcore.fileio import write_text_atomic

    if out is not None:
        write_text_atomic(out, yaml.safe_dump(chain.document, sort_keys=False))
    if report_to_stderr(out):
        typer.echo(f"chain plans written to {out}", err=True)
        return
    if as_json:
        typer.echo(json.dumps(chain.document, indent=2))
        return
    doc, table = chain.document, chain.table
    typer.echo(f"{table.num_layers}-layer chain from {doc['costs']} on {doc['gpus']} x {doc['hardware']}, "
               f"global batch {doc['global_batch']}")
    typer.echo(f"  {'#':>2} {'step s':>9} {'samples/s':>10} {'peak GiB':>9}  layout (layers per stage)")
    for i, p in enumerate(chain.plans):
        typer.echo(f"  {i + 1:>2} {p.step_time_s:9.4f} {p.samples_per_s:10.1f} {max(p.stage_memory_gib):9.2f}  "
                   f"tp{p.tp} pp{p.pp} dp{p.dp} mbs{p.mbs} zero{int(p.zero)} {list(p.stage_layers)}")
    if chain.plans and chain.plans[0].layers:
        from planner.search.chain import NO_LAUNCHER

        typer.echo("\nper layer in plan 1 (tp x dp; R = recomputed):")
        runs = _runs([(k, f"tp{c.tp}xdp{c.dp}{' R' if c.recompute else ''}")
                      for k, c in zip(table.kinds, chain.plans[0].layers, strict=True)])
        typer.echo("  " + ", ".join(f"{k} {s}" + (f" x{n}" if n > 1 else "") for k, s, n in runs))
        typer.echo(f"note: {NO_LAUNCHER}")


def _runs(items: list[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """Consecutive equal (kind, strategy) pairs as (kind, strategy, count)."""
    runs: list[tuple[str, str, int]] = []
    for kind, strategy in items:
        if runs and runs[-1][:2] == (kind, strategy):
            runs[-1] = (kind, strategy, runs[-1][2] + 1)
        else:
            runs.append((kind, strategy, 1))
    return runs
