"""Trial scripts for a plan's best layouts: what each launcher is told to run, that the launchers' own parsers
take it (torchtitan's ConfigManager, DeepSpeed's config; Megatron-LM's flags against the list read from its
arguments.py), the manifest, and the layouts a launcher cannot run being named rather than substituted."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

import planner
from meshcore.errors import InputError
from planner.outputs.emitters import FRAMEWORK, Target, for_launcher
from planner.outputs.planread import load_plan
from planner.search.space import SearchSpec
from planner.studies.trial import MANIFEST, TrialLauncher, write_trials

FLAGS = Path(__file__).resolve().parents[1] / "planner" / "outputs" / "emitters" / "megatron_flags.txt"


def _plan(target: Target, top_k: int = 3) -> planner.Plan:
    return planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                        runtime=planner.Runtime(framework=FRAMEWORK[target]),
                        spec=for_launcher(SearchSpec(top_k=top_k), target))


def _command(script: Path) -> list[str]:
    """The launch line of a launch.sh, as words (without the trailing pipe to tee)."""
    line = script.read_text().splitlines()[-1]
    return shlex.split(line.split(" 2>&1 | tee ")[0])


def test_megatron_trials_run_the_emitted_arguments_for_n_steps(tmp_path: Path) -> None:
    plan = _plan(Target.MEGATRON)
    trials = write_trials(plan, TrialLauncher.MEGATRON, 3, 10, tmp_path)
    assert [t.rank for t in trials] == [0, 1, 2] and not any(t.skipped for t in trials)
    known = {line.split()[0] for line in FLAGS.read_text().splitlines() if line.startswith("--")}
    for t in trials:
        words = _command(tmp_path / t.script)
        assert words[:2] == ["bash", "$here/megatron.sh"]  # the config beside launch.sh, run from any folder
        extra = dict(zip(words[2::2], words[3::2], strict=False))
        assert extra["--train-iters"] == "10" and extra["--log-interval"] == "1"
        config = (tmp_path / t.config).read_text()
        used = {w for w in shlex.split(config.split("MEGATRON_ARGS=(")[1].split(")")[0]) if w.startswith("--")}
        assert used | {w for w in words if w.startswith("--")} <= known
        assert (tmp_path / t.script).stat().st_mode & 0o100  # executable
    manifest = yaml.safe_load((tmp_path / MANIFEST).read_text())
    assert manifest["launcher"] == "megatron" and manifest["steps"] == 10
    assert "elapsed time per iteration" in manifest["collect"] and "max allocated" in manifest["collect"]
    assert [e["log"] for e in manifest["trials"]] == [f"trial-{i}/train.log" for i in (1, 2, 3)]
    copy = load_plan(tmp_path / manifest["plan"])
    assert copy.best.layout == plan.best.layout and len(copy.alternatives) == len(plan.alternatives)


def test_torchtitan_trials_parse_with_its_config_manager(tmp_path: Path) -> None:
    pytest.importorskip("torchtitan", reason="torchtitan not installed (pip install -e '.[validate]')")
    from torchtitan.config import ConfigManager

    trials = write_trials(_plan(Target.TORCHTITAN, 2), TrialLauncher.TORCHTITAN, 2, 7, tmp_path)
    for t in trials:
        words = _command(tmp_path / t.script)
        args = words[words.index("torchtitan.train") + 1:]
        args = [a for a in args if a != "$@"]
        job = ConfigManager().parse_args(["--job.config_file", str(tmp_path / t.config), *args[2:]])
        assert job.training.steps == 7 and job.metrics.log_freq == 1
        assert words[:3] == ["torchrun", "--nnodes", "2"]


def test_deepspeed_trials_log_every_step(tmp_path: Path) -> None:
    """The two keys are DeepSpeed's own (its config constants; the rest is the emitter's, which
    tests/test_emitters.py runs through DeepSpeedConfig), and DeepSpeed's launcher parses the command."""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -e '.[validate]')")
    from deepspeed.runtime.constants import STEPS_PER_PRINT, WALL_CLOCK_BREAKDOWN

    (t,) = write_trials(_plan(Target.DEEPSPEED, 1), TrialLauncher.DEEPSPEED, 1, 5, tmp_path)
    config = json.loads((tmp_path / t.config).read_text())
    assert config[STEPS_PER_PRINT] == 1 and config[WALL_CLOCK_BREAKDOWN] is True
    from deepspeed.launcher.runner import parse_args

    words = [w for w in _command(tmp_path / t.script) if w != "$@"]
    assert words[0] == "deepspeed"
    launch = parse_args([w if "TRAIN_SCRIPT" not in w else "train.py" for w in words[1:]])
    assert (launch.num_nodes, launch.num_gpus) == (2, 8)
    assert launch.user_args == ["--deepspeed_config", "$here/deepspeed.json"]


def test_layouts_a_launcher_cannot_run_are_named_not_substituted(tmp_path: Path) -> None:
    plan = planner.plan("llama3-8b", "h100-sxm", gpus=16, seq_len=4096, global_batch=64,
                        runtime=planner.Runtime(framework="any"),
                        spec=SearchSpec(top_k=3, pp=2, schedule=planner.Schedule.ZB_V))
    trials = write_trials(plan, TrialLauncher.MEGATRON, 2, 10, tmp_path)
    assert all(t.skipped and "zb-v" in t.skipped and t.script is None for t in trials)
    assert not (tmp_path / "trial-1").exists()
    manifest = yaml.safe_load((tmp_path / MANIFEST).read_text())
    assert all("skipped" in e and "log" not in e for e in manifest["trials"])


@pytest.mark.parametrize(("top_k", "steps", "message"), [(0, 10, "--top-k must be between 1 and"),
                                                         (9, 10, "--top-k must be between 1 and"),
                                                         (1, 0, "--steps must be between 1 and")])
def test_bad_counts_are_refused(tmp_path: Path, top_k: int, steps: int, message: str) -> None:
    with pytest.raises(InputError, match=message):
        write_trials(_plan(Target.MEGATRON, 2), TrialLauncher.MEGATRON, top_k, steps, tmp_path)


def test_cli_trial(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from cli import app

    planner.save_plan(_plan(Target.MEGATRON, 2), tmp_path / "plan.yaml")
    out = tmp_path / "trials"
    result = CliRunner().invoke(app, ["trial", str(tmp_path / "plan.yaml"), "--to", "megatron", "--out", str(out),
                                      "--top-k", "2", "--steps", "5"])
    assert result.exit_code == 0, result.output
    assert (out / MANIFEST).is_file() and (out / "trial-2" / "launch.sh").is_file()
    bad = CliRunner().invoke(app, ["trial", str(tmp_path / "plan.yaml"), "--to", "nemo", "--out", str(out)])
    assert bad.exit_code == 2 and "--to must be one of megatron, torchtitan, deepspeed" in bad.output


def test_launch_scripts_run_from_any_folder(tmp_path: Path) -> None:
    """launch.sh finds its configuration and log beside itself, and Megatron-LM's pretrain_gpt.py in $MEGATRON_LM:
    started from another folder with stub launchers, the Megatron trial runs the stub pretrain_gpt.py it is
    pointed at and writes train.log beside the script (it changed into the trial folder and called
    pretrain_gpt.py there before)."""
    import os
    import subprocess

    trials = write_trials(_plan(Target.MEGATRON, 1), TrialLauncher.MEGATRON, 1, 3, tmp_path / "trials")
    megatron = tmp_path / "Megatron-LM"
    megatron.mkdir()
    (megatron / "pretrain_gpt.py").write_text("")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "torchrun").write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in *pretrain_gpt.py) test -f "$a" && '
                                    'echo "ran $a";; esac; done\n')
    (stubs / "torchrun").chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "MEGATRON_LM": str(megatron)}
    script = tmp_path / "trials" / trials[0].script
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"ran {megatron}/pretrain_gpt.py" in (script.parent / "train.log").read_text()


def test_megatron_launch_stops_naming_a_missing_pretrain_gpt(tmp_path: Path) -> None:
    """Without pretrain_gpt.py where $MEGATRON_LM points (or in the current folder), the script stops before
    torchrun with one line saying so (it handed torchrun a relative path that did not exist)."""
    import os
    import subprocess

    trials = write_trials(_plan(Target.MEGATRON, 1), TrialLauncher.MEGATRON, 1, 3, tmp_path / "trials")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "torchrun").write_text('#!/bin/sh\necho "torchrun ran"\n')
    (stubs / "torchrun").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "MEGATRON_LM"}
    env["PATH"] = f"{stubs}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(["bash", str(tmp_path / "trials" / trials[0].script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    log = (tmp_path / "trials" / "trial-1" / "train.log").read_text()
    assert done.returncode == 2 and "torchrun ran" not in log
    assert f"error: no pretrain_gpt.py in {tmp_path}: set MEGATRON_LM to your Megatron-LM checkout" in log


def test_megatron_lm_option_is_checked_and_written_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from cli import app

    planner.save_plan(_plan(Target.MEGATRON, 1), tmp_path / "plan.yaml")
    (tmp_path / "Megatron-LM").mkdir()
    monkeypatch.chdir(tmp_path)
    args = ["trial", "plan.yaml", "--to", "megatron", "--out", "trials", "--top-k", "1", "--megatron-lm"]
    missing = CliRunner().invoke(app, [*args, "Megatron-LM"])
    assert missing.exit_code == 2 and "--megatron-lm Megatron-LM: no pretrain_gpt.py there" in missing.output
    (tmp_path / "Megatron-LM" / "pretrain_gpt.py").write_text("")
    ok = CliRunner().invoke(app, [*args, "Megatron-LM"])
    assert ok.exit_code == 0, ok.output
    script = (tmp_path / "trials" / "trial-1" / "launch.sh").read_text()
    assert f"export MEGATRON_LM=${{MEGATRON_LM:-{tmp_path / 'Megatron-LM'}}}" in script
    other = CliRunner().invoke(app, ["trial", "plan.yaml", "--to", "torchtitan", "--out", "t2", "--megatron-lm",
                                     "Megatron-LM"])
    assert other.exit_code == 2 and "--megatron-lm is for --to megatron" in other.output
