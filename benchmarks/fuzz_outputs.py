"""Fuzz families of issue 37 for benchmarks/fuzz.py: names into emitted scripts, and special output paths.

names-in-scripts: a generated name (shell metacharacters, quotes, control characters, Unicode line separators,
    command substitutions, over-long text) as a model, hardware or GPU name. Half the cases put it in a model YAML
    and run `meshplan plan` (a name outside the safe set must be refused: marked bad); the other half put it past
    the loaders into a plan, emit every target and every trial script, check each shell script with `bash -n` and
    run it with stub launchers on PATH. A marker file appearing, a comment line broken or a script that does not
    parse raises, which fuzz.py counts as a raw exception.
output-paths: `meshplan plan --out PATH` for a symlink, a dangling symlink, a FIFO with a reader, /dev/null,
    /dev/full, a folder, the empty string, `-`, a missing folder, a 300-character name; afterwards what the path
    pointed at must be what it was (a link still a link, a FIFO still a FIFO, a device still a device), else the
    case raises.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import random
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHELL_PIECES = ("\n", "\r", "\r\n", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1b[2J", "\x00", "$(", ")", "`",
                "'", '"', ";", "&&", "|", ">", "<", "\\", "#", "*", "?", "~", "${IFS}", "!", "{", "}")
SAFE_PIECES = ("llama", "Qwen/Qwen3-8B", "H100 SXM", "gb200 (nvl72)", "a.b-c_d+e", "x:y", "m@rev", "7b")


def hostile_name(rng: random.Random, marker: Path) -> tuple[str, bool]:
    """(name, whether the loaders must refuse it): safe pieces with, most of the time, a payload that would touch
    `marker` if it ever reached a shell as code; bad is what meshcore.checks.identifier refuses (some pieces,
    a lone `)` say, are allowed characters)."""
    from meshcore.checks import identifier
    from meshcore.errors import InputError

    name = rng.choice(SAFE_PIECES)
    if rng.random() < 0.15:
        name = name if rng.random() < 0.5 else "x" * rng.choice([200, 201, 5000])
    else:
        piece = rng.choice(SHELL_PIECES)
        name += rng.choice([f"{piece}touch {marker}", f"{piece}touch {marker}{piece}", f"$(touch {marker})",
                            f"`touch {marker}`", f"'; touch {marker}; '", f"{piece}"])
    try:
        identifier(name, "name")
    except InputError:
        return name, True
    return name, False


def _stub_env(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("torchrun", "deepspeed"):
        stub = folder / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "TRAIN_SCRIPT": "train.py"}


def _renamed(plan: Any, name: str) -> Any:
    """The plan with `name` as model, hardware and GPU name, set past the loaders' validation."""
    model, cluster, gpu = copy.copy(plan.model), copy.copy(plan.cluster), copy.copy(plan.cluster.gpu)
    for spec in (model, cluster, gpu):
        object.__setattr__(spec, "name", name)
    object.__setattr__(cluster, "gpu", gpu)
    return dataclasses.replace(plan, model=model, cluster=cluster)


def _check_script(path: Path, env: dict[str, str]) -> None:
    bash = shutil.which("bash")
    if bash is None:
        return
    parsed = subprocess.run([bash, "-n", str(path)], capture_output=True, text=True, timeout=30)
    if parsed.returncode:
        raise RuntimeError(f"{path.name} does not parse: {parsed.stderr.strip()[:100]}")
    subprocess.run([bash, str(path)], cwd=path.parent, env=env, capture_output=True, timeout=60)


def emit_everything(plan: Any, name: str, folder: Path) -> None:
    """Emit every target and trial for `plan` named `name`; raise if a name escapes a comment or runs."""
    from meshcore.fileio import is_script
    from planner.outputs.emitters import Target, emit
    from planner.outputs.emitters.common import UnsupportedPlanError
    from planner.studies.trial import TrialLauncher, write_trials

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    marker = folder / "PWNED"
    env = _stub_env(folder / "bin")
    hostile = _renamed(plan, name)
    for target in Target:
        try:
            text = emit(hostile, target).text
        except UnsupportedPlanError:
            continue
        for line in text.splitlines():
            if "touch" in line and not line.lstrip().startswith(("#", "description = ")):
                raise RuntimeError(f"{target.value}: a name left its comment line: {line[:80]!r}")
        if is_script(text):
            script = folder / f"{target.value}.sh"
            script.write_text(text)
            _check_script(script, env)
    for launcher in TrialLauncher:
        trials = write_trials(hostile, launcher, 1, 2, folder / f"trial-{launcher.value}")
        for trial in trials:
            if trial.script is not None:
                _check_script(folder / f"trial-{launcher.value}" / trial.script, env)
    if marker.exists():
        raise RuntimeError(f"an emitted script ran a name: {name[:60]!r}")


# ---- special output paths ----------------------------------------------------------------------------------


def _kind(path: str) -> str:
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return "absent"
    for test, kind in ((stat.S_ISLNK, "link"), (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "char"),
                       (stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "other"


def special_path(rng: random.Random, folder: Path) -> tuple[str, str, bool, Callable[[], None] | None]:
    """(path, what, bad, start) for one output path; `start` starts what must run beside the write (a reader)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    choice = rng.randrange(10)
    if choice == 0:
        (folder / "target.yaml").write_text("old\n")
        (folder / "link.yaml").symlink_to("target.yaml")
        return str(folder / "link.yaml"), "a symlink to a file", False, None
    if choice == 1:
        (folder / "link.yaml").symlink_to(folder / "new.yaml")
        return str(folder / "link.yaml"), "a dangling symlink", False, None
    if choice == 2:
        fifo = folder / "pipe"
        os.mkfifo(fifo)
        return str(fifo), "a FIFO with a reader", False, lambda: threading.Thread(
            target=fifo.read_bytes, daemon=True).start()
    if choice == 3:
        return "/dev/null", "/dev/null", False, None
    if choice == 4:
        return "/dev/full", "/dev/full", True, None
    if choice == 5:
        return str(folder), "a folder", True, None
    if choice == 6:
        return "", "the empty string", True, None
    if choice == 7:
        return "-", "standard output", False, None
    if choice == 8:
        return str(folder / "missing" / "p.yaml"), "a file in a missing folder", True, None
    return str(folder / ("p" * 300 + ".yaml")), "a 300-character name", True, None


def output_case(args: list[str], path: str, start: Callable[[], None] | None) -> None:
    """Run `args` (ending in --out `path`) as fuzz_limits.run_cli classifies a command line; raise RuntimeError also
    when what `path` pointed at changed kind where it must not (a link, FIFO or device replaced by a file)."""
    from fuzz_limits import run_cli

    before = _kind(path) if path not in ("", "-") else "n/a"
    if start is not None:
        start()
    try:
        run_cli(args)
    except RuntimeError as exc:  # click's usage error for --out '' (its parser refuses it) is a clean refusal
        if "Invalid value for '--out'" not in str(exc):
            raise
        from meshcore.errors import InputError

        raise InputError("--out refused by its option parser") from None
    finally:
        after = _kind(path) if path not in ("", "-") else "n/a"
        if not (before == after or (before == "absent" and after == "file")):
            raise RuntimeError(f"--out {path[:40]!r} was a {before}, is now a {after}")
