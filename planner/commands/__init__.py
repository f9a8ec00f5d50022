"""The `meshplan` commands (cli.py is the entry point): each module parses one group's flags, calls planner.api or
planner.studies, and prints. The app lists every command and imports a command's module only when it runs it
(planner.commands.lazy): `meshplan plan` loads what planning needs, `meshplan --help` none of the modules."""

from planner.commands.common import app

__all__ = ["app"]
