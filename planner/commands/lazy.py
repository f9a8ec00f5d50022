"""The command line loads only the module of the command it runs: `meshplan plan` never imports the sweep, the
inference planners or the profiler, and `meshplan --help` none of them (issue 36: start-up is most of a small plan's
time). The root group lists every command from `COMMANDS` (name, module, the first paragraph of its help, which
tests/test_cli.py holds equal to the command's own) and builds a command from its module when it is asked for it."""

from __future__ import annotations

import importlib
from typing import Any

import typer.main
from typer._click import Command, Context, HelpFormatter
from typer.core import TyperCommand, TyperGroup

# name -> (module of planner.commands that registers it, the first paragraph of its help), in --help's order
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("catalog", "List the built-in model presets."),
    "hardware": ("catalog", "List the built-in hardware presets."),
    "evaluate": ("planning", "Predict step time, throughput, MFU and per-GPU memory of one layout (given by flags or "
                             "--plan)."),
    "plan": ("planning", "Search for the fastest layout that fits; print it with the top-k alternatives, write a plan "
                         "file."),
    "emit": ("planning", "Turn a plan into a launcher configuration (Megatron-LM, torchtitan, DeepSpeed, NeMo)."),
    "explain": ("planning", "Show why a plan is what it is: timeline, memory per stage, breakdown, the binding "
                            "constraint."),
    "sweep": ("studies", "What-if studies: best plan against GPU count, hardware, bandwidth, sequence or batch; or "
                         "the GPUs\nneeded to train --tokens in --days."),
    "trial": ("studies", "Write launch scripts that train the plan's best layouts for a few steps, logging every "
                         "step."),
    "calibrate": ("studies", "Fit the hardware profile's physical parameters to your own measured runs (held-out "
                             "check first)."),
    "profile": ("profiling", "Measure layers, the network and the host's fixed costs with PyTorch (needs the profile "
                             "extra), or an interatomic potential with MACE (the mlip extra)."),
    "infer": ("inference", "Plan inference: LLM serving, edge pipelines, diffusion transformers."),
    "mlip": ("mlip", "Plan graph interatomic potentials (MACE, NequIP, Allegro): domain decomposition or data "
                     "parallelism."),
    "recsys": ("recsys", "Plan recommendation models (DLRM): embedding-table sharding."),
}


def build(name: str, markup: Any) -> Command | None:
    """The click command of `name` from what its module registers on the app (importing the module)."""
    short = app.pretty_exceptions_short
    importlib.import_module(f"planner.commands.{COMMANDS[name][0]}")
    for info in app.registered_commands:
        if info.callback is not None and (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(info, pretty_exceptions_short=short, rich_markup_mode=markup)
    for group in app.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(group, pretty_exceptions_short=short, rich_markup_mode=markup,
                                                  suggest_commands=True)
    return None


class LazyGroup(TyperGroup):
    """The root group: every command of `COMMANDS` listed at once, each built when it is looked up to run (its help
    listing shows stand-ins that carry only the name and help)."""

    def __init__(self, *args: Any, commands: dict[str, Command] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, commands=commands, **kwargs)
        given = dict(self.commands)
        self.commands = {name: TyperCommand(name=name, help=text, rich_markup_mode=self.rich_markup_mode)
                         for name, (_, text) in COMMANDS.items()}
        self.commands.update({k: v for k, v in given.items() if k not in COMMANDS})
        self._loaded: set[str] = set()
        self._listing = False

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if cmd_name in COMMANDS and cmd_name not in self._loaded and not self._listing:
            built = build(cmd_name, self.rich_markup_mode)
            if built is not None:
                self.commands[cmd_name] = built
            self._loaded.add(cmd_name)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        self._listing = True  # the listing needs each command's name and help only
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


# The root app lives here, beside the group that builds its commands, so that planner.commands.common (which the
# command modules import it from) imports this module and not the other way round: no import circle.
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False, cls=LazyGroup,
                  rich_markup_mode=None,  # click's plain help: rich's table cut option names at 80 columns
                  help="meshplan: plan and predict parallel layouts for large-model training.")
