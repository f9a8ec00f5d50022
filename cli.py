"""The `meshplan` command line in a checkout: `python cli.py ...`, and `from cli import app` for the tests. A shim:
the entry point is planner/cli.py (the installed console script runs planner.cli:main), and this file is not
installed, so nothing named `cli` lands in site-packages beside other projects' modules."""

from __future__ import annotations

from planner.cli import app, main

__all__ = ["app", "main"]

if __name__ == "__main__":
    main()
