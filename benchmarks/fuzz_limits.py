"""Fuzz family of issue 37 for benchmarks/fuzz.py: nesting and size limits (target `nesting-size`).

Each case gives one input path of meshplan (--model, --hardware and its fragments, --costs, --plan, --cluster, MLIP
--costs, recsys and diffusion --model, calibrate's runs) one of:
  - a value nested 8 to 100,000 deep (YAML flow or block style, or JSON) where a number or a section belongs;
  - YAML aliases that expand a few lines into 10^9 values ("billion laughs"), or an integer of 5,000 digits;
  - a file just over its kind's size limit (meshcore/inputfile.py; sparse, so it costs no disk), or one padded
    with comment lines to exactly the limit (edge: it may be read);
  - a device (/dev/zero, /dev/urandom, /dev/null), a folder, a FIFO whose writer never stops, a FIFO that carries a
    valid file (edge), or a name of 300 to 5,000 characters.
Every case runs the command line in-process under a 30-second alarm and raises (a raw exception for fuzz.py) on a
traceback, on an unclean refusal (not exit 2/3 with one `error:` line) or when it took more than SLOW_S seconds: the
issue asks for each refusal within a second, and the margin is for a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

SLOW_S = 5.0
ALARM_S = 30
_RUNNER: list[Any] = []


def _cli() -> tuple[Any, Any]:
    if not _RUNNER:
        import typer.testing

        from cli import app

        _RUNNER.extend([typer.testing.CliRunner(), app])
    return _RUNNER[0], _RUNNER[1]


def _alarm(signum: int, frame: Any) -> None:
    raise TimeoutError(f"no answer in {ALARM_S} s")


def run_cli(args: list[str]) -> None:
    """Run `args` as fuzz.py classifies an API call: return when accepted, raise InputError with the one error line
    when refused cleanly, RuntimeError on a traceback, an unclean refusal or a slow answer."""
    from meshcore.errors import InputError

    runner, app = _cli()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(ALARM_S)
    start = time.perf_counter()
    try:
        result = runner.invoke(app, args)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - start
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise RuntimeError(f"traceback: {type(result.exception).__name__}: {str(result.exception)[:150]}")
    if elapsed > SLOW_S:
        raise RuntimeError(f"took {elapsed:.1f} s (exit {result.exit_code})")
    if result.exit_code == 0:
        return
    lines = [line for line in result.output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    if result.exit_code in (2, 3) and len(errors) == 1 and lines[-1] == errors[0]:
        raise InputError(errors[0].removeprefix("error: "))
    raise RuntimeError(f"unclean: exit {result.exit_code}: {' | '.join(lines[-2:])[:150]}")


def _nested(rng: random.Random, depth: int, as_json: bool) -> tuple[str, str]:
    """(text of a value nested `depth` deep, its style)."""
    if as_json or depth > 2000 or rng.random() < 0.6:
        return "[" * depth + "1" + "]" * depth, "flow"
    return "\n" + "".join("  " * i + "-\n" for i in range(depth)) + "  " * depth + "- 1\n", "block"


LAUGHS = "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
    f"*a{i - 1}]\n" for i in range(1, 9))


def _fifo(path: Path, data: Callable[[], bytes], endless: bool) -> None:
    """A FIFO at `path` and a writer thread that waits up to ten seconds for a reader, then writes `data()` once or,
    when `endless`, until the reader goes."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    os.mkfifo(path)

    def write() -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:
                if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                    return
                time.sleep(0.01)
        os.set_blocking(fd, True)
        chunk = data()
        try:
            while True:
                os.write(fd, chunk)
                if not endless:
                    break
        except OSError:
            pass
        finally:
            os.close(fd)

    threading.Thread(target=write, daemon=True).start()


class Limits:
    """The `nesting-size` cases over the base inputs of one fuzz worker (`inputs`: fuzz_inputs.Inputs)."""

    def __init__(self, inputs: Any) -> None:
        self.inputs = inputs
        self.folder: Path = inputs.folder / "limits"
        self.folder.mkdir(exist_ok=True)

    def _kinds(self) -> dict[str, tuple[str, Callable[[str], list[str]], int, bool]]:
        """kind -> (file name, command line for a path, the kind's size limit, whether any path is read: a device
        or FIFO may carry it; otherwise only a regular file is)."""
        from meshcore.inputfile import MAX_LOG_BYTES, MAX_PLAN_BYTES, MAX_SPEC_BYTES, MAX_TABLE_BYTES

        job = ["--gpus", "4", "--seq-len", "512", "--global-batch", "8"]
        return {
            "model": ("m.yaml", lambda p: ["evaluate", "--model", p, "--hardware", "h100-sxm", *job], MAX_SPEC_BYTES,
                      False),
            "hf-config": ("config.json", lambda p: ["evaluate", "--model", p, "--hardware", "h100-sxm", *job],
                          MAX_SPEC_BYTES, False),
            "hardware": ("hw.yaml", lambda p: ["evaluate", "--model", self.inputs.tiny, "--hardware", p, *job],
                         MAX_SPEC_BYTES, False),
            "fragment": ("frag.yaml", lambda p: ["evaluate", "--model", self.inputs.tiny, "--hardware",
                                                 f"h100-sxm,{p}", *job], MAX_SPEC_BYTES, True),
            "plan": ("plan.json", lambda p: ["evaluate", "--plan", p], MAX_PLAN_BYTES, True),
            "plan-yaml": ("plan.yaml", lambda p: ["explain", p], MAX_PLAN_BYTES, True),
            "costs": ("c.csv", lambda p: ["plan", "--costs", p, "--hardware", "h100-sxm", "--gpus", "2", "--seq-len",
                                          "128", "--global-batch", "8"], MAX_TABLE_BYTES, True),
            "mlip": ("mlip.csv", lambda p: ["mlip", "plan", "--costs", p, "--hardware", "h100-sxm", "--gpus", "4",
                                            "--atoms", "1000"], MAX_TABLE_BYTES, True),
            "cluster": ("cluster.yaml", lambda p: ["plan", "--cluster", p, "--model", self.inputs.tiny, "--seq-len",
                                                   "512", "--global-batch", "8"], MAX_SPEC_BYTES, False),
            "runs": ("runs.yaml", lambda p: ["calibrate", p, "--hardware", "h100-sxm"], MAX_LOG_BYTES, True),
            "diffusion": ("d.yaml", lambda p: ["infer", "diffusion", "--model", p, "--hardware", "h100-sxm",
                                               "--gpus", "2"], MAX_SPEC_BYTES, False),
        }

    def _valid(self, kind: str) -> str:
        """A valid file of `kind`, as text."""
        from fuzz_inputs import TINY, _csv

        inputs = self.inputs
        if kind in ("model", "diffusion"):
            return yaml.safe_dump(TINY if kind == "model" else {
                "hidden_size": 256, "num_heads": 4, "ffn_hidden_size": 1024, "double_layers": 2, "single_layers": 2,
                "patch_size": 2, "latent_channels": 16})
        if kind == "hf-config":
            from fuzz_inputs import LLAMA

            return json.dumps(LLAMA)
        if kind == "hardware":
            return yaml.safe_dump(inputs.h100)
        if kind == "fragment":
            return yaml.safe_dump({"gpu": {"memory_gib": 40}})
        if kind in ("plan", "plan-yaml"):
            plan = inputs.plans[0]
            return json.dumps(plan) if kind == "plan" else yaml.safe_dump(plan, sort_keys=False)
        if kind == "costs":
            return _csv(inputs.cost_rows)
        if kind == "mlip":
            return (Path(__file__).parent / "data" / "mlip" / "example-mace-formula.csv").read_text()
        if kind == "cluster":
            return yaml.safe_dump({"groups": [{"name": "a", "hardware": "h100-sxm", "nodes": 1}]})
        return yaml.safe_dump([{"name": "a", "model": "llama3-8b", "gpus": 8, "seq_len": 4096, "global_batch": 16,
                                "tp": 1, "zero": 1, "step_time_s": 1.1}])

    def _write(self, name: str, text: str) -> str:
        path = self.folder / name
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a FIFO of an earlier case
        path.write_text(text, encoding="utf-8")
        return str(path)

    def case(self, rng: random.Random) -> tuple[str, bool, list[str]]:
        """(what, bad, command line) of one case."""
        from meshcore.inputfile import MAX_NESTING

        kinds = self._kinds()
        kind = rng.choice(sorted(kinds))
        name, command, limit, any_path = kinds[kind]
        roll = rng.random()
        structured = kind not in ("costs", "mlip")
        if roll < 0.25 and structured:
            depth = rng.choice([8, 64, 65, 200, 1000, 1001, 5000, 100_000])
            as_json = name.endswith(".json")
            value, style = _nested(rng, depth, as_json)
            if as_json:
                data = json.loads(self._valid(kind))
                text = json.dumps(data)[:-1] + f', "nested": {value}}}'
            else:
                text = f"nested: {value}\n" + self._valid(kind) if style == "flow" else \
                    self._valid(kind) + f"nested:{value}"
            bad = not (kind == "hf-config" and depth <= MAX_NESTING)  # a config's unread keys are ignored
            return f"{kind}: a value nested {depth} deep ({style})", bad, command(self._write(name, text))
        if roll < 0.35 and structured and not name.endswith(".json"):
            if rng.random() < 0.5:
                return f"{kind}: aliases expanding to 10^9 values", True, command(self._write(name, LAUGHS))
            text = self._valid(kind) + "extra: " + "1" * 5000 + "\n"
            return f"{kind}: an integer of 5000 digits", True, command(self._write(name, text))
        if roll < 0.55:
            valid = self._valid(kind)
            path = self._write(name, valid)
            if rng.random() < 0.8 or not structured or limit > 2**20 or name.endswith(".json"):
                extra = rng.choice([1, 1, 4096, limit])
                os.truncate(path, limit + extra)  # sparse: the size is refused before anything is read
                return f"{kind}: {limit + extra} bytes (limit {limit})", True, command(path)
            pad = limit - len(valid.encode())
            lines = "#" + "x" * 78 + "\n"
            text = valid + lines * (pad // len(lines)) + "#" * (pad % len(lines))
            return f"{kind}: exactly the limit of {limit} bytes, comments", False, command(self._write(name, text))
        if roll < 0.8:
            device = rng.choice(["/dev/zero", "/dev/zero", "/dev/urandom", "/dev/null", str(self.folder)])
            return f"{kind}: {device}", True, command(device)
        if roll < 0.9:
            fifo = self.folder / ("fifo-" + name)
            endless = rng.random() < 0.5
            carried = self._valid(kind).encode()
            _fifo(fifo, (lambda: b"\0" * 65536) if endless else (lambda: carried), endless)
            what = "a FIFO that never stops" if endless else "a FIFO carrying a valid file"
            return f"{kind}: {what}", endless or not any_path, command(str(fifo))
        length = rng.choice([256, 300, 4096, 5000])
        return f"{kind}: a {length}-character name", True, command(str(self.folder / ("n" * length + name)))
