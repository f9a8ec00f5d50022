"""`python -m planner` runs the meshplan command line."""

from planner.cli import main

main()
