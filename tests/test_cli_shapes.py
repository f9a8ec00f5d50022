"""Shapes of the command line (issue 31 item 5): `evaluate PLAN` takes the file as explain/emit/trial do, `plan
--emit-out` writes the launcher configuration apart from the table, and `--help` at 80 columns shows every option
name whole (rich's option table cut them to '--global-batch-t…')."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import typer.main
from typer.testing import CliRunner

from cli import app
from planner.commands.lazy import COMMANDS

runner = CliRunner()
PLAN = ["plan", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096",
        "--global-batch", "64"]


def test_evaluate_takes_the_plan_file_as_an_argument(tmp_path: Path) -> None:
    saved = tmp_path / "plan.yaml"
    assert runner.invoke(app, [*PLAN, "--out", str(saved)]).exit_code == 0
    positional = runner.invoke(app, ["evaluate", str(saved), "--json"])
    flag = runner.invoke(app, ["evaluate", "--plan", str(saved), "--json"])
    assert positional.exit_code == 0, positional.output
    assert positional.output == flag.output and '"step_time_s"' in positional.output
    both = runner.invoke(app, ["evaluate", str(saved), "--plan", str(tmp_path / "other.yaml")])
    assert both.exit_code == 2 and "give the plan file once" in both.output
    missing = runner.invoke(app, ["evaluate", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "nope.yaml" in missing.output and "Traceback" not in missing.output


def test_plan_emit_out_writes_the_configuration_apart(tmp_path: Path) -> None:
    script = tmp_path / "megatron.sh"
    res = runner.invoke(app, [*PLAN, "--emit", "megatron", "--emit-out", str(script)])
    assert res.exit_code == 0, res.output
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "--tensor-model-parallel-size" in text
    assert "MEGATRON_ARGS" not in res.output and f"megatron configuration written to {script}" in res.output
    assert script.stat().st_mode & 0o100  # a script: executable
    default = tmp_path / "default.sh"  # without --emit: the runtime's configuration
    assert runner.invoke(app, [*PLAN, "--emit-out", str(default)]).exit_code == 0
    assert default.read_text() == text


def _commands() -> list[tuple[list[str], click.Command]]:
    """Every command and subcommand of the root group, with its argument path."""
    group = typer.main.get_command(app)
    found: list[tuple[list[str], click.Command]] = []
    ctx = click.Context(group)
    for name in COMMANDS:
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            found += [([name, sub], cmd.get_command(ctx, sub)) for sub in cmd.list_commands(ctx)]  # type: ignore[misc]
        else:
            found.append(([name], cmd))
    return found


@pytest.mark.parametrize(("path", "command"), _commands(), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_help_at_80_columns_shows_every_option_name_whole(path: list[str], command: click.Command) -> None:
    res = runner.invoke(app, [*path, "--help"], terminal_width=80, env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                assert re.search(rf"(^|[\s,/]){re.escape(name)}([\s,/=]|$)", res.output, re.M), (path, name)


def test_plan_rows_are_ranked_by_the_column_shown_first() -> None:
    """Issue 31 item 6: the alternatives were ranked by the simulated step while 'step s' was shown first; the first
    column is the ranking's step, in order, the closed form beside it."""
    res = runner.invoke(app, ["plan", "--model", "llama3-70b", "--hardware", "h100-sxm", "--gpus", "64", "--seq-len",
                              "8192", "--global-batch", "512", "--top-k", "5"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["#", "step", "s"])
    assert lines[head].split()[3:5] == ["closed", "s"]
    rows = [line.replace("≈", "").split() for line in lines[head + 1:head + 6]]
    steps = [float(r[1]) for r in rows]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5] and steps == sorted(steps)
