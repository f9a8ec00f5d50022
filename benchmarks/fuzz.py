"""Bad and edge input, fuzzed (issues 17 and 21): every loader and the command line, in-process.

    python benchmarks/fuzz.py [--cases 10000] [--seed 17] [--workers 2] [--show 3]

Each case is one generated input (benchmarks/fuzz_inputs.py: files; benchmarks/fuzz_calls.py: options and API
calls) from a seeded random generator rather than hypothesis: case i draws from Random(f"{seed}-{i}"), so it is
the same whatever the number of workers or the cases before it, and no time goes to shrinking. A case is a model
YAML, a Hugging Face config.json, a hardware profile or fragment, a cost table (a transformer's or a chain's), a
plan file, a calibration runs file, a set of command-line options of evaluate / plan / sweep / trial, or a Python
API call; names into emitted scripts and special output paths (benchmarks/fuzz_outputs.py, issue 37). Files are
read by the command that takes them (evaluate, plan --costs, explain, emit, evaluate --plan, trial, calibrate)
through typer's CliRunner, or by the API function (load_model, load_hardware, read_costs, read_chain, load_plan,
...). The `nesting-size` family (benchmarks/fuzz_limits.py, issue 37) gives each input path a
deeply nested value, expanding aliases, a file over its size limit, a device, a folder, a FIFO or an over-long name,
and counts an answer slower than a few seconds as a raw exception. Cluster and models are tiny, so a search takes
milliseconds: 10,000 cases take about a minute with 2 workers. The generator marks an input `bad` when it is clearly
invalid (NaN, a negative count, a float degree, a missing kind, a key that does not exist, ...); `edge` inputs are
legal or arguable (1 GPU, a 1-layer model, an alternative's other split) and may go either way.

Outcomes:
  refused          meshplan's own error: exit 2 or 3 and one `error:` line (click's usage error for a value its
                   type or range refuses counts too); from the API a MeshplanError whose message is one line
  accepted         exit 0, or the call returned
  silent accept    accepted, though the input was bad
  traceback        an exception escaped the command line (or a `Traceback` was printed)
  raw exception    the API raised something other than a MeshplanError
  unclean          a refusal with another exit code, no `error:` line, or a message over several lines
The last four are the bad classes: the counts per target and outcome are printed, then the first examples of
each bad class; the exit status is 1 when any bad class is not empty.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import typer  # noqa: E402
import typer.testing  # noqa: E402
from fuzz_inputs import TARGETS, Inputs  # noqa: E402

BAD_CLASSES = ("silent accept", "traceback", "raw exception", "unclean")
USAGE_ERRORS = ("Invalid value for", "No such option", "Missing option", "Missing argument", "Got unexpected extra",
                "requires an argument", "is not a valid")


@dataclass(frozen=True)
class Result:
    index: int
    target: str
    what: str
    bad: bool
    outcome: str
    detail: str


def classify_cli(res: Any) -> tuple[str, str]:
    """(outcome, detail) of one CliRunner result."""
    exc = res.exception
    if exc is not None and not isinstance(exc, SystemExit):
        return "traceback", f"{type(exc).__name__}: {str(exc)[:200]}"
    if "Traceback (most recent call last)" in res.output:
        return "traceback", res.output.strip().splitlines()[-1][:200]
    if res.exit_code == 0:
        return "accepted", ""
    lines = [line for line in res.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if res.exit_code in (2, 3) and len(errors) == 1 and lines[-1] == errors[0]:
        return "refused", errors[0][:200]
    if res.exit_code == 2 and any(u in res.output for u in USAGE_ERRORS):
        return "refused", " ".join(line.strip(" │╭╮╰╯─") for line in lines[-3:])[:200]
    return "unclean", f"exit {res.exit_code}: {' | '.join(lines[-3:])[:200]}"


def classify_api(call: Callable[[], Any]) -> tuple[str, str]:
    from meshcore.errors import MeshplanError

    try:
        call()
    except MeshplanError as exc:
        message = str(exc)
        return ("refused" if message and "\n" not in message else "unclean"), message[:200]
    except Exception as exc:  # noqa: BLE001 - the point: any other exception is a finding
        return "raw exception", f"{type(exc).__name__}: {str(exc)[:200]}"
    return "accepted", ""


_STATE: dict[str, Any] = {}


def _setup(seed: int) -> None:
    """One worker's state: its scratch folder, the base inputs (plans made once) and the CLI runner."""
    import logging

    logging.disable(logging.WARNING)  # load_plan's drift warnings: each case's own error line is what counts
    from cli import app

    # typer builds the click command on every invoke (about 15 ms); the command is the same for every case
    typer.testing._get_command = functools.cache(typer.testing._get_command)  # type: ignore[attr-defined]
    folder = Path(tempfile.mkdtemp(prefix="meshplan-fuzz-"))
    _STATE.update(runner=typer.testing.CliRunner(), app=app, inputs=Inputs(folder, seed))


def run_case(inputs: Inputs, runner: typer.testing.CliRunner, app: typer.Typer, index: int) -> Result:
    """Case `index`: generated, run (a command line through `runner`, or an API call) and classified."""
    case = inputs.case(index)
    if case.args is not None:
        outcome, detail = classify_cli(runner.invoke(app, case.args))
    else:
        assert case.call is not None
        outcome, detail = classify_api(case.call)
    if outcome == "accepted" and case.bad:
        outcome = "silent accept"
    return Result(index, case.target, case.what, case.bad, outcome, detail)


def _worker(args: tuple[int, list[int]]) -> list[Result]:
    """Run the cases `indices`; what native code prints (HiGHS' banner) goes to /dev/null meanwhile."""
    seed, indices = args
    _setup(seed)
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        return [run_case(_STATE["inputs"], _STATE["runner"], _STATE["app"], i) for i in indices]
    finally:
        os.dup2(saved, 1)
        os.close(devnull)
        os.close(saved)
        shutil.rmtree(_STATE["inputs"].folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--show", type=int, default=3, help="examples shown of each bad class")
    parser.add_argument("--target", choices=sorted(TARGETS), help="fuzz only this target")
    parser.add_argument("--dump", type=Path, help="write every case's outcome here, one JSON object a line")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    indices = [i for i in range(args.cases) if args.target is None or Inputs.target_of(args.seed, i) == args.target]
    shares = [(args.seed, indices[w::args.workers]) for w in range(args.workers)]
    if args.workers == 1:
        results = _worker(shares[0])
    else:
        with ProcessPoolExecutor(args.workers) as pool:  # not daemonic: `sweep --workers` may start its own
            results = [r for part in pool.map(_worker, shares) for r in part]
    results.sort(key=lambda r: r.index)
    report(results, time.perf_counter() - start, args)
    if args.dump is not None:
        args.dump.write_text("".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in results))
    return 1 if any(r.outcome in BAD_CLASSES for r in results) else 0


def report(results: list[Result], elapsed: float, args: argparse.Namespace) -> None:
    outcomes = ("refused", "accepted", *BAD_CLASSES)
    by_target = Counter((r.target, r.outcome) for r in results)
    print(f"meshplan fuzz: {len(results)} cases (seed {args.seed}, {args.workers} workers) in {elapsed:.0f} s; "
          f"{sum(r.bad for r in results)} marked bad, {sum(not r.bad for r in results)} edge")
    print(f"  {'target':16} {'cases':>6} " + " ".join(f"{o:>13}" for o in outcomes))
    for target in TARGETS:
        n = sum(by_target[(target, o)] for o in outcomes)
        if n:
            print(f"  {target:16} {n:>6} " + " ".join(f"{by_target[(target, o)]:>13}" for o in outcomes))
    totals = Counter(r.outcome for r in results)
    print(f"  {'all':16} {len(results):>6} " + " ".join(f"{totals[o]:>13}" for o in outcomes))
    for outcome in BAD_CLASSES:
        found = [r for r in results if r.outcome == outcome]
        print(f"\n{outcome}: {len(found)}")
        for r in found[:args.show]:
            print(f"  case {r.index} [{r.target}] {r.what}\n      -> {r.detail}")
    refusals = [r for r in results if r.outcome == "refused" and r.detail.startswith("error: ")]
    if refusals:
        print(f"\nrefusals, first {args.show}:")
        for r in refusals[:args.show]:
            print(f"  [{r.target}] {r.what}\n      -> {r.detail}")


if __name__ == "__main__":
    raise SystemExit(main())
