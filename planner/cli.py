"""The `meshplan` command line (the console script `meshplan` and `python -m planner`; the repository's cli.py
is a shim for a checkout and is not installed, so no module named `cli` lands in site-packages). The commands live
in planner/commands (each parses its flags, calls the planner API and prints); this entry point turns Ctrl-C into
exit code 130 without a traceback. Errors become one line on
stderr and an exit code (2: bad input or a layout that breaks a rule; 3: nothing fits)."""

from __future__ import annotations

import os
import sys

if sys.argv[1:2] != ["profile"]:  # the planner does no linear algebra: one BLAS thread saves numpy's start-up of a
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # pool per core (60 ms of CPU on 2 cores); profile keeps them


def _interrupted(exc: BaseException | None) -> bool:
    """Whether Ctrl-C caused `exc` (an extension module's initialisation turns it into an ImportError)."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


try:  # Ctrl-C while the modules load (typer; a command's modules load when it runs) exits 130 like one during the work
    from planner.commands import app
except (KeyboardInterrupt, ImportError) as exc:
    if not _interrupted(exc):
        raise
    sys.stderr.write("\n")
    raise SystemExit(130) from None


__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point. Ctrl-C exits 130 without a traceback, also while typer builds the command line
    (the imports above have their own guard)."""
    try:
        app(prog_name="meshplan")
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
