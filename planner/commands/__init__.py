"""The `meshplan` commands (cli.py is the entry point): each module parses one group's flags, calls planner.api or
planner.studies, and prints. Importing the package registers every command on `app`."""

from planner.commands import catalog, inference, mlip, planning, profiling, recsys, studies
from planner.commands.common import app

__all__ = ["app", "catalog", "inference", "mlip", "planning", "profiling", "recsys", "studies"]
