"""Time the two commands the README opens with, as a new user runs them: in a fresh clone of this repository's
HEAD, each in a fresh virtual environment (pip's cache as the machine has it), with the machine's load beside
the figures.

    python benchmarks/readme_commands.py [--only plan|tests]

The commands are read from the README itself (its first two ```bash blocks), so the figures are those of the
commands as written. The output is what the README's opening lines quote.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands(readme: str) -> list[str]:
    """The first two ```bash blocks of the README: set up and plan, set up and test."""
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    if len(blocks) < 2:
        raise SystemExit("the README does not open with two ```bash blocks")
    return [b.strip() for b in blocks[:2]]


def run(command: str, where: Path) -> tuple[float, int, str]:
    """(wall seconds, exit status, last lines of output) of `command` run by bash in `where`."""
    start = time.perf_counter()
    done = subprocess.run(["bash", "-c", command], cwd=where, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
    tail = "\n".join(done.stdout.strip().splitlines()[-3:] + ([] if done.returncode == 0 else
                                                               done.stderr.strip().splitlines()[-2:]))
    return time.perf_counter() - start, done.returncode, tail


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("plan", "tests"))
    args = parser.parse_args()
    commands = dict(zip(("plan", "tests"), readme_commands((ROOT / "README.md").read_text()), strict=True))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"README commands at {head.strip()} on {platform.node()} ({os.cpu_count()} cores, Python "
          f"{platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M')}; load before: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    failed = 0
    for name, command in commands.items():
        if args.only not in (None, name):
            continue
        with tempfile.TemporaryDirectory(prefix="meshplan-readme-") as tmp:
            clone = Path(tmp) / "meshplan"
            subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
            seconds, status, tail = run(command, clone)
        failed += status != 0
        shown = tail.replace("\n", "\n         ")
        print(f"  {name:5}  {seconds:7.0f} s  exit {status}  load after: "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n         {shown}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
