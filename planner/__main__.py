"""`python -m planner` runs the meshplan command line."""

from cli import main

main()
