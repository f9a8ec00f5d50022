"""Trial runs of a plan's best layouts (`meshplan trial`): one launch script per layout, and a manifest that
`meshplan calibrate` reads back once the trials have run.

For each of the plan's best K layouts (the best, then its alternatives in rank order) the trial folder gets
the launcher's configuration exactly as `meshplan emit --strict` writes it, and a `launch.sh` that runs it
for N steps with per-step timing and memory logged to `train.log` beside it. launch.sh finds its files beside
itself and runs from the folder it is started in (Megatron-LM's pretrain_gpt.py from $MEGATRON_LM, default that
folder; the user's TRAIN_SCRIPT for DeepSpeed):
- Megatron-LM: `--train-iters N --log-interval 1 --log-throughput` and mock data (`--mock-data`,
  `--tokenizer-type NullTokenizer`, `--lr`, `--eval-iters 0`), so the trial needs no dataset; Megatron prints
  each iteration's elapsed time and, after the first logged iteration, the memory report;
- torchtitan: `--training.steps N --metrics.log_freq 1` on top of the job file (its dataset and tokenizer
  are the user's: the job file names neither);
- DeepSpeed: the JSON gains `steps_per_print: 1` and `wall_clock_breakdown: true`; the training script is the
  user's (`TRAIN_SCRIPT`).
A layout the launcher cannot run is not substituted: it is listed in the manifest as skipped, with the reason.
The manifest (`trials.yaml`) names the plan (copied into the folder), each trial's rank in it, script, config
and log, so that `meshplan calibrate DIR/trials.yaml --hardware H` can pair every log with its layout.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from meshcore.errors import InputError
from meshcore.fileio import write_text_atomic
from meshcore.text import comment
from planner.outputs.emitters import Target, emit
from planner.outputs.emitters.common import UnsupportedPlanError, layout_summary
from planner.outputs.plan import Plan
from planner.outputs.planfile import dumps, runtime_dict

MANIFEST = "trials.yaml"
PLAN_COPY = "plan.yaml"
LOG = "train.log"
MAX_STEPS = 100_000
# what `meshplan calibrate` reads from each launcher's train.log (planner/inputs/runlogs.py)
COLLECT = MappingProxyType({
    "megatron": "'elapsed time per iteration (ms)' of each iteration line after the first logged interval; 'max "
                "allocated' of the '[Rank N] (after K iterations) memory (MB)' report; the arguments block",
    "torchtitan": "'tps' of each 'step:' line after step 1, and the tokens of a step from its set-up lines",
    "deepspeed": "CurrSamplesPerSec and MaxMemAllocated of the throughput timer lines, or the wall-clock "
                 "breakdown's fwd + bwd + step",
})


class TrialLauncher(str, Enum):
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    DEEPSPEED = "deepspeed"

    @property
    def target(self) -> Target:
        return Target(self.value)

    @property
    def config_name(self) -> str:
        return {"megatron": "megatron.sh", "torchtitan": "torchtitan.toml", "deepspeed": "deepspeed.json"}[self.value]


@dataclass(frozen=True)
class Trial:
    name: str
    rank: int  # 0: the plan's best layout, k: its k-th alternative
    layout: str
    predicted_step_s: float
    script: str | None  # paths relative to the trial folder; None when skipped
    config: str | None
    log: str | None
    skipped: str | None = None  # why the launcher cannot run this layout


def _torchrun(plan: Plan, entry: str) -> str:
    gpus, per_node = plan.cluster.num_gpus, plan.cluster.gpus_per_node
    nodes, procs = max(1, gpus // per_node), min(gpus, per_node)
    return (f'torchrun --nnodes {nodes} --nproc-per-node {procs} --node-rank "${{NODE_RANK:-0}}" '
            f'--master-addr "${{MASTER_ADDR:-localhost}}" --master-port "${{MASTER_PORT:-6000}}" {entry}')


def _launch(launcher: TrialLauncher, plan: Plan, steps: int, config: str) -> str:
    """The body of launch.sh: run the configuration for `steps` steps, logging every step to train.log."""
    if launcher is TrialLauncher.MEGATRON:
        extra = ["--train-iters", str(steps), "--log-interval", "1", "--log-throughput", "--eval-iters", "0",
                 "--mock-data", "--tokenizer-type", "NullTokenizer", "--lr", "1.0e-4"]
        return f'bash "$here/{config}" {" ".join(extra)} "$@"'
    if launcher is TrialLauncher.TORCHTITAN:
        entry = (f'-m torchtitan.train --job.config_file "$here/{config}" --training.steps {steps} '
                 f'--metrics.log_freq 1 "$@"')
        return _torchrun(plan, entry)
    gpus, per_node = plan.cluster.num_gpus, plan.cluster.gpus_per_node
    return (f'deepspeed --num_nodes {max(1, gpus // per_node)} --num_gpus {min(gpus, per_node)} '
            f'"${{TRAIN_SCRIPT:?set TRAIN_SCRIPT to your DeepSpeed training script}}" '
            f'--deepspeed_config "$here/{config}" "$@"')


def _config_text(launcher: TrialLauncher, text: str, steps: int) -> str:
    if launcher is not TrialLauncher.DEEPSPEED:
        return text
    config: dict[str, Any] = json.loads(text)
    config.update({"steps_per_print": 1, "wall_clock_breakdown": True})
    return json.dumps(config, indent=2) + "\n"


def megatron_home(folder: Path | None, launcher: TrialLauncher) -> str | None:
    """`--megatron-lm`: the absolute path of a Megatron-LM checkout holding pretrain_gpt.py, or None (then launch.sh
    reads $MEGATRON_LM, default the folder it is started in); refused for other launchers or without the script."""
    if folder is None:
        return None
    if launcher is not TrialLauncher.MEGATRON:
        raise InputError(f"--megatron-lm is for --to megatron; the trials are for {launcher.value}")
    if not (folder / "pretrain_gpt.py").is_file():
        raise InputError(f"--megatron-lm {folder}: no pretrain_gpt.py there; give the folder of a Megatron-LM "
                         "checkout (it holds pretrain_gpt.py)")
    return str(folder.resolve())


def write_trials(plan: Plan, launcher: TrialLauncher, top_k: int, steps: int, out: Path,
                 megatron_lm: Path | None = None) -> list[Trial]:
    """Write the trial folder for `plan`'s best `top_k` layouts; return what was written (skips included).
    `megatron_lm` (Megatron-LM trials): the checkout launch.sh runs pretrain_gpt.py from unless $MEGATRON_LM is
    set, checked here and written as an absolute path."""
    home = megatron_home(megatron_lm, launcher)
    if not 1 <= top_k <= 1 + len(plan.alternatives):
        raise InputError(f"--top-k must be between 1 and {1 + len(plan.alternatives)} (the plan holds the best "
                         f"layout and {len(plan.alternatives)} alternatives), got {top_k}")
    if not 1 <= steps <= MAX_STEPS:
        raise InputError(f"--steps must be between 1 and {MAX_STEPS}, got {steps}")
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    trials: list[Trial] = []
    for rank, ranked in enumerate((plan.best, *plan.alternatives)[:top_k]):
        name = f"trial-{rank + 1}"
        one = replace(plan, best=ranked, alternatives=())
        label = layout_summary(ranked.layout)
        try:
            text = emit(one, launcher.target, strict=True).text
        except UnsupportedPlanError as exc:
            trials.append(Trial(name, rank, label, ranked.step_time_s, None, None, None, str(exc)))
            continue
        folder = out / name
        folder.mkdir(exist_ok=True)
        config = launcher.config_name
        body = _config_text(launcher, text, steps)
        if launcher is TrialLauncher.MEGATRON:
            write_text_atomic(folder / config, body, executable=True)
        else:
            write_text_atomic(folder / config, body)
        script = "\n".join([
            "#!/usr/bin/env bash",
            comment(f"meshplan trial {rank + 1} of {top_k}: {label}; predicted {ranked.step_time_s:.3f} s/step"),
            comment(f"Runs {steps} steps and logs each one to {LOG}; then: meshplan calibrate {MANIFEST} --hardware "
                    "HARDWARE"),
            "set -euo pipefail", 'here="$(cd "$(dirname "$0")" && pwd)"  # run from anywhere; files beside this one',
            *([f"export MEGATRON_LM=${{MEGATRON_LM:-{shlex.quote(home)}}}"] if home is not None else []),
            f'{_launch(launcher, plan, steps, config)} 2>&1 | tee "$here/{LOG}"', ""])
        write_text_atomic(folder / "launch.sh", script, executable=True)
        trials.append(Trial(name, rank, label, ranked.step_time_s, f"{name}/launch.sh", f"{name}/{config}",
                            f"{name}/{LOG}"))
    write_text_atomic(out / PLAN_COPY, dumps(plan, PLAN_COPY))
    manifest = {"plan": PLAN_COPY, "runtime": runtime_dict(plan.job.runtime.framework), "launcher": launcher.value,
                "steps": steps, "collect": COLLECT[launcher.value],
                "trials": [{k: v for k, v in vars(t).items() if v is not None} for t in trials]}
    header = "\n".join([
        comment(f"meshplan trial: {top_k} layouts of {plan.model.name} on {plan.cluster.num_gpus} x "
                f"{plan.cluster.name}, {steps} steps each with {launcher.value}."),
        comment(f"Run each trial's launch.sh, then: meshplan calibrate {shlex.quote(str(out / MANIFEST))} "
                "--hardware HARDWARE"), ""])
    write_text_atomic(out / MANIFEST, header + yaml.safe_dump(manifest, sort_keys=False))
    return trials


def is_manifest(data: Any) -> bool:
    return isinstance(data, dict) and "trials" in data and "plan" in data


def trial_paths(manifest: Path, data: dict[str, Any]) -> tuple[Path, Sequence[dict[str, Any]]]:
    """The plan file and the trial entries a manifest names (paths resolved against its folder)."""
    folder = manifest.parent
    trials = data.get("trials")
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        raise InputError(f"{manifest}: `trials` must be a list of mappings (written by meshplan trial)")
    return folder / os.fspath(data["plan"]), trials
